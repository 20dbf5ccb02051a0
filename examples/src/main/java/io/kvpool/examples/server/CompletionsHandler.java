package io.kvpool.examples.server;

import java.util.Locale;
import com.fasterxml.jackson.core.JacksonException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code POST /v1/completions}, OpenAI style: parses and checks the request, authenticates the tenant,
 * runs it through the {@link Router}, and answers JSON — or, with {@code "stream": true}, server-sent
 * events: one {@code data: {chunk}} per token, then {@code data: [DONE]}.
 *
 * <p>Checks, in order, each answered with a JSON error before anything reaches a pool: the path (404),
 * the method (405), the key (401), the body size (413), the JSON (400: malformed, prompt not a string,
 * max_tokens missing, negative or not an integer, stream not a boolean).
 */
final class CompletionsHandler implements HttpHandler {

    static final String PATH = "/v1/completions";
    static final String MODEL = "kvpool-echo";

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final Router router;
    private final ObjectMapper json;
    private final int maxBodyBytes;
    private final long heartbeatNanos;

    /** @param heartbeat how often a non-streamed response whose headers went out writes a heartbeat while decode generates */
    CompletionsHandler(Router router, ObjectMapper json, int maxBodyBytes, java.time.Duration heartbeat) {
        this.router = router;
        this.json = json;
        this.maxBodyBytes = maxBodyBytes;
        this.heartbeatNanos = heartbeat.toNanos();
    }

