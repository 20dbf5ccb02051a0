package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.echo.EchoTokenizer;
import io.kvpool.examples.server.link.LinkGate;
import org.junit.jupiter.api.Test;

import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Clients at the edges of a completion stream: one that stops reading holds no decode pages, one stalled past the
 * stall timeout ends as the client's abort; and the KV of a prompt that round-trips differently is not the prompt.
 */
class ClientStreamEdgesTest {

    /** ~190 bytes of SSE per token: 5.7 MB, more than the socket buffers on both sides hold (tcp_wmem max 4 MiB) */
    private static final int MAX_TOKENS = 30_000;

    /**
     * A streaming client that keeps its connection open but stops reading. Generation runs apart from the writes:
     * it ends and frees its pages while the request's own thread waits for the client to read (here for longer
     * than the test: a 60 s stall timeout).
     */
    @Test
    void aStreamingClientThatStopsReadingHoldsNoDecodePages() throws Exception {
        // long enough for 30,000 tokens on a loaded 2-core machine: a generation cut short by the timeout would free
        // the pages too, but not show that a client that stops reading does not stop the generation
        final Duration requestTimeout = Duration.ofSeconds(6);
        try (KvServer server = KvServer.start(ServerTests.small().contextTokens(32_768).prefillPages(2_100).decodePages(2_100)
            .requestTimeout(requestTimeout).stallTimeout(Duration.ofSeconds(60)).build());
             Socket s = stalledStream(server)) {
            // the duty threads are not blocked: another tenant is still served
            final TestClient client = new TestClient(server);
            final TestClient.Response ok = client.complete("alice", "still served", 3, false);
            assertEquals(200, ok.status(), ok::body);

            // within three request timeouts the stalled request's generation is over and its decode pages free
            final long end = System.nanoTime() + requestTimeout.multipliedBy(3).toNanos();
            while (System.nanoTime() < end && (server.decodePool().snapshot().owned() > 0 || server.decodePool().snapshot().openSequences() > 0)) {
                Thread.sleep(20);
            }
            final long generated = server.roles().decode().status().counters().get("generated_tokens");
            final io.kvpool.PoolSnapshot pool = server.decodePool().snapshot();
            assertTrue(pool.owned() == 0 && pool.openSequences() == 0 && pool.reserved() == 0, "3 request timeouts after a stalled stream, "
                + "decode still holds pages (" + server.counters() + "), having generated " + generated + " of " + MAX_TOKENS
                + " tokens; decode pool: " + pool);
            assertTrue(generated >= MAX_TOKENS, "generated " + generated);
            assertEquals(1L, server.counters().get("in_flight"), "the stalled request itself still waits for its client");
        }
    }

