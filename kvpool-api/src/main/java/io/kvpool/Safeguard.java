package io.kvpool;

/**
 * Safeguards that can be switched off with {@link KvPoolBuilder#unsafeDisable}, <b>only</b> so tests and
 * the incident replay can prove that each safeguard is what stops a leak. A pool built with any of them
 * off logs an error at startup and says so in {@link KvPool#toString()}. Never disable one in production.
 */
public enum Safeguard {
    /** Refuse handles whose generation differs from their slot's. Off: a stale handle reaches the slot's next tenant. */
    GENERATION_CHECK,
    /**
     * Refuse handles issued by another pool ({@link PageHandle#FOREIGN}). Off: a handle of one pool used on
     * another in the same process reaches that pool's page of the same slot (and generation).
     */
    POOL_IDENTITY_CHECK,
    /** Fill freed pages (see {@link io.kvpool.storage.FillMode}). Off: freed pages keep their tenant's bytes. */
    FREE_PAGE_FILL,
    /**
     * Reject requests that cannot fit. Off: an over-capacity request is admitted as a one-token placeholder
     * (what the incident replay reproduces) — its sequence holds one page whatever it asked for.
     */
    ADMISSION_REJECTION,
    /**
     * Hand out a shared page's bytes read-only ({@link KvPool#page}, {@link Sequence#page}). Off: a write through
     * the segment of a page another sequence also holds (an attached prefix, a fork's page) changes that
     * sequence's KV too.
     */
    SHARED_PAGE_READ_ONLY;

    /** Logs an ERROR naming the safeguards a pool was built without, if any. */
    static void warnIfDisabled(java.util.Set<Safeguard> disabled) {
        if (!disabled.isEmpty()) {
            System.getLogger("io.kvpool").log(System.Logger.Level.ERROR, "UNSAFE kvpool built with safeguards DISABLED: "
                + disabled + " — for tests and incident replays only; this pool can leak one request's KV to another");
        }
    }
}
