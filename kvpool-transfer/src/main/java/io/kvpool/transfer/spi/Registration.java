package io.kvpool.transfer.spi;

/** Pages a receiver exposed to one peer for one transfer ({@link PeerLink#register}). */
public interface Registration extends AutoCloseable {

    /**
     * {@return transport-specific bytes that let the peer address the pages (goes into the descriptor)} The array may
     * be the registration's own rather than a copy per call (a key is made once per transfer and read once): callers
     * read it and do not modify it.
     */
    byte[] key();

    /**
     * Tries to revoke the peer's access to these pages.
     *
     * @return whether the transport proves that no write through this registration can land any more
     *         (RDMA memory-window invalidation can; tcp/shared-memory emulation cannot, see docs/dependencies.md, "UCX from Java")
     */
    boolean revoke();

    /** Ends the registration after a completed transfer (every write was flushed). Idempotent. */
    @Override
    void close();
}
