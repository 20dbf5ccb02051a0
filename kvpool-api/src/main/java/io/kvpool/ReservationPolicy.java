package io.kvpool;

/** How many pages admission reserves for a request. */
public enum ReservationPolicy {
    /**
     * Pages for {@code prompt + maxNewTokens} (default): an admitted request can never run out of pages
     * before it has generated {@code maxNewTokens} tokens.
     */
    FULL,
    /**
     * Pages for the prompt only (over-commit): more requests fit, but decoding allocates from the
     * unreserved free pages and can fail with {@link PoolExhaustedException}. The caller must be ready
     * to preempt or abort.
     */
    PROMPT_ONLY
}
