package io.kvpool.transfer;

/**
 * One request's KV leaving a {@link TransferSender}. Read on the sender's thread (or after a
 * happens-before edge from it).
 */
public final class OutgoingTransfer {

    /** Where it stands; see {@link TransferSender}. */
    public enum State {
        /** Offered; no descriptor from the receiver yet. */
        WAITING,
        /** Writing pages, at most the configured number in flight. */
        WRITING,
        /** Every write completed; waiting for the flush that proves delivery. */
        FLUSHING,
        /**
         * Every write proven delivered and the COMPLETION sent (if the link failed during that send, the
         * receiver times out, and an ABORT from it is answered with the true counts).
         */
        COMPLETED,
        /** Failed or aborted: no new writes; waiting until every posted write reached a terminal state. */
        FAILING,
        /** Failed, every posted write ended, DRAINED sent (or nothing could be sent: the link was down). */
        DRAINED
    }

    final long requestId;
    final long[] sourceHandles;
    final int tokenCount;
    final int serial;
    State state = State.WAITING;
    FailureReason failureReason;
    String failure;
    Peer peer;
    long transferId = -1;
    int generation;
    int rank;
    int senders;
    int firstPage;
    int endPage;
    int nextPage;
    long posted;
    long succeeded;
    long failed;
    io.kvpool.transfer.spi.RemoteRegion region;
    long deadline;
    boolean forced;
    boolean flushPending;
    boolean flushAttempted;
    boolean flushed;
    boolean sourceReleased;
    /** Checksums taken before the source was released early ({@link TransferSafeguard#SOURCE_HOLD} off); else null. */
    int[] checksumsAtRelease;
    /** A DRAINED went out before every write ended ({@link TransferSafeguard#DRAINED_AFTER_WRITES_END} off). */
    boolean drainedEarly;
    boolean finished;

    OutgoingTransfer(long requestId, long[] sourceHandles, int tokenCount, int serial) {
        this.requestId = requestId;
        this.sourceHandles = sourceHandles;
        this.tokenCount = tokenCount;
        this.serial = serial;
    }

    /** {@return the request} */
    public long requestId() {
        return requestId;
    }

    /** {@return where it stands} */
    public State state() {
        return state;
    }

    /** {@return whether it is over (COMPLETED or DRAINED): the source pages were released} */
    public boolean isDone() {
        return state == State.COMPLETED || state == State.DRAINED;
    }

    /** {@return why it failed, in words with the numbers, or {@code null}} */
    public String failure() {
        return failure;
    }

    /**
     * {@return why it failed, typed, or {@code null} if it did not} {@link FailureReason#REJECTED}: the receiver refused
     * the request (its admission, a busy slot: see the message); {@link FailureReason#ABORTED}: the receiver aborted or
     * cancelled it; {@link FailureReason#SENDER_ABORTED}: this side aborted it ({@link TransferSender#abort}) or a read,
     * write or flush failed; {@link FailureReason#TIMEOUT}: no descriptor came within the descriptor timeout;
     * {@link FailureReason#PEER_LOST}: its link failed or this sender closed.
     */
    public FailureReason failureReason() {
        return failureReason;
    }

    /** {@return writes posted, completed OK, and failed or cancelled so far} */
    public long posted() {
        return posted;
    }

    /** {@return writes that completed OK} */
    public long succeeded() {
        return succeeded;
    }

    /** {@return writes that failed or were cancelled} */
    public long failed() {
        return failed;
    }

    /** {@return tokens this sender holds for the request} */
    public int tokenCount() {
        return tokenCount;
    }

    @Override
    public String toString() {
        return "OutgoingTransfer[request=" + requestId + ", transfer=" + transferId + "/" + generation + " rank " + rank + ", "
            + state + ", posted=" + posted + " ok=" + succeeded + " failed=" + failed + (failure == null ? "" : ", " + failure) + "]";
    }
}
