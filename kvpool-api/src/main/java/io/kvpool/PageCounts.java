package io.kvpool;

import java.util.concurrent.atomic.LongAdder;

/**
 * The pool's page counts by state that the free structures do not give, kept as the states change so
 * that reading them costs no slot scan and no lock. {@link SlotTable} reports every phase change of a
 * successful CAS here (and the allocator of every page it allocates pinned); nothing else writes. The allocation and
 * free paths touch nothing here, but for a pinned allocation's one batched add.
 *
 * <pre>
 *   receiving         LongAdder   +1 / -1 as slots enter and leave RECEIVING      ┐ transport events (and pinned
 *   draining          LongAdder   +1 / -1                                         │ allocations: RECEIVING)
 *   quarantined       LongAdder   +1 / -1                                         ┘
 *   quarantineEvents  LongAdder   +1 per entry into QUARANTINED
 *   retired           LongAdder   +1 per slot that leaves service
 *
 *   free   = what the free structures hold      (PageAllocator.freeNow: plain stack, LRU, return stack, cache)
 *   in use = capacity - free - retired
 *   owned  = in use - receiving - draining - quarantined
 * </pre>
 * A batch of transitions on one thread ({@link HandleOps}' range operations) counts its moves in a {@link Delta}
 * and adds them once at its end, so that 64 pages cost 64 CAS on state words and not 64 more on these adders.
 * Each value is exact at a quiescent point; between, a read may miss a change in flight (a page whose
 * last release has happened but which is still being filled counts as in use until it is pushed). {@link AccountingCheck} compares
 * these counts with a full scan of the state words.
 */
final class PageCounts {

    final LongAdder receiving = new LongAdder();
    final LongAdder draining = new LongAdder();
    final LongAdder quarantined = new LongAdder();
    final LongAdder quarantineEvents = new LongAdder();
    final LongAdder retired = new LongAdder();

    /** Where a phase move is counted: these adders, or a batch's {@link Delta}. */
    interface Sink {
        /** Adds {@code n} to count {@code which} (one of the indices below). */
        void count(int which, long n);
    }

    // the counts a phase move changes, by index
    private static final int RECEIVING = 0, DRAINING = 1, QUARANTINED = 2, QUARANTINE_EVENTS = 3, RETIRED = 4, COUNTS = 5;

    /**
     * Counts that a successful CAS moved a slot from phase {@code from} to phase {@code to} (both SlotStateMachine
     * constants): the one place that says which phases are counted.
     */
    static void moved(int from, int to, Sink sink) {
        if (from == to) {
            return;
        }
        switch (from) {
            case SlotStateMachine.RECEIVING -> sink.count(RECEIVING, -1);
            case SlotStateMachine.DRAINING -> sink.count(DRAINING, -1);
            case SlotStateMachine.QUARANTINED -> sink.count(QUARANTINED, -1);
            default -> { }
        }
        switch (to) {
            case SlotStateMachine.RETIRED -> sink.count(RETIRED, 1);
            case SlotStateMachine.RECEIVING -> sink.count(RECEIVING, 1);
            case SlotStateMachine.DRAINING -> sink.count(DRAINING, 1);
            case SlotStateMachine.QUARANTINED -> {
                sink.count(QUARANTINED, 1);
                sink.count(QUARANTINE_EVENTS, 1);
            }
            default -> { }
        }
    }

    /** Test seam: runs between the reads of {@link #pinnedAtMostOnce} ({@code null} in production). */
    volatile Runnable betweenPinnedReads;

    /**
     * The pages in a pinned phase, read while they may move between those phases (a transport ending its receives as
     * the pool closes), counting each at most once. Moves go RECEIVING → DRAINING → QUARANTINED, and every move
     * decrements its old count before it increments its new one ({@link #moved}, and {@link #add} in index order), so
     * counts read against that direction may miss a page that moved meanwhile but never count it twice. Read along it,
     * a page could be seen in RECEIVING and then again in DRAINING.
     *
     * @return the pinned pages, none counted twice (one that moved during the read may be missed)
     */
    long pinnedAtMostOnce() {
        final long q = quarantined.sum();
        betweenReads();
        final long d = draining.sum();
        betweenReads();
        return q + d + receiving.sum();
    }

    private void betweenReads() {
        final Runnable r = betweenPinnedReads;
        if (r != null) {
            r.run();
        }
    }

    /** Test seam: runs between the pinned phases' reads of {@link PoolMetrics#read()} ({@code null} in production). */
    volatile Runnable betweenMetricReads;

    /** Runs {@link #betweenMetricReads}, if a test set it. */
    void betweenMetricReads() {
        final Runnable r = betweenMetricReads;
        if (r != null) {
            r.run();
        }
    }

    /** The counts themselves as a sink: every move lands at once. */
    final Sink now = (which, n) -> adder(which).add(n);

    private LongAdder adder(int which) {
        return switch (which) {
            case RECEIVING -> receiving;
            case DRAINING -> draining;
            case QUARANTINED -> quarantined;
            case QUARANTINE_EVENTS -> quarantineEvents;
            case RETIRED -> retired;
            default -> throw new IllegalArgumentException("no count " + which);
        };
    }

    /** Phase moves of one batch, in plain fields of the thread that runs it; {@link #add} hands them over. */
    static final class Delta implements Sink {
        private final long[] n = new long[COUNTS];

        @Override
        public void count(int which, long k) {
            n[which] += k;
        }
    }

    /** Adds a batch's moves (one adder call per count that changed) and zeroes the delta. */
    void add(Delta d) {
        for (int i = 0; i < COUNTS; i++) {
            if (d.n[i] != 0) {
                adder(i).add(d.n[i]);
                d.n[i] = 0;
            }
        }
    }
}
