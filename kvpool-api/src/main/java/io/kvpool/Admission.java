package io.kvpool;

import java.util.Objects;

/**
 * The typed outcome of {@link KvPool#admit}: a request is admitted with a reservation, or refused with a
 * reason and the numbers behind it. Never a placeholder.
 *
 * <p>An admitted request's reservation is held by its sequence until that is closed. Whoever takes it with
 * {@link #sequence()} owns it; until then the admission does, and {@link #close()} gives the reservation back. So
 * a caller that may leave before taking the sequence (a client gone, an exception) admits in a
 * try-with-resources:
 * <pre>{@code
 * try (Admission a = pool.admit(prompt, maxNew, salt)) {
 *     if (!a.admitted()) return refuse(a.message());
 *     prepare();                       // throws: the reservation goes back with the admission
 *     engine.run(a.sequence());        // taken: the engine closes it
 * }
 * }</pre>
 *
 * <p>The allocation-free {@link KvPool#tryReserve} returns the same decisions as result codes:
 * {@link #CONTEXT_TOO_LONG}, {@link #EXCEEDS_POOL}, {@link #RETRY_LATER}.
 *
 * <p>Not thread-safe: one thread at a time uses an admission.
 */
public final class Admission implements AutoCloseable {

    /** Why a request was or was not admitted. */
    public enum Decision {
        /**
         * Admitted; {@link #sequence()} holds a reservation for every page the request can need under
         * {@link ReservationPolicy#FULL} (the default), for its prompt only under {@link ReservationPolicy#PROMPT_ONLY}.
         */
        ADMITTED,
        /** {@code prompt + maxNewTokens} exceeds the pool's max context. The request is wrong; do not retry. */
        REJECTED_CONTEXT_TOO_LONG,
        /** The request needs more pages than the pool has in service even when empty. Do not retry. */
        REJECTED_EXCEEDS_POOL,
        /** The request fits the pool but not now (pages or reservation slots are taken). Retry later. */
        RETRY_LATER
    }

    /** Result code of {@link KvPool#tryReserve}: see {@link Decision#REJECTED_CONTEXT_TOO_LONG}. */
    public static final long CONTEXT_TOO_LONG = -1L;
    /** Result code of {@link KvPool#tryReserve}: see {@link Decision#REJECTED_EXCEEDS_POOL}. */
    public static final long EXCEEDS_POOL = -2L;
    /** Result code of {@link KvPool#tryReserve}: see {@link Decision#RETRY_LATER}. */
    public static final long RETRY_LATER = -3L;

    private final Decision decision;
    private final Sequence sequence;
    private final long requestedTokens;
    private final long maxContextTokens;
    private final long pagesNeeded;
    private final long pagesAvailable;
    private final long pagesInService;
    /** Tokens an admitted sequence got from the prefix cache (their pages are shared, not reserved). */
    private final int cachedTokens;
    /** Whether {@link #sequence()} handed the sequence out: its caller owns it, and {@link #close()} leaves it. */
    private boolean taken;

    Admission(Decision decision, Sequence sequence, long requestedTokens, long maxContextTokens, long pagesNeeded,
              long pagesAvailable, long pagesInService) {
        this.decision = Objects.requireNonNull(decision);
        this.sequence = sequence;
        this.requestedTokens = requestedTokens;
        this.maxContextTokens = maxContextTokens;
        this.pagesNeeded = pagesNeeded;
        this.pagesAvailable = pagesAvailable;
        this.pagesInService = pagesInService;
        this.cachedTokens = sequence == null ? 0 : sequence.tokenCount();
    }

    /** {@return the decision} */
    public Decision decision() {
        return decision;
    }

    /** @return the refusal a {@link KvPool#tryReserve} code stands for */
    static Decision decisionOf(long code) {
        return code == CONTEXT_TOO_LONG ? Decision.REJECTED_CONTEXT_TOO_LONG
            : code == EXCEEDS_POOL ? Decision.REJECTED_EXCEEDS_POOL : Decision.RETRY_LATER;
    }

    /** {@return whether the request was admitted} */
    public boolean admitted() {
        return decision == Decision.ADMITTED;
    }

    /**
     * {@return the admitted request's sequence} The caller owns it from then on and must close it; the admission's
     * {@link #close()} no longer touches it. Every call returns the same sequence.
     *
     * @throws IllegalStateException if the request was not admitted, with the reason; or if the admission was closed
     *                               before the sequence was taken (its reservation is gone)
     */
    public Sequence sequence() {
        if (sequence == null) {
            throw new IllegalStateException("request was not admitted: " + message());
        }
        if (!taken && sequence.isClosed()) {
            throw new IllegalStateException("admission closed before its sequence was taken: its reservation (" + pagesNeeded
                + " pages needed, less any attached from the prefix cache) and its attached pages were given back");
        }
        taken = true;
        return sequence;
    }

    /**
     * Gives the reservation back if the request was admitted and {@link #sequence()} never handed its sequence out
     * (closes that sequence). Does nothing otherwise: a sequence taken is its taker's to close. Idempotent.
     */
    @Override
    public void close() {
        if (sequence != null && !taken) {
            sequence.close();
        }
    }

    /** {@return {@code prompt + maxNewTokens} of the request} */
    public long requestedTokens() {
        return requestedTokens;
    }

    /** {@return the pool's max context when the decision was made} */
    public long maxContextTokens() {
        return maxContextTokens;
    }

    /** {@return pages the request needed reserved} */
    public long pagesNeeded() {
        return pagesNeeded;
    }

    /** {@return free, unreserved pages when the decision was made} */
    public long pagesAvailable() {
        return pagesAvailable;
    }

    /** {@return pages in service (capacity less retired) when the decision was made} */
    public long pagesInService() {
        return pagesInService;
    }

    /** {@return a one-line explanation with the numbers, suitable for an error response} */
    public String message() {
        return switch (decision) {
            case ADMITTED -> requestedTokens + " tokens, " + pagesNeeded + " pages" + (cachedTokens > 0
                ? " (" + cachedTokens + " tokens attached from the prefix cache, the rest reserved)" : " reserved");
            case REJECTED_CONTEXT_TOO_LONG -> "request of " + requestedTokens + " tokens (prompt + max new tokens) exceeds the max context of "
                + maxContextTokens + " tokens";
            case REJECTED_EXCEEDS_POOL -> "request needs " + pagesNeeded + " pages but the pool has only " + pagesInService
                + " pages in service";
            case RETRY_LATER -> "request needs " + pagesNeeded + " pages; " + pagesAvailable + " are free and unreserved now";
        };
    }

    /** {@return the decision code as {@link KvPool#tryReserve} would return it (0 for ADMITTED)} */
    public long code() {
        return switch (decision) {
            case ADMITTED -> 0;
            case REJECTED_CONTEXT_TOO_LONG -> CONTEXT_TOO_LONG;
            case REJECTED_EXCEEDS_POOL -> EXCEEDS_POOL;
            case RETRY_LATER -> RETRY_LATER;
        };
    }

    @Override
    public String toString() {
        return decision + ": " + message();
    }
}
