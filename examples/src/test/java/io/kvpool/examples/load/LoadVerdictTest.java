package io.kvpool.examples.load;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Executors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The load generator's verdict: a foreign tenant name cut off at the end of an aborted stream is seen, a run in which
 * nothing completed or nothing was sent is not clean, a run of aborts only is not "nothing completed", and a
 * well-formed request refused as malformed is unexpected.
 */
class LoadVerdictTest {

    /**
     * An aborted stream keeps only the tokens it received, and the marker search is its only leak check. Stale KV
     * that ends in another tenant's name token ({@code " SECRET-"}, {@code "tenant3-"} — the tokenizer's own cut)
     * is not seen, because the regex also wants the request number that the client never received. The class
     * comment itself says the tenant-name token alone is the proof.
     */
    @Test
    void aForeignTenantNameCutOffAtTheEndOfAnAbortedStreamIsSeen() {
        final List<byte[]> foreign = EchoTokenizer.encode(Mix.prompt("tenant3", 13, 9));
        final StringBuilder received = new StringBuilder(Mix.prompt("tenant7", 11, 3)); // own tokens first
        // then the first two tokens of a foreign marker (after the first one, which is cut differently)
        final int second = EchoTokenizer.encode(Markers.of("tenant3", 13)).size();
        received.append(EchoTokenizer.text(foreign.get(second))).append(EchoTokenizer.text(foreign.get(second + 1)));
        assertEquals("SECRET-tenant7-11 SECRET-tenant3-", received.toString(), "the tokens as the echo tokenizer cuts them");
        assertFalse(Markers.foreign("tenant7", received).isEmpty(), "tenant3's name in tenant7's stream went unseen: '" + received + "'");
    }

