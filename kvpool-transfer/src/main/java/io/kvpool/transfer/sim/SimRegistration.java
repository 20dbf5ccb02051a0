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
