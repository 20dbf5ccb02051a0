package io.kvpool.examples.server.link;

import io.kvpool.transfer.spi.LinkFailedException;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Revocable registrations between a receiver and a sender that live in the <em>same</em> JVM.
 *
 * <p>Why: the shared-memory transport cannot revoke a registration (the sender maps the whole pool file)
 * and proves a teardown only once the peer process is gone — never when the peer is this very process.
 * So with both roles in one JVM a quarantined page could never be released. Here both ends are ours: the
 * sender's link ({@link FaultyLink}) runs every copy into the receiver's pages inside
 * {@link Grant#write}, under the grant's lock, after checking it is live; {@link Grant#revoke()} takes the
 * same lock. Once {@code revoke()} returned, no write through that registration is running or can start:
 * a real proof in this JVM, and only here (a sender in another process has no such check, so a
 * {@link GrantingLink} built without grants revokes nothing).
 *
 * <pre>
 *   region key on the wire:  grant id (int64 LE) ‖ the transport's own key
 * </pre>
 * Thread-safe.
 */
public final class LocalGrants {

    private final ConcurrentHashMap<Long, Grant> live = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();

    /** One registration's permission to write. */
    static final class Grant {
        final long id;
        private boolean revoked; // guarded by this

        Grant(long id) {
            this.id = id;
        }

        /** Revokes it: when this returns, no write through it is running and none can start. */
        synchronized void revoke() {
            revoked = true;
        }

        synchronized boolean isRevoked() {
            return revoked;
        }

        /**
         * Runs a write into the registered pages if the grant is live, holding its lock throughout.
         *
         * @return whether it ran
         */
        synchronized boolean write(Runnable copy) {
            if (revoked) {
                return false;
            }
            copy.run();
            return true;
        }
    }

    /** @return a new live grant */
    Grant issue() {
        final Grant g = new Grant(ids.incrementAndGet());
        live.put(g.id, g);
        return g;
    }

    /** Revokes a grant and forgets it (a registration that ended). */
    void end(Grant g) {
        g.revoke();
        live.remove(g.id);
    }

    /**
     * @return the live grant a wrapped region key names
     * @throws LinkFailedException if the key is malformed or its grant was revoked or ended
     */
    Grant find(byte[] wrappedKey) {
        final long id = idOf(wrappedKey);
        final Grant g = live.get(id);
        if (g == null || g.isRevoked()) {
            throw new LinkFailedException("registration " + id + " was revoked or has ended: no write may use it");
        }
        return g;
    }

    /** @return {@code grant id ‖ key} */
    static byte[] wrap(long grantId, byte[] key) {
        final byte[] out = new byte[8 + key.length];
        ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN).putLong(0, grantId);
        System.arraycopy(key, 0, out, 8, key.length);
        return out;
    }

    /** @return the transport's own key inside a wrapped key */
    static byte[] inner(byte[] wrappedKey) {
        idOf(wrappedKey);
        return Arrays.copyOfRange(wrappedKey, 8, wrappedKey.length);
    }

    private static long idOf(byte[] wrappedKey) {
        if (wrappedKey.length < 8) {
            throw new LinkFailedException("region key of " + wrappedKey.length + " bytes carries no grant id (8 bytes)");
        }
        return ByteBuffer.wrap(wrappedKey).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
    }
}
