package io.kvpool.examples.load;

import java.util.List;
import java.util.Set;

/**
 * How one {@link Shot} ended, as the client saw it.
 *
 * @param shot             the request
 * @param kind             the class of ending
 * @param status           the HTTP status (200 for a stream that ended in an error event; 0 if none arrived)
 * @param reason           the error's {@code reason} (or the garbage's expected one), {@code null} on success
 * @param ttftNanos        time to the first streamed token, or -1
 * @param totalNanos       time from sending to the end (or to the disconnect)
 * @param completionTokens tokens received
 * @param foreignMarkers   other tenants' markers found in the response ({@link Markers}): must be empty
 * @param kvTenants        the tenants the server read from the KV ({@code kvpool.kv_tenants}), if it said
 * @param kvMismatch       a completion whose KV ({@code kvpool.kv_text}) is not exactly the prompt sent: must be false
 * @param detail           for errors: the message or exception, shortened
 */
public record Outcome(Shot shot, Kind kind, int status, String reason, long ttftNanos, long totalNanos, int completionTokens,
                      Set<String> foreignMarkers, List<String> kvTenants, boolean kvMismatch, String detail) {

    /** The class of ending. */
    public enum Kind {
        /** 200 with a completion (whose leak checks are {@link #foreignMarkers} and {@link #kvMismatch}). */
        COMPLETED,
        /** Refused for good: 400 or 413 (context too long, exceeds the pool, bad input …). */
        REJECTED,
        /** Told to come back: 429 or 503 with {@code Retry-After}. */
        RETRY_LATER,
        /** The server failed it: 5xx other than 503, or an error event in a stream (transfer failed, timeout). */
        FAILED,
        /** The client disconnected on purpose ({@link Shot#abortAfter}). */
        ABORTED,
        /** Bad input answered with exactly the expected status and reason. */
        GARBAGE_REFUSED,
        /** Anything unexpected: a bad input accepted or answered wrongly, a broken connection, a malformed response. */
        UNEXPECTED
    }

    /** @return whether the response held another tenant's marker */
    public boolean leaked() {
        return !foreignMarkers.isEmpty();
    }

    /** @return whether the server's KV read named another tenant than the shot's */
    public boolean foreignKv() {
        return kvTenants.stream().anyMatch(t -> !t.equals(shot.tenant()));
    }

    /**
     * @return "status reason" for tables, e.g. {@code 429 retry_later}; {@code stream error <reason>} for what went wrong
     *         in a stream after its 200 (an error event, a cut), {@code 200 <reason>} for a whole answer that was wrong
     */
    public String statusAndReason() {
        return status == 200 && reason != null && shot.stream() ? "stream error " + reason : status + (reason == null ? "" : " " + reason);
    }
}
