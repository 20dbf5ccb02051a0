package io.kvpool.transfer;

/**
 * Transfer-side safeguards that can be switched off, <b>only</b> so tests and the incident replay can show
 * each is what stops a leak or a corrupted read (the pool's own are {@link io.kvpool.Safeguard}). An engine
 * built with any of them off logs an error at startup and says so in its {@code toString()}. Each belongs to one side:
 * {@link #SOURCE_HOLD} and {@link #DRAINED_AFTER_WRITES_END} to the sender ({@link TransferSender.Builder#unsafeDisable}),
 * the others to the receiver ({@link TransferReceiver.Builder#unsafeDisable}).
 */
public enum TransferSafeguard {
    /**
     * Hold a failed transfer's pages DRAINING until every sender confirms its writes ended. Off: the pages
     * are freed at once, and writes still in flight land in the pages' next tenant.
     */
    DRAIN_WAIT,
    /**
     * When no drain confirmation arrives by the deadline (or the peer is lost), quarantine the pages until
     * the transport proves the peer can no longer write. Off: they are freed on the timer alone (the
     * early SGLang behaviour), and a frozen peer's late writes land in the next tenant's pages.
     */
    QUARANTINE_ON_TIMEOUT,
    /**
     * Commit only if the completion's token count equals the expected count. Off: a short transfer (a
     * one-token placeholder) commits, and decode reads pages nothing was written into.
     */
    LENGTH_CHECK,
    /**
     * Commit only if no received page still holds the free-page canary. Off: unwritten KV reaches decode. It runs on a
     * receiving pool filled with the canary ({@link io.kvpool.storage.FillMode#CANARY}, the default) only; on
     * another fill a sender's unwritten (canary-filled) KV is not caught at decode, and the receiver says so at build.
     */
    CANARY_CHECK,
    /** Commit only if every page's position-keyed checksum matches the sender's. Off: corrupted or misplaced KV reaches decode. */
    CHECKSUM,
    /**
     * The sender holds a reference on each source page until every write reading it is terminal. Off: it releases them
     * once its last batch is posted, and a page the application frees and reuses meanwhile sends its next tenant's KV
     * (a transport may read a source until its write completes). A sender's safeguard.
     */
    SOURCE_HOLD,
    /**
     * The sender sends DRAINED only once every write the failed transfer posted is terminal and a flush proved the
     * ones that completed OK delivered, and counts only those as proven. Off: it sends DRAINED as soon as the transfer
     * fails, reporting every write not yet known to have failed as proven (a failed send acknowledged drained early), so
     * the receiver frees pages that writes still in flight land in later, in their next tenant's KV. The source pages
     * are still held until every write ended ({@link #SOURCE_HOLD}), so what lands late is this transfer's KV. For
     * tests only, like every constant here. A sender's safeguard.
     */
    DRAINED_AFTER_WRITES_END;

    /** {@return whether this is a sender's safeguard (switched off on its builder), not the receiver's} */
    public boolean isSenderSide() {
        return this == SOURCE_HOLD || this == DRAINED_AFTER_WRITES_END;
    }
}
