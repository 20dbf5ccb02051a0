package io.kvpool;

/**
 * A pool's gauges and counters, readable at any time from any thread at O(1) cost: no slot scan, and no
 * lock that admission waits for (each read sums a few striped counters or reads a volatile). Each value is
 * read on its own, so a set of reads is not one atomic cut; for a consistent cut at a quiescent point use
 * {@link KvPool#snapshot()}, and for a full check {@link KvPool#verifyAccounting()}. Obtain it with
 * {@link KvPool#metrics()}; it stays readable after the pool is closed.
 *
 * <p>Every value counts a change from the moment its CAS or critical section ends.
 */
public final class PoolMetrics {

    private final int capacity;
    private final PageCounts counts;
    private final PageAllocator allocator;
    private final Reservations reservations;
    private final PrefixSharing prefix;
    private final HandleOps ops;

    PoolMetrics(int capacity, PageCounts counts, PageAllocator allocator, Reservations reservations, PrefixSharing prefix, HandleOps ops) {
        this.capacity = capacity;
        this.counts = counts;
        this.allocator = allocator;
        this.reservations = reservations;
        this.prefix = prefix;
        this.ops = ops;
    }

    private PoolSnapshot now() {
        return read();
    }

    /** {@return pages the pool was built with} */
    public long capacity() {
        return capacity;
    }

    /**
     * {@return FREE pages, including cached free pages that still hold a published prefix; a gauge} Never above the
     * capacity less the retired pages.
     */
    public long free() {
        return now().free();
    }

    /**
     * {@return OWNED pages; a gauge} Derived: the capacity less the pages in every other state, read one after another,
     * so a page that moves during the read (FREE → RECEIVING → DRAINING → FREE) may be missed or counted twice here;
     * never below 0.
     */
    public long owned() {
        return now().owned();
    }

    /** {@return RECEIVING pages (pinned for a remote writer); a gauge} */
    public long receiving() {
        return now().receiving();
    }

    /** {@return DRAINING pages (a failed transfer waiting for its sender's drain); a gauge} */
    public long draining() {
        return now().draining();
    }

    /** {@return QUARANTINED pages (held until the transport proves the peer cannot write); a gauge} */
    public long quarantined() {
        return now().quarantined();
    }

    /** {@return RETIRED pages (generation exhausted; out of service for good); a gauge} */
    public long retired() {
        return now().retired();
    }

    /** {@return pages reserved for admitted requests and not yet allocated; a gauge} */
    public long reserved() {
        return now().reserved();
    }

    /** {@return FREE pages that still hold a published prefix; a gauge} */
    public long cachedFree() {
        return now().cachedFree();
    }

    /** {@return pages in the prefix index (free or not); a gauge} */
    public long publishedPrefixes() {
        return now().publishedPrefixes();
    }

    /** {@return sequences not yet closed; a gauge} */
    public long openSequences() {
        return now().openSequences();
    }

    /** {@return reservations from {@link KvPool#tryReserve} not yet opened or cancelled; a gauge} */
    public long openReservations() {
        return now().openReservations();
    }

    /** {@return times a slot left FREE (fresh allocation or revival of a cached page); a counter} */
    public long allocations() {
        return now().allocations();
    }

    /** {@return pages attached from the prefix cache; a counter} */
    public long prefixHits() {
        return now().prefixHits();
    }

    /** {@return cached pages evicted to satisfy an allocation; a counter} */
    public long evictions() {
        return now().evictions();
    }

    /** {@return admissions refused with REJECTED_CONTEXT_TOO_LONG; a counter} */
    public long rejectedContextTooLong() {
        return now().rejectedContextTooLong();
    }

    /** {@return admissions refused with REJECTED_EXCEEDS_POOL; a counter} */
    public long rejectedExceedsPool() {
        return now().rejectedExceedsPool();
    }

    /** {@return admissions answered RETRY_LATER; a counter} */
    public long retryLater() {
        return now().retryLater();
    }

    /** {@return operations refused because their handle was stale or invalid; a counter} */
    public long staleHandlesRefused() {
        return now().staleHandlesRefused();
    }

    /** {@return operations refused because their handle names another pool; a counter} */
    public long foreignHandlesRefused() {
        return now().foreignHandlesRefused();
    }

    /** {@return pages that entered QUARANTINED; a counter} */
    public long quarantineEvents() {
        return now().quarantineEvents();
    }

    /**
     * {@return every value at once, read without the pool lock; O(1)} Not one cut: a page that moves during the read
     * may be missed or counted in two states ({@link KvPool#snapshot()} at a quiescent point is exact).
     */
    public PoolSnapshot read() {
        // the pinned phases against the direction pages move through them (PageCounts#pinnedAtMostOnce), so that one move
        // during the read does not show a page in both; a page that goes round (DRAINING → FREE → RECEIVING) still may
        final long quarantined = counts.quarantined.sum();
        counts.betweenMetricReads();
        final long draining = counts.draining.sum();
        counts.betweenMetricReads();
        final long receiving = counts.receiving.sum();
        final long retired = counts.retired.sum();
        // the free structures are read one after another: a page read in one, then allocated and freed into one read
        // after it, is counted twice, so free is capped at the pages in service (free + retired never exceeds capacity)
        final long free = Math.min(capacity - retired, allocator.freeNow());
        // after the page counts: every page they show in use was allocated by then, so pagesFreed() never reads below 0
        final long allocations = allocator.allocations();
        // a page freed after its pinned phase was read shows twice, once there and once free: owned never reads below 0
        final long owned = Math.max(0, capacity - free - retired - receiving - draining - quarantined);
        return new PoolSnapshot(capacity, free, owned, receiving,
            draining, quarantined, retired, reservations.reserved(), allocator.cachedFree(), prefix.published(),
            reservations.openSequences(), reservations.openReservations(), allocations, prefix.hits(), allocator.evictions(),
            reservations.rejectedContextTooLong(), reservations.rejectedExceedsPool(), reservations.retryLater(),
            ops.staleRefused(), ops.foreignRefused(), counts.quarantineEvents.sum());
    }
}
