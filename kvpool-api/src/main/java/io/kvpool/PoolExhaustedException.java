package io.kvpool;

/**
 * A sequence needed a page beyond its reservation and the pool had no unreserved free page. An admitted
 * request under the default {@link ReservationPolicy#FULL} policy never sees this within the tokens it
 * was admitted for, except for a copy-on-write that another holder's {@link KvPool#retain} forces (see
 * {@link Sequence#append}).
 */
public final class PoolExhaustedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    PoolExhaustedException(String message) {
        super(message);
    }
}
