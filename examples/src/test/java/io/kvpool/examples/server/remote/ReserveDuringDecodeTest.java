package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.RoleServer;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.role.SeparateRoles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

/** A reserve and a decode call of one request id at a decode process: never both hold the id. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ReserveDuringDecodeTest {

    private static final String BODY = "{\"request_id\":7,\"tenant\":\"alice\",\"prompt_tokens\":40,\"max_new_tokens\":8}";

    @Test
    void aDecodeCallArrivingWhileAReserveOfItsIdIsUnderWayIsRefusedAndTheReservationIsTheOnlyHolder(@TempDir Path dir)
        throws Exception {
        final ServerConfig cfg = ServerTests.small().role(Topology.Role.DECODE).workDir(dir).build();
        final SeparateRoles.Decode d = SeparateRoles.decode(cfg);
        final DecodeEndpoint endpoint = new DecodeEndpoint(d.role(), Json.strict(), cfg);
        final HttpClient client = HttpClient.newHttpClient();
        try (io.kvpool.examples.server.role.DecodeRole role = d.role();
             HttpFront front = HttpFront.start(cfg.host(), 0, Http.limits(cfg, RoleEndpoint.maxBody(cfg)), endpoint);
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
            final URI base = front.baseUri();
            Await.until(() -> status(client, base).path("ready").asBoolean(), Duration.ofSeconds(30), () -> "linked");
            // the decode call of the same id comes in the reserve's gap, and gets as far as it goes before the reserve goes on
            final AtomicReference<HttpResponse<InputStream>> decode = new AtomicReference<>();
            endpoint.beforeReserve = id -> {
                final CompletableFuture<HttpResponse<InputStream>> answered = client.sendAsync(post(base, "internal/decode", BODY),
                    HttpResponse.BodyHandlers.ofInputStream());
                try {
                    decode.set(answered.get(10, TimeUnit.SECONDS)); // its status: claimed and started (200), or refused
                } catch (Exception e) {
                    throw new IllegalStateException("the decode call of request " + id + " got no answer", e);
                }
            };
            final HttpResponse<String> reserve = client.send(post(base, "internal/reserve", BODY), HttpResponse.BodyHandlers.ofString());
            endpoint.beforeReserve = null;
            final HttpResponse<InputStream> call = decode.get();
            assertNotNull(call, "the hook ran");
            // the decode call, if it started, ends; what stays reserved then belongs to the reserve alone
            client.send(post(base, "internal/abort", "{\"request_id\":7}"), HttpResponse.BodyHandlers.discarding());
            call.body().close();
            Await.until(() -> role.activeTransfers() == 0, Duration.ofSeconds(10), () -> "the decode call ended: " + role);
            final JsonNode after = status(client, base);
            final long reservedPages = after.path("pool").path("counters").path("reserved").asLong();
            assertEquals(409, call.statusCode(), () -> "a decode call of request 7 while its reserve is under way is refused, "
                + "else both hold the id: decode answered " + call.statusCode() + ", reserve answered " + reserve.statusCode() + " "
                + reserve.body() + ", and after the decode call ended " + reservedPages + " pages stay reserved, "
                + after.path("counters").path("reserved_ahead").asLong() + " reservations made");
            assertEquals(200, reserve.statusCode(), reserve::body);
            assertEquals("{\"admitted\":true}", reserve.body());
            assertEquals(3, reservedPages, () -> "48 tokens: 3 pages of 16 promised to the reservation: " + after);
            client.send(post(base, "internal/unreserve", "{\"request_id\":7}"), HttpResponse.BodyHandlers.discarding());
            Await.until(() -> status(client, base).path("pool").path("counters").path("reserved").asLong() == 0, Duration.ofSeconds(10),
                () -> "the reservation given back: " + status(client, base));
        }
    }

    private static HttpRequest post(URI base, String path, String body) {
        return HttpRequest.newBuilder(base.resolve(path)).header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body)).build();
    }

    private static JsonNode status(HttpClient client, URI base) {
        try {
            return new ObjectMapper().readTree(client.send(HttpRequest.newBuilder(base.resolve("internal/status")).build(),
                HttpResponse.BodyHandlers.ofByteArray()).body());
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
