package io.kvpool.transfer.sim;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.Registration;

import java.nio.ByteBuffer;

/** Pages a {@link SimLink} end exposed to its peer. */
final class SimRegistration implements Registration {
    final long id;
    final SimLink owner;
    final PageStorage storage;
    final int[] slots;
    final boolean revocable;
    boolean revoked;
    /** When a write into it was last posted ({@link SimNetwork#now()}), or {@link Long#MIN_VALUE}. */
    long lastPostedAt = Long.MIN_VALUE;

    SimRegistration(long id, SimLink owner, PageStorage storage, int[] slots, boolean revocable) {
        this.id = id;
        this.owner = owner;
        this.storage = storage;
        this.slots = slots;
        this.revocable = revocable;
    }

    @Override
    public byte[] key() {
        return ByteBuffer.allocate(8).putLong(id).array();
    }

    @Override
    public boolean revoke() {
        if (revocable) {
            revoked = true;
        }
        return revoked;
    }

    @Override
    public void close() {
        // like a memory-window invalidation on a revocable link; on a non-revocable one writes still land
        revoke();
    }
}
