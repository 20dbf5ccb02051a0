package io.kvpool.examples.server.router;

import com.fasterxml.jackson.core.JacksonException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.http.HttpHandler;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.api.Auth;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.echo.EchoDecoder;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code POST /v1/completions}, OpenAI style: parses and checks the request, authenticates the tenant,
 * runs it through the {@link Router}, and answers JSON — or, with {@code "stream": true}, server-sent
 * events: one {@code data: {chunk}} per token, then {@code data: [DONE]}.
 *
 * <p>Checks, in order, each answered with a JSON error before anything reaches a pool: the body size (413,
 * by the HTTP front, before the request reaches this class), the path (404), the method (405), the key (401),
 * the JSON (400: malformed, prompt not a string, max_tokens missing, negative or not an integer, stream not a
 * boolean).
 *
 * <p>A client that closes its connection is noticed when it does, without a write ({@link HttpCall#onClientGone}):
 * the router aborts both roles at once. A client that stops reading a stream holds nothing: generation runs to
 * its end apart from the writes, and a write that waits longer than the front's stall timeout ends the request.
 */
public final class CompletionsHandler implements HttpHandler {

    static final String PATH = "/v1/completions";
    static final String MODEL = "kvpool-echo";

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final Router router;
    private final ObjectMapper json;

    public CompletionsHandler(Router router, ObjectMapper json) {
        this.router = router;
        this.json = json;
    }

    @Override
    public void handle(HttpCall ex) {
        Sse sse = null;
        try {
            if (!ex.path().equals(PATH)) {
                throw ApiError.of(404, "not_found", "no_such_path", "no endpoint at " + ex.path() + "; POST " + PATH);
            }
            Http.method(ex, "POST");
            final String tenant = Auth.tenant(ex.headers("Authorization"));
            final Router.Request req = parse(ex.body());
            if (req.stream()) {
                sse = new Sse(ex);
                final Router.Completion c = router.complete(tenant, req, sse);
                sse.finish(c);
            } else {
                final Router.Completion c = router.complete(tenant, req, new Plain(ex));
                Http.sendJson(ex, json, 200, completion(c));
            }
        } catch (ApiError e) {
            router.counters().error(e.status());
            if (sse != null && sse.started) {
                sse.error(e); // the status line is gone: an error event ends the stream
            } else {
                Http.sendError(ex, json, e);
            }
        } catch (Router.ClientGone e) {
            LOG.log(System.Logger.Level.DEBUG, e.getMessage());
        } catch (IOException e) {
            LOG.log(System.Logger.Level.DEBUG, "writing a response failed: " + e);
        } catch (RuntimeException e) { // the router answers its own; this is one of the handler's
            router.counters().error(500);
            final ApiError internal = ApiError.internal(LOG, "a completion request", e);
            if (sse != null && sse.started) {
                sse.error(internal);
            } else {
                Http.sendError(ex, json, internal);
            }
        }
    }

    /** @throws ApiError 400 naming what is wrong */
    Router.Request parse(byte[] body) throws ApiError {
        final JsonNode root;
        try {
            root = Json.read(json, body);
        } catch (JacksonException e) {
            throw ApiError.badRequest("malformed_json", "request body is not valid JSON: " + e.getOriginalMessage());
        } catch (IOException e) {
            throw ApiError.badRequest("malformed_json", "request body could not be read as JSON: " + e.getMessage());
        }
        if (root == null || !root.isObject()) {
            throw ApiError.badRequest("malformed_json", "request body must be a JSON object");
        }
        final JsonNode prompt = root.get("prompt");
        if (prompt == null || !prompt.isTextual()) {
            throw ApiError.badRequest("invalid_prompt", "prompt must be a string"
                + (prompt == null ? " and is missing" : ", got " + prompt.getNodeType().name().toLowerCase(Locale.ROOT)));
        }
        final JsonNode max = root.get("max_tokens");
        if (max == null || max.isNull()) {
            throw ApiError.badRequest("invalid_max_tokens", "max_tokens is required (an integer ≥ 0)");
        }
        if (!max.isIntegralNumber() || !max.canConvertToLong()) {
            throw ApiError.badRequest("invalid_max_tokens", "max_tokens must be an integer ≥ 0, got " + max);
        }
        final long maxTokens = max.asLong();
        if (maxTokens < 0) {
            throw ApiError.badRequest("invalid_max_tokens", "max_tokens must be ≥ 0, got " + maxTokens);
        }
        final JsonNode stream = root.get("stream");
        if (stream != null && !stream.isNull() && !stream.isBoolean()) {
            throw ApiError.badRequest("invalid_stream", "stream must be true or false, got " + stream);
        }
        // the context check names the numbers, as the client sent them
        return new Router.Request(prompt.asText(), maxTokens, stream != null && stream.asBoolean());
    }

    static Map<String, Object> completion(Router.Completion c) {
        final Map<String, Object> m = head(c.requestId());
        m.put("choices", List.of(choice(c.generation().text(), "length")));
        m.put("usage", usage(c));
        m.put("kvpool", kvpool(c));
        return m;
    }

    private static Map<String, Object> head(long requestId) {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", "cmpl-" + requestId);
        m.put("object", "text_completion");
        m.put("created", System.currentTimeMillis() / 1000);
        m.put("model", MODEL);
        return m;
    }

    private static Map<String, Object> choice(String text, String finish) {
        final Map<String, Object> ch = new LinkedHashMap<>();
        ch.put("index", 0);
        ch.put("text", text);
        ch.put("logprobs", null);
        ch.put("finish_reason", finish);
        return ch;
    }

    private static Map<String, Object> usage(Router.Completion c) {
        final Map<String, Object> u = new LinkedHashMap<>();
        u.put("prompt_tokens", c.promptTokens());
        u.put("completion_tokens", c.generation().completionTokens());
        u.put("total_tokens", c.promptTokens() + c.generation().completionTokens());
        return u;
    }

    private static Map<String, Object> kvpool(Router.Completion c) {
        final EchoDecoder.Reconstruction kv = c.generation().kv();
        final Map<String, Object> k = new LinkedHashMap<>();
        k.put("request_id", c.requestId());
        k.put("tenant", c.tenant());
        k.put("kv_text", kv.text());
        k.put("kv_tenants", kv.tenants());
        k.put("kv_tokens", kv.tokens());
        k.put("kv_canary_tokens", kv.canary());
        k.put("kv_garbage_tokens", kv.garbage());
        k.put("kv_misplaced_tokens", kv.misplaced());
        if (kv.tail() != EchoDecoder.TAIL_NOT_READ) {
            k.put("kv_tail_tokens", kv.tail());
        }
        return k;
    }

    /**
     * A non-streamed response: nothing is sent before the completion (or the error) is known, so every refusal
     * and failure keeps its own status. The client's close is seen without writing.
     */
    private record Plain(HttpCall ex) implements Router.Sink {
        @Override
        public void admitted(long requestId) {
        }

        @Override
        public void heartbeat() {
        }

        @Override
        public void token(String text) throws IOException {
            if (ex.clientGone()) {
                throw new IOException("the client closed the connection");
            }
        }

        @Override
        public boolean clientGone() {
            return ex.clientGone();
        }

        @Override
        public void onClientGone(Runnable action) {
            ex.onClientGone(action);
        }
    }

    /** A streaming response: headers once both roles admitted, then keep-alives, token chunks, the end. */
    private final class Sse implements Router.Sink {
        private final HttpCall ex;
        boolean started;
        private long requestId;

        Sse(HttpCall ex) {
            this.ex = ex;
        }

        @Override
        public void admitted(long id) throws IOException {
            requestId = id;
            ex.setHeader("Cache-Control", "no-cache");
            ex.startStream(200, "text/event-stream; charset=utf-8");
            started = true;
            ex.write(": admitted; waiting for the KV transfer\n\n");
        }

        @Override
        public void heartbeat() throws IOException {
            ex.write(": waiting for the KV transfer\n\n");
        }

        @Override
        public void token(String text) throws IOException {
            final Map<String, Object> m = head(requestId);
            m.put("choices", List.of(choice(text, null)));
            data(m);
        }

        @Override
        public boolean clientGone() {
            return ex.clientGone();
        }

        @Override
        public void onClientGone(Runnable action) {
            ex.onClientGone(action);
        }

        void finish(Router.Completion c) throws IOException {
            final Map<String, Object> m = head(c.requestId());
            m.put("choices", List.of(choice("", "length")));
            m.put("usage", usage(c));
            m.put("kvpool", kvpool(c));
            data(m);
            ex.write("data: [DONE]\n\n");
            ex.endStream();
        }

        void error(ApiError e) {
            try {
                data(e.body());
                ex.write("data: [DONE]\n\n");
                ex.endStream();
            } catch (IOException gone) {
                LOG.log(System.Logger.Level.DEBUG, "stream error event not delivered: " + gone);
            }
        }

        private void data(Map<String, Object> m) throws IOException {
            ex.write("data: " + json.writeValueAsString(m) + "\n\n");
        }
    }
}
