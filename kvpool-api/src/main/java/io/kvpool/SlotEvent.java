package io.kvpool;

/**
 * The operations that change a page slot's state; {@link IllegalSlotTransitionException#event()} names the
 * one that was refused. The pool applies them itself: an application calls {@link KvPool#retain},
 * {@link KvPool#release} and {@link Sequence}'s methods, a transport the writer-pin operations of
 * {@link KvPool#handles()}. Which event each state allows is drawn in the slot state machine's table
 * (see {@link SlotState}).
 */
public enum SlotEvent {
    /** Take a FREE slot into service (allocation, or revival of a cached page). Needs no handle. */
    ALLOCATE,
    /** Add a reference (fork, prefix attachment). */
    RETAIN,
    /** Drop a reference. */
    RELEASE,
    /** Pin the page as the target of remote writes. */
    PIN_WRITER,
    /** The transfer into the page completed and was verified: drop the writer pin. */
    COMMIT_RECEIVE,
    /** The transfer failed or was aborted: wait for the sender's drain confirmation. */
    BEGIN_DRAIN,
    /** The sender confirmed every write it posted reached a terminal state: drop the writer pin. */
    DRAINED,
    /** No confirmation arrived (or the peer was lost): hold the page until the peer provably cannot write. */
    QUARANTINE,
    /** The transport proved the peer can no longer write (endpoint torn down, registration revoked). */
    RELEASE_QUARANTINE
}
