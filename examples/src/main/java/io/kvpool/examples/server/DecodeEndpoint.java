package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The decode role process's internal endpoint (besides {@link RoleEndpoint}'s):
 * {@code POST /internal/decode} {@code {"request_id":7,"tenant":"alice","prompt_tokens":5,"max_new_tokens":8}}
 * starts the request on the {@link DecodeRole} and answers 200 at once (so the router's abort that may
 * follow finds the call), then streams its events, one JSON object per line, as {@link RemoteDecodeCall}
 * reads them: heartbeats while admission and the transfer are pending, the admission, the transfer's
 * outcome, then — if the KV committed — the generated tokens and the result.
 *
 * <p>The stream is also how this process notices a router that went away: every heartbeat and token is
 * written and flushed, and a write that fails aborts the request here (the router's
 * {@code POST /internal/abort} usually comes first).
 */
final class DecodeEndpoint extends RoleEndpoint {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final DecodeRole role;
    private final Duration heartbeat;
    private final ConcurrentHashMap<Long, DecodeCall> calls = new ConcurrentHashMap<>();

    DecodeEndpoint(DecodeRole role, ObjectMapper json, ServerConfig config) {
        super(DecodeRole.ROLE, json, config);
        this.role = Objects.requireNonNull(role, "role");
        this.heartbeat = config.heartbeat();
    }

    @Override
    io.kvpool.KvPool pool() {
        return role.pool();
    }

    @Override
    RoleStatus status() {
        return role.status();
    }

    @Override
    int activeTransfers() {
        return role.activeTransfers();
    }

    @Override
    boolean ready() {
        return role.ready();
    }

    @Override
    void abort(long requestId, String why) {
        final DecodeCall c = calls.get(requestId);
        if (c != null) {
            c.abort(why);
        }
    }

    @Override
    boolean route(HttpExchange ex, String path) throws ApiError, IOException {
        if (!path.equals("/internal/decode")) {
            return false;
        }
        method(ex, "POST");
        final JsonNode b = body(ex);
        final long id = RoleJson.number(b, "request_id");
        final String tenant = RoleJson.text(b, "tenant");
        final int prompt = (int) RoleJson.number(b, "prompt_tokens");
        final int maxNew = (int) RoleJson.number(b, "max_new_tokens");
        final DecodeCall call;
        try {
            call = role.start(id, tenant, prompt, maxNew);
        } catch (IllegalStateException e) {
            throw closed("decode role: " + e.getMessage());
        }
        if (calls.putIfAbsent(id, call) != null) {
            call.abort("duplicate request id " + id);
            throw new IllegalArgumentException("request " + id + " is already decoding here");
        }
        try {
            stream(ex, id, call, maxNew);
        } finally {
            calls.remove(id, call);
        }
        return true;
    }

    private void stream(HttpExchange ex, long id, DecodeCall call, int maxNew) {
        try {
            ex.getResponseHeaders().set("Content-Type", "application/x-ndjson");
            ex.sendResponseHeaders(200, 0);
            final OutputStream out = ex.getResponseBody();
            DecodeCall.Admitted a;
            while ((a = call.awaitAdmission(heartbeat)) == null) {
                event(out, Map.of("event", "waiting"));
            }
            if (!a.admitted()) {
                event(out, Map.of("event", "rejected", "rejection", RoleJson.rejection(a.rejection())));
                return;
            }
            event(out, Map.of("event", "admitted"));
            DecodeCall.TransferOutcome o;
            while ((o = call.awaitTransfer(heartbeat)) == null) {
                event(out, Map.of("event", "waiting"));
            }
            if (!o.committed()) {
                final Map<String, Object> m = new LinkedHashMap<>();
                m.put("event", "transfer");
                m.put("committed", false);
                m.put("failure", String.valueOf(o.failure()));
                m.put("message", String.valueOf(o.message()));
                event(out, m);
                return;
            }
            event(out, Map.of("event", "transfer", "committed", true));
            final DecodeCall.Generation g = call.generate(maxNew, t -> event(out, Map.of("event", "token", "text", t)));
            final Map<String, Object> done = new LinkedHashMap<>();
            done.put("event", "done");
            done.put("text", g.text());
            done.put("completion_tokens", g.completionTokens());
            done.put("kv", RoleJson.kv(g.kv()));
            event(out, done);
        } catch (IOException gone) {
            call.abort("the router's stream of request " + id + " broke: " + gone.getMessage());
        } catch (InterruptedException e) {
            call.abort("decode role interrupted");
            Thread.currentThread().interrupt();
        } catch (RuntimeException e) {
            call.abort("decode of request " + id + " failed: " + e.getMessage());
            LOG.log(System.Logger.Level.WARNING, "decode: request " + id + " failed: " + e);
            try {
                event(ex.getResponseBody(), Map.of("event", "error", "message", String.valueOf(e.getMessage())));
            } catch (IOException ignored) {
                // the router is gone too
            }
        }
    }

    private void event(OutputStream out, Map<String, ?> m) throws IOException {
        final byte[] line = (json.writeValueAsString(m) + "\n").getBytes(StandardCharsets.UTF_8);
        out.write(line);
        out.flush();
    }
}
