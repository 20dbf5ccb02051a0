package io.kvpool.jmh;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.RemoteRegion;

import java.nio.ByteBuffer;

/**
 * The raw-transport baseline the transfer benchmarks share: a batch of page writes through a link, then a
 * flush, polled until the flush is reported — no protocol. Any write that does not end OK, a failed flush,
 * a control frame or a link failure throws.
 */
final class RawFlush implements LinkListener {
    private boolean flushed;
    private long token;

    /** Posts {@code count} writes {@code region[dst[i]] ← source[src[i]]}, flushes, and waits for the flush. */
    void putBatchAndFlush(PeerLink link, RemoteRegion region, int[] dst, PageStorage source, int[] src, int count) {
        flushed = false;
        link.putBatch(region, dst, source, src, 0, count, token);
        token += count;
        link.flush(token++);
        while (!flushed) {
            link.poll(this, 256);
        }
    }

    @Override
    public void onFrame(PeerLink link, ByteBuffer frame) {
        throw new IllegalStateException("no frame expected on the raw path");
    }

    @Override
    public void onWriteDone(PeerLink link, long token, int status) {
        if (status != PeerLink.OK) {
            throw new IllegalStateException("write " + token + " ended " + status);
        }
    }

    @Override
    public void onFlushDone(PeerLink link, long token, boolean ok) {
        if (!ok) {
            throw new IllegalStateException("flush " + token + " did not prove delivery");
        }
        flushed = true;
    }

    @Override
    public void onLinkFailed(PeerLink link, String reason) {
        throw new IllegalStateException(reason);
    }
}
