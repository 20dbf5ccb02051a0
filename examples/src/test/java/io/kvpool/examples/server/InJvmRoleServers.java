package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/**
 * A decode and a prefill {@link RoleServer} in this JVM, linked over shared memory as two role processes would be
 * (the {@code --role} mode without the processes), and plain HTTP to their internal endpoints. Closing closes
 * prefill, then decode; idempotent as they are.
 */
final class InJvmRoleServers implements AutoCloseable {

    static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    final RoleServer decode;
    final RoleServer prefill;

    private InJvmRoleServers(RoleServer decode, RoleServer prefill) {
        this.decode = decode;
        this.prefill = prefill;
    }

    /** Starts both roles from {@code base} (which names the work directory) and waits until their link is up. */
    static InJvmRoleServers start(ServerConfig.Builder base, Duration wait) throws Exception {
        final RoleServer decode = RoleServer.start(base.role(Topology.Role.DECODE).build());
        RoleServer prefill = null;
        try {
            prefill = RoleServer.start(base.role(Topology.Role.PREFILL).build());
            final RoleServer p = prefill;
            Await.until(() -> status(decode.baseUri()).path("ready").asBoolean() && status(p.baseUri()).path("ready").asBoolean(),
                wait, () -> "the prefill→decode link to come up");
            return new InJvmRoleServers(decode, prefill);
        } catch (Exception | Error e) {
            if (prefill != null) {
                prefill.close();
            }
            decode.close();
            throw e;
        }
    }

    /** @return a role's {@code /internal/status}, or an empty object if it does not answer */
    static JsonNode status(URI role) {
        try {
            return TestClient.JSON.readTree(send(role, "internal/status", null).body());
        } catch (Exception e) {
            return TestClient.JSON.createObjectNode();
        }
    }

    /** @return how many prefill engines a decode role reports linked ({@code linked_instances}), -1 if it reports none */
    static int linkedPrefills(RoleServer decode) {
        final JsonNode l = status(decode.baseUri()).path("linked_instances");
        return l.isArray() ? l.size() : -1;
    }

    /** @return a prefill role's completed transfers ({@code counters.transfers_completed}) */
    static long transfersCompleted(RoleServer prefill) {
        final JsonNode c = status(prefill.baseUri()).path("counters").path("transfers_completed");
        if (!c.isIntegralNumber()) {
            throw new AssertionError("no transfers_completed counter: " + c);
        }
        return c.asLong();
    }

    /** GET ({@code body == null}) or POST (a JSON string, or an object to write as JSON) to a role's endpoint. */
    static HttpResponse<String> send(URI role, String path, Object body) throws Exception {
        final HttpRequest.Builder q = HttpRequest.newBuilder(role.resolve(path)).timeout(Duration.ofSeconds(10))
            .header("Content-Type", "application/json");
        return HTTP.send((body == null ? q.GET() : q.POST(HttpRequest.BodyPublishers.ofString(
            body instanceof String s ? s : TestClient.JSON.writeValueAsString(body)))).build(), HttpResponse.BodyHandlers.ofString());
    }

    @Override
    public void close() {
        prefill.close();
        decode.close();
    }
}
