package io.kvpool;

import java.util.Arrays;

/**
 * Admission's bookkeeping: how many free pages are promised to admitted requests, the decision rule, the
 * ids of {@link KvPool#tryReserve} reservations, and the counters of what was refused.
 *
 * <pre>
 *   decide(prompt, maxNew):   tokens &gt; maxContext                 → CONTEXT_TOO_LONG   (counted)
 *                             pages(tokens) &gt; pages in service    → EXCEEDS_POOL       (counted)
 *                             pages &gt; free − reserved             → RETRY_LATER        (counted)
 *                             else reserved += pages              → admitted
 *   invariant at quiescence:  0 ≤ reserved ≤ free
 *
 *   reservation id (long):    [ 0 | pool (7) | generation (32 bits, 1 .. 2^31 − 1) | index (24 bits) ]   indices reused oldest first
 * </pre>
 * Every method runs under the pool lock. The counters are written there and read by anyone (volatile): a
 * metrics read takes no lock.
 */
final class Reservations {

    /**
     * One admission decision and the numbers behind it.
     *
     * @param code           pages reserved (≥ 0), or {@link Admission#CONTEXT_TOO_LONG}, {@link Admission#EXCEEDS_POOL},
     *                       {@link Admission#RETRY_LATER}
     * @param pagesNeeded    pages the request needs reserved
     * @param pagesAvailable free, unreserved pages when it was decided
     * @param admittedTokens tokens the reservation covers
     */
    record Grant(long code, long pagesNeeded, long pagesAvailable, long admittedTokens) {
        boolean admitted() {
            return code >= 0;
        }
    }

    private final KvLayout layout;
    private final long maxContextTokens;
    private final ReservationPolicy policy;
    private final boolean rejectOverCapacity;

    private volatile long reserved;
    private volatile long rejectedContextTooLong;
    private volatile long rejectedExceedsPool;
    private volatile long retryLater;
    private volatile long openSequences;
    private volatile long openReservations;

    private final int[] resPages;
    private final long[] resTokens;
    private final int[] resGeneration;
    private final int[] resFree;
    /** Free reservation indices: a FIFO ring of {@code freeCount} entries from {@code freeHead}. */
    private int freeCount;
    private int freeHead;

    /**
     * A reservation id, laid out as a {@link PageHandle} is, so that one pool's id is never taken for another's:
     * <pre>
     *   63 62         56 55                              24 23                     0
     *  +--+-------------+----------------------------------+-----------------------+
     *  | 0|  pool (7)   | generation of the index (32 bits |     index (24 bits)   |
     *  |  |             | holding 1 .. 2^31 − 1)           |                       |
     *  +--+-------------+----------------------------------+-----------------------+
     * </pre>
     */
    static final int INDEX_BITS = 24;
    /** Most reservations a pool may have open at once: what {@link #INDEX_BITS} can name. */
    static final int MAX_RESERVATIONS = 1 << INDEX_BITS;
    private static final int POOL_SHIFT = INDEX_BITS + 32;

    private final int poolId;

    /** @return the index a reservation id names */
    static int index(long reservationId) {
        return (int) (reservationId & (MAX_RESERVATIONS - 1));
    }

    /** @return the generation of its index a reservation id names: all 32 bits, so no two ids name one reservation */
    static long generation(long reservationId) {
        return (reservationId >>> INDEX_BITS) & 0xFFFF_FFFFL;
    }

    Reservations(KvLayout layout, long maxContextTokens, ReservationPolicy policy, boolean rejectOverCapacity, int maxReservations,
                 int poolId) {
        if (maxReservations > MAX_RESERVATIONS) {
            throw new IllegalArgumentException("maxReservations is " + maxReservations + ", at most " + MAX_RESERVATIONS);
        }
        this.poolId = poolId;
        this.layout = layout;
        this.maxContextTokens = maxContextTokens;
        this.policy = policy;
        this.rejectOverCapacity = rejectOverCapacity;
        this.resPages = new int[maxReservations];
        this.resTokens = new long[maxReservations];
        this.resGeneration = new int[maxReservations];
        this.resFree = new int[maxReservations];
        Arrays.fill(resPages, -1);
        for (int i = 0; i < maxReservations; i++) {
            resFree[i] = i;
        }
        this.freeCount = maxReservations;
    }

