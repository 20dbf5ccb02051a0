package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.echo.EchoTokenizer;
import io.kvpool.examples.server.remote.RemoteFixtures;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.RoleRefusedException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Request ids across router instances, and the role endpoints' answers the router depends on, against a
 * prefill and a decode {@link RoleServer} (here in this JVM, linked over shared memory as separate processes
 * would be): the role processes key offers, descriptors and decode calls by request id, so
 * <ul>
 *   <li>a router that starts in front of roles where an earlier (crashed) router's request still lingers must
 *       not be answered from that request's KV — its ids are its own ({@link Router#firstId});</li>
 *   <li>a role refuses an id already in flight there (409 {@value DuplicateRequestException#REASON}) before it
 *       starts anything for it, and the request in flight under it is untouched;</li>
 *   <li>a decode process that fails a request before admission answers the router at once, not at its timeout;</li>
 *   <li>decode's 429 carries the pages it had available.</li>
 * </ul>
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RequestIdsTest {

    private static final Duration WAIT = Duration.ofSeconds(15);

    @TempDir
    static Path dir;
    static InJvmRoleServers roles;
    static RoleServer decode;
    static RoleServer prefill;

    @BeforeAll
    static void start() throws Exception {
        roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), WAIT);
        decode = roles.decode;
        prefill = roles.prefill;
    }

    @AfterAll
    static void stop() {
        if (roles != null) {
            roles.close();
        }
    }

    static JsonNode status(RoleServer r) {
        return InJvmRoleServers.status(r.baseUri());
    }

    static HttpResponse<String> post(RoleServer r, String path, Object body) throws Exception {
        return InJvmRoleServers.send(r.baseUri(), path, body);
    }

    /** Prefill's answer to an offered request: admitted, and the engine that holds the offer (16 hex digits). */
    static void assertOffered(String body) {
        assertOffered(body, "");
    }

    static void assertOffered(String body, String why) {
        assertTrue(body.matches("\\{\"admitted\":true,\"instance\":\"[0-9a-f]{16}\"}"), why + ": " + body);
    }

    static Map<String, Object> prefillBody(long id, String tenant, String prompt) {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("request_id", id);
        m.put("tenant", tenant);
        m.put("tokens", RemoteFixtures.tokens(EchoTokenizer.encode(prompt)));
        return m;
    }

    static Map<String, Object> decodeBody(long id, String tenant, int promptTokens, int maxNew) {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("request_id", id);
        m.put("tenant", tenant);
        m.put("prompt_tokens", promptTokens);
        m.put("max_new_tokens", maxNew);
        return m;
    }

    static KvServer router() {
        return KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
            .withUrls(prefill.baseUri(), decode.baseUri())).build());
    }

    static void awaitIdle() throws InterruptedException {
        Await.until(() -> status(prefill).path("active_transfers").asInt(-1) == 0 && status(decode).path("active_transfers").asInt(-1) == 0
                && status(decode).path("pool").path("counters").path("free").asLong() == 128
                && status(prefill).path("pool").path("counters").path("free").asLong() == 64, WAIT,
            () -> "both roles to be idle: " + status(prefill) + " " + status(decode));
    }

    @Test
    void aRestartedRouterIsNeverAnsweredFromACrashedRoutersRequestStillOfferedUnderItsId() throws Exception {
        // what a crashed router left behind: alice's request 1 (the id a router counting from 1 gave its first request)
        // admitted and offered by prefill, its decode half never sent
        final String alice = "alice's secret: the owl flies at dawn";
        final HttpResponse<String> lingering = post(prefill, "internal/prefill", prefillBody(1, "alice", alice));
        assertOffered(lingering.body());

        final String bob = "bob's notes: a cat sleeps at noon";
        assertEquals(EchoTokenizer.encode(alice).size(), EchoTokenizer.encode(bob).size(), "equal token counts: every size check passes");
        final List<String> ids = new ArrayList<>();
        for (String tenant : List.of("bob", "carol")) { // the restarted router, then a second one beside it
            try (KvServer router = router()) {
                final String prompt = tenant.equals("bob") ? bob : "carol's diary: the fox ran by";
                final TestClient.Response r = new TestClient(router).complete(tenant, prompt, 4, false);
                assertEquals(200, r.status(), r::body);
                assertEquals(List.of(), Isolation.violations(tenant, prompt, 4, r.json()));
                ids.add(r.json().path("kvpool").path("request_id").asText());
            }
        }
        assertNotEquals(ids.get(0), ids.get(1), "two routers issued the same request id");
        post(prefill, "internal/abort", Map.of("request_id", 1, "why", "test over"));
        awaitIdle();
    }

    @Test
    void prefillRefusesAnIdAlreadyInFlightAndLeavesTheRequestUnderItAlone() throws Exception {
        final String alice = "alice: the key is under the mat";
        assertOffered(post(prefill, "internal/prefill", prefillBody(77, "alice", alice)).body());
        final long admitted = status(prefill).path("counters").path("admitted").asLong();

        final HttpResponse<String> dup = post(prefill, "internal/prefill", prefillBody(77, "mallory", "mallory: the key is elsewhere"));
        assertEquals(409, dup.statusCode(), dup::body);
        final JsonNode err = TestClient.JSON.readTree(dup.body()).path("error");
        assertEquals(DuplicateRequestException.REASON, err.path("reason").asText(), dup::body);
        assertTrue(err.path("message").asText().contains("request id 77 is already in flight"), dup::body);
        assertEquals(admitted, status(prefill).path("counters").path("admitted").asLong(), "nothing admitted for the duplicate");

        // the request in flight under 77 is still alice's, whole
        final String events = post(decode, "internal/decode", decodeBody(77, "alice", EchoTokenizer.encode(alice).size(), 2)).body();
        final JsonNode done = TestClient.JSON.readTree(events.lines().toList().getLast());
        assertEquals("done", done.path("event").asText(), events);
        assertEquals(alice, done.path("kv").path("text").asText(), events);
        assertEquals(List.of("alice"), List.of(done.path("kv").path("tenants").path(0).asText()), events);
        awaitIdle();
        assertOffered(post(prefill, "internal/prefill", prefillBody(77, "alice", alice)).body(),
            "an id is free again once its transfer is over");
        post(prefill, "internal/abort", Map.of("request_id", 77, "why", "test over"));
        awaitIdle();
    }

    @Test
    void decodeRefusesAnIdAlreadyDecodingBeforeItStartsASecondTransfer() throws Exception {
        final long admitted = status(decode).path("counters").path("admitted").asLong();
        final long rejected = status(decode).path("counters").path("rejected").asLong();
        final long abortsBefore = status(decode).path("counters").path("abort_requests").asLong();
        // request 88's stream stays open: its KV never comes (nothing offered), so it waits for its transfer
        final HttpResponse<InputStream> first = InJvmRoleServers.HTTP.send(HttpRequest.newBuilder(decode.baseUri().resolve("internal/decode"))
            .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(TestClient.JSON.writeValueAsString(decodeBody(88, "alice", 5, 2)))).build(),
            HttpResponse.BodyHandlers.ofInputStream());
        try (InputStream in = first.body()) {
            assertEquals(200, first.statusCode());
            Await.until(() -> status(decode).path("counters").path("admitted").asLong() == admitted + 1, WAIT, () -> "88 admitted");

            final HttpResponse<String> dup = post(decode, "internal/decode", decodeBody(88, "mallory", 5, 2));
            assertEquals(409, dup.statusCode(), dup::body);
            assertEquals(DuplicateRequestException.REASON, TestClient.JSON.readTree(dup.body()).path("error").path("reason").asText(), dup::body);
            dutyBarrier(decode); // a second start would have been counted by now
            assertEquals(admitted + 1, status(decode).path("counters").path("admitted").asLong(), "no second admission for the duplicate");
            assertEquals(rejected, status(decode).path("counters").path("rejected").asLong(), "no second start for the duplicate");

            // another router reusing the id: no reservation under it, and giving one back leaves the call decoding alone
            final HttpResponse<String> dupReserve = post(decode, "internal/reserve", decodeBody(88, "mallory", 5, 2));
            assertEquals(409, dupReserve.statusCode(), dupReserve::body);
            assertEquals(204, post(decode, "internal/unreserve", Map.of("request_id", 88, "why", "mallory's router gave up")).statusCode());
            dutyBarrier(decode); // the give-back has been taken
            assertEquals(0, status(decode).path("counters").path("abort_requests").asLong() - abortsBefore, "88 was not aborted");
            assertEquals(204, post(decode, "internal/abort", Map.of("request_id", 88, "why", "test over")).statusCode());
            final String rest = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(rest.contains("\"committed\":false"), rest);
        }
        awaitIdle();
    }

    /**
     * A call decode can never take is answered at once. 0 prompt tokens must not start the call: the decode pool's
     * admission would throw on the role's thread — a 200 stream with an {@code error} event, which the router takes
     * for a 503 (retry). The endpoint refuses it with 400 before it starts anything, and the
     * router gets a {@link RoleRefusedException} (a 502 without Retry-After) from {@code start} itself.
     */
    @Test
    void aDecodeErrorBeforeAdmissionAnswersTheRouterAtOnce() throws Exception {
        try (DecodeService remote = RemoteFixtures.decode(decode.baseUri(), new ObjectMapper(),
            Duration.ofSeconds(5))) {
            final long t0 = System.nanoTime();
            final RoleRefusedException e = assertThrows(RoleRefusedException.class, () -> remote.start(99, "alice", 0, 2));
            assertEquals(400, e.status());
            assertTrue(e.getMessage().contains("prompt_tokens must be ≥ 1, was 0"), e.getMessage());
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(4));
        }
        awaitIdle();
    }

    @Test
    void decodesRetryLaterCarriesThePagesItHadAvailable() throws Exception {
        final List<HttpResponse<InputStream>> holding = new ArrayList<>();
        try {
            for (int i = 0; i < 4; i++) { // 4 × 32 pages: every page of the 128-page decode pool promised
                holding.add(InJvmRoleServers.HTTP.send(HttpRequest.newBuilder(decode.baseUri().resolve("internal/decode"))
                    .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(TestClient.JSON.writeValueAsString(decodeBody(200 + i, "alice", 500, 12))))
                    .build(), HttpResponse.BodyHandlers.ofInputStream()));
            }
            Await.until(() -> status(decode).path("pool").path("counters").path("reserved").asLong()
                + status(decode).path("pool").path("counters").path("receiving").asLong() == 128, WAIT, () -> "all pages promised: " + status(decode));
            final String events = post(decode, "internal/decode", decodeBody(300, "bob", 100, 12)).body();
            final JsonNode last = TestClient.JSON.readTree(events.lines().toList().getLast());
            assertEquals("RETRY_LATER", last.path("rejection").path("reason").asText(), events);
            final JsonNode n = last.path("rejection").path("numbers");
            assertEquals(0, n.path("pages_available").asLong(-1), events);
            assertEquals(7, n.path("pages_needed").asLong(), events);
            assertEquals(128, n.path("pages_in_service").asLong(), events);
            try (KvServer router = router()) { // what a client reads: the 429 names the numbers
                final TestClient.Response r = new TestClient(router).complete("bob", BackpressureTest.words("b", 100), 12, false);
                assertEquals(429, r.status(), r::body);
                assertEquals("decode", r.error().path("role").asText(), r::body);
                assertEquals(0, r.error().path("pages_available").asLong(-1), r::body);
                assertEquals(7, r.error().path("pages_needed").asLong(-1), r::body);
            }
        } finally {
            for (int i = 0; i < holding.size(); i++) {
                post(decode, "internal/abort", Map.of("request_id", 200 + i, "why", "test over"));
                holding.get(i).body().close();
            }
        }
        awaitIdle();
    }

    /**
     * Returns once decode's duty thread has run everything submitted before: it takes commands in order, and a
     * reservation is answered from it (then given back). Neither counts as admitted, rejected or aborted.
     */
    private static void dutyBarrier(RoleServer decode) throws Exception {
        final HttpResponse<String> r = post(decode, "internal/reserve", decodeBody(990_001, "barrier", 1, 0));
        assertEquals(200, r.statusCode(), r::body);
        assertEquals(204, post(decode, "internal/unreserve", Map.of("request_id", 990_001, "why", "the barrier's")).statusCode());
    }
}