    /** The stall timeout ends a request whose client stopped reading, as the client's abort. */
    @Test
    void aStreamStalledLongerThanTheStallTimeoutEndsAsTheClientsAbort() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().contextTokens(32_768).prefillPages(2_100).decodePages(2_100)
            .requestTimeout(Duration.ofSeconds(30)).stallTimeout(Duration.ofMillis(500)).build());
             Socket s = stalledStream(server)) {
            final long end = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (System.nanoTime() < end && (server.counters().get("aborted") < 1 || server.counters().get("in_flight") > 0)) {
                Thread.sleep(20);
            }
            assertEquals(1L, server.counters().get("aborted"), server.counters()::toString);
            assertEquals(0L, server.counters().get("in_flight"), server.counters()::toString);
            assertTrue(server.awaitQuiescence(Duration.ofSeconds(10)));
            ServerTests.assertBalanced(server);
        }
    }

    /** @return a connection that asked for a {@link #MAX_TOKENS}-token stream and will never read it */
    private static Socket stalledStream(KvServer server) throws Exception {
        final Socket s = new Socket();
        s.setReceiveBufferSize(2048); // before connect: a small window, so the server's writes wait soon
        s.connect(new java.net.InetSocketAddress(server.baseUri().getHost(), server.baseUri().getPort()));
        final byte[] body = TestClient.body("a", MAX_TOKENS, true).getBytes(StandardCharsets.UTF_8);
        final OutputStream out = s.getOutputStream();
        out.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-mallory\r\n"
            + "Content-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(body);
        out.flush();
        return s; // ... and never read: the client is still there (its socket is open), it just does not read
    }

    /**
     * README: "The tokenizer cuts the prompt into word pieces of at most 8 UTF-8 bytes (any text round-trips)".
     * EchoTokenizer must not test {@code Character.isSurrogate((char) cp)} on the <em>code point</em>: for a
     * supplementary code point whose low 16 bits fall in D800..DFFF (U+1D800 SIGNWRITING HAND-FIST INDEX, U+2D800 a
     * CJK ideograph of Extension F, ...) the cast truncates it to a surrogate and the character would become '?'.
     */
    @Test
    void aSupplementaryCharacterWhoseLow16BitsLookLikeASurrogateRoundTrips() {
        final String text = new String(Character.toChars(0x1D800)) + " and " + new String(Character.toChars(0x2D800));
        final StringBuilder back = new StringBuilder();
        for (byte[] t : EchoTokenizer.encode(text)) {
            back.append(EchoTokenizer.text(t));
        }
        assertEquals(text, back.toString(), "the echo tokenizer does not round-trip valid UTF-16 text");
    }

    /** The same over HTTP: the KV a tenant gets back is not its prompt (Isolation's own check flags it). */
    @Test
    void overHttpTheKvTextOfSuchAPromptIsNotThePrompt() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().build())) {
            final String prompt = "sign " + new String(Character.toChars(0x1D800));
            final TestClient.Response r = new TestClient(server).complete("alice", prompt, 2, false);
            assertEquals(200, r.status(), r::body);
            final JsonNode json = r.json();
            final List<String> v = Isolation.violations("alice", prompt, 2, json);
            assertEquals(List.of(), v, () -> "response: " + json);
            ServerTests.assertBalanced(server);
        }
    }

    /**
     * README: a request the server closes while it runs gets 503 {@code server_closing}, "counted as a failure, not
     * a client abort". That held mid-generation (ShutdownTest), not mid-transfer: Router.close() aborts the decode
     * call, decode fails the transfer as ABORTED, and the request thread reported that as a failed KV transfer — a
     * 502 {@code transfer_failed}/{@code aborted}, counted under failed{reason="aborted"} — to a client that did
     * nothing wrong and is told nothing about retrying.
     */
    @Test
    void aServerClosingMidTransferAnswers503ServerClosingNotA502TransferFailure() throws Exception {
        final LinkGate gate = LinkGate.create(true);
        final KvServer server = KvServer.start(ServerTests.held(gate).build());
        try {
            final java.util.concurrent.CompletableFuture<java.net.http.HttpResponse<String>> pending =
                java.net.http.HttpClient.newHttpClient().sendAsync(java.net.http.HttpRequest.newBuilder(server.baseUri().resolve("/v1/completions"))
                        .header("Authorization", "Bearer sk-alice").POST(java.net.http.HttpRequest.BodyPublishers.ofString(
                            TestClient.body("held mid transfer", 2, false))).build(),
                    java.net.http.HttpResponse.BodyHandlers.ofString());
            assertTrue(gate.awaitHeld(1, Duration.ofSeconds(10)), "the transfer never started");
            server.close();
            final java.net.http.HttpResponse<String> r = pending.get(20, java.util.concurrent.TimeUnit.SECONDS);
            assertEquals(503, r.statusCode(), () -> r.body() + " / counters " + server.counters() + "\n" + server.metricsText().lines()
                .filter(l -> l.startsWith("kvpool_requests_failed_total")).toList());
            assertTrue(r.body().contains("\"reason\":\"server_closing\""), r::body);
        } finally {
            gate.open();
            server.close();
        }
    }
}
