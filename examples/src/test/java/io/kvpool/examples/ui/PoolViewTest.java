package io.kvpool.examples.ui;

import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PoolViewTest {

    @Test
    void everyStateHasItsOwnCode_inSlotStateOrder() {
        final SlotState[] states = SlotState.values();
        assertEquals(states.length, PoolView.CODES.length());
        assertEquals(states.length, PoolView.CODES.chars().distinct().count(), "codes must be distinct: " + PoolView.CODES);
        for (SlotState s : states) {
            assertEquals(PoolView.CODES.charAt(s.ordinal()), PoolView.code(s), s.toString());
        }
        assertEquals("FORDQX", Arrays.stream(states).map(s -> String.valueOf(PoolView.code(s))).collect(Collectors.joining()));
    }

    @Test
    void of_readsEverySlotOfARealPool_andItsSnapshot() {
        try (PoolScene scene = new PoolScene(16)) {
            final int[] own = scene.own(6);
            scene.receive(own[1]);
            scene.receive(own[2]);
            scene.drain(own[2]);
            scene.receive(own[3]);
            scene.quarantine(own[3]);
            final Sequence seq = scene.sequence(9); // 3 pages
            scene.free(own[0]);

            final PoolView v = PoolView.of("decode", scene.pool);
            assertEquals("decode", v.role());
            assertEquals(16, v.capacity());
            assertEquals(scene.expected(), v.pages());
            assertEquals(5, count(v, 'O'), v.pages()); // own[4], own[5] + 3 sequence pages
            assertEquals(1, count(v, 'R'), v.pages());
            assertEquals(1, count(v, 'D'), v.pages());
            assertEquals(1, count(v, 'Q'), v.pages());
            assertEquals(8, count(v, 'F'), v.pages());

            final PoolSnapshot snap = scene.pool.snapshot();
            assertEquals(PoolView.counters(snap), v.counters());
            assertEquals(List.of(PoolSnapshot.class.getRecordComponents()).stream().map(c -> PoolView.snakeCase(c.getName())).toList(),
                List.copyOf(v.counters().keySet()), "counters keep the snapshot's order, in snake_case");
            assertEquals("rejected_context_too_long", PoolView.snakeCase("rejectedContextTooLong"));
            assertEquals(Map.of("free", 8L, "owned", 5L, "receiving", 1L, "draining", 1L, "quarantined", 1L, "open_sequences", 1L),
                Map.of("free", v.counters().get("free"), "owned", v.counters().get("owned"), "receiving", v.counters().get("receiving"),
                    "draining", v.counters().get("draining"), "quarantined", v.counters().get("quarantined"),
                    "open_sequences", v.counters().get("open_sequences")));

            scene.close(seq);
            assertEquals(scene.expected(), PoolView.of("decode", scene.pool).pages(), "a new view sees the change");
            assertEquals(3, count(v, 'O') - count(PoolView.of("decode", scene.pool), 'O'));
        }
    }

    @Test
    void aViewIsACopy_notALiveWindow() {
        try (PoolScene scene = new PoolScene(8)) {
            final PoolView before = PoolView.of("prefill", scene.pool);
            scene.own(2);
            assertEquals("FFFFFFFF", before.pages());
            assertEquals(8L, before.counters().get("free"));
            assertEquals(2, count(PoolView.of("prefill", scene.pool), 'O'));
        }
    }

    @Test
    void refusesPagesThatDoNotMatchTheCapacityOrTheCodes() {
        final IllegalArgumentException len = assertThrows(IllegalArgumentException.class, () -> new PoolView("p", 4, "FFF", Map.of()));
        assertEquals("pages has 3 characters for a capacity of 4", len.getMessage());
        final IllegalArgumentException code = assertThrows(IllegalArgumentException.class, () -> new PoolView("p", 4, "FOfF", Map.of()));
        assertEquals("pages[2] is 'f' (U+0066), not one of FORDQX", code.getMessage());
        assertThrows(NullPointerException.class, () -> new PoolView(null, 0, "", Map.of()));
        final Map<String, Long> withNull = new LinkedHashMap<>();
        withNull.put("free", null);
        final NullPointerException npe = assertThrows(NullPointerException.class, () -> new PoolView("p", 0, "", withNull));
        assertTrue(npe.getMessage().contains("pool p counter free = null"), npe.getMessage());
    }

    @Test
    void countersKeepTheirOrderAndCannotBeChanged() {
        final Map<String, Long> in = new LinkedHashMap<>();
        for (String k : List.of("zeta", "alpha", "mid", "beta")) {
            in.put(k, (long) k.length());
        }
        final PoolView v = new PoolView("p", 1, "F", in);
        final LiveState s = new LiveState(List.of(v), in);
        in.put("late", 1L);
        assertEquals(List.of("zeta", "alpha", "mid", "beta"), List.copyOf(v.counters().keySet()));
        assertEquals(List.of("zeta", "alpha", "mid", "beta"), List.copyOf(s.counters().keySet()));
        assertThrows(UnsupportedOperationException.class, () -> v.counters().put("x", 1L));
        assertThrows(UnsupportedOperationException.class, () -> s.counters().put("x", 1L));
        assertThrows(UnsupportedOperationException.class, () -> s.pools().add(v));
    }

    private static long count(PoolView v, char code) {
        return v.pages().chars().filter(c -> c == code).count();
    }
}
