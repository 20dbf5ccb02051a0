package io.kvpool;

/**
 * A view of a pool's page states and counters, built from the counts the pool keeps as pages change
 * state (no slot scan). Its values are read one after another without stopping other threads, so they are
 * one consistent cut only at a quiescent point (no operation in flight); {@link #balanced()} is the
 * accounting invariant that must hold there. {@link KvPool#verifyAccounting()} checks the counts against a
 * scan of every slot.
 *
 * @param capacity                 pages the pool was built with
 * @param free                     FREE pages (including cached free pages that still hold a prefix)
 * @param owned                    OWNED pages
 * @param receiving                RECEIVING pages
 * @param draining                 DRAINING pages
 * @param quarantined              QUARANTINED pages
 * @param retired                  RETIRED pages (generation exhausted; out of service)
 * @param reserved                 pages reserved for admitted requests and not yet allocated
 * @param cachedFree               FREE pages that still hold a published prefix (evicted LRU first-come)
 * @param publishedPrefixes        pages in the prefix index (free or not)
 * @param openSequences            sequences not yet closed
 * @param openReservations         reservations from {@link KvPool#tryReserve} not yet opened or cancelled
 * @param allocations              times a slot left FREE (fresh allocation or revival of a cached page)
 * @param prefixHits               pages attached from the prefix cache
 * @param evictions                cached pages evicted to satisfy an allocation
 * @param rejectedContextTooLong   admissions refused with REJECTED_CONTEXT_TOO_LONG
 * @param rejectedExceedsPool      admissions refused with REJECTED_EXCEEDS_POOL
 * @param retryLater               admissions answered RETRY_LATER
 * @param staleHandlesRefused      operations refused because their handle was stale or invalid
 * @param foreignHandlesRefused    operations refused because their handle names another pool
 * @param quarantineEvents         pages that entered QUARANTINED
 */
public record PoolSnapshot(
    long capacity,
    long free,
    long owned,
    long receiving,
    long draining,
    long quarantined,
    long retired,
    long reserved,
    long cachedFree,
    long publishedPrefixes,
    long openSequences,
    long openReservations,
    long allocations,
    long prefixHits,
    long evictions,
    long rejectedContextTooLong,
    long rejectedExceedsPool,
    long retryLater,
    long staleHandlesRefused,
    long foreignHandlesRefused,
    long quarantineEvents) {

    /** @return this snapshot with other page counts (for a scan to compare with the counted ones) */
    PoolSnapshot withPageCounts(long free, long owned, long receiving, long draining, long quarantined, long retired) {
        return new PoolSnapshot(capacity, free, owned, receiving, draining, quarantined, retired, reserved, cachedFree,
            publishedPrefixes, openSequences, openReservations, allocations, prefixHits, evictions, rejectedContextTooLong,
            rejectedExceedsPool, retryLater, staleHandlesRefused, foreignHandlesRefused, quarantineEvents);
    }

    /** @return the close report for a pool closed in this state, or null when nothing was outstanding */
    String outstandingReport() {
        if (inUse() == 0 && openSequences == 0 && openReservations == 0) {
            return null;
        }
        final long pinned = receiving + draining + quarantined;
        return "kvpool closed with outstanding pages: " + inUse() + " of " + capacity + " in use (owned " + owned + ", receiving "
            + receiving + ", draining " + draining + ", quarantined " + quarantined + "), " + openSequences + " open sequences, "
            + openReservations + " open reservations, " + reserved + " pages reserved"
            + (pinned > 0 ? "; " + pinned + " pages are pinned for remote writes, so the storage is NOT released (a peer may still write into it)" : "");
    }

    /** @return the page counts by state, for messages */
    String pageCountsString() {
        return "free=" + free + " owned=" + owned + " receiving=" + receiving + " draining=" + draining
            + " quarantined=" + quarantined + " retired=" + retired;
    }

    /** {@return pages not FREE and not RETIRED} */
    public long inUse() {
        return owned + receiving + draining + quarantined;
    }

    /**
     * {@return tenancies ended so far: every allocation not still in use (exact at quiescence)} A page is FREE again
     * after its tenancy, or RETIRED if it was its slot's last generation (after 2^32 tenancies of one slot). Never
     * below 0, also from a read while pages are allocated ({@link PoolMetrics#read()}).
     */
    public long pagesFreed() {
        return Math.max(0, allocations - inUse());
    }

    /**
     * {@return whether {@code free + owned + receiving + draining + quarantined + retired == capacity} and
     * {@code 0 ≤ reserved ≤ free}} The counts' invariant: it holds with pages leaked too (they count as owned). For
     * "nothing left behind" see {@link #idle()}.
     */
    public boolean balanced() {
        return free + owned + receiving + draining + quarantined + retired == capacity && reserved >= 0 && reserved <= free;
    }

    /**
     * {@return whether nothing is outstanding: no page in use (every page FREE or RETIRED), no open sequence or
     * reservation, nothing reserved} What a pool's close report looks for, and nothing reserved besides. At a quiescent
     * point after every request ended, together with {@link #balanced()}, it is an application's leak check.
     */
    public boolean idle() {
        return inUse() == 0 && openSequences == 0 && openReservations == 0 && reserved == 0;
    }

    @Override
    public String toString() {
        return "capacity=" + capacity + " free=" + free + " (cached " + cachedFree + ") owned=" + owned
            + " receiving=" + receiving + " draining=" + draining + " quarantined=" + quarantined + " retired=" + retired
            + " reserved=" + reserved + " publishedPrefixes=" + publishedPrefixes + " sequences=" + openSequences
            + " reservations=" + openReservations
            + " | allocations=" + allocations + " prefixHits=" + prefixHits + " evictions=" + evictions
            + " rejected{contextTooLong=" + rejectedContextTooLong + ", exceedsPool=" + rejectedExceedsPool
            + ", retryLater=" + retryLater + "} staleRefused=" + staleHandlesRefused + " foreignRefused=" + foreignHandlesRefused
            + " quarantineEvents=" + quarantineEvents;
    }
}
