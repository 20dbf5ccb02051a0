package io.kvpool.transfer.spi;

/**
 * A {@link Registration} whose pages can never be revoked and that holds nothing to release: only its key.
 * Fits transports where the peer maps a whole arena once (a shared pool file, a CUDA IPC handle), so that
 * one transfer's registration is just the bytes that name its pages, and only the link's
 * {@link PeerLink#tearDown()} can prove that the peer's access ended.
 * <p>
 * Thread-safe. One made by {@link #of} is immutable: it copies its key in and {@link #key()} hands out copies. One
 * made by {@link #taking} keeps the caller's array and hands out that array itself, as {@link Registration#key()}
 * allows: for a transport that makes a fresh key per registration and never reads it again.
 */
public final class FixedRegistration implements Registration {
    private final byte[] key;
    private final boolean handsOutOwn;

    private FixedRegistration(byte[] key, boolean handsOutOwn) {
        this.key = key;
        this.handsOutOwn = handsOutOwn;
    }

    /**
     * Wraps a transport's key in a registration that holds nothing else.
     *
     * @param key the transport's bytes that let the peer address the pages (copied)
     * @return a registration that {@link #revoke() cannot be revoked} and releases nothing on {@link #close()}
     * @throws NullPointerException if {@code key} is null
     */
    public static FixedRegistration of(byte[] key) {
        return new FixedRegistration(key.clone(), false);
    }

    /**
     * Wraps a key the caller made for this registration alone, without copying it: the caller gives the array up, and
     * {@link #key()} returns the array itself (read it, do not modify it).
     *
     * @param key the transport's bytes that let the peer address the pages (kept, not copied)
     * @return a registration that {@link #revoke() cannot be revoked} and releases nothing on {@link #close()}
     * @throws NullPointerException if {@code key} is null
     */
    public static FixedRegistration taking(byte[] key) {
        return new FixedRegistration(java.util.Objects.requireNonNull(key, "key"), true);
    }

    /** @return a copy of the key, or the key itself for a registration made by {@link #taking} */
    @Override
    public byte[] key() {
        return handsOutOwn ? key : key.clone();
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
