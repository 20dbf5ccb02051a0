package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.link.LinkGate;
import org.junit.jupiter.api.Test;

import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Retry-later (429) while a transfer holds the pages, and 503 while the decode side has no link. */
class BackpressureTest {

    /** {@code n} one-token words */
    static String words(String prefix, int n) {
        return IntStream.range(0, n).mapToObj(i -> prefix + i).collect(Collectors.joining(" "));
    }

    @Test
    void aRequestThatFitsButNotNowGets429WithTheNumbersAndRetryAfter() throws Exception {
        final LinkGate gate = LinkGate.create(true);
        try (KvServer server = KvServer.start(ServerTests.held(gate).prefillPages(40).build())) {
            final TestClient client = new TestClient(server);
            final String first = words("a", 400); // 400 tokens: 25 of the prefill pool's 40 pages
            final CompletableFuture<HttpResponse<String>> held = HttpClient.newHttpClient().sendAsync(
                HttpRequest.newBuilder(server.baseUri().resolve("/v1/completions")).header("Authorization", "Bearer sk-alice")
                    .POST(HttpRequest.BodyPublishers.ofString(TestClient.body(first, 2, false))).build(),
                HttpResponse.BodyHandlers.ofString());
            assertTrue(gate.awaitHeld(1, Duration.ofSeconds(10)), "the first transfer never started");

            final TestClient.Response r = client.complete("bob", words("b", 400), 2, false);
            assertEquals(429, r.status(), r::body);
            assertEquals("1", r.retryAfter());
            final JsonNode e = r.error();
            assertEquals("rate_limit_error", e.path("type").asText());
            assertEquals("retry_later", e.path("reason").asText());
            assertEquals("prefill", e.path("role").asText());
            assertEquals(25, e.path("pages_needed").asLong());
            assertEquals(15, e.path("pages_available").asLong());
            assertTrue(e.path("message").asText().contains("25") && e.path("message").asText().contains("15"), e::toString);

            gate.open();
            final HttpResponse<String> firstDone = held.get();
            assertEquals(200, firstDone.statusCode(), firstDone::body);
            final String m = server.metricsText();
            final java.util.Map<String, Double> mm = Metrics.parse(m);
            assertEquals(1.0, mm.get("kvpool_requests_rejected_total{reason=\"retry_later\",role=\"prefill\"}"), m);
            assertEquals(1.0, mm.get("kvpool_pool_admissions_rejected_total{reason=\"retry_later\",role=\"prefill\"}"), m);
            ServerTests.assertBalanced(server);
        }
    }

    @Test
    void withoutALinkTheDecodeSideAnswers503AndNothingIsLeftBehind() throws Exception {
        final LinkGate gate = LinkGate.create(false);
        try (KvServer server = KvServer.start(ServerTests.held(gate).reconnectDelay(Duration.ofHours(1)).build())) {
            final TestClient client = new TestClient(server);
            assertEquals(200, client.complete("alice", "before the link drops", 2, false).status());
            gate.dropLink();
            Await.until(() -> !server.roles().decode().ready(), Duration.ofSeconds(10), () -> "decode to notice the lost link");

            final long admitted = server.roles().prefill().status().counters().get("admitted");
            final TestClient.Response r = client.complete("alice", "while it is down", 2, true);
            assertEquals(503, r.status(), r::body);
            assertEquals("1", r.retryAfter());
            final JsonNode e = r.error();
            assertEquals("service_unavailable", e.path("type").asText());
            assertEquals("decode_unavailable", e.path("reason").asText());
            assertEquals("decode", e.path("role").asText());
            ServerTests.assertBalanced(server);
            // the router knew decode could not take the KV: prefill computed nothing, so there was nothing to abort
            // (not: prefill admits and computes it, then the paired abort throws it away — 1 abort request)
            assertEquals(admitted, server.roles().prefill().status().counters().get("admitted"));
            assertEquals(0, server.roles().prefill().status().counters().get("abort_requests"));
        }
    }
}
