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
