package io.kvpool.examples.http;

import java.util.HexFormat;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Answers an unexpected exception without its text: the client gets an error id, the server log gets the exception
 * under the same id. An exception's message may name other requests, tenants, peers or paths, none of which a
 * client should read. Thread-safe.
 */
public final class InternalErrors {

    private InternalErrors() {
    }

    /** @return a fresh error id: 16 hex digits, unique enough to find one log line among a day's */
    public static String nextId() {
        return HexFormat.of().toHexDigits(ThreadLocalRandom.current().nextLong());
    }

    /**
     * Logs {@code failure} at ERROR under a fresh id.
     *
     * @param log  where to log
     * @param what what failed, for the log line (e.g. {@code "GET /x"})
     * @return the id, for the answer
     */
    public static String log(System.Logger log, String what, Throwable failure) {
        final String id = nextId();
        log.log(System.Logger.Level.ERROR, what + " failed (error " + id + ")", failure);
        return id;
    }

    /** @return the message an answer carries for error {@code id} */
    public static String message(String id) {
        return "internal error " + id + ": the server's log has the details under this id";
    }
}
