package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A decode process stopping gracefully (SIGTERM, as in a rolling restart) while a request it reserved is still with
 * prefill: it keeps listening until that request is done, refuses new ones meanwhile and reads not ready, then stops.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleShutdownTest {

    private static final Duration WAIT = Duration.ofSeconds(15);

    @TempDir
    Path dir;

    @Test
    void aStoppingDecodeFinishesTheRequestItReservedAndTakesNoNewOne() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), WAIT)) {
            final RoleServer decode = roles.decode;
            final String prompt = "Hello from alice";
            final int promptTokens = EchoTokenizer.encode(prompt).size();
            // the router's first call: decode promises the request's pages before prefill computes
            assertEquals("{\"admitted\":true}", post(decode, "internal/reserve", RequestIdsTest.decodeBody(7, "alice", promptTokens, 2)).body());

            final CompletableFuture<Void> stopped = CompletableFuture.runAsync(() -> decode.shutdown(Duration.ofSeconds(30)),
                task -> Thread.ofPlatform().daemon().start(task));
            Await.until(() -> !InJvmRoleServers.status(decode.baseUri()).path("ready").asBoolean(true), WAIT,
                () -> "decode to read not ready: " + InJvmRoleServers.status(decode.baseUri()));
            final JsonNode status = InJvmRoleServers.status(decode.baseUri());
            assertEquals(1, status.path("gauges").path("draining").asLong(), status::toString); // says why it is not ready:
            assertEquals(1, status.path("gauges").path("link_up").asLong(), status::toString); // not a lost prefill link

            final HttpResponse<String> refused = post(decode, "internal/reserve", RequestIdsTest.decodeBody(8, "bob", promptTokens, 2));
            final JsonNode r = TestClient.JSON.readTree(refused.body());
            assertFalse(r.path("admitted").asBoolean(true), refused::body);
            assertEquals("UNAVAILABLE", r.path("rejection").path("reason").asText(), refused::body);
            assertTrue(r.path("rejection").path("message").asText().contains("stopping"), refused::body);

            // the reserved request goes on: prefill computes and offers it, decode's call takes its KV and generates
            RequestIdsTest.assertOffered(post(roles.prefill, "internal/prefill", RequestIdsTest.prefillBody(7, "alice", prompt)).body());
            final String events = post(decode, "internal/decode", RequestIdsTest.decodeBody(7, "alice", promptTokens, 2)).body();
            final JsonNode done = TestClient.JSON.readTree(events.lines().toList().getLast());
            assertEquals("done", done.path("event").asText(), events);
            assertEquals(prompt, done.path("kv").path("text").asText(), events);

            stopped.get(WAIT.toSeconds(), TimeUnit.SECONDS); // nothing left: it stops well within its grace
            assertThrows(java.io.IOException.class, () -> InJvmRoleServers.send(decode.baseUri(), "internal/status", null),
                "a stopped decode listens no more");
        }
    }

    private static HttpResponse<String> post(RoleServer r, String path, Object body) throws Exception {
        return InJvmRoleServers.send(r.baseUri(), path, body);
    }
}
