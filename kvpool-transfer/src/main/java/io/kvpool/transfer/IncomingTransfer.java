package io.kvpool.transfer;

import io.kvpool.Admission;
import io.kvpool.Sequence;
import io.kvpool.transfer.spi.Registration;

/**
 * One request's KV arriving at a {@link TransferReceiver}: its state, and on commit the sequence decode
 * may use. Read from the receiver's thread (or after a happens-before edge from it).
 */
public final class IncomingTransfer {

    /** Where a transfer stands; see the protocol in {@link TransferReceiver}. */
    public enum State {
        /** Admission refused it, or no transfer slot or sender was available; no page was allocated. */
        REJECTED,
        /** Pages pinned RECEIVING, descriptor sent, waiting for every sender's completion. */
        RECEIVING,
        /** Verified and committed: {@link #sequence()} is ready for decode and belongs to the caller. */
        COMMITTED,
        /** Failed; pages DRAINING until every sender confirms its writes ended. */
        DRAINING,
        /**
         * Failed, and some sender did not prove its writes ended (drain deadline, lost link, or unproven
         * writes reported); pages QUARANTINED until the transport proves no write can land.
         */
        QUARANTINED,
        /** Failed, and its pages were freed (drained, or released from quarantine). */
        RELEASED
    }

    final long requestId;
    final int promptTokens;
    final int maxNewTokens;
    final int[] senderPeers;
    final long startedAt;
    State state;
    FailureReason failure;
    String message;
    Admission.Decision admissionDecision;
    boolean retryLater;
    Sequence sequence;
    /** {@link Sequence#structureVersion()} once its pages were allocated: a truncate that drops a page changes it. */
    long structureVersion;
    long[] handles;
    int transferId = -1;
    int generation;
    int expectedTokens;
    Registration[] registrations;
    boolean[] completed;
    boolean[] confirmed;
    /** Per rank, once the transfer failed: whether it is a suspect (only the transport's proof confirms it); {@code null} before. */
    boolean[] suspect;
    /** Per rank, once the transfer failed: what proved the rank's writes over, {@code null} while nothing has. */
    WriteProof[] proofs;
    int[] checksums;
    /** The first rank whose completion carried no checksums, or -1. */
    int noChecksumsRank = -1;
    int[] tokenCounts;
    long deadline;
    long holdStartedAt;
    ReceiverMetrics.Outcome outcome;

    IncomingTransfer(long requestId, int promptTokens, int maxNewTokens, int[] senderPeers, long now) {
        this.requestId = requestId;
        this.promptTokens = promptTokens;
        this.maxNewTokens = maxNewTokens;
        this.senderPeers = senderPeers.clone();
        this.startedAt = now;
    }

    /** {@return the request} */
    public long requestId() {
        return requestId;
    }

    /** {@return where it stands} */
    public State state() {
        return state;
    }

    /** {@return whether it reached a state it never leaves (COMMITTED, REJECTED, RELEASED)} */
    public boolean isTerminal() {
        return state == State.COMMITTED || state == State.REJECTED || state == State.RELEASED;
    }

    /** {@return why it failed, or {@code null} if it did not (yet)} */
    public FailureReason failure() {
        return failure;
    }

    /** {@return the failure's explanation with the numbers, or {@code null}} */
    public String message() {
        return message;
    }

    /**
     * {@return the admission's decision, or {@code null} if the request never reached admission} The
     * admitted sequence itself is reachable only through {@link #sequence()}, after commit.
     */
    public Admission.Decision admissionDecision() {
        return admissionDecision;
    }

    /**
     * {@return whether the same request, started again later, can be received where this transfer was refused or
     * failed} For a REJECTED transfer: true when every transfer slot was busy, the request id was receiving in another
     * transfer, admission answered {@link Admission.Decision#RETRY_LATER}, or the pool could not allocate the pages
     * admission promised; false when it never fits as asked (more pages than one descriptor carries, a reserved
     * sequence admitted for fewer tokens than the prompt, a context too long or a request larger than the pool). For
     * one refused {@link FailureReason#PEER_LOST} at start: true when every sender not up was still in its handshake,
     * false when any one's link failed or is retiring (a fresh link may take the request; that one will not). For
     * a {@link FailureReason#SENDER_ABORTED} one: true when the sender said a write or its flush failed (the link's
     * fault; a sender of an older build does not say so), false for any other cause of its abort. False in every other
     * case. A start refused before any descriptor left sends a CANCEL to the senders it can reach, which ends their
     * offers of the request: a retry then needs prefill to offer it again, from the sequence it kept or recomputed.
     */
    public boolean retryLater() {
        return retryLater;
    }

    /** {@return the tokens the receiver expects (and commits), 0 before admission} */
    public int expectedTokens() {
        return expectedTokens;
    }

    /**
     * The receiver's transfer slot this transfer holds: the descriptor's {@code transferId}. The slot alone —
     * it is reused across requests; {@link #generation()} tells its uses apart.
     *
     * @return the slot, or {@code -1} if none was assigned (the transfer was rejected before one was)
     */
    public int transferId() {
        return transferId;
    }

    /** {@return the generation of the transfer slot for this transfer} */
    public int generation() {
        return generation;
    }

    /**
     * What proved that one sender rank can write nothing more into this failed transfer's pages.
     *
     * @param senderRank the rank, from 0 to the number of senders given to {@link TransferReceiver#start} minus 1
     * @return the proof; {@code null} while the rank has none yet (the pages are still held) and for a transfer that did
     *         not fail (committed, rejected, or still receiving). Once the transfer is {@link State#RELEASED} every rank
     *         has one, {@link WriteProof#NONE} only where a safeguard was switched off.
     * @throws IndexOutOfBoundsException if there is no such rank
     */
    public WriteProof writeProof(int senderRank) {
        java.util.Objects.checkIndex(senderRank, senderPeers.length);
        return proofs == null ? null : proofs[senderRank];
    }

    /** {@return how the deferred release ended, or {@code null} if it did not (or there was none)} */
    public ReceiverMetrics.Outcome outcome() {
        return outcome;
    }

    /**
     * {@return the committed sequence} It is the caller's now: close it when decode is done.
     *
     * @throws IllegalStateException if the transfer is not COMMITTED
     */
    public Sequence sequence() {
        if (state != State.COMMITTED) {
            throw new IllegalStateException("transfer of request " + requestId + " is " + state
                + (failure == null ? "" : " (" + failure + ": " + message + ")") + ", not COMMITTED");
        }
        return sequence;
    }

    @Override
    public String toString() {
        return "IncomingTransfer[request=" + requestId + ", transfer=" + transferId + "/" + generation + ", tokens="
            + expectedTokens + ", " + state + (failure == null ? "" : ", " + failure + ": " + message) + "]";
    }
}
