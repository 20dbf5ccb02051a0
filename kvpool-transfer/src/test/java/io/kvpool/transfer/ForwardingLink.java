package io.kvpool.transfer;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;

import java.nio.ByteBuffer;

/**
 * A link that hands every call to another and reports the other's events as its own; a test overrides what it
 * watches or changes (frames sent, frames and failures arriving, whether it is up).
 */
class ForwardingLink implements PeerLink {
    final PeerLink in;

    ForwardingLink(PeerLink in) {
        this.in = in;
    }

    /** A frame arrived on the link underneath; the default passes it on. */
    void frameArrived(LinkListener listener, ByteBuffer frame) {
        listener.onFrame(this, frame);
    }

    /** The link underneath failed; the default passes it on. */
    void linkFailed(LinkListener listener, String reason) {
        listener.onLinkFailed(this, reason);
    }

    @Override
    public int poll(LinkListener l, int limit) {
        return in.poll(new LinkListener() {
            @Override public void onFrame(PeerLink link, ByteBuffer frame) { frameArrived(l, frame); }
            @Override public void onWriteDone(PeerLink link, long token, int status) { l.onWriteDone(ForwardingLink.this, token, status); }
            @Override public void onFlushDone(PeerLink link, long token, boolean ok) { l.onFlushDone(ForwardingLink.this, token, ok); }
            @Override public void onLinkFailed(PeerLink link, String reason) { linkFailed(l, reason); }
        }, limit);
    }

    @Override public void send(byte[] frame) { in.send(frame); }
    @Override public String describe() { return in.describe(); }
    @Override public boolean isUp() { return in.isUp(); }
    @Override public Registration register(PageStorage s, int[] slots) { return in.register(s, slots); }
    @Override public boolean tearDown() { return in.tearDown(); }
    @Override public RemoteRegion attach(byte[] key, int pages) { return in.attach(key, pages); }
    @Override public void putBatch(RemoteRegion r, int[] dst, PageStorage s, int[] src, int off, int n, long t) { in.putBatch(r, dst, s, src, off, n, t); }
    @Override public void flush(long token) { in.flush(token); }
    @Override public void cancelWrites() { in.cancelWrites(); }
    @Override public void close() { in.close(); }
}
