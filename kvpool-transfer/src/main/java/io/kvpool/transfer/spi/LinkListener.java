package io.kvpool.transfer.spi;

import java.nio.ByteBuffer;

/** Events of a {@link PeerLink}, delivered by {@link PeerLink#poll} on the link's owner thread. */
public interface LinkListener {

    /**
     * A control frame arrived; decode it before the call returns (the buffer may be reused).
     *
     * @param link  the link it arrived on
     * @param frame the encoded frame, header included, between position and limit (the position need not be 0); read
     *              it there, and leave the buffer's position, limit, mark and byte order as they are: a link may hand
     *              every frame in one view of its input
     */
    void onFrame(PeerLink link, ByteBuffer frame);

    /**
     * A write reached its terminal state.
     *
     * @param link   the link it was posted on
     * @param token  the write's token from {@link PeerLink#putBatch}
     * @param status {@link PeerLink#OK}, {@link PeerLink#FAILED} or {@link PeerLink#CANCELED}
     */
    void onWriteDone(PeerLink link, long token, int status);

    /**
     * A run of writes with consecutive tokens reached the same terminal state: the writes
     * {@code firstToken, firstToken + 1, …, firstToken + count − 1}, in that order. Links whose writes finish
     * in batches report them so; the default calls {@link #onWriteDone} for each, and a listener that can
     * account for the run at once overrides it.
     *
     * @param link       the link they were posted on
     * @param firstToken the first write's token
     * @param count      how many writes, ≥ 1
     * @param status     {@link PeerLink#OK}, {@link PeerLink#FAILED} or {@link PeerLink#CANCELED}, the same for all
     */
    default void onWritesDone(PeerLink link, long firstToken, int count, int status) {
        for (int i = 0; i < count; i++) {
            onWriteDone(link, firstToken + i, status);
        }
    }

    /**
     * A flush finished.
     *
     * @param link  the link it was asked on
     * @param token the token given to {@link PeerLink#flush}
     * @param ok    whether delivery of every write posted before the flush that completed {@link PeerLink#OK} is
     *              proven (a write that failed is never proven by a flush)
     */
    void onFlushDone(PeerLink link, long token, boolean ok);

    /**
     * The link failed (peer lost, protocol error); delivered once. Writes may still land until
     * {@link PeerLink#tearDown}.
     *
     * @param link   the link that failed
     * @param reason why, for logs
     */
    void onLinkFailed(PeerLink link, String reason);
}
