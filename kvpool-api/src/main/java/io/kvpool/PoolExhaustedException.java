package io.kvpool;

/**
 * A sequence needed a page beyond its reservation and the pool had no unreserved free page. An admitted
 * request under the default {@link ReservationPolicy#FULL} policy never sees this within the tokens it
 * was admitted for, except for a copy-on-write that another holder's {@link KvPool#retain} forces (see
 * {@link Sequence#append}).
 */
public final class PoolExhaustedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    private final boolean retryLater;

    PoolExhaustedException(String message) {
        this(message, true);
    }

    PoolExhaustedException(String message, boolean retryLater) {
        super(message);
        this.retryLater = retryLater;
    }

    /**
     * {@return whether pages freed elsewhere can make the same call succeed} False only for a {@link Sequence#fork()}
     * (or {@link Sequence#tryFork()}) that the pool could not reserve even with every page the sequence neither holds
     * nor has reserved free: no wait helps while the sequence stays as it is.
     */
    public boolean retryLater() {
        return retryLater;
    }
}
