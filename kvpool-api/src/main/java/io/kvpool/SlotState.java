package io.kvpool;

/** The state of one page slot. See {@link SlotStateMachine} for the transitions between them. */
public enum SlotState {
    /** Not owned by anyone; on the free list or, if it still holds a published prefix, in the cache's LRU. */
    FREE,
    /** Owned by one or more references (sequences, forks, prefix attachments); refcount ≥ 1. */
    OWNED,
    /** Target of in-flight remote writes: a writer pin keeps it out of FREE whatever its refcount. */
    RECEIVING,
    /** The transfer into it failed or was aborted; waiting for the sender to confirm its writes are over. */
    DRAINING,
    /** The drain was not confirmed in time; held until the transport proves the peer can no longer write. */
    QUARANTINED,
    /** The slot's generation is exhausted; out of service for the life of the pool. */
    RETIRED
}
