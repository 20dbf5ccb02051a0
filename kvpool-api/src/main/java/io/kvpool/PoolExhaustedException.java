package io.kvpool;

/**
 * A sequence needed a page beyond its reservation and the pool had no unreserved free page. An admitted
 * request under the default {@link ReservationPolicy#FULL} policy never sees this within the tokens it
 * was admitted for.
 */
public final class PoolExhaustedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    PoolExhaustedException(String message) {
        super(message);
    }
}
