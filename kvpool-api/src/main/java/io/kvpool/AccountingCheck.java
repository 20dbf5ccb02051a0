package io.kvpool;

/**
 * The full accounting check behind {@link KvPool#verifyAccounting()}: a scan of every state word and every
 * free structure, compared with the counts the pool keeps incrementally. It costs O(capacity) time and
 * {@code 5 × capacity} bytes of scratch (about 3.4 ms and 5 MiB at a million pages, MetricsReadBenchmark); call it in tests and at
 * quiescent points, never on a serving path.
 *
 * <pre>
 *   1. by state, the scan's counts == the incremental counts (PageCounts, and the allocator's count of free pages)
 *   2. free + owned + receiving + draining + quarantined + retired == capacity, 0 ≤ reserved ≤ free
 *   3. every FREE slot is in exactly one free structure (plain stack, cached LRU, allocator cache), and
 *      no other slot is in any; every cached free slot holds a published prefix
 *   4. the free structures hold exactly as many pages as there are FREE slots, and the LRU as many as are counted
 *      cached
 * </pre>
 * Runs under the pool lock at a quiescent point.
 */
final class AccountingCheck {

    private AccountingCheck() {
    }

    /**
     * @param counted the pool's snapshot from its incremental counts
     * @return the snapshot from the scan (equal to {@code counted} when the check passes)
     * @throws IllegalStateException describing the first violation
     */
    static PoolSnapshot verifyLocked(PoolSnapshot counted, SlotTable slots, PageAllocator allocator, PrefixSharing prefix) {
        final int capacity = slots.capacity();
        final long[] byState = new long[SlotState.values().length];
        for (int s = 0; s < capacity; s++) {
            byState[SlotStateMachine.phase(slots.wordVolatile(s))]++;
        }
        final PoolSnapshot scanned = counted.withPageCounts(byState[SlotStateMachine.FREE], byState[SlotStateMachine.OWNED],
            byState[SlotStateMachine.RECEIVING], byState[SlotStateMachine.DRAINING], byState[SlotStateMachine.QUARANTINED],
            byState[SlotStateMachine.RETIRED]);
        if (!scanned.equals(counted)) {
            throw new IllegalStateException("the incremental page counts disagree with a scan of the state words: counted "
                + counted.pageCountsString() + ", scanned " + scanned.pageCountsString());
        }
        if (!scanned.balanced()) {
            throw new IllegalStateException("accounting does not balance: " + scanned);
        }
        final FreePages free = allocator.freePages();
        final byte[] seen = new byte[capacity];
        final int[] plain = new int[capacity];
        int n = 0;
        for (int s; (s = free.popPlain()) >= 0; ) {
            plain[n++] = s;
        }
        for (int i = n - 1; i >= 0; i--) {
            free.pushPlain(plain[i]);
            seen[plain[i]]++;
        }
        allocator.cache().forEachQuiescent(s -> seen[s]++); // a live owner's cache, when checked from another thread
        for (int s = 0; s < capacity; s++) {
            if (free.isCached(s)) {
                seen[s]++;
                if (!prefix.isPublished(s)) {
                    throw new IllegalStateException("cached free slot " + s + " holds no published prefix");
                }
            }
        }
        for (int s = 0; s < capacity; s++) {
            final boolean isFree = SlotStateMachine.phase(slots.wordVolatile(s)) == SlotStateMachine.FREE;
            if (seen[s] != (isFree ? 1 : 0)) {
                throw new IllegalStateException("slot " + s + " is " + SlotStateMachine.describe(slots.wordVolatile(s))
                    + " but appears " + seen[s] + " times in the free structures");
            }
        }
        if (free.cachedSize() != counted.cachedFree()) {
            throw new IllegalStateException("the cached free pages are counted " + counted.cachedFree() + " but the LRU holds "
                + free.cachedSize());
        }
        final int cached = allocator.cache().sizeQuiescent();
        if (free.size() + cached != scanned.free()) {
            throw new IllegalStateException("free structures hold " + free.size() + " pages and the allocator cache "
                + cached + " but " + scanned.free() + " slots are FREE");
        }
        return scanned;
    }
}
