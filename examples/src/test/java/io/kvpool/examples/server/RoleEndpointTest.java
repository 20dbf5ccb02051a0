package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.echo.EchoTokenizer;
import io.kvpool.examples.server.remote.RemoteFixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A role process's internal endpoints, served in this JVM by a {@link RoleServer}: what the router relies on,
 * and a clear JSON error for every call it would never make.
 */
class RoleEndpointTest {

    @TempDir
    Path dir;

    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    private HttpResponse<String> call(URI base, String method, String path, String body) throws Exception {
        return call(base, method, path, body, "application/json");
    }

    private HttpResponse<String> call(URI base, String method, String path, String body, String contentType) throws Exception {
        final HttpRequest.Builder b = HttpRequest.newBuilder(base.resolve(path)).timeout(Duration.ofSeconds(10))
            .method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        return http.send((contentType == null ? b : b.header("Content-Type", contentType)).build(), HttpResponse.BodyHandlers.ofString());
    }

    private static JsonNode error(HttpResponse<String> r) throws Exception {
        return TestClient.JSON.readTree(r.body()).path("error");
    }

    private ServerConfig role(Topology.Role role) {
        return ServerTests.small().role(role).workDir(dir).build();
    }

    @Test
    void aRoleTakesThePrefillCallOfTheLargestPromptItsRouterAccepts() throws Exception {
        // a router with --max-body-bytes 1 MiB takes a 1 MiB prompt; its prefill call costs up to 7 bytes a prompt byte
        try (RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).maxBodyBytes(1 << 20).build())) {
            final String big = "{\"pad\":\"" + "a".repeat(7 << 20) + "\"}";
            final HttpResponse<String> r = call(prefill.baseUri(), "POST", "internal/prefill", big);
            assertEquals(400, r.statusCode(), "read and refused for its fields, not for its size: " + r.body());
            final HttpResponse<String> over = call(prefill.baseUri(), "POST", "internal/prefill", "{\"pad\":\"" + "a".repeat(9 << 20) + "\"}");
            assertEquals(413, over.statusCode(), "the control: beyond 8 × --max-body-bytes: " + over.body());
        }
    }

    @Test
    void theDecodeRolesEndpointsAnswerWhatTheRouterNeedsAndRefuseEverythingElseClearly() throws Exception {
        try (RoleServer decode = RoleServer.start(role(Topology.Role.DECODE))) {
            final URI u = decode.baseUri();
            assertEquals("shm:" + dir.resolve("transfer.sock"), decode.kvLink());

            final HttpResponse<String> notFound = call(u, "POST", "v1/completions", "{}");
            assertEquals(404, notFound.statusCode(), notFound::body);
            assertTrue(error(notFound).path("message").asText().contains("this is the decode role"), notFound::body);
            final HttpResponse<String> wrongMethod = call(u, "GET", "internal/decode", null);
            assertEquals(405, wrongMethod.statusCode(), wrongMethod::body);
            assertEquals("POST", wrongMethod.headers().firstValue("Allow").orElse(null));
            final HttpResponse<String> missing = call(u, "POST", "internal/decode", "{\"tenant\":\"a\"}");
            assertEquals(400, missing.statusCode(), missing::body);
            assertEquals("field 'request_id' is missing", error(missing).path("message").asText());
            final HttpResponse<String> notJson = call(u, "POST", "internal/decode", "{nope");
            assertEquals(400, notJson.statusCode(), notJson::body);
            final HttpResponse<String> twice = call(u, "POST", "internal/abort", "{\"request_id\":42,\"request_id\":43}");
            assertEquals(400, twice.statusCode(), "a key given twice: " + twice.body());
            final HttpResponse<String> trailing = call(u, "POST", "internal/abort", "{\"request_id\":42} 43");
            assertEquals(400, trailing.statusCode(), "data after the document: " + trailing.body());
            assertEquals(404, call(u, "POST", "internal/test/gate", "{}").statusCode(), "the test hook is prefill's only");
            assertEquals(204, call(u, "POST", "internal/abort", "{\"request_id\":42}").statusCode(), "unknown ids: nothing to do");

            final JsonNode status = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body());
            assertEquals("decode", status.path("role").asText());
            assertFalse(status.path("ready").asBoolean(), "no prefill link yet");
            assertEquals(128, status.path("pool").path("capacity").asInt());
            assertEquals("F".repeat(128), status.path("pool").path("pages").asText());
            final JsonNode accounting = TestClient.JSON.readTree(call(u, "GET", "internal/accounting", null).body());
            assertTrue(accounting.path("balanced").asBoolean() && accounting.path("idle").asBoolean(), accounting::toString);
            final Map<String, Double> m = Metrics.parse(call(u, "GET", "metrics", null).body());
            assertEquals(1.0, m.get("kvpool_role_up{role=\"decode\"}"));
            assertEquals(128.0, m.get("kvpool_pool_pages{role=\"decode\",state=\"free\"}"));

            // no prefill link: the stream answers at once with the typed refusal the router turns into a 503
            final HttpResponse<String> refused = call(u, "POST", "internal/decode",
                "{\"request_id\":1,\"tenant\":\"alice\",\"prompt_tokens\":3,\"max_new_tokens\":2}");
            assertEquals(200, refused.statusCode(), refused::body);
            final List<String> lines = refused.body().lines().toList();
            final JsonNode last = TestClient.JSON.readTree(lines.getLast());
            assertEquals("rejected", last.path("event").asText(), refused::body);
            assertEquals("UNAVAILABLE", last.path("rejection").path("reason").asText(), refused::body);
        }
    }

    @Test
    void thePrefillRolesEndpointAdmitsComputesAndAbortsAndRefusesMalformedTokens() throws Exception {
        try (RoleServer prefill = RoleServer.start(role(Topology.Role.PREFILL))) { // no decode: its link stays down
            final URI u = prefill.baseUri();
            final HttpResponse<String> tooLong = call(u, "POST", "internal/prefill",
                "{\"request_id\":1,\"tenant\":\"a\",\"tokens\":[\"" + java.util.Base64.getEncoder().encodeToString(new byte[9]) + "\"]}");
            assertEquals(400, tooLong.statusCode(), tooLong::body);
            assertEquals("tokens[0] has 9 bytes; a token has 1..8", error(tooLong).path("message").asText());
            assertEquals(404, call(u, "POST", "internal/test/gate", "{}").statusCode(), "the test hook is off without -D" + RoleServer.TEST_HOOKS);

            final String tokens = TestClient.JSON.writeValueAsString(RemoteFixtures.tokens(EchoTokenizer.encode("Hello from alice")));
            final HttpResponse<String> ok = call(u, "POST", "internal/prefill", "{\"request_id\":2,\"tenant\":\"alice\",\"tokens\":" + tokens + "}");
            assertEquals(200, ok.statusCode(), ok::body);
            final String engine = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body()).path("instance").asText();
            assertEquals("{\"admitted\":true,\"instance\":\"" + engine + "\"}", ok.body(), "the answer names this process's engine");
            final HttpResponse<String> big = call(u, "POST", "internal/prefill", "{\"request_id\":3,\"tenant\":\"alice\",\"tokens\":"
                + TestClient.JSON.writeValueAsString(RemoteFixtures.tokens(EchoTokenizer.encode(BackpressureTest.words("w", 600)))) + "}");
            final JsonNode r = TestClient.JSON.readTree(big.body());
            assertFalse(r.path("admitted").asBoolean(), big::body);
            assertEquals("CONTEXT_TOO_LONG", r.path("rejection").path("reason").asText(), big::body);
            assertEquals(600, r.path("rejection").path("numbers").path("requested_tokens").asLong(), big::body);

            assertEquals(204, call(u, "POST", "internal/abort", "{\"request_id\":2,\"why\":\"test\"}").statusCode());
            Await.until(() -> poolFree(u), Duration.ofSeconds(10), () -> "prefill to release the aborted offer");
        }
    }

    @Test
    void aPrefillInstanceThatIsNot16HexDigitsIsRefusedWith400AndTheStatusNamesDecodesEngine() throws Exception {
        try (RoleServer decode = RoleServer.start(role(Topology.Role.DECODE))) {
            final URI u = decode.baseUri();
            final String body = "{\"request_id\":1,\"tenant\":\"alice\",\"prompt_tokens\":3,\"max_new_tokens\":2,\"prefill_instance\":%s}";
            for (String path : new String[] {"internal/reserve", "internal/decode"}) {
                for (String[] bad : new String[][] {
                    {"5", "field 'prefill_instance' must be a string, was NUMBER"},
                    {"\"xyz\"", "an instance id is 16 hex digits, not 'xyz'"},
                    {"\"a1b2c3d4e5f6071\"", "an instance id is 16 hex digits, not 'a1b2c3d4e5f6071'"},
                    {"\"+1b2c3d4e5f60718\"", "an instance id is 16 hex digits, not '+1b2c3d4e5f60718'"},
                    {"\"0000000000000000\"", "instance id 0 stands for none"}}) {
                    final HttpResponse<String> r = call(u, "POST", path, body.formatted(bad[0]));
                    assertEquals(400, r.statusCode(), () -> path + " " + bad[0] + ": " + r.body());
                    assertEquals("bad_field", error(r).path("reason").asText(), r::body);
                    assertEquals("prefill_instance: " + bad[1], error(r).path("message").asText(), r::body);
                }
            }
            final JsonNode status = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body());
            assertTrue(status.path("instance").asText().matches("[0-9a-f]{16}"), status::toString);
            assertTrue(status.path("linked_instances").isArray() && status.path("linked_instances").isEmpty(), status::toString);
            assertEquals(0, status.path("counters").path("rejected").asLong(), "nothing reached the role: " + status.path("counters"));
        }
    }

    /** Nonsense the router never sends is a 400 naming the field, before the role starts anything. */
    @Test
    void internalEndpointsRefuseNonPositiveIdsAndCountsAndMalformedTenantsWith400() throws Exception {
        try (RoleServer decode = RoleServer.start(role(Topology.Role.DECODE))) {
            final URI u = decode.baseUri();
            final String ok = "{\"request_id\":%s,\"tenant\":%s,\"prompt_tokens\":%s,\"max_new_tokens\":%s}";
            for (String[] bad : new String[][]{
                {"0", "\"alice\"", "3", "2", "request_id must be ≥ 1, was 0"},
                {"-5", "\"alice\"", "3", "2", "request_id must be ≥ 1, was -5"},
                {"1", "\"alice\"", "0", "2", "prompt_tokens must be ≥ 1, was 0"},
                {"1", "\"alice\"", "-3", "2", "prompt_tokens must be ≥ 1, was -3"},
                {"1", "\"alice\"", "3", "-1", "max_new_tokens must be ≥ 0, was -1"},
                {"1", "\"\"", "3", "2", "tenant '' is not a tenant name ([A-Za-z0-9_-]{1,64})"},
                {"1", "\"al ice\"", "3", "2", "tenant 'al ice' is not a tenant name ([A-Za-z0-9_-]{1,64})"},
                {"1", "\"" + "a".repeat(65) + "\"", "3", "2", "tenant '" + "a".repeat(65) + "' is not a tenant name ([A-Za-z0-9_-]{1,64})"}}) {
                final HttpResponse<String> r = call(u, "POST", "internal/decode", ok.formatted(bad[0], bad[1], bad[2], bad[3]));
                assertEquals(400, r.statusCode(), () -> String.join(",", bad) + ": " + r.body());
                assertEquals("bad_field", error(r).path("reason").asText(), r::body);
                assertEquals(bad[4], error(r).path("message").asText(), r::body);
            }
            for (String id : new String[]{"0", "-1"}) {
                final HttpResponse<String> r = call(u, "POST", "internal/abort", "{\"request_id\":" + id + "}");
                assertEquals(400, r.statusCode(), r::body);
                assertEquals("request_id must be ≥ 1, was " + id, error(r).path("message").asText(), r::body);
            }
            final JsonNode status = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body());
            assertEquals(0, status.path("counters").path("rejected").asLong(), "nothing reached the role: " + status.path("counters"));
            assertEquals(0, status.path("counters").path("admitted").asLong(), "nothing reached the role: " + status.path("counters"));
        }
        try (RoleServer prefill = RoleServer.start(role(Topology.Role.PREFILL))) {
            final URI u = prefill.baseUri();
            final String tokens = TestClient.JSON.writeValueAsString(RemoteFixtures.tokens(EchoTokenizer.encode("Hello")));
            for (String[] bad : new String[][]{
                {"0", "\"alice\"", tokens, "request_id must be ≥ 1, was 0"},
                {"-7", "\"alice\"", tokens, "request_id must be ≥ 1, was -7"},
                {"1", "\"alice/bob\"", tokens, "tenant 'alice/bob' is not a tenant name ([A-Za-z0-9_-]{1,64})"},
                {"1", "\"alice\"", "[]", "tokens must hold at least one token (prompt_tokens ≥ 1), was empty"}}) {
                final HttpResponse<String> r = call(u, "POST", "internal/prefill",
                    "{\"request_id\":" + bad[0] + ",\"tenant\":" + bad[1] + ",\"tokens\":" + bad[2] + "}");
                assertEquals(400, r.statusCode(), () -> String.join(",", bad) + ": " + r.body());
                assertEquals(bad[3], error(r).path("message").asText(), r::body);
            }
            assertEquals(400, call(u, "POST", "internal/abort", "{\"request_id\":0}").statusCode());
            final JsonNode c = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body()).path("counters");
            assertEquals(0, c.path("admitted").asLong() + c.path("rejected").asLong(), "nothing reached the role: " + c);
        }
    }

    @Test
    void internalEndpointsActOnlyOnJsonBodiesAndRefuseOtherMediaTypesWith415() throws Exception {
        // a browser page may POST text/plain (or form data) to any origin without asking first: an internal endpoint
        // that acted on it would let any page open on the role's host reserve, prefill or abort
        try (RoleServer decode = RoleServer.start(role(Topology.Role.DECODE))) {
            final URI u = decode.baseUri();
            final String reserve = "{\"request_id\":%d,\"tenant\":\"evil\",\"prompt_tokens\":100,\"max_new_tokens\":28}";
            int id = 1;
            for (String type : new String[]{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x", null}) {
                for (String path : List.of("internal/reserve", "internal/decode", "internal/unreserve", "internal/abort")) {
                    final HttpResponse<String> r = call(u, "POST", path, reserve.formatted(id++), type);
                    assertEquals(415, r.statusCode(), () -> type + " " + path + ": " + r.body());
                    assertEquals("unsupported_media_type", error(r).path("reason").asText(), r::body);
                }
            }
            final JsonNode c = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body()).path("counters");
            assertEquals(0, c.path("admitted").asLong() + c.path("rejected").asLong() + c.path("abort_requests").asLong(),
                "nothing reached the role: " + c);
            assertTrue(poolFree(u), "no page reserved");
            final HttpResponse<String> json = call(u, "POST", "internal/reserve", reserve.formatted(id), "Application/JSON; charset=utf-8");
            assertEquals(200, json.statusCode(), json::body);
        }
        try (RoleServer prefill = RoleServer.start(role(Topology.Role.PREFILL))) {
            final String tokens = TestClient.JSON.writeValueAsString(RemoteFixtures.tokens(EchoTokenizer.encode("Hello")));
            final HttpResponse<String> r = call(prefill.baseUri(), "POST", "internal/prefill",
                "{\"request_id\":1,\"tenant\":\"evil\",\"tokens\":" + tokens + "}", "text/plain");
            assertEquals(415, r.statusCode(), r::body);
            final JsonNode c = TestClient.JSON.readTree(call(prefill.baseUri(), "GET", "internal/status", null).body()).path("counters");
            assertEquals(0, c.path("admitted").asLong() + c.path("rejected").asLong(), "nothing reached the role: " + c);
        }
    }

    /**
     * A body in UTF-16 or UTF-32 is malformed (RFC 8259 §8.1: JSON between systems is UTF-8), not a call in another
     * encoding: a parser that guessed would reserve pages for bytes every UTF-8 reader sees as NULs.
     */
    @Test
    void internalEndpointsRefuseABodyThatIsNotUtf8With400AndReserveNothing() throws Exception {
        try (RoleServer decode = RoleServer.start(role(Topology.Role.DECODE))) {
            final URI u = decode.baseUri();
            final String reserve = "{\"request_id\":%d,\"tenant\":\"alice\",\"prompt_tokens\":100,\"max_new_tokens\":28}";
            int id = 1;
            for (java.nio.charset.Charset cs : List.of(java.nio.charset.StandardCharsets.UTF_16BE, java.nio.charset.StandardCharsets.UTF_16LE,
                java.nio.charset.StandardCharsets.UTF_16, java.nio.charset.Charset.forName("UTF-32BE"), java.nio.charset.Charset.forName("UTF-32LE"))) {
                for (String path : List.of("internal/reserve", "internal/abort")) {
                    final HttpResponse<String> r = http.send(HttpRequest.newBuilder(u.resolve(path)).timeout(Duration.ofSeconds(10))
                        .header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofByteArray(reserve.formatted(id++).getBytes(cs))).build(),
                        HttpResponse.BodyHandlers.ofString());
                    assertEquals(400, r.statusCode(), () -> cs + " " + path + ": " + r.body());
                    assertEquals("malformed_internal_request", error(r).path("reason").asText(), r::body);
                    assertTrue(error(r).path("message").asText().contains("UTF-8"), r::body);
                }
            }
            final JsonNode c = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body()).path("counters");
            assertEquals(0, c.path("admitted").asLong() + c.path("reserved_ahead").asLong() + c.path("rejected").asLong()
                + c.path("abort_requests").asLong(), "nothing reached the role: " + c);
            assertTrue(poolFree(u), "no page reserved");
        }
    }

    private boolean poolFree(URI u) {
        try {
            final JsonNode c = TestClient.JSON.readTree(call(u, "GET", "internal/status", null).body()).path("pool").path("counters");
            return c.path("free").asLong() == c.path("capacity").asLong() && c.path("open_sequences").asLong() == 0;
        } catch (Exception e) {
            return false;
        }
    }
}
