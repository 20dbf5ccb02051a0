package io.kvpool.transfer;

/** Why a transfer did not commit. Each failure also carries a message with the numbers. */
public enum FailureReason {
    /** Admission refused the request before any page was allocated (see {@link io.kvpool.Admission.Decision}). */
    REJECTED,
    /** The completion's token count differs from the expected count. */
    LENGTH_MISMATCH,
    /** A received page still holds the free-page canary: some KV was never written. */
    CANARY,
    /** A page's checksum differs from the sender's. */
    CHECKSUM_MISMATCH,
    /** A completion was inconsistent (wrong page range, checksum count, failed writes, missing checksums). */
    BAD_COMPLETION,
    /** A sender aborted (a write or flush failed, or it was told to). */
    SENDER_ABORTED,
    /** The receiver's side aborted it ({@link TransferReceiver#abort}). */
    ABORTED,
    /** No completion arrived by the deadline. */
    TIMEOUT,
    /** A sender's link failed or was refused. */
    PEER_LOST
}
