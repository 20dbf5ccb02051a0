package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.PoolSnapshot;
import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.net.http.HttpRequest;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The completion endpoint on one server: answers, streams, tenants, and every error with its JSON. */
class CompletionApiTest {

    static KvServer server;
    static TestClient client;

    @BeforeAll
    static void start() {
        server = KvServer.start(ServerTests.small().maxBodyBytes(4096).build());
        client = new TestClient(server);
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @Test
    void aCompletionIsTheEchoOfThePromptReadBackFromKv() throws Exception {
        final String prompt = "Hello from alice, the secret is 42 ✓";
        final TestClient.Response r = client.complete("alice", prompt, 9, false);
        assertEquals(200, r.status(), r::body);
        assertTrue(r.contentType().startsWith("application/json"), r::contentType);
        final JsonNode j = r.json();
        assertEquals("text_completion", j.path("object").asText());
        assertEquals("kvpool-echo", j.path("model").asText());
        assertTrue(j.path("id").asText().startsWith("cmpl-"), j::toString);
        assertEquals("length", j.path("choices").path(0).path("finish_reason").asText());
        assertEquals("Hello from alice, the secret is 42 ✓Hello", j.path("choices").path(0).path("text").asText());
        final int promptTokens = EchoTokenizer.encode(prompt).size();
        assertEquals(promptTokens, j.path("usage").path("prompt_tokens").asInt());
        assertEquals(9, j.path("usage").path("completion_tokens").asInt());
        assertEquals(promptTokens + 9, j.path("usage").path("total_tokens").asInt());
        assertEquals(prompt, j.path("kvpool").path("kv_text").asText());
        assertEquals(List.of(), Isolation.violations("alice", prompt, 9, j));
        ServerTests.assertBalanced(server);
    }

    @Test
    void aStreamedCompletionSendsOneEventPerTokenThenDone() throws Exception {
        final String prompt = "stream me, please";
        final TestClient.Response r = client.complete("bob", prompt, 5, true);
        assertEquals(200, r.status(), r::body);
        assertTrue(r.contentType().startsWith("text/event-stream"), r::contentType);
        final List<String> events = r.events();
        assertEquals(5 + 2, events.size(), r::body); // 5 tokens, the final chunk, [DONE]
        final StringBuilder text = new StringBuilder();
        for (int i = 0; i < 5; i++) {
            final JsonNode chunk = TestClient.JSON.readTree(events.get(i));
            assertTrue(chunk.path("choices").path(0).path("finish_reason").isNull(), chunk::toString);
            assertEquals(chunk.path("id").asText(), TestClient.JSON.readTree(events.get(5)).path("id").asText());
            text.append(chunk.path("choices").path(0).path("text").asText());
        }
        final JsonNode last = TestClient.JSON.readTree(events.get(5));
        assertEquals("length", last.path("choices").path(0).path("finish_reason").asText());
        assertEquals(5, last.path("usage").path("completion_tokens").asInt());
        assertEquals("[DONE]", events.get(6));
        // the final chunk carries the KV report; the streamed text is what a non-streamed call returns
        final JsonNode asOne = TestClient.JSON.createObjectNode().set("kvpool", last.path("kvpool"));
        ((com.fasterxml.jackson.databind.node.ObjectNode) asOne).set("choices",
            TestClient.JSON.readTree("[{\"text\":" + TestClient.JSON.writeValueAsString(text.toString()) + "}]"));
        assertEquals(List.of(), Isolation.violations("bob", prompt, 5, asOne));
        ServerTests.assertBalanced(server);
    }

    @Test
    void twoTenantsAtOnceEachGetOnlyTheirOwnKv() throws Exception {
        final List<Future<List<String>>> results = new ArrayList<>();
        try (ExecutorService pool = Executors.newFixedThreadPool(4)) {
            for (String tenant : List.of("alice", "bob", "alice", "bob")) {
                results.add(pool.submit(() -> {
                    final List<String> v = new ArrayList<>();
                    for (int i = 0; i < 15; i++) {
                        final String prompt = tenant.toUpperCase() + " secret " + tenant + "-" + i + " " + "word ".repeat(i % 7);
                        final int max = i % 5 * 3;
                        final TestClient.Response r = client.complete(tenant, prompt, max, i % 2 == 0);
                        if (r.status() != 200) {
                            v.add(tenant + " got " + r.status() + ": " + r.body());
                            continue;
                        }
                        v.addAll(Isolation.violations(tenant, prompt, max, i % 2 == 0 ? streamed(r) : r.json()));
                    }
                    return v;
                }));
            }
            for (Future<List<String>> f : results) {
                assertEquals(List.of(), f.get());
            }
        }
        ServerTests.assertBalanced(server);
    }

    /** A streamed response folded into the shape of a non-streamed one. */
    static JsonNode streamed(TestClient.Response r) throws Exception {
        final List<String> events = r.events();
        final StringBuilder text = new StringBuilder();
        JsonNode last = null;
        for (String e : events) {
            if (e.equals("[DONE]")) {
                break;
            }
            last = TestClient.JSON.readTree(e);
            text.append(last.path("choices").path(0).path("text").asText());
        }
        final com.fasterxml.jackson.databind.node.ObjectNode o = TestClient.JSON.createObjectNode();
        o.set("kvpool", last == null ? null : last.get("kvpool"));
        o.set("choices", TestClient.JSON.readTree("[{\"text\":" + TestClient.JSON.writeValueAsString(text.toString()) + "}]"));
        return o;
    }

    @Test
    void badInputGetsItsErrorAndChangesNothingInAnyPool() throws Exception {
        ServerTests.assertBalanced(server);
        final PoolSnapshot prefillBefore = server.prefillPool().snapshot();
        final PoolSnapshot decodeBefore = server.decodePool().snapshot();
        final String ok = TestClient.body("hi", 1, false);

        expect(client.post("/v1/completions", null, ok), 401, "authentication_error", "missing_api_key");
        expect(client.post("/v1/completions", "Basic YWxpY2U6eA==", ok), 401, "authentication_error", "invalid_api_key");
        expect(client.post("/v1/completions", "Bearer alice", ok), 401, "authentication_error", "invalid_api_key");
        expect(client.post("/v1/completions", "Bearer sk-" + "a".repeat(65), ok), 401, "authentication_error", "invalid_api_key");
        expect(client.post("/v1/completions", "Bearer sk-al ice", ok), 401, "authentication_error", "invalid_api_key");
        expect(twoKeys(ok), 401, "authentication_error", "invalid_api_key"); // which one is meant depends on who reads them
        final String key = "Bearer sk-alice";
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", "), 400, "invalid_request_error", "malformed_json");
        expect(client.post("/v1/completions", key, "[1,2]"), 400, "invalid_request_error", "malformed_json");
        expect(client.post("/v1/completions", key, ""), 400, "invalid_request_error", "malformed_json");
        expect(client.post("/v1/completions", key, ok + " {}"), 400, "invalid_request_error", "malformed_json"); // trailing data
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"prompt\": \"there\", \"max_tokens\": 1}"), 400,
            "invalid_request_error", "malformed_json"); // a key twice: which one would another parser take?
        expect(client.post("/v1/completions", key, "{\"max_tokens\": 3}"), 400, "invalid_request_error", "invalid_prompt");
        expect(client.post("/v1/completions", key, "{\"prompt\": 7, \"max_tokens\": 3}"), 400, "invalid_request_error", "invalid_prompt");
        expect(client.post("/v1/completions", key, "{\"prompt\": [\"a\"], \"max_tokens\": 3}"), 400, "invalid_request_error", "invalid_prompt");
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\"}"), 400, "invalid_request_error", "invalid_max_tokens");
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"max_tokens\": -1}"), 400, "invalid_request_error", "invalid_max_tokens");
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"max_tokens\": 1.5}"), 400, "invalid_request_error", "invalid_max_tokens");
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"max_tokens\": \"3\"}"), 400, "invalid_request_error", "invalid_max_tokens");
        expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"max_tokens\": 1, \"stream\": \"yes\"}"), 400,
            "invalid_request_error", "invalid_stream");
        expect(client.post("/v1/completions", key, TestClient.body("", 3, false)), 400, "invalid_request_error", "empty_prompt");

        // too long for the advertised context: the numbers are in the error
        final JsonNode ctx = expect(client.complete("alice", "ten tokens of prompt text for the context check", 600, false),
            400, "invalid_request_error", "context_too_long");
        final int promptTokens = EchoTokenizer.encode("ten tokens of prompt text for the context check").size();
        assertEquals("router", ctx.path("role").asText());
        assertEquals(promptTokens + 600, ctx.path("requested_tokens").asLong());
        assertEquals(512, ctx.path("max_context_tokens").asLong());
        assertTrue(ctx.path("message").asText().contains(String.valueOf(promptTokens + 600)) && ctx.path("message").asText().contains("512"));
        expect(client.complete("alice", "hi", Integer.MAX_VALUE, false), 400, "invalid_request_error", "context_too_long");
        // beyond an int, and at the edge of a long: named as sent, never wrapped into a request that fits
        for (String max : new String[] {"5000000000", String.valueOf(Long.MAX_VALUE)}) {
            final JsonNode huge = expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"max_tokens\": " + max + "}"),
                400, "invalid_request_error", "context_too_long");
            assertEquals(max, huge.path("max_tokens").asText(), huge::toString);
            assertTrue(huge.path("message").asText().contains(max), huge::toString);
        }
        final JsonNode edge = expect(client.post("/v1/completions", key, "{\"prompt\": \"hi\", \"max_tokens\": " + Long.MAX_VALUE + "}"),
            400, "invalid_request_error", "context_too_long");
        assertTrue(edge.path("message").asText().startsWith("request of more than " + Long.MAX_VALUE + " tokens"), edge::toString);

        // a body over the limit: 413 naming the limit
        final JsonNode big = expect(client.complete("alice", "x".repeat(5000), 1, false), 413, "request_too_large", "body_too_large");
        assertEquals(4096, big.path("max_body_bytes").asLong());

        // wrong method, unknown path
        final TestClient.Response get = client.get("/v1/completions");
        expect(get, 405, "method_not_allowed", "method_not_allowed");
        expect(client.get("/v1/models"), 404, "not_found", "no_such_path");
        expect(client.send(HttpRequest.newBuilder(server.baseUri().resolve("/metrics")).POST(HttpRequest.BodyPublishers.noBody()).build()),
            405, "method_not_allowed", "method_not_allowed");

        assertEquals(prefillBefore, server.prefillPool().snapshot(), "bad input changed the prefill pool");
        assertEquals(decodeBefore, server.decodePool().snapshot(), "bad input changed the decode pool");
    }

    /** A completion request with two API keys, alice's first. */
    private static TestClient.Response twoKeys(String body) throws java.io.IOException, InterruptedException {
        return client.send(HttpRequest.newBuilder(server.baseUri().resolve("/v1/completions")).timeout(java.time.Duration.ofSeconds(30))
            .header("Authorization", "Bearer sk-alice").header("Authorization", "Bearer sk-mallory")
            .POST(HttpRequest.BodyPublishers.ofString(body)).build());
    }

    /**
     * JSON between systems is UTF-8 (RFC 8259 §8.1): a body in UTF-16 or UTF-32 is malformed, not another spelling of a
     * request. A parser that guessed the encoding would act on bytes that every UTF-8 reader (a proxy's filter, a log
     * scanner) sees as NULs and garbage.
     */
    @Test
    void aBodyInUtf16OrUtf32IsMalformedJsonNotARequestInAnotherEncoding() throws Exception {
        final String ok = TestClient.body("hi", 1, false);
        assertEquals(200, client.post("/v1/completions", "Bearer sk-alice", ok).status(), "the control: the same request in UTF-8");
        final PoolSnapshot prefillBefore = server.prefillPool().snapshot();
        for (java.nio.charset.Charset cs : List.of(java.nio.charset.StandardCharsets.UTF_16BE, java.nio.charset.StandardCharsets.UTF_16LE,
            java.nio.charset.StandardCharsets.UTF_16, java.nio.charset.Charset.forName("UTF-32BE"), java.nio.charset.Charset.forName("UTF-32LE"))) {
            final TestClient.Response r = client.send(HttpRequest.newBuilder(server.baseUri().resolve("/v1/completions"))
                .timeout(java.time.Duration.ofSeconds(30)).header("Authorization", "Bearer sk-alice")
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofByteArray(ok.getBytes(cs))).build());
            final JsonNode e = expect(r, 400, "invalid_request_error", "malformed_json");
            assertTrue(e.path("message").asText().contains("UTF-8"), () -> cs + ": " + r.body());
        }
        assertEquals(prefillBefore.allocations(), server.prefillPool().snapshot().allocations(), "nothing reached a pool");
        ServerTests.assertBalanced(server);
    }

    private static JsonNode expect(TestClient.Response r, int status, String type, String reason) {
        assertEquals(status, r.status(), r::body);
        assertTrue(r.contentType().startsWith("application/json"), r::contentType);
        final JsonNode e = r.error();
        assertEquals(type, e.path("type").asText(), r::body);
        assertEquals(reason, e.path("reason").asText(), r::body);
        assertTrue(e.path("message").asText().length() > 10, r::body);
        assertNull(r.retryAfter(), r::body);
        return e;
    }

    @Test
    void a401NamesTheBearerScheme() throws Exception {
        final java.net.http.HttpResponse<String> r = java.net.http.HttpClient.newHttpClient().send(java.net.http.HttpRequest
            .newBuilder(server.baseUri().resolve("v1/completions")).POST(java.net.http.HttpRequest.BodyPublishers.ofString(
                TestClient.body("hi", 1, false))).build(), java.net.http.HttpResponse.BodyHandlers.ofString());
        assertEquals(401, r.statusCode(), r::body);
        assertEquals("Bearer realm=\"kvpool-example\"", r.headers().firstValue("WWW-Authenticate").orElse(null));
    }
}
