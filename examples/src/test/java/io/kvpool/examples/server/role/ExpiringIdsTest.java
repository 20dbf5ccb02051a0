package io.kvpool.examples.server.role;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ExpiringIdsTest {

    private static final long KEEP = 1_000_000_000L;

    @Test
    void keepsAtMostMaxIdsAndCountsTheRest() {
        final long t0 = System.nanoTime();
        final ExpiringIds ids = new ExpiringIds(2, KEEP);
        assertTrue(ids.add(1, t0));
        assertTrue(ids.add(2, t0));
        assertFalse(ids.add(3, t0), "a third id while two are kept");
        assertEquals(1, ids.notKept());
        assertTrue(ids.take(2));
        assertFalse(ids.take(2), "an id is taken once");
        assertFalse(ids.take(3), "the id that was not kept");
        assertTrue(ids.add(3, t0), "room again after a take");
    }

    @Test
    void expiredIdsLeaveInASweepAtMostOneEveryInterval() {
        final long keep = 10_000_000L, ms = 1_000_000L; // kept 10 ms, swept at most every 100 ms
        final ExpiringIds ids = new ExpiringIds(1, keep);
        final long t0 = System.nanoTime(); // after the construction: its first sweep is due from then
        assertTrue(ids.add(1, t0));
        assertTrue(ids.add(2, t0 + 20 * ms), "id 1 expired at 10 ms: the first sweep makes room");
        assertFalse(ids.add(3, t0 + 40 * ms), "id 2 expired at 30 ms, but the last sweep was at 20 ms");
        assertEquals(1, ids.notKept());
        ids.sweep(t0 + 100 * ms);
        assertFalse(ids.isEmpty(), "a sweep 80 ms after the last one");
        ids.sweep(t0 + 120 * ms);
        assertTrue(ids.isEmpty(), "a sweep 100 ms after the last one");
        assertTrue(ids.add(4, t0 + 120 * ms));
        assertFalse(ids.take(2));
        assertTrue(ids.take(4));
    }

    @Test
    void refusesAnEmptyBoundOrKeep() {
        assertThrows(IllegalArgumentException.class, () -> new ExpiringIds(0, KEEP));
        assertThrows(IllegalArgumentException.class, () -> new ExpiringIds(1, 0));
    }
}
