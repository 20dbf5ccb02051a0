package io.kvpool;

/**
 * A pool cannot be built as asked: its pages cannot hold the advertised context for one request (e.g. a
 * deployment advertising 1,048,576 tokens on a pool that holds 681,280). Thrown when the pool is built,
 * never later.
 */
public final class PoolCapacityException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    private final long advertisedContextTokens;
    private final long poolTokens;

    PoolCapacityException(long advertisedContextTokens, long poolTokens, String message) {
        super(message);
        this.advertisedContextTokens = advertisedContextTokens;
        this.poolTokens = poolTokens;
    }

    /** {@return the context length the deployment advertised} */
    public long advertisedContextTokens() {
        return advertisedContextTokens;
    }

    /** {@return the tokens the pool can hold for one request, i.e. the largest safe context} */
    public long poolTokens() {
        return poolTokens;
    }
}
