package io.kvpool.transfer.spi;

import io.kvpool.storage.PageStorage;

import java.nio.ByteBuffer;
import java.util.Objects;

/**
 * A {@link PeerLink} that hands every call to another link and reports that link's events as its own. A subclass
 * overrides what it watches or changes: a call on the way down (a {@link PeerLink} method, calling {@code super} to pass
 * it on), or an event on the way up (one of the {@code *Arrived}/{@code *Done}/{@link #linkFailed} hooks, whose
 * defaults pass it on). Wrappers that count, delay, fail or gate a transport are written this way.
 *
 * <p>An engine knows its peers by link identity, so every event it gets names this link, never the one underneath;
 * a run of write completions stays one run ({@link LinkListener#onWritesDone}) unless {@link #writesDone} is
 * overridden. Every frame goes down through {@link #send(byte[])}: a frame sent as a buffer is copied into an array
 * for it (PeerLink's default), so a subclass that watches or changes frames overrides that one method. One that leaves
 * frames alone may override {@link #send(ByteBuffer)} to pass buffers down without the copy.
 *
 * <p>Threads: as every {@link PeerLink}, one owner thread calls every method; the hooks run inside {@link #poll}.
 */
public abstract class ForwardingPeerLink implements PeerLink {

    private final PeerLink delegate;
    private final Relay relay = new Relay();

    /**
     * Wraps a link.
     *
     * @param delegate the link every call goes to
     * @throws NullPointerException if {@code delegate} is null
     */
    protected ForwardingPeerLink(PeerLink delegate) {
        this.delegate = Objects.requireNonNull(delegate, "delegate");
    }

    /** {@return the link every call goes to} */
    protected final PeerLink delegate() {
        return delegate;
    }

    /**
     * A frame arrived on the link underneath; the default passes it on as this link's.
     *
     * @param listener the listener of the {@link #poll} under way
     * @param frame    the frame, as {@link LinkListener#onFrame} describes it
     */
    protected void frameArrived(LinkListener listener, ByteBuffer frame) {
        listener.onFrame(this, frame);
    }

    /**
     * A write ended on the link underneath; the default passes it on as this link's.
     *
     * @param listener the listener of the {@link #poll} under way
     * @param token    the write's token
     * @param status   its terminal state, as {@link LinkListener#onWriteDone} describes it
     */
    protected void writeDone(LinkListener listener, long token, int status) {
        listener.onWriteDone(this, token, status);
    }

    /**
     * A run of writes ended on the link underneath; the default passes it on as one run of this link's. Override it
     * (calling {@link #writeDone} for each) to see or change writes one by one.
     *
     * @param listener   the listener of the {@link #poll} under way
     * @param firstToken the first write's token
     * @param count      how many writes, ≥ 1
     * @param status     their terminal state, as {@link LinkListener#onWritesDone} describes it
     */
    protected void writesDone(LinkListener listener, long firstToken, int count, int status) {
        listener.onWritesDone(this, firstToken, count, status);
    }

    /**
     * A flush ended on the link underneath; the default passes it on as this link's.
     *
     * @param listener the listener of the {@link #poll} under way
     * @param token    the flush's token
     * @param ok       whether delivery is proven, as {@link LinkListener#onFlushDone} describes it
     */
    protected void flushDone(LinkListener listener, long token, boolean ok) {
        listener.onFlushDone(this, token, ok);
    }

    /**
     * The link underneath failed; the default passes it on as this link's failure.
     *
     * @param listener the listener of the {@link #poll} under way
     * @param reason   why, for logs
     */
    protected void linkFailed(LinkListener listener, String reason) {
        listener.onLinkFailed(this, reason);
    }

    /** Polls the link underneath; its events reach {@code listener} through the hooks above. */
    @Override
    public int poll(LinkListener listener, int limit) {
        final LinkListener outer = relay.target; // a hook may poll again: give the outer poll its listener back
        relay.target = Objects.requireNonNull(listener, "listener");
        try {
            return delegate.poll(relay, limit);
        } finally {
            relay.target = outer;
        }
    }

    @Override
    public String describe() {
        return delegate.describe();
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
    public Registration register(PageStorage storage, int[] slots) {
        return delegate.register(storage, slots);
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

    /** The listener handed to the link underneath: each event goes to its hook. */
    private final class Relay implements LinkListener {
        LinkListener target;

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            frameArrived(target, frame);
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            writeDone(target, token, status);
        }

        @Override
        public void onWritesDone(PeerLink link, long firstToken, int count, int status) {
            writesDone(target, firstToken, count, status);
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            flushDone(target, token, ok);
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            linkFailed(target, reason);
        }
    }
}
