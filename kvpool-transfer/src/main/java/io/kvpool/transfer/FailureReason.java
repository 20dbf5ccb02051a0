package io.kvpool.transfer;

/**
 * Why a transfer did not commit ({@link IncomingTransfer#failure()}) or complete ({@link OutgoingTransfer#failureReason()},
 * which says what each means on the sender). Each failure also carries a message with the numbers.
 */
public enum FailureReason {
    /**
     * Refused before any page was allocated: by admission ({@link IncomingTransfer#admissionDecision()} says how), or
     * for a reason of its own, without an admission decision or after admitting (the message says which, with the
     * numbers). {@link IncomingTransfer#retryLater()} says whether waiting can help, for every case:
     * <ul>
     *   <li>every transfer slot was busy, or the pool could not allocate the pages admission had promised: waiting
     *       can help;</li>
     *   <li>the request id is already receiving here: it names one transfer at a time (waiting for that one to end
     *       can help);</li>
     *   <li>the request needs more pages than one descriptor carries, or its reserved sequence was admitted for fewer
     *       tokens than the prompt has ({@link TransferReceiver#start(long, io.kvpool.Sequence, int, int...)}): it never
     *       fits as asked, and waiting does not help.</li>
     * </ul>
     */
    REJECTED,
    /** The completion's token count differs from the expected count. */
    LENGTH_MISMATCH,
    /** A received page still holds the free-page canary: some KV was never written. */
    CANARY,
    /** A page's checksum differs from the sender's. */
    CHECKSUM_MISMATCH,
    /** A completion was inconsistent (wrong page range, checksum count, failed writes, missing checksums). */
    BAD_COMPLETION,
    /**
     * A sender aborted: a write or its flush failed ({@link IncomingTransfer#retryLater()} is then true), or it was
     * told to, or it could not send (a descriptor it refused, a source page gone, a checksum it could not compute).
     */
    SENDER_ABORTED,
    /**
     * The receiver's side aborted it ({@link TransferReceiver#abort}), could not register its pages on a link that is
     * up, or could not verify the pages it received (its own checksum or canary read failed); or, at the completion,
     * it found that the application had closed, truncated or appended to the sequence it handed to
     * {@link TransferReceiver#start(long, io.kvpool.Sequence, int, int...)}.
     */
    ABORTED,
    /** No completion (at the receiver) or no descriptor (at the sender) arrived by the deadline. */
    TIMEOUT,
    /**
     * A sender's link failed, was refused, or was not up (a retiring link takes no new transfer), or the sender closed
     * with the transfer under way: another link may serve.
     */
    PEER_LOST
}
