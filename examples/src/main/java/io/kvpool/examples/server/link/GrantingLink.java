package io.kvpool.examples.server.link;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;

import java.nio.ByteBuffer;
import java.util.Objects;

/**
 * The decode side's end of a link: the transport's link, whose registrations carry a {@link LocalGrants}
 * grant when the sender lives in this JVM, so that {@link Registration#revoke()} can prove that no write
 * lands any more (see {@link LocalGrants}). Without grants it passes everything through unchanged.
 * Not thread-safe, like every {@link PeerLink}.
 */
public final class GrantingLink implements PeerLink {

    private final PeerLink delegate;
    private final LocalGrants grants;
    private final LinkRelay relay = new LinkRelay(this, (token, status) -> status);

    /** @param grants the grants shared with the sender's links, or {@code null} when the sender is another process */
    public GrantingLink(PeerLink delegate, LocalGrants grants) {
        this.delegate = Objects.requireNonNull(delegate, "delegate");
        this.grants = grants;
    }

    @Override
    public Registration register(PageStorage storage, int[] slots) {
        final Registration reg = delegate.register(storage, slots);
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
    public int poll(LinkListener listener, int limit) {
        return delegate.poll(relay.to(listener), limit);
    }

    @Override
    public String describe() {
        return delegate.describe() + (grants == null ? "" : "+grants");
    }

    @Override
    public boolean isUp() {
        return delegate.isUp();
    }

    @Override
    public void send(byte[] frame) {
        delegate.send(frame);
    }

    @Override
    public void send(ByteBuffer frame) {
        delegate.send(frame);
    }

    @Override
    public boolean tearDown() {
        return delegate.tearDown();
    }

    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        return delegate.attach(regionKey, pages);
    }

    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        delegate.putBatch(region, dst, source, src, off, count, firstToken);
    }

    @Override
    public void flush(long token) {
        delegate.flush(token);
    }

    @Override
    public void cancelWrites() {
        delegate.cancelWrites();
    }

    @Override
    public void close() {
        delegate.close();
    }
}
