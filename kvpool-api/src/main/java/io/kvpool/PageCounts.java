package io.kvpool;

import java.util.concurrent.atomic.LongAdder;

/**
 * The pool's page counts by state that the free structures do not give, kept as the states change so
 * that reading them costs no slot scan and no lock. {@link SlotTable} reports every phase change of a
 * successful CAS here; nothing else writes. Nothing here is touched on the allocation or free path.
 *
 * <pre>
 *   receiving         LongAdder   +1 / -1 as slots enter and leave RECEIVING      ┐ transport events only
 *   draining          LongAdder   +1 / -1                                         │
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

    /** Phase moves of one batch, in plain fields of the thread that runs it; {@link #add} hands them over. */
    static final class Delta {
        long receiving, draining, quarantined, quarantineEvents, retired;

        /** As {@link PageCounts#moved}, into this delta. */
        void moved(int from, int to) {
            if (from == to) {
                return;
            }
            switch (from) {
                case SlotStateMachine.RECEIVING -> receiving--;
                case SlotStateMachine.DRAINING -> draining--;
                case SlotStateMachine.QUARANTINED -> quarantined--;
                default -> { }
            }
            switch (to) {
                case SlotStateMachine.RETIRED -> retired++;
                case SlotStateMachine.RECEIVING -> receiving++;
                case SlotStateMachine.DRAINING -> draining++;
                case SlotStateMachine.QUARANTINED -> {
                    quarantined++;
                    quarantineEvents++;
                }
                default -> { }
            }
        }
    }

    /** Adds a batch's moves (one adder call per count that changed) and zeroes the delta. */
    void add(Delta d) {
        if (d.receiving != 0) {
            receiving.add(d.receiving);
        }
        if (d.draining != 0) {
            draining.add(d.draining);
        }
        if (d.quarantined != 0) {
            quarantined.add(d.quarantined);
        }
        if (d.quarantineEvents != 0) {
            quarantineEvents.add(d.quarantineEvents);
        }
        if (d.retired != 0) {
            retired.add(d.retired);
        }
        d.receiving = d.draining = d.quarantined = d.quarantineEvents = d.retired = 0;
    }

    /** A successful CAS moved a slot from phase {@code from} to phase {@code to} (both SlotStateMachine constants). */
    void moved(int from, int to) {
        if (from == to) {
            return;
        }
        switch (from) {
            case SlotStateMachine.RECEIVING -> receiving.decrement();
            case SlotStateMachine.DRAINING -> draining.decrement();
            case SlotStateMachine.QUARANTINED -> quarantined.decrement();
            default -> { }
        }
        switch (to) {
            case SlotStateMachine.RETIRED -> retired.increment();
            case SlotStateMachine.RECEIVING -> receiving.increment();
            case SlotStateMachine.DRAINING -> draining.increment();
            case SlotStateMachine.QUARANTINED -> {
                quarantined.increment();
                quarantineEvents.increment();
            }
            default -> { }
        }
    }
}
