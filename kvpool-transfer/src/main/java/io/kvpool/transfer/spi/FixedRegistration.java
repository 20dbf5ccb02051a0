package io.kvpool.transfer.spi;

/**
 * A {@link Registration} whose pages can never be revoked and that holds nothing to release: only its key.
 * Fits transports where the peer maps a whole arena once (a shared pool file, a CUDA IPC handle), so that
 * one transfer's registration is just the bytes that name its pages, and only the link's
 * {@link PeerLink#tearDown()} can prove that the peer's access ended.
 * <p>
 * Immutable and thread-safe; {@link #key()} returns a copy.
 */
public final class FixedRegistration implements Registration {
    private final byte[] key;

    private FixedRegistration(byte[] key) {
        this.key = key.clone();
    }

    /**
     * Wraps a transport's key in a registration that holds nothing else.
     *
     * @param key the transport's bytes that let the peer address the pages (copied)
     * @return a registration that {@link #revoke() cannot be revoked} and releases nothing on {@link #close()}
     * @throws NullPointerException if {@code key} is null
     */
    public static FixedRegistration of(byte[] key) {
        return new FixedRegistration(key);
    }

    /** @return a copy of the key */
    @Override
    public byte[] key() {
        return key.clone();
    }

    /** @return {@code false}, always: the peer's mapping cannot be taken back (only {@link PeerLink#tearDown()} proves an end) */
    @Override
    public boolean revoke() {
        return false;
    }

    /** Does nothing: the mapping is the whole arena, owned by the storage, not by this registration. Idempotent. */
    @Override
    public void close() {
    }

    @Override
    public String toString() {
        return "FixedRegistration[" + key.length + " key bytes]";
    }
}
