package io.kvpool.examples.ui;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@link LiveState} and {@link PoolView} to and from the JSON that {@code GET /api/state} answers and
 * the page reads. Fields and counters keep their order:
 * <pre>
 * {"pools":[{"role":"prefill","capacity":8,"pages":"OOFFRFDQ","counters":{"capacity":8,"free":4,...},
 *             "holders":[{"request_id":7,"tenant":"alice","phase":"prefill","pages":2,"slots":[0,1]}, ...]}, ...],
 *  "counters":{"requests":12,"completed":10,...}}
 * </pre>
 * {@code holders} ({@link PoolView.Holder}) is written only when the pool has some, and read as empty when absent.
 * A router whose roles run in other processes can read each role's pool with {@link #readPool}.
 */
public final class StateJson {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private StateJson() {
    }

    /** @return the state as UTF-8 JSON */
    public static byte[] write(LiveState state) {
        final ObjectNode root = MAPPER.createObjectNode();
        final ArrayNode pools = root.putArray("pools");
        for (PoolView p : state.pools()) {
            pools.add(tree(p));
        }
        counters(root.putObject("counters"), state.counters());
        return bytes(root);
    }

    /** @return one pool as UTF-8 JSON */
    public static byte[] writePool(PoolView pool) {
        return bytes(tree(pool));
    }

    /**
     * @return the state {@link #write} wrote
     * @throws IllegalArgumentException if the bytes are not such JSON (the message says what is wrong where)
     */
    public static LiveState read(byte[] json) {
        final JsonNode root = parse(json);
        final JsonNode pools = field(root, "pools", "state");
        if (!pools.isArray()) {
            throw new IllegalArgumentException("state.pools is " + pools.getNodeType() + ", not an array");
        }
        final List<PoolView> views = new ArrayList<>(pools.size());
        for (int i = 0; i < pools.size(); i++) {
            views.add(pool(pools.get(i), "state.pools[" + i + "]"));
        }
        return new LiveState(views, counters(field(root, "counters", "state"), "state.counters"));
    }

    /**
     * @return the pool {@link #writePool} wrote
     * @throws IllegalArgumentException if the bytes are not such JSON
     */
    public static PoolView readPool(byte[] json) {
        return pool(parse(json), "pool");
    }

    private static ObjectNode tree(PoolView p) {
        final ObjectNode n = MAPPER.createObjectNode();
        n.put("role", p.role());
        n.put("capacity", p.capacity());
        n.put("pages", p.pages());
        counters(n.putObject("counters"), p.counters());
        if (!p.holders().isEmpty()) {
            holders(n.putArray("holders"), p.holders());
        }
        return n;
    }

    /** Writes holders as the {@code holders} array of a pool. */
    public static void holders(ArrayNode into, List<PoolView.Holder> holders) {
        for (PoolView.Holder h : holders) {
            final ObjectNode o = into.addObject();
            o.put("request_id", h.requestId());
            o.put("tenant", h.tenant());
            o.put("phase", h.phase());
            o.put("pages", h.pages());
            final ArrayNode slots = o.putArray("slots");
            h.slots().forEach(slots::add);
        }
    }

    /**
     * @param n     a pool's {@code holders} array, or {@code null} (none)
     * @param where where it is, for the message
     * @throws IllegalArgumentException if it is not such an array
     */
    public static List<PoolView.Holder> holders(JsonNode n, String where) {
        if (n == null || n.isNull()) {
            return List.of();
        }
        if (!n.isArray()) {
            throw new IllegalArgumentException(where + " is " + n.getNodeType() + ", not an array");
        }
        final List<PoolView.Holder> out = new ArrayList<>(n.size());
        for (int i = 0; i < n.size(); i++) {
            final JsonNode h = n.get(i);
            final String at = where + "[" + i + "]";
            final JsonNode id = field(h, "request_id", at);
            final JsonNode tenant = field(h, "tenant", at);
            final JsonNode phase = field(h, "phase", at);
            final JsonNode pages = field(h, "pages", at);
            final JsonNode slots = field(h, "slots", at);
            if (!id.isIntegralNumber() || !id.canConvertToLong() || !tenant.isTextual() || !phase.isTextual()
                || !pages.isIntegralNumber() || !pages.canConvertToInt() || !slots.isArray()) {
                throw new IllegalArgumentException(at + " needs an integer request_id, text tenant and phase, int pages and a slots array: " + h);
            }
            final List<Integer> s = new ArrayList<>(slots.size());
            for (JsonNode slot : slots) {
                if (!slot.isIntegralNumber() || !slot.canConvertToInt()) {
                    throw new IllegalArgumentException(at + ".slots has " + slot + ", not an int");
                }
                s.add(slot.intValue());
            }
            out.add(new PoolView.Holder(id.longValue(), tenant.textValue(), phase.textValue(), pages.intValue(), s));
        }
        return out;
    }

    private static void counters(ObjectNode into, Map<String, Long> counters) {
        counters.forEach(into::put);
    }

    private static byte[] bytes(JsonNode n) {
        try {
            return MAPPER.writeValueAsBytes(n);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("cannot write JSON", e); // a tree of strings and numbers always writes
        }
    }

    private static JsonNode parse(byte[] json) {
        try {
            final JsonNode n = MAPPER.readTree(json);
            if (n == null || !n.isObject()) {
                throw new IllegalArgumentException("expected a JSON object, got " + (n == null ? "nothing" : n.getNodeType()));
            }
            return n;
        } catch (IOException e) {
            throw new IllegalArgumentException("not JSON: " + (e instanceof JsonProcessingException j ? j.getOriginalMessage() : e.getMessage()), e);
        }
    }

    private static JsonNode field(JsonNode n, String name, String where) {
        final JsonNode f = n.get(name);
        if (f == null || f.isNull()) {
            throw new IllegalArgumentException(where + "." + name + " is missing");
        }
        return f;
    }

    private static PoolView pool(JsonNode n, String where) {
        if (!n.isObject()) {
            throw new IllegalArgumentException(where + " is " + n.getNodeType() + ", not an object");
        }
        final JsonNode role = field(n, "role", where);
        final JsonNode capacity = field(n, "capacity", where);
        final JsonNode pages = field(n, "pages", where);
        if (!role.isTextual() || !pages.isTextual() || !capacity.canConvertToInt() || !capacity.isIntegralNumber()) {
            throw new IllegalArgumentException(where + " needs a text role, an int capacity and text pages: " + n);
        }
        return new PoolView(role.textValue(), capacity.intValue(), pages.textValue(), counters(field(n, "counters", where), where + ".counters"),
            holders(n.get("holders"), where + ".holders"));
    }

    private static Map<String, Long> counters(JsonNode n, String where) {
        if (!n.isObject()) {
            throw new IllegalArgumentException(where + " is " + n.getNodeType() + ", not an object");
        }
        final Map<String, Long> m = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : n.properties()) {
            final JsonNode v = e.getValue();
            if (!v.isIntegralNumber() || !v.canConvertToLong()) {
                throw new IllegalArgumentException(where + "." + e.getKey() + " is " + v + ", not a 64-bit integer");
            }
            m.put(e.getKey(), v.longValue());
        }
        return m;
    }
}