    /**
     * Decides a request and, when it is admitted, reserves its pages.
     *
     * @param free      FREE pages in the free structures now
     * @param inService pages in service (capacity less retired)
     */
    Grant decide(int promptTokens, int maxNewTokens, long free, long inService) {
        final long tokens = (long) promptTokens + maxNewTokens;
        long admittedTokens = policy == ReservationPolicy.FULL ? tokens : promptTokens;
        long needed = layout.pagesFor(admittedTokens);
        // below zero while a truncate's pages, reserved ahead, are still on their way to the free structures
        final long available = Math.max(0, free - reserved);
        // each Grant is made before its count changes: an OutOfMemoryError making it leaves nothing reserved or counted
        if (tokens > maxContextTokens || needed > inService) {
            if (rejectOverCapacity) {
                if (tokens > maxContextTokens) {
                    final Grant refused = new Grant(Admission.CONTEXT_TOO_LONG, needed, available, admittedTokens);
                    rejectedContextTooLong++;
                    return refused;
                }
                final Grant refused = new Grant(Admission.EXCEEDS_POOL, needed, available, admittedTokens);
                rejectedExceedsPool++;
                return refused;
            }
            // Safeguard.ADMISSION_REJECTION disabled: admit a one-token placeholder (the incident replay's case).
            needed = 1;
            admittedTokens = 1;
        }
        if (needed > available) {
            final Grant refused = new Grant(Admission.RETRY_LATER, needed, available, admittedTokens);
            retryLater++;
            return refused;
        }
        final Grant granted = new Grant(needed, needed, available, admittedTokens);
        reserved += needed;
        return granted;
    }

    /** @return whether a request that fits the pool would find too few free unreserved pages in {@code free} now */
    boolean wouldWait(int promptTokens, int maxNewTokens, long free) {
        final long tokens = policy == ReservationPolicy.FULL ? (long) promptTokens + maxNewTokens : promptTokens;
        return layout.pagesFor(tokens) > free - reserved;
    }

    /**
     * Gives an admitted grant a reservation id, or undoes it when every id is taken.
     *
     * @return the id ({@code > 0}), or {@link Admission#RETRY_LATER}
     */
    long open(Grant grant) {
        if (freeCount == 0) {
            reserved -= grant.code();
            retryLater++;
            return Admission.RETRY_LATER;
        }
        // oldest free index first (a FIFO ring): an index comes back only after every other free one did, so a
        // generation wraps only after 2^31 × maxReservations reservations, not after 2^31 of them
        final int idx = resFree[freeHead];
        freeHead = (freeHead + 1) % resFree.length;
        freeCount--;
        int gen = resGeneration[idx] + 1;
        if (gen <= 0) {
            gen = 1;
        }
        resGeneration[idx] = gen;
        resPages[idx] = (int) grant.code();
        resTokens[idx] = grant.admittedTokens();
        openReservations++;
        return ((long) poolId << POOL_SHIFT) | ((long) gen << INDEX_BITS) | idx;
    }

    /**
     * Ends a reservation id (opened into a sequence, or cancelled).
     *
     * @param cancel whether its pages go back to the pool (else a sequence takes them over)
     * @return the reservation's pages (index 0) and admitted tokens (index 1), in {@code out}
     * @throws IllegalArgumentException if the id is unknown, already opened or cancelled
     */
    void take(long reservationId, boolean cancel, long[] out) {
        final int idx = index(reservationId);
        final long gen = generation(reservationId);
        final int pool = (int) (reservationId >>> POOL_SHIFT);
        if (reservationId > 0 && pool != poolId) {
            throw new IllegalArgumentException("reservation id " + reservationId + " is of pool " + pool + ", not of this pool "
                + poolId);
        }
        if (reservationId <= 0 || idx >= resPages.length || resGeneration[idx] != gen || resPages[idx] < 0) {
            throw new IllegalArgumentException("unknown, opened or cancelled reservation id " + reservationId);
        }
        resFree[(freeHead + freeCount++) % resFree.length] = idx;
        openReservations--;
        out[0] = resPages[idx];
        out[1] = resTokens[idx];
        if (cancel) {
            reserved -= resPages[idx];
        }
        resPages[idx] = -1;
    }

    /** Test hook: sets the generation of a free reservation index, as after that many reservations of it. */
    void forceGeneration(int index, int generation) {
        resGeneration[index] = generation;
    }

    /** Adds pages to the reserved count (a sequence's top-up, a fork, an undone allocation). */
    void add(long pages) {
        reserved += pages;
    }

    /** Takes pages off the reserved count (allocated, or given back). */
    void remove(long pages) {
        reserved -= pages;
    }

    void sequenceOpened() {
        openSequences++;
    }

    void sequenceClosed() {
        openSequences--;
    }

    /** @return pages promised to admitted requests and not yet allocated (any thread) */
    long reserved() {
        return reserved;
    }

    long openSequences() {
        return openSequences;
    }

    long openReservations() {
        return openReservations;
    }

    long rejectedContextTooLong() {
        return rejectedContextTooLong;
    }

    long rejectedExceedsPool() {
        return rejectedExceedsPool;
    }

    long retryLater() {
        return retryLater;
    }

    long maxContextTokens() {
        return maxContextTokens;
    }
}
