package io.kvpool.examples.server.link;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.ForwardingPeerLink;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;

import java.nio.ByteBuffer;

/**
 * The decode side's end of a link: the transport's link, whose registrations carry a {@link LocalGrants}
 * grant when the sender lives in this JVM, so that {@link Registration#revoke()} can prove that no write
 * lands any more (see {@link LocalGrants}). Without grants it passes everything through unchanged.
 * Not thread-safe, like every {@link PeerLink}.
 */
public final class GrantingLink extends ForwardingPeerLink {

    private final LocalGrants grants;

    /** @param grants the grants shared with the sender's links, or {@code null} when the sender is another process */
    public GrantingLink(PeerLink delegate, LocalGrants grants) {
        super(delegate);
        this.grants = grants;
    }

    @Override
    public Registration register(PageStorage storage, int[] slots) {
        final Registration reg = super.register(storage, slots);
        if (grants == null) {
            return reg;
        }
        final LocalGrants.Grant g = grants.issue();
        final byte[] key = LocalGrants.wrap(g.id, reg.key());
        return new Registration() {
            @Override
            public byte[] key() {
                return key.clone();
            }

            @Override
            public boolean revoke() {
                g.revoke();
                return true; // proven: every write of the sender's link runs under the grant's lock
            }

            @Override
            public void close() {
                grants.end(g);
                reg.close();
            }
        };
    }

    @Override
    public String describe() {
        return delegate().describe() + (grants == null ? "" : "+grants");
    }

    /** Frames pass down as they came: this link does not look at them, so it spares the copy into an array. */
    @Override
    public void send(ByteBuffer frame) {
        delegate().send(frame);
    }
}
