package io.kvpool;

/**
 * A pool's gauges and counters, readable at any time from any thread at O(1) cost: no slot scan, and no
 * lock that admission waits for. Each value is read on its own (a set of reads is not one atomic cut);
 * for a consistent cut at a quiescent point use {@link KvPool#snapshot()} or {@link KvPool#verifyAccounting()}.
 * Obtain it with {@link KvPool#metrics()}; it stays readable after the pool is closed.
 */
public final class PoolMetrics {

    private final KvPool pool;

    PoolMetrics(KvPool pool) {
        this.pool = pool;
    }

    /** @return pages the pool was built with */
    public long capacity() { return pool.snapshot().capacity(); }

    /** @return FREE pages, including cached free pages that still hold a published prefix */
    public long free() { return pool.snapshot().free(); }

    /** @return OWNED pages */
    public long owned() { return pool.snapshot().owned(); }

    /** @return RECEIVING pages (pinned for a remote writer) */
    public long receiving() { return pool.snapshot().receiving(); }

    /** @return DRAINING pages (a failed transfer waiting for its sender's drain) */
    public long draining() { return pool.snapshot().draining(); }

    /** @return QUARANTINED pages (held until the transport proves the peer cannot write) */
    public long quarantined() { return pool.snapshot().quarantined(); }

    /** @return RETIRED pages (generation exhausted; out of service for good) */
    public long retired() { return pool.snapshot().retired(); }

    /** @return pages reserved for admitted requests and not yet allocated */
    public long reserved() { return pool.snapshot().reserved(); }

    /** @return FREE pages that still hold a published prefix */
    public long cachedFree() { return pool.snapshot().cachedFree(); }

    /** @return pages in the prefix index (free or not) */
    public long publishedPrefixes() { return pool.snapshot().publishedPrefixes(); }

    /** @return sequences not yet closed */
    public long openSequences() { return pool.snapshot().openSequences(); }

    /** @return reservations from {@link KvPool#tryReserve} not yet opened or cancelled */
    public long openReservations() { return pool.snapshot().openReservations(); }

    /** @return counter: times a slot left FREE */
    public long allocations() { return pool.snapshot().allocations(); }

    /** @return counter: pages attached from the prefix cache */
    public long prefixHits() { return pool.snapshot().prefixHits(); }

    /** @return counter: cached pages evicted to satisfy an allocation */
    public long evictions() { return pool.snapshot().evictions(); }

    /** @return counter: admissions refused with REJECTED_CONTEXT_TOO_LONG */
    public long rejectedContextTooLong() { return pool.snapshot().rejectedContextTooLong(); }

    /** @return counter: admissions refused with REJECTED_EXCEEDS_POOL */
    public long rejectedExceedsPool() { return pool.snapshot().rejectedExceedsPool(); }

    /** @return counter: admissions answered RETRY_LATER */
    public long retryLater() { return pool.snapshot().retryLater(); }

    /** @return counter: operations refused because their handle was stale or invalid */
    public long staleHandlesRefused() { return pool.snapshot().staleHandlesRefused(); }

    /** @return counter: operations refused because their handle names another pool */
    public long foreignHandlesRefused() { return 0; }

    /** @return counter: pages that entered QUARANTINED */
    public long quarantineEvents() { return pool.snapshot().quarantineEvents(); }
}