    /**
     * A server that answers every well-formed request with 500 internal_error (an unhandled exception: a bug) passes
     * the load generator: FAILED is a class the verdict accepts, so the report says "clean — every answer as
     * expected" and the command exits 0.
     */
    @Test
    void aServerThatAnswersEveryRequestWith500InternalErrorIsNotClean() throws Exception {
        try (Fake fake = new Fake(500, "{\"error\":{\"type\":\"server_error\",\"reason\":\"internal_error\",\"message\":\"internal error: NPE\"}}")) {
            final ByteArrayOutputStream out = new ByteArrayOutputStream();
            final int rc = new LoadCommand().run(new String[] {"--url", fake.uri().toString(), "--requests", "20", "--clients", "2",
                    "--garbage-ratio", "0", "--abort-ratio", "0", "--over-capacity-ratio", "0"},
                new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
            assertEquals(1, rc, "every request got 500 internal_error, yet:\n" + out.toString(StandardCharsets.UTF_8));
        }
    }

    /**
     * A server that lost its decode role (every answer 502 role_lost, a failure the protocol names) or that drains
     * (every answer 503) checked no KV at all: not clean, though each answer is one the load generator accepts.
     */
    @Test
    void aRunInWhichNothingCompletedIsNotClean() throws Exception {
        for (int status : new int[] {502, 503}) {
            try (Fake fake = new Fake(status, status == 502
                ? "{\"error\":{\"type\":\"server_error\",\"reason\":\"role_lost\",\"message\":\"decode lost\"}}"
                : "{\"error\":{\"type\":\"service_unavailable\",\"reason\":\"server_draining\",\"message\":\"stopping\"}}")) {
                final ByteArrayOutputStream out = new ByteArrayOutputStream();
                final int rc = new LoadCommand().run(new String[] {"--url", fake.uri().toString(), "--requests", "20", "--clients", "2",
                        "--garbage-ratio", "0", "--abort-ratio", "0", "--over-capacity-ratio", "0"},
                    new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
                final String report = out.toString(StandardCharsets.UTF_8);
                assertEquals(1, rc, status + ": no request completed, yet:\n" + report);
                assertTrue(report.contains("verdict: NOTHING COMPLETED"), report);
            }
        }
    }

    /** A completion whose text is right but whose KV the server says it read from another tenant's pages is a leak. */
    @Test
    void aCompletionWhoseKvNamesAnotherTenantIsNotClean() {
        final Shot s = new Shot(0, "tenant1", Shot.Kind.NORMAL, "SECRET-tenant1-0 .", 4, 2, false, -1, null);
        final Outcome o = new Outcome(s, Outcome.Kind.COMPLETED, 200, null, -1, 1, 2, java.util.Set.of(), List.of("tenant1", "tenant2"),
            false, null);
        assertTrue(o.foreignKv());
        final LoadGenerator.Result r = new LoadGenerator.Result(List.of(o), 1_000_000L, 1);
        assertFalse(LoadReport.clean(r, new PoolCheck(true, List.of())), "a completion whose KV names tenant2 was called clean");
        final java.io.ByteArrayOutputStream text = new java.io.ByteArrayOutputStream();
        LoadReport.print(r, new Mix(2, new int[] {8, 16}, new int[] {0, 4}, 0, 0, 0, new int[] {9, 9}, 0, 4096, 1), new PoolCheck(true, List.of()), new java.io.PrintStream(text, true, java.nio.charset.StandardCharsets.UTF_8));
        final String report = text.toString(java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(report.contains("completions whose KV names another tenant") && report.contains("verdict: LEAK OR FAILURE"), report);
    }

    /** Aborts on purpose complete nothing by design: a run of aborts only is judged by its pools, not "nothing completed". */
    @Test
    void aRunOfAbortsOnlyIsNotNothingCompleted() {
        final Shot aborting = new Shot(0, "t1", Shot.Kind.NORMAL, "p", 4, 8, true, 2, null);
        final Shot finishing = new Shot(1, "t1", Shot.Kind.NORMAL, "p", 4, 8, true, -1, null);
        final Outcome aborted = new Outcome(aborting, Outcome.Kind.ABORTED, 200, null, 1, 2, 2, java.util.Set.of(), List.of(), false, null);
        final Outcome failed = new Outcome(finishing, Outcome.Kind.FAILED, 502, "role_lost", -1, 2, 0, java.util.Set.of(), List.of(), false, "lost");
        assertFalse(LoadReport.nothingCompleted(new LoadGenerator.Result(List.of(aborted), 1_000_000, 1)));
        assertTrue(LoadReport.nothingCompleted(new LoadGenerator.Result(List.of(aborted, failed), 1_000_000, 1)));
    }

    /**
     * A request that fits (NORMAL, well-formed JSON) answered 400 malformed_json is a server bug, but the client files
     * it under REJECTED whatever the reason, so it is never an unexpected answer.
     */
    @Test
    void aWellFormedRequestRefusedAsMalformedIsUnexpected() throws Exception {
        try (Fake fake = new Fake(400, "{\"error\":{\"type\":\"invalid_request_error\",\"reason\":\"malformed_json\",\"message\":\"?\"}}");
             CompletionClient client = new CompletionClient(fake.uri(), Duration.ofSeconds(10), 1 << 20)) {
            final Mix mix = new Mix(4, new int[] {8, 16}, new int[] {1, 4}, 0, 0, 0, new int[] {3000, 3001}, 0, 1 << 20, 1);
            final Shot s = mix.shot(0);
            assertEquals(Shot.Kind.NORMAL, s.kind());
            final Outcome o = client.send(s);
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), "a well-formed request refused as " + o.statusAndReason() + " was filed as " + o.kind());
        }
    }

    /** Answers every completion with a fixed status and body; /metrics shows two clean pools. */
    static final class Fake implements AutoCloseable {
        private final HttpServer http;

        Fake(int status, String body) throws IOException {
            http = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
            http.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
            http.createContext("/v1/completions", ex -> answer(ex, status, "application/json", body));
            http.createContext("/metrics", ex -> answer(ex, 200, "text/plain; version=0.0.4", """
                kvpool_requests_in_flight 0
                kvpool_role_up{role="prefill"} 1
                kvpool_role_up{role="decode"} 1
                kvpool_pool_capacity_pages{role="prefill"} 8
                kvpool_pool_capacity_pages{role="decode"} 8
                kvpool_pool_pages{role="prefill",state="free"} 8
                kvpool_pool_pages{role="decode",state="free"} 8
                """));
            http.start();
        }

        URI uri() {
            return URI.create("http://127.0.0.1:" + http.getAddress().getPort() + "/");
        }

        private static void answer(HttpExchange ex, int status, String type, String body) throws IOException {
            try (ex) {
                ex.getRequestBody().readAllBytes();
                final byte[] b = body.getBytes(StandardCharsets.UTF_8);
                ex.getResponseHeaders().set("Content-Type", type);
                ex.sendResponseHeaders(status, b.length);
                ex.getResponseBody().write(b);
            }
        }

        @Override
        public void close() {
            http.stop(0);
        }
    }

    @Test
    void aRunThatSentNothingIsNotClean() {
        final LoadGenerator.Result none = new LoadGenerator.Result(List.of(), 1_000_000L, 1);
        assertFalse(LoadReport.clean(none, new PoolCheck(true, List.of())), "no request ran, yet the run was called clean");
    }

    @Test
    void aWrongWholeAnswerIsNotCalledAStreamError() {
        final Shot whole = new Shot(1, "tenant1", Shot.Kind.NORMAL, "SECRET-tenant1-1", 1, 2, false, -1, null);
        final Shot streamed = new Shot(2, "tenant1", Shot.Kind.NORMAL, "SECRET-tenant1-2", 1, 2, true, -1, null);
        assertEquals("200 no_kvpool_section", new Outcome(whole, Outcome.Kind.UNEXPECTED, 200, "no_kvpool_section", -1, 1, 0,
            java.util.Set.of(), List.of(), false, "{}").statusAndReason());
        assertEquals("stream error stream_cut", new Outcome(streamed, Outcome.Kind.UNEXPECTED, 200, "stream_cut", -1, 1, 0,
            java.util.Set.of(), List.of(), false, "").statusAndReason());
        assertEquals("429 retry_later", new Outcome(whole, Outcome.Kind.RETRY_LATER, 429, "retry_later", -1, 1, 0,
            java.util.Set.of(), List.of(), false, "").statusAndReason());
    }
}
