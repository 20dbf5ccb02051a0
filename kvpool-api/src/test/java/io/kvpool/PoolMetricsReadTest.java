package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link PoolMetrics#read()} while a transport moves pages through the pinned phases on another thread, without the
 * pool lock: the reads are not one cut (a page may show in two states, or in none), but the derived OWNED count, the
 * capacity less the rest, never reads below 0 (a gauge below 0 trips alerts). A stress test: it stops at the first
 * bad read, or after 2 s; without the floor it read -1 within the first half second.
 */
class PoolMetricsReadTest {

    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(ints = {0, 1})
    void aPageThatMovesBetweenThePinnedReadsIsNotCountedInTwoPhases(int at) {
        // the pinned phases are read against the direction pages move: a page going RECEIVING → DRAINING between two
        // reads may be missed, never counted in both
        try (KvPool pool = TestPools.pool(4)) {
            final long moving = pool.tryAllocate();
            pool.handles().pinWriter(moving);
            final int[] gap = {0};
            pool.slotTable().counts().betweenMetricReads = () -> {
                if (gap[0]++ == at) {
                    pool.handles().beginDrain(moving);
                }
            };
            final PoolSnapshot s = pool.metrics().read();
            pool.slotTable().counts().betweenMetricReads = null;
            assertEquals(2, gap[0], "read() reads the three pinned counts with the seam between them");
            assertTrue(s.receiving() + s.draining() <= 1, "1 page pinned, counted " + s);
            pool.handles().drained(moving);
            pool.release(moving);
        }
    }

    @Test
    void ownedNeverReadsBelowZeroWhilePagesMoveThroughThePinnedPhases() throws Exception {
        try (KvPool pool = KvPool.builder(new KvLayout(2, 1, 4, DType.FP32, 4)).pages(16).maxContextTokens(64).build()) {
            final AtomicBoolean stop = new AtomicBoolean();
            final Thread mover = Thread.ofPlatform().start(() -> {
                // one page at a time, never OWNED: FREE → RECEIVING → DRAINING → FREE
                while (!stop.get()) {
                    final Sequence s = pool.admit(4, 0).sequence();
                    pool.handles().appendPinned(s, 4);
                    final long h = s.pageHandle(0);
                    pool.handles().beginDrain(h);
                    s.close();
                    pool.handles().drained(h);
                }
            });
            long reads = 0;
            String bad = null;
            try {
                final long end = System.nanoTime() + 2_000_000_000L;
                while (bad == null && System.nanoTime() < end) {
                    final PoolSnapshot s = pool.metrics().read();
                    reads++;
                    if (s.owned() < 0) {
                        bad = s.toString();
                    }
                }
            } finally {
                stop.set(true);
                mover.join();
            }
            assertTrue(bad == null, "read " + reads + ": " + bad + " (no page is ever OWNED)");
        }
    }

    @Test
    void pagesFreedNeverReadsBelowZeroWhenAPageIsAllocatedDuringTheRead() {
        // a fresh pool has freed nothing: a page allocated while read() runs must not show as -1 pages freed
        try (KvPool pool = TestPools.pool(4)) {
            final long[] taken = {-1};
            pool.slotTable().counts().betweenMetricReads = () -> {
                if (taken[0] < 0) {
                    taken[0] = pool.tryAllocate();
                }
            };
            final PoolSnapshot s = pool.metrics().read();
            pool.slotTable().counts().betweenMetricReads = null;
            assertTrue(taken[0] >= 0, "the seam allocated a page");
            assertTrue(s.pagesFreed() >= 0, "pagesFreed " + s.pagesFreed() + " in " + s);
            pool.release(taken[0]);
        }
    }

    @Test
    void aSnapshotsToStringShowsEveryComponent() {
        // every component its own value, so that a component toString leaves out is missing from it
        final java.lang.reflect.RecordComponent[] components = PoolSnapshot.class.getRecordComponents();
        final Object[] values = new Object[components.length];
        final Class<?>[] types = new Class<?>[components.length];
        for (int i = 0; i < components.length; i++) {
            values[i] = 1001L + i;
            types[i] = components[i].getType();
        }
        final String text;
        try {
            text = PoolSnapshot.class.getDeclaredConstructor(types).newInstance(values).toString();
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
        for (int i = 0; i < components.length; i++) {
            assertTrue(text.matches("(?s).*\\b" + values[i] + "\\b.*"), components[i].getName() + " (" + values[i] + ") missing from " + text);
        }
    }
    @Test
    void freeNeverReadsAboveTheCapacityWhilePagesGoRoundTheFreeStructures() throws Exception {
        // a page read in one free structure, then allocated and freed into another read after it, is in two counts
        // of free; a stress test that stops at the first bad read, or after 2 s
        try (KvPool pool = TestPools.pool(16)) {
            final AtomicBoolean stop = new AtomicBoolean();
            final Thread[] movers = new Thread[2];
            for (int t = 0; t < movers.length; t++) {
                movers[t] = Thread.ofPlatform().start(() -> {
                    while (!stop.get()) {
                        final long h = pool.tryAllocate();
                        if (h >= 0) {
                            pool.release(h);
                        }
                    }
                });
            }
            long reads = 0;
            String bad = null;
            try {
                final long end = System.nanoTime() + 2_000_000_000L;
                while (bad == null && System.nanoTime() < end) {
                    final PoolSnapshot s = pool.metrics().read();
                    reads++;
                    if (s.free() + s.retired() > s.capacity()) {
                        bad = s.toString();
                    }
                }
            } finally {
                stop.set(true);
                for (Thread m : movers) {
                    m.join();
                }
            }
            assertTrue(bad == null, "read " + reads + ": " + bad + " (more pages free than the pool has)");
        }
    }
}
