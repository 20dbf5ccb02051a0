package io.kvpool.transfer.spi;

import java.nio.ByteBuffer;

/** Events of a {@link PeerLink}, delivered by {@link PeerLink#poll} on the link's owner thread. */
public interface LinkListener {

    /** A control frame arrived; decode it before the call returns (the buffer may be reused). */
    void onFrame(PeerLink link, ByteBuffer frame);

    /** A write reached its terminal state: {@link PeerLink#OK}, {@link PeerLink#FAILED} or {@link PeerLink#CANCELED}. */
    void onWriteDone(PeerLink link, long token, int status);

    /** A flush finished: {@code ok} proves delivery of every write posted before it. */
    void onFlushDone(PeerLink link, long token, boolean ok);

    /** The link failed (peer lost, protocol error); delivered once. Writes may still land until {@link PeerLink#tearDown}. */
    void onLinkFailed(PeerLink link, String reason);
}
