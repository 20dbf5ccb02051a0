package io.kvpool;

import java.util.concurrent.atomic.LongAdder;

/**
 * The pool's page counts by state, kept as the states change so that reading them costs no slot scan
 * and no lock. {@link SlotTable} reports every phase change of a successful CAS here; nothing else writes.
 *
 * <pre>
 *   tenancies ended   LongAdder   +1 when a slot leaves use (to FREE or RETIRED)     hot path: a page's last release
 *   receiving         LongAdder   +1 / -1 as slots enter and leave RECEIVING      ┐ transport events only:
 *   draining          LongAdder   +1 / -1                                         ├ never on the allocation
 *   quarantined       LongAdder   +1 / -1                                         ┘ path
 *   quarantineEvents  LongAdder   +1 per entry into QUARANTINED
 *   retired           LongAdder   +1 per slot that leaves service
 *
 *   in use = allocations - tenancies ended     (allocations: counted by the allocator, see PageAllocator)
 *   owned  = in use - receiving - draining - quarantined
 *   free   = capacity - in use - retired
 * </pre>
 * Each value is exact at a quiescent point; between, a read may miss a change in flight (a page counted
 * freed before the allocation that preceded it is read, for example). {@link AccountingCheck} compares
 * these counts with a full scan of the state words.
 */
final class PageCounts {

    final LongAdder ended = new LongAdder();
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
            case SlotStateMachine.FREE -> ended.increment();
            case SlotStateMachine.RETIRED -> {
                retired.increment();
                if (from != SlotStateMachine.FREE) {
                    ended.increment();
                }
            }
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
