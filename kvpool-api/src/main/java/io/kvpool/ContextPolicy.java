package io.kvpool;

/** What building a pool does when the advertised max context exceeds what the pool can hold for one request. */
public enum ContextPolicy {
    /** Refuse to build, with both numbers and the largest safe context (default). */
    FAIL,
    /** Clamp the max context to what fits and log a warning with both numbers. Explicit opt-in. */
    CLAMP
}