    @Override
    public void handle(HttpExchange ex) throws IOException {
        Sse sse = null;
        Plain plain = null;
        try {
            if (!ex.getRequestURI().getPath().equals(PATH)) {
                throw ApiError.of(404, "not_found", "no_such_path", "no endpoint at " + ex.getRequestURI().getPath()
                    + "; POST " + PATH);
            }
            if (!ex.getRequestMethod().equals("POST")) {
                ex.getResponseHeaders().set("Allow", "POST");
                throw ApiError.of(405, "method_not_allowed", "method_not_allowed", ex.getRequestMethod() + " " + PATH
                    + " is not allowed; use POST");
            }
            final String tenant = Auth.tenant(ex.getRequestHeaders().getFirst("Authorization"));
            final Router.Request req = parse(readBody(ex));
            if (req.stream()) {
                sse = new Sse(ex);
                final Router.Completion c = router.complete(tenant, req, sse);
                sse.finish(c);
            } else {
                plain = new Plain(ex);
                final Router.Completion c = router.complete(tenant, req, plain);
                plain.finish(c);
            }
        } catch (ApiError e) {
            router.counters().error(e.status());
            if (sse != null && sse.started) {
                sse.error(e); // the status line is gone: an error event ends the stream
            } else if (plain != null && plain.started) {
                plain.error(e); // 200 went out at the commit: the body is the error object instead of the completion
            } else {
                Http.sendError(ex, json, e);
            }
        } catch (Router.ClientGone e) {
            LOG.log(System.Logger.Level.DEBUG, e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (IOException e) {
            LOG.log(System.Logger.Level.DEBUG, "writing a response failed: " + e);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.ERROR, "request failed", e);
            router.counters().error(500);
            final ApiError internal = ApiError.of(500, "server_error", "internal_error", "internal error: " + e);
            if (sse != null && sse.started) {
                sse.error(internal);
            } else if (plain != null && plain.started) {
                plain.error(internal);
            } else {
                Http.sendError(ex, json, internal);
            }
        } finally {
            ex.close();
        }
    }

    private byte[] readBody(HttpExchange ex) throws ApiError, IOException {
        final String declared = ex.getRequestHeaders().getFirst("Content-Length");
        if (declared != null) {
            final long n;
            try {
                n = Long.parseLong(declared.strip());
            } catch (NumberFormatException e) {
                throw ApiError.badRequest("bad_content_length", "Content-Length is not a number: " + declared);
            }
            if (n > maxBodyBytes) {
                discardRest(ex.getRequestBody());
                throw tooLarge(n);
            }
        }
        try (InputStream in = ex.getRequestBody()) {
            final byte[] body = in.readNBytes(maxBodyBytes + 1);
            if (body.length > maxBodyBytes) {
                discardRest(in);
                throw tooLarge(-1);
            }
            return body;
        }
    }

    /**
     * Bytes of an over-limit body read and thrown away before the 413 goes out. Closing a connection with
     * unread bytes in its receive buffer makes the kernel send a reset, which can reach the client before
     * the 413 does (seen: 2 of 40 bodies of 2–16 MiB answered "connection reset" instead). Up to this much
     * is drained so the client reads its 413; a bigger body is cut off (the 413 says Connection: close).
     */
    static final long DRAIN_LIMIT = 64L << 20;

    private static void discardRest(InputStream in) {
        try {
            long left = DRAIN_LIMIT;
            final byte[] sink = new byte[64 << 10];
            for (int r; left > 0 && (r = in.read(sink, 0, (int) Math.min(sink.length, left))) > 0; ) {
                left -= r;
            }
        } catch (IOException gone) {
            // the client went away: nothing to answer either
        }
    }

    private ApiError tooLarge(long declared) {
        final Map<String, Object> f = new LinkedHashMap<>();
        f.put("max_body_bytes", maxBodyBytes);
        if (declared >= 0) {
            f.put("content_length", declared);
        }
        return new ApiError(413, "request_too_large", "body_too_large", "request body "
            + (declared >= 0 ? "of " + declared + " bytes " : "") + "exceeds the limit of " + maxBodyBytes + " bytes", f, 0);
    }

    /** @throws ApiError 400 naming what is wrong */
    Router.Request parse(byte[] body) throws ApiError {
        final JsonNode root;
        try {
            root = json.readTree(body);
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
        // larger than an int can never fit a context; the context check names the numbers
        return new Router.Request(prompt.asText(), (int) Math.min(maxTokens, Integer.MAX_VALUE / 2), stream != null && stream.asBoolean());
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
        return k;
    }

    /**
     * A non-streamed response. Nothing is sent before the KV transfer committed, so every refusal and
     * transfer failure keeps its own status (the JDK server cannot see a closed connection without writing,
     * so a client that leaves before the commit is noticed only then). At the commit the answer is decided:
     * 200 headers go out (chunked), then one space — whitespace JSON ignores before a value — at most every
     * heartbeat while decode generates: a client that left makes a write fail, and the router aborts both
     * roles. Then the completion object. Should generation itself fail after that (the server closing, a
     * decode process lost), the body is the error object instead of the completion, as a stream ends with an
     * error event.
     */
    private final class Plain implements Router.Sink {
        private final HttpExchange ex;
        private OutputStream out;
        boolean started;
        private long lastWrite;

        Plain(HttpExchange ex) {
            this.ex = ex;
        }

        @Override
        public void admitted(long requestId) {
        }

        @Override
        public void heartbeat() {
            // before the commit: anything sent would fix the status while the outcome is still open
        }

        @Override
        public void committed(long requestId) throws IOException {
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(200, 0);
            started = true;
            out = ex.getResponseBody();
            beat();
        }

        @Override
        public void token(String text) throws IOException {
            if (System.nanoTime() - lastWrite >= heartbeatNanos) {
                beat();
            }
        }

        private void beat() throws IOException {
            out.write(' ');
            out.flush();
            lastWrite = System.nanoTime();
        }

        void finish(Router.Completion c) throws IOException {
            out.write(json.writeValueAsBytes(completion(c)));
            out.flush();
        }

        void error(ApiError e) {
            try {
                out.write(json.writeValueAsBytes(e.body()));
                out.flush();
            } catch (IOException gone) {
                LOG.log(System.Logger.Level.DEBUG, "error body not delivered: " + gone);
            }
        }
    }

    /** A streaming response: headers once both roles admitted, then keep-alives, token chunks, the end. */
    private final class Sse implements Router.Sink {
        private final HttpExchange ex;
        private OutputStream out;
        boolean started;
        private long requestId;

        Sse(HttpExchange ex) {
            this.ex = ex;
        }

        @Override
        public void admitted(long id) throws IOException {
            requestId = id;
            ex.getResponseHeaders().set("Content-Type", "text/event-stream; charset=utf-8");
            ex.getResponseHeaders().set("Cache-Control", "no-cache");
            ex.sendResponseHeaders(200, 0);
            started = true;
            out = ex.getResponseBody();
            write(": admitted; waiting for the KV transfer\n\n");
        }

        @Override
        public void heartbeat() throws IOException {
            write(": waiting for the KV transfer\n\n");
        }

        @Override
        public void token(String text) throws IOException {
            final Map<String, Object> m = head(requestId);
            m.put("choices", List.of(choice(text, null)));
            data(m);
        }

        void finish(Router.Completion c) throws IOException {
            final Map<String, Object> m = head(c.requestId());
            m.put("choices", List.of(choice("", "length")));
            m.put("usage", usage(c));
            m.put("kvpool", kvpool(c));
            data(m);
            write("data: [DONE]\n\n");
        }

        void error(ApiError e) {
            try {
                data(e.body());
                write("data: [DONE]\n\n");
            } catch (IOException gone) {
                LOG.log(System.Logger.Level.DEBUG, "stream error event not delivered: " + gone);
            }
        }

        private void data(Map<String, Object> m) throws IOException {
            write("data: " + json.writeValueAsString(m) + "\n\n");
        }

        private void write(String s) throws IOException {
            out.write(s.getBytes(StandardCharsets.UTF_8));
            out.flush();
        }
    }
}
