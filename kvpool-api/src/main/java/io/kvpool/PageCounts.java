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

    /**
     * Where a phase move is counted: these adders ({@link #now}), or a batch's {@link Delta}. One small method a
     * count, so that a batch's calls inline whatever the call site's profile and its delta can stay in registers.
     */
    interface Sink {
        void receiving(long n);

        void draining(long n);

        void quarantined(long n);

        /** One more entry into QUARANTINED. */
        void quarantineEvent();

        /** One more slot out of service. */
        void retired();
    }

    /**
     * Counts that a successful CAS moved a slot from phase {@code from} to phase {@code to} (both SlotStateMachine
     * constants): the one place that says which phases are counted.
     */
    static void moved(int from, int to, Sink sink) {
        if (from == to) {
            return;
        }
        switch (from) {
            case SlotStateMachine.RECEIVING -> sink.receiving(-1);
            case SlotStateMachine.DRAINING -> sink.draining(-1);
            case SlotStateMachine.QUARANTINED -> sink.quarantined(-1);
            default -> { }
        }
        switch (to) {
            case SlotStateMachine.RETIRED -> sink.retired();
            case SlotStateMachine.RECEIVING -> sink.receiving(1);
            case SlotStateMachine.DRAINING -> sink.draining(1);
            case SlotStateMachine.QUARANTINED -> {
                sink.quarantined(1);
                sink.quarantineEvent();
            }
            default -> { }
        }
    }

    /** Test seam: runs between the reads of {@link #pinnedAtMostOnce} ({@code null} in production). */
    volatile Runnable betweenPinnedReads;

    /**
     * The pages in a pinned phase, read while they may move between those phases (a transport ending its receives as
     * the pool closes), counting each at most once. Moves go RECEIVING → DRAINING → QUARANTINED, and every move
     * decrements its old count before it increments its new one ({@link #moved}, and {@link #add} in that order), so
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
    final Sink now = new Sink() {
        @Override
        public void receiving(long n) {
            receiving.add(n);
        }

        @Override
        public void draining(long n) {
            draining.add(n);
        }

        @Override
        public void quarantined(long n) {
            quarantined.add(n);
        }

        @Override
        public void quarantineEvent() {
            quarantineEvents.increment();
        }

        @Override
        public void retired() {
            retired.increment();
        }
    };

    /**
     * The delta of the batches that run under the pool lock (a pinned allocation, a pin of many pages): only its
     * holder touches it, and it {@link #add}s it before it lets the lock go, so it is zero whenever the lock is free
     * and no such batch allocates one of its own.
     */
    final Delta locked = new Delta();

    /**
     * Phase moves of one batch, in plain fields of the thread that runs it; {@link #add} hands them over. Fields, not
     * an array: a batch whose calls inline names each field outright, so the JIT can keep its delta in registers
     * instead of allocating it (an array indexed by a variable it cannot).
     */
    static final class Delta implements Sink {
        private long receiving, draining, quarantined, quarantineEvents, retired;

        @Override
        public void receiving(long n) {
            receiving += n;
        }

        @Override
        public void draining(long n) {
            draining += n;
        }

        @Override
        public void quarantined(long n) {
            quarantined += n;
        }

        @Override
        public void quarantineEvent() {
            quarantineEvents++;
        }

        @Override
        public void retired() {
            retired++;
        }
    }

    /** Adds a batch's moves (one adder call per count that changed) and zeroes the delta. */
    void add(Delta d) {
        // in the order of the moves (see pinnedAtMostOnce): an earlier phase's count lands before a later one's
        if (d.receiving != 0) {
            receiving.add(d.receiving);
            d.receiving = 0;
        }
        if (d.draining != 0) {
            draining.add(d.draining);
            d.draining = 0;
        }
        if (d.quarantined != 0) {
            quarantined.add(d.quarantined);
            d.quarantined = 0;
        }
        if (d.quarantineEvents != 0) {
            quarantineEvents.add(d.quarantineEvents);
            d.quarantineEvents = 0;
        }
        if (d.retired != 0) {
            retired.add(d.retired);
            d.retired = 0;
        }
    }
}
