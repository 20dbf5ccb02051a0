package io.kvpool.examples.server;

import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.remote.StubRole;
import io.kvpool.examples.server.role.Rejection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A refusal is retryable (429/503 with Retry-After) only when waiting can help; a refusal that no wait
 * lifts is a 4xx (or a 502 for a role that will never take the call) without Retry-After. The audit is in
 * examples/docs/example-server-refusals.md.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RefusalsTest {

    @Test
    void theServerRefusesToStartWithAContextOneTransferDescriptorCannotCarry() throws Exception {
        // the case this fixes: 65,537 tokens at 1 token per page was a 429 retry_later for ever
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> ServerConfig.parse("--tokens-per-page", "1", "--context", "80000", "--pages", "80000"));
        final String m = e.getMessage();
        assertTrue(m.contains("the advertised context of 80000 tokens needs 80000 pages of 1 token(s)"), m);
        assertTrue(m.contains("one KV transfer descriptor carries at most 65536 pages (65536 tokens at 1 per page)"), m);
        assertTrue(m.contains("lower --context to ≤ 65536 or raise --tokens-per-page to ≥ 2"), m);

        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        final int exit = KvServerMain.run(new String[] {"--port", "0", "--tokens-per-page", "1", "--context", "80000", "--pages", "80000"},
            new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
        assertEquals(2, exit);
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("one KV transfer descriptor carries at most 65536 pages"), err::toString);

        // the largest context one descriptor carries still starts; so does the same context at 2 tokens per page
        assertEquals(65_536, ServerConfig.parse("--tokens-per-page", "1", "--context", "65536", "--pages", "80000").contextTokens());
        assertEquals(80_000, ServerConfig.parse("--tokens-per-page", "2", "--context", "80000", "--pages", "80000").contextTokens());
    }

    @Test
    void aPromptOverOneDescriptorIsA413NotARetry() {
        // decode's side of it (a prompt over one descriptor is EXCEEDS_TRANSFER): role.DecodeRoleReasonTest
        final ApiError e = ApiError.of(new Rejection("decode", Rejection.Reason.EXCEEDS_TRANSFER, "m", Map.of()));
        assertEquals(413, e.status());
        assertEquals("exceeds_transfer", e.reason());
        assertEquals(0, e.retryAfterSeconds(), "no wait makes it fit");
    }

    /** A stub role process: decode reserves, aborts are taken, and every other call is refused with {@code refusal} (404: another build). */
    private static StubRole stubRole(String role, int refusal) {
        return StubRole.start(role, path -> switch (path) {
            case "/internal/reserve" -> new StubRole.Reply(200, "{\"admitted\":true}"); // decode has room: the refusal is the next call's
            case "/internal/abort", "/internal/unreserve" -> StubRole.Reply.NO_CONTENT;
            default -> StubRole.Reply.error(refusal, path);
        });
    }

    @Test
    void aRoleThatFailsTheRoutersCallIsA502WithoutRetryAfterAndStaysUp() throws Exception {
        final StubRole prefill = stubRole("prefill", 500); // took the call and failed it: a storage fault, a bug
        final StubRole decode = stubRole("decode", 500);
        try (KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
            .withUrls(prefill.base(),
                decode.base())).build())) {
            for (int i = 0; i < 2; i++) { // the second alike (RoleFailureHealthTest: the role is not marked down)
                final TestClient.Response r = new TestClient(router).complete("alice", "hello", 2, false);
                assertEquals(502, r.status(), r::body); // not 503 + Retry-After: 1, nor the role marked down
                assertNull(r.retryAfter(), r::body);
                assertEquals("role_error", r.error().path("reason").asText(), r::body);
                assertEquals(500, r.error().path("role_status").asInt(), r::body);
                assertTrue(r.error().path("message").asText().contains("answered 500 to POST /internal/prefill"), r::body);
            }
        } finally {
            prefill.close();
            decode.close();
        }
    }

    @Test
    void aDecodeThatFailsTheReservationIsA502AndPrefillIsNeverAsked() throws Exception {
        try (StubRole prefill = stubRole("prefill", 500);
             StubRole decode = StubRole.start("decode", path -> path.equals("/internal/reserve") ? StubRole.Reply.error(500, path)
                 : StubRole.Reply.NO_CONTENT);
             KvServer router = KvServer.start(routerOver(prefill, decode))) {
            final TestClient.Response r = new TestClient(router).complete("alice", "hello", 2, false);
            assertEquals(502, r.status(), r::body);
            assertEquals("role_error", r.error().path("reason").asText(), r::body);
            assertTrue(r.error().path("message").asText().contains("answered 500 to POST /internal/reserve"), r::body);
            assertEquals(java.util.List.of(), prefill.paths(), "prefill computed nothing and was sent no abort");
            router.close(); // waits for what is being delivered
            assertEquals(java.util.List.of("/internal/reserve"), decode.paths(), "a failed reserve holds nothing to give back");
        }
    }

    @Test
    void aPrefillRefusalGivesDecodesReservationBack() throws Exception {
        try (StubRole prefill = StubRole.start("prefill", path -> path.equals("/internal/prefill")
                 ? new StubRole.Reply(200, "{\"admitted\":false,\"rejection\":{\"role\":\"prefill\",\"reason\":\"RETRY_LATER\","
                     + "\"message\":\"prefill pool: no room now\",\"numbers\":{}}}")
                 : StubRole.Reply.NO_CONTENT);
             StubRole decode = stubRole("decode", 500);
             KvServer router = KvServer.start(routerOver(prefill, decode))) {
            final TestClient.Response r = new TestClient(router).complete("alice", "hello", 2, false);
            assertEquals(429, r.status(), r::body);
            Await.until(() -> decode.paths().contains("/internal/unreserve"), java.time.Duration.ofSeconds(10),
                () -> "decode's reservation given back: " + decode.paths());
            assertEquals(java.util.List.of("/internal/prefill"), prefill.paths(), "prefill refused it: no abort to send");
        }
    }

    private static ServerConfig routerOver(StubRole prefill, StubRole decode) {
        return ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill.base(), decode.base())).build();
    }

    @Test
    void aRoleThatRefusesTheRoutersCallIsA502WithoutRetryAfter() throws Exception {
        final StubRole prefill = stubRole("prefill", 404);
        final StubRole decode = stubRole("decode", 404);
        try (KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
            .withUrls(prefill.base(),
                decode.base())).build())) {
            final TestClient.Response r = new TestClient(router).complete("alice", "hello", 2, false);
            assertEquals(502, r.status(), r::body); // not 503 + Retry-After: 1: the role will never take the call
            assertNull(r.retryAfter(), r::body);
            assertEquals("role_refused", r.error().path("reason").asText(), r::body);
            assertEquals(404, r.error().path("role_status").asInt(), r::body);
            assertTrue(r.error().path("message").asText().contains("answered 404 to POST /internal/prefill"), r::body);
        } finally {
            prefill.close();
            decode.close();
        }
    }
}
