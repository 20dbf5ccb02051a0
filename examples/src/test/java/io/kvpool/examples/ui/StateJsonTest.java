package io.kvpool.examples.ui;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class StateJsonTest {

    static LiveState sample() {
        final Map<String, Long> pc = new LinkedHashMap<>();
        pc.put("capacity", 6L);
        pc.put("free", 2L);
        pc.put("owned", 1L);
        final Map<String, Long> sc = new LinkedHashMap<>();
        sc.put("requests", 12L);
        sc.put("requests_completed", 10L);
        sc.put("requests_rejected", 1L);
        sc.put("big", Long.MAX_VALUE);
        return new LiveState(List.of(new PoolView("prefill", 6, "FORDQX", pc), new PoolView("decode", 2, "OF", Map.of())), sc);
    }

    @Test
    void writesTheShapeThePageReads_inOrder() {
        assertEquals("{\"pools\":["
                + "{\"role\":\"prefill\",\"capacity\":6,\"pages\":\"FORDQX\",\"counters\":{\"capacity\":6,\"free\":2,\"owned\":1}},"
                + "{\"role\":\"decode\",\"capacity\":2,\"pages\":\"OF\",\"counters\":{}}],"
                + "\"counters\":{\"requests\":12,\"requests_completed\":10,\"requests_rejected\":1,\"big\":9223372036854775807}}",
            new String(StateJson.write(sample()), StandardCharsets.UTF_8));
    }

    @Test
    void readsWhatItWrites() {
        final LiveState s = sample();
        final LiveState back = StateJson.read(StateJson.write(s));
        assertEquals(s, back);
        assertEquals(List.copyOf(s.counters().keySet()), List.copyOf(back.counters().keySet()));
        assertEquals(List.copyOf(s.pools().get(0).counters().keySet()), List.copyOf(back.pools().get(0).counters().keySet()));
        assertEquals(s.pools().get(1), StateJson.readPool(StateJson.writePool(s.pools().get(1))));
    }

    @Test
    void escapesRoleNames() {
        final PoolView odd = new PoolView("a\"b</script>\n", 1, "F", Map.of());
        final String json = new String(StateJson.writePool(odd), StandardCharsets.UTF_8);
        assertTrue(json.startsWith("{\"role\":\"a\\\"b</script>\\n\""), json);
        assertEquals(odd, StateJson.readPool(json.getBytes(StandardCharsets.UTF_8)));
    }

    @Test
    void refusesWhatItCannotRead_sayingWhere() {
        assertTrue(bad("x").startsWith("not JSON: Unrecognized token 'x'"), bad("x"));
        assertTrue(bad("{\"pools\":").startsWith("not JSON: Unexpected end-of-input"), bad("{\"pools\":"));
        assertEquals("expected a JSON object, got ARRAY", bad("[]"));
        assertEquals("state.pools is missing", bad("{\"counters\":{}}"));
        assertEquals("state.pools is OBJECT, not an array", bad("{\"pools\":{},\"counters\":{}}"));
        assertEquals("state.counters is missing", bad("{\"pools\":[]}"));
        assertEquals("state.counters.requests is 1.5, not a 64-bit integer", bad("{\"pools\":[],\"counters\":{\"requests\":1.5}}"));
        assertEquals("state.pools[0].pages is missing",
            bad("{\"pools\":[{\"role\":\"p\",\"capacity\":1,\"counters\":{}}],\"counters\":{}}"));
        assertEquals("pages has 2 characters for a capacity of 1",
            bad("{\"pools\":[{\"role\":\"p\",\"capacity\":1,\"pages\":\"FF\",\"counters\":{}}],\"counters\":{}}"));
        assertEquals("pages[0] is 'Z' (U+005A), not one of FORDQX",
            bad("{\"pools\":[{\"role\":\"p\",\"capacity\":1,\"pages\":\"Z\",\"counters\":{}}],\"counters\":{}}"));
        assertTrue(bad("{\"pools\":[{\"role\":\"p\",\"capacity\":\"1\",\"pages\":\"F\",\"counters\":{}}],\"counters\":{}}")
            .startsWith("state.pools[0] needs a text role, an int capacity and text pages"));
    }

    private static String bad(String json) {
        return assertThrows(IllegalArgumentException.class, () -> StateJson.read(json.getBytes(StandardCharsets.UTF_8))).getMessage();
    }
}
