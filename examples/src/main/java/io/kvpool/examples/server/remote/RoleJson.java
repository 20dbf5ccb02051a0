package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.echo.EchoDecoder;
import io.kvpool.examples.server.echo.EchoTokenizer;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;

import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The JSON of the router ↔ role endpoints (see {@link io.kvpool.examples.server.RoleServer}): both directions of each value, so
 * that the two ends cannot drift apart. Readers are strict: a missing or mistyped field is an
 * {@link IllegalArgumentException} naming it.
 *
 * <pre>
 *   status      {"role":"decode","ready":true,"active_transfers":0,
 *                "pool":{"role":"decode","capacity":1024,"pages":"FFOO…","counters":{"free":1020,…},"holders":[…]},
 *                "counters":{"admitted":3,…},"gauges":{"active_transfers":0,"link_up":1,…},
 *                "instance":"5c817ed000000001","linked_instances":["a1b2c3d4e5f60718",…]}
 *   decode call {"request_id":7,"tenant":"alice","prompt_tokens":5,"max_new_tokens":8,"prefill_instance":"a1b2c3d4e5f60718"}
 *   rejection   {"role":"decode","reason":"RETRY_LATER","message":"…","numbers":{"pages_needed":8,…}}
 *   tokens      ["SGVs","bG8="]   (each token's UTF-8 bytes, base64)
 *   kv          {"text":"…","tenants":["alice"],"tokens":5,"canary":0,"garbage":0,"misplaced":0}
 * </pre>
 */
final class RoleJson {

    private RoleJson() {
    }

    /** @return the status as JSON, with what the router's quiescence and readiness checks read */
    static Map<String, Object> status(RoleStatus s, int activeTransfers, boolean ready) {
        final Map<String, Object> pool = new LinkedHashMap<>();
        pool.put("role", s.pool().role());
        pool.put("capacity", s.pool().capacity());
        pool.put("pages", s.pool().pages());
        pool.put("counters", new LinkedHashMap<>(s.pool().counters()));
        if (!s.pool().holders().isEmpty()) { // the live page's "who holds which pages" (StateJson's shape)
            final com.fasterxml.jackson.databind.node.ArrayNode holders = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.arrayNode();
            io.kvpool.examples.ui.StateJson.holders(holders, s.pool().holders());
            pool.put("holders", holders);
        }
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("role", s.role());
        m.put("ready", ready);
        m.put("active_transfers", activeTransfers);
        m.put("pool", pool);
        m.put("counters", s.counters());
        m.put("gauges", s.gauges());
        if (s.instance() != 0) {
            m.put("instance", RoleStatus.hex(s.instance()));
        }
        if (s.linked() != null) {
            m.put("linked_instances", s.linked().stream().map(RoleStatus::hex).toList());
        }
        return m;
    }

    /** @return the status read back */
    static RoleStatus status(JsonNode n) {
        final JsonNode p = field(n, "pool");
        final PoolView view = new PoolView(text(p, "role"), (int) number(p, "capacity"), text(p, "pages"), longs(field(p, "counters")),
            io.kvpool.examples.ui.StateJson.holders(p.get("holders"), "pool.holders"));
        // the instance ids are optional: a role of a build before them reports none, and the pairing checks then pass
        final long instance = optionalInstance(n, "instance");
        List<Long> linked = null;
        if (n.has("linked_instances")) {
            final JsonNode a = field(n, "linked_instances");
            if (!a.isArray()) {
                throw new IllegalArgumentException("field 'linked_instances' must be an array, was " + a.getNodeType());
            }
            linked = new ArrayList<>();
            for (JsonNode e : a) {
                if (!e.isTextual()) {
                    throw new IllegalArgumentException("field 'linked_instances' holds " + e + ", not an instance id");
                }
                linked.add(RoleStatus.parseInstance(e.asText()));
            }
        }
        return new RoleStatus(text(n, "role"), view, longs(field(n, "counters")), longs(field(n, "gauges")), null, instance, linked);
    }

    /**
     * @return the body of decode's {@code /internal/reserve} and {@code /internal/decode} calls, which
     *         {@code DecodeEndpoint} reads alike
     */
    static Map<String, Object> decodeRequest(long requestId, String tenant, int promptTokens, int maxNewTokens,
                                             long prefillInstance) {
        final Map<String, Object> body = new LinkedHashMap<>();
        body.put("request_id", requestId);
        body.put("tenant", tenant);
        body.put("prompt_tokens", promptTokens);
        body.put("max_new_tokens", maxNewTokens);
        if (prefillInstance != 0) { // left out when unknown: the body is then what a decode of any build reads
            body.put("prefill_instance", RoleStatus.hex(prefillInstance));
        }
        return body;
    }

    /**
     * @return the {@code prefill_instance} of a decode call's body ({@link #decodeRequest}), 0 when it has none
     * @throws IllegalArgumentException if it is not a string of 16 hex digits, or is all zeros
     */
    static long prefillInstance(JsonNode body) {
        return optionalInstance(body, "prefill_instance");
    }

    /**
     * @return the instance id in {@code field} of {@code n}, 0 when it has none (a role of a build before instance ids)
     * @throws IllegalArgumentException if it is not a string of 16 hex digits, or is all zeros
     */
    private static long optionalInstance(JsonNode n, String field) {
        return n.has(field) ? RoleStatus.parseInstance(text(n, field)) : 0;
    }

    /** @return an admission's answer: {@code {"admitted":true}}, or {@code {"admitted":false,"rejection":{…}}} for {@code r} */
    static Map<String, Object> admission(Rejection r) {
        final Map<String, Object> out = new LinkedHashMap<>();
        out.put("admitted", r == null);
        if (r != null) {
            out.put("rejection", rejection(r));
        }
        return out;
    }

    /**
     * Reads an admission's answer ({@link #admission(Rejection)}).
     *
     * @param what the call, for the message ({@code decode role at http://… answered POST /internal/reserve})
     * @return {@code null} when admitted, else the refusal
     * @throws IllegalStateException if the answer is not an admission's
     */
    static Rejection admission(JsonNode n, String what) {
        try {
            return bool(n, "admitted") ? null : rejection(field(n, "rejection"));
        } catch (IllegalArgumentException e) {
            throw new IllegalStateException(what + " with " + n + ": " + e.getMessage(), e);
        }
    }

    /**
     * @return the engine a prefill answer names ({@code "instance"}, 16 hex digits), or 0 when it names none
     * @throws IllegalStateException if it names one that is not 16 hex digits
     */
    static long offeredBy(JsonNode n, String what) {
        try {
            return optionalInstance(n, "instance");
        } catch (IllegalArgumentException e) {
            throw new IllegalStateException(what + " with " + n + ": " + e.getMessage(), e);
        }
    }

    static Map<String, Object> rejection(Rejection r) {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("role", r.role());
        m.put("reason", r.reason().name());
        m.put("message", r.message());
        m.put("numbers", r.numbers());
        return m;
    }

    static Rejection rejection(JsonNode n) {
        final String reason = text(n, "reason");
        final Rejection.Reason r;
        try {
            r = Rejection.Reason.valueOf(reason);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("unknown rejection reason '" + reason + "'");
        }
        return new Rejection(text(n, "role"), r, text(n, "message"), longs(field(n, "numbers")));
    }

    static List<String> tokens(List<byte[]> tokens) {
        final List<String> out = new ArrayList<>(tokens.size());
        for (byte[] t : tokens) {
            out.add(Base64.getEncoder().encodeToString(t));
        }
        return out;
    }

    static List<byte[]> tokens(JsonNode n) {
        if (n == null || !n.isArray()) {
            throw new IllegalArgumentException("tokens must be an array of base64 strings");
        }
        final List<byte[]> out = new ArrayList<>(n.size());
        for (JsonNode t : n) {
            if (!t.isTextual()) {
                throw new IllegalArgumentException("tokens[" + out.size() + "] is not a string");
            }
            final byte[] b = Base64.getDecoder().decode(t.asText());
            if (b.length < 1 || b.length > EchoTokenizer.MAX_TOKEN_BYTES) {
                throw new IllegalArgumentException("tokens[" + out.size() + "] has " + b.length + " bytes; a token has 1.."
                    + EchoTokenizer.MAX_TOKEN_BYTES);
            }
            out.add(b);
        }
        return out;
    }

    static Map<String, Object> kv(EchoDecoder.Reconstruction r) {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("text", r.text());
        m.put("tenants", r.tenants());
        m.put("tokens", r.tokens());
        m.put("canary", r.canary());
        m.put("garbage", r.garbage());
        m.put("misplaced", r.misplaced());
        m.put("tail", r.tail());
        return m;
    }

    static EchoDecoder.Reconstruction kv(JsonNode n) {
        final List<String> tenants = new ArrayList<>();
        for (JsonNode t : field(n, "tenants")) {
            tenants.add(t.asText());
        }
        return new EchoDecoder.Reconstruction(text(n, "text"), tenants, (int) number(n, "tokens"), (int) number(n, "canary"),
            (int) number(n, "garbage"), (int) number(n, "misplaced"),
            n.has("tail") ? (int) number(n, "tail") : EchoDecoder.TAIL_NOT_READ); // a decode role of an older build reads no tail
    }

    static JsonNode field(JsonNode n, String name) {
        final JsonNode f = n == null ? null : n.get(name);
        if (f == null || f.isNull()) {
            throw new IllegalArgumentException("field '" + name + "' is missing");
        }
        return f;
    }

    static String text(JsonNode n, String name) {
        final JsonNode f = field(n, name);
        if (!f.isTextual()) {
            throw new IllegalArgumentException("field '" + name + "' must be a string, was " + f.getNodeType());
        }
        return f.asText();
    }

    static long number(JsonNode n, String name) {
        final JsonNode f = field(n, name);
        if (!f.isIntegralNumber() || !f.canConvertToLong()) {
            throw new IllegalArgumentException("field '" + name + "' must be an integer, was " + f);
        }
        return f.asLong();
    }

    static boolean bool(JsonNode n, String name) {
        final JsonNode f = field(n, name);
        if (!f.isBoolean()) {
            throw new IllegalArgumentException("field '" + name + "' must be true or false, was " + f);
        }
        return f.asBoolean();
    }

    private static Map<String, Long> longs(JsonNode n) {
        final Map<String, Long> m = new LinkedHashMap<>();
        n.properties().forEach(e -> m.put(e.getKey(), e.getValue().asLong()));
        return m;
    }
}
