package io.kvpool.transfer;

/**
 * What let a {@link TransferReceiver} free a failed transfer's pages, for one sender rank: the proof that the rank
 * can write nothing more into them. A failed transfer's pages are freed only when every rank has one; until then they
 * are DRAINING or QUARANTINED. Read per transfer with {@link IncomingTransfer#writeProof(int)}, counted over every
 * freed transfer by {@link ReceiverMetrics#releasedRanks(WriteProof)}. A transport's proof is what its
 * {@link io.kvpool.transfer.spi.PeerLink#tearDown()} and {@link io.kvpool.transfer.spi.Registration#revoke()} report:
 * the receiver records it, it cannot check it.
 */
public enum WriteProof {
    /**
     * The sender proved it: its completion, or a DRAINED acknowledgement, said every write it posted was delivered
     * and is over (a flush confirmed them).
     */
    SENDER,
    /**
     * The rank's registration of the pages was revoked: the transport refuses any write to them from now on. Also the
     * proof for a rank whose registration was never made (its register failed, or the start ended at a lower rank):
     * no descriptor went to it, so it holds no key to the pages.
     */
    REVOKED,
    /**
     * The receiver tore the sender's link down, and the transport proved the teardown: nothing the peer sends on it
     * any more is applied. For UCX the link's worker is destroyed; for shared memory the peer process is gone, and its
     * mapping of the pool with it; for CUDA IPC (kvpool-cuda) the importing process is gone, or the link never exported
     * its memory; on the simulated network, at once.
     */
    LINK_TORN_DOWN,
    /**
     * No proof: the pages were freed while the rank's writes could still land. The receiver does so only with
     * {@link TransferSafeguard#DRAIN_WAIT} or {@link TransferSafeguard#QUARANTINE_ON_TIMEOUT} switched off.
     */
    NONE
}
