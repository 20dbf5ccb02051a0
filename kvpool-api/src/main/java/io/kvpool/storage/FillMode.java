package io.kvpool.storage;

/** What the pool writes into a page when it becomes free. */
public enum FillMode {
    /**
     * The {@link PageStorage#CANARY canary pattern} (default): a reader of a page nobody wrote since it
     * was freed sees the canary, and {@link PageStorage#firstCanaryToken} detects it.
     */
    CANARY,
    /** Zeros: no stale data survives, but unwritten pages cannot be told from written zeros. */
    ZERO,
    /** Nothing: fastest; freed pages keep their last tenant's bytes until overwritten. */
    NONE
}
