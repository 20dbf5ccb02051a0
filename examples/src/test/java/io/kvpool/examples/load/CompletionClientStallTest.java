package io.kvpool.examples.load;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * {@code --timeout-ms} bounds every wait for an answer, its body included: the JDK's request timeout ends with the
 * headers, so a body that stops coming (a server frozen mid-answer, a path cut) must not hold a load thread, and the
 * run's report, for ever.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class CompletionClientStallTest {

    /** A server that answers every request with {@code head}, then writes nothing more and keeps the connection open. */
    static final class Staller implements AutoCloseable {
        final ServerSocket ss;
        final List<Socket> open = new java.util.concurrent.CopyOnWriteArrayList<>();
        final Thread acceptor;

        Staller(String head) throws IOException {
            this(head, null);
        }

        /** @param every written every 100 ms after the head while the connection lasts; {@code null}: nothing more */
        Staller(String head, String every) throws IOException {
            ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            acceptor = Thread.ofVirtual().start(() -> {
                try {
                    while (true) {
                        final Socket s = ss.accept();
                        open.add(s);
                        Thread.ofVirtual().start(() -> {
                            try {
                                final InputStream in = s.getInputStream();
                                final byte[] buf = new byte[65536];
                                // read the request head and a small body (good enough for these probes)
                                in.read(buf);
                                final OutputStream out = s.getOutputStream();
                                out.write(head.getBytes(StandardCharsets.UTF_8));
                                out.flush();
                                while (every != null) { // until the client closes: the write then fails
                                    Thread.sleep(100);
                                    out.write(every.getBytes(StandardCharsets.UTF_8));
                                    out.flush();
                                }
                                while (in.read(buf) >= 0) {
                                    // keep reading, answer nothing more
                                }
                            } catch (IOException | InterruptedException ignored) {
                            }
                        });
                    }
                } catch (IOException ignored) {
                }
            });
        }

        URI uri() {
            return URI.create("http://127.0.0.1:" + ss.getLocalPort() + "/");
        }

        @Override
        public void close() throws IOException {
            ss.close();
            for (Socket s : open) {
                s.close();
            }
        }
    }

    private static Outcome sendWithin(CompletionClient c, Shot s, Duration limit) throws Exception {
        final CompletableFuture<Outcome> f = new CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                f.complete(c.send(s));
            } catch (Throwable t) {
                f.completeExceptionally(t);
            }
        });
        try {
            return f.get(limit.toMillis(), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            return null;
        }
    }

    /**
     * Sends {@code shot} with {@code --timeout-ms 500} to a server that answers {@code status} with 1 byte of a 1000-byte
     * body, then nothing. @return the outcome, which must have come within 5 s and be body_stalled with that status
     */
    private static Outcome stalledAnswer(String status, Shot shot) throws Exception {
        final Staller srv0 = new Staller("HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{");
        try (CompletionClient c = new CompletionClient(srv0.uri(), Duration.ofMillis(500), 1 << 20); Staller srv = srv0) {
            final Outcome o = sendWithin(c, shot, Duration.ofSeconds(5));
            assertNotNull(o, "with --timeout-ms 500, a request whose answer stalled (" + status + ") was still waiting after 5 s");
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o::toString);
            assertEquals("body_stalled", o.reason(), o::toString);
            assertEquals(Integer.parseInt(status.substring(0, 3)), o.status(), o::toString);
            return o;
        }
    }

    private static Shot shot(Shot.Kind kind, boolean stream, Garbage garbage) {
        return new Shot(0, "tenant0", kind, Mix.prompt("tenant0", 0, 8), 8, 4, stream, -1, garbage);
    }

    private static String chunk(String s) {
        return Integer.toHexString(s.getBytes(StandardCharsets.UTF_8).length) + "\r\n" + s + "\r\n";
    }

    private static final String TOKEN = "data: {\"choices\":[{\"index\":0,\"text\":\" .\",\"finish_reason\":null}]}\n\n";

    /** A stream that runs past max_tokens (4 here) and never ends is told at its fifth token, not read for ever. */
    @Test
    void aStreamThatRunsPastMaxTokensIsEndedAtOnce() throws Exception {
        try (Staller srv = new Staller("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + chunk(": admitted\n\n"), chunk(TOKEN));
             CompletionClient c = new CompletionClient(srv.uri(), Duration.ofMillis(500), 1 << 20)) {
            final Outcome o = sendWithin(c, shot(Shot.Kind.NORMAL, true, null), Duration.ofSeconds(5));
            assertNotNull(o, "a stream of tokens past max_tokens that never ends held the client for 5 s");
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o::toString);
            assertEquals("too_many_tokens", o.reason(), o::toString);
        }
    }

    /** A stream that ends cleanly with more tokens than max_tokens is no completion: it wrote past its reservation. */
    @Test
    void moreTokensThanMaxTokensIsNoCleanCompletion() throws Exception {
        final Shot shot = shot(Shot.Kind.NORMAL, true, null);
        final StringBuilder body = new StringBuilder(chunk(": admitted\n\n"));
        for (int i = 0; i < 40; i++) {
            body.append(chunk(TOKEN));
        }
        body.append(chunk("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":"
            + "{\"completion_tokens\":40},\"kvpool\":{\"kv_text\":" + new com.fasterxml.jackson.databind.ObjectMapper()
            .writeValueAsString(shot.prompt()) + ",\"kv_tenants\":[\"" + shot.tenant() + "\"]}}\n\n"));
        body.append(chunk("data: [DONE]\n\n")).append("0\r\n\r\n");
        try (Staller srv = new Staller("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + body);
             CompletionClient c = new CompletionClient(srv.uri(), Duration.ofSeconds(5), 1 << 20)) {
            final Outcome o = sendWithin(c, shot, Duration.ofSeconds(10));
            assertNotNull(o);
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o::toString);
            assertEquals("too_many_tokens", o.reason(), o::toString);
        }
    }

    /** A body that trickles for ever (a byte every 100 ms) is given up after max_tokens + 2 timeouts in all (3 s here). */
    @Test
    void aBodyThatTricklesForEverIsGivenUp() throws Exception {
        try (Staller srv = new Staller("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{", " ");
             CompletionClient c = new CompletionClient(srv.uri(), Duration.ofMillis(500), 1 << 20)) {
            final Outcome o = sendWithin(c, shot(Shot.Kind.NORMAL, false, null), Duration.ofSeconds(8));
            assertNotNull(o, "a body trickling one byte per 100 ms held the client for 8 s");
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o::toString);
            assertEquals("body_stalled", o.reason(), o::toString);
            assertTrue(o.detail().contains("still coming after 3000 ms"), o::toString);
        }
    }

    /** A non-streamed answer whose headers came but whose body stops ends as body_stalled within --timeout-ms. */
    @Test
    void aNonStreamedAnswerWhoseBodyStallsEndsWithinTheTimeout() throws Exception {
        stalledAnswer("200 OK", shot(Shot.Kind.NORMAL, false, null));
    }

    /** The same for a streamed request refused with a status other than 200. */
    @Test
    void aRefusedStreamWhoseBodyStallsEndsWithinTheTimeout() throws Exception {
        stalledAnswer("429 Too Many Requests", shot(Shot.Kind.NORMAL, true, null));
    }

    /**
     * A stream that sends nothing but the server's heartbeat comments for {@code --timeout-ms} is stalled: the comments
     * keep a connection alive, they are not the answer's progress.
     */
    @Test
    void aStreamOfHeartbeatsOnlyEndsAsStalledWithinTheTimeout() throws Exception {
        final String heartbeat = ": waiting for the KV transfer\n\n";
        try (Staller srv = new Staller("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                 Integer.toHexString(heartbeat.length()) + "\r\n" + heartbeat + "\r\n");
             CompletionClient c = new CompletionClient(srv.uri(), Duration.ofMillis(500), 1 << 20)) {
            final Outcome o = sendWithin(c, shot(Shot.Kind.NORMAL, true, null), Duration.ofSeconds(5));
            assertNotNull(o, "with --timeout-ms 500, a stream of heartbeats only was still read after 5 s");
            assertEquals("stream_stalled", o.reason(), o::toString);
        }
    }

    /** A garbage request's answer whose body stops is body_stalled with its status, not a failed connection. */
    @Test
    void aGarbageAnswerWhoseBodyStallsIsBodyStalled() throws Exception {
        stalledAnswer("400 Bad Request", shot(Shot.Kind.GARBAGE, false, Garbage.MALFORMED_JSON));
    }

    /** The whole command: {@code load --url} against a server whose answers stall after their headers reports (exit 1). */
    @Test
    void loadAgainstAStallingServerReportsWithinItsTimeout() throws Exception {
        try (Staller srv = new Staller("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")) {
            final CompletableFuture<Integer> rc = new CompletableFuture<>();
            final java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            final Thread t = Thread.ofPlatform().daemon().start(() -> {
                try {
                    rc.complete(new LoadCommand().run(new String[] {"--url", srv.uri().toString(), "--requests", "2", "--clients", "1",
                            "--stream-ratio", "0", "--abort-ratio", "0", "--garbage-ratio", "0", "--over-capacity-ratio", "0", "--timeout-ms", "300"},
                        new java.io.PrintStream(out, true), new java.io.PrintStream(new java.io.ByteArrayOutputStream(), true)));
                } catch (Throwable e) {
                    rc.completeExceptionally(e);
                }
            });
            try {
                // reported, and not clean: 2 stalled answers of 300 ms, then the pool check's read of /metrics, which stalls
                // too and is given up after 10 s
                assertEquals(1, rc.get(30, TimeUnit.SECONDS), out::toString);
            } catch (TimeoutException e) {
                t.interrupt();
                fail("load --timeout-ms 300 had not reported after 30 s:\n" + out);
            }
        }
    }
}
