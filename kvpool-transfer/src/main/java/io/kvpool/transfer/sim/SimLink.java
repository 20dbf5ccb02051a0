package io.kvpool.transfer.sim;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;

import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** One end of a {@link SimNetwork} link. */
public final class SimLink implements PeerLink {

    private final SimNetwork net;
    private final String name;
    private final boolean revocable;
    SimLink peer;
    private final ArrayDeque<Object> ready = new ArrayDeque<>();
    private final Map<Long, PendingWrite> pending = new LinkedHashMap<>();
    private long writeSeq;
    private long lastFrameAt;
    private boolean up = true;
    boolean crashed;
    boolean tornDown;
    private boolean closed;
    private boolean failureQueued;
    private Window window = new Window();
    private long windowLastLanding;
    private final List<Straggler> stragglers = new ArrayList<>();
    private long lateLandings;

    /**
     * A write that landed very late ({@link SimFaults#stragglerWrite()}): every flush on its end issued before it lands
     * answers only after it, as an endpoint flush waits for every earlier put.
     *
     * @param postedAt when it was posted ({@link SimNetwork#now()})
     * @param landAt   when it lands and completes
     * @param slots    the destination slots of the region it was written into (shared, do not modify)
     */
    public record Straggler(long postedAt, long landAt, int[] slots) {
    }

    private record FrameEvent(byte[] frame) {
    }

    private record WriteEvent(long token, int status) {
    }

    private record FlushEvent(long token, boolean ok) {
    }

    private record FailEvent(String reason) {
    }

    /** A posted write: read once (at its read time, or when cancelled first), then reported once. */
    private static final class PendingWrite {
        final long token;
        int status;
        boolean done;
        Runnable read; // null once the source was read

        PendingWrite(long token, int status) {
            this.token = token;
            this.status = status;
        }

        void readNow() {
            final Runnable r = read;
            read = null;
            if (r != null) {
                r.run();
            }
        }
    }

    /** The writes posted since the last flush: whether any failed, known by the time the flush answers. */
    private static final class Window {
        boolean failed;
    }

    /** A region attached on {@code link}: only that link may write into it, as on the real transports. */
    private record Remote(SimLink link, SimRegistration reg) implements RemoteRegion {
        @Override
        public int pages() {
            return reg.slots.length;
        }
    }

    SimLink(SimNetwork net, String name, boolean revocable) {
        this.net = net;
        this.name = name;
        this.revocable = revocable;
    }

    @Override
    public String describe() {
        return "sim:" + name;
    }

    @Override
    public boolean isUp() {
        return up;
    }

    /** {@return writes posted here whose terminal state has not been reported yet} */
    public int pendingWrites() {
        return pending.size();
    }

    private void requireUp() {
        if (!up) {
            throw new LinkFailedException(describe() + " is down");
        }
    }

    @Override
    public void send(byte[] frame) {
        requireUp();
        final SimFaults f = net.faults();
        if (f.frameLoss() > 0 && net.random().nextDouble() < f.frameLoss()) {
            return;
        }
        final int copies = f.frameDuplicate() > 0 && net.random().nextDouble() < f.frameDuplicate() ? 2 : 1;
        final byte[] copy = frame.clone();
        for (int i = 0; i < copies; i++) {
            lastFrameAt = Math.max(lastFrameAt, net.now() + net.delay(f.maxFrameDelayNanos())); // in order, like a stream
            final SimLink to = peer;
            net.schedule(lastFrameAt, () -> {
                if (!to.closed && !to.crashed) {
                    to.ready.add(new FrameEvent(copy));
                }
            });
        }
    }

    @Override
    public int poll(LinkListener listener, int limit) {
        int n = 0;
        while (n < limit && !ready.isEmpty()) {
            final Object e = ready.poll();
            n++;
            switch (e) {
                case FrameEvent fe -> listener.onFrame(this, ByteBuffer.wrap(fe.frame()));
                case WriteEvent we -> listener.onWriteDone(this, we.token(), we.status());
                case FlushEvent fl -> listener.onFlushDone(this, fl.token(), fl.ok());
                case FailEvent fa -> listener.onLinkFailed(this, fa.reason());
                default -> throw new AssertionError(e);
            }
        }
        return n;
    }

    @Override
    public Registration register(PageStorage storage, int[] slots) {
        requireUp();
        return net.register(this, storage, slots, revocable);
    }

    @Override
    public boolean tearDown() {
        tornDown = true;
        close();
        return true;
    }

    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        requireUp();
        if (regionKey.length != 8) {
            throw new LinkFailedException(describe() + ": region key of " + regionKey.length + " bytes, expected 8");
        }
        final SimRegistration reg = net.registration(ByteBuffer.wrap(regionKey).getLong());
        if (reg == null || reg.owner != peer) {
            throw new LinkFailedException(describe() + ": region key names no registration of this link's peer");
        }
        if (reg.slots.length != pages) {
            throw new LinkFailedException(describe() + ": the registration has " + reg.slots.length + " pages, asked for " + pages);
        }
        return new Remote(this, reg);
    }

    /**
     * {@return the writes posted on this end that straggled, oldest first} A test reads them to tell a transfer that
     * failed because a frozen write held its link's flushes past its deadline from one its link's handling failed.
     */
    public List<Straggler> stragglers() {
        return Collections.unmodifiableList(stragglers);
    }

    /** {@return the writes posted on this end that complete on time and land late ({@link SimFaults#lateLanding()})} */
    public long lateLandings() {
        return lateLandings;
    }

    /**
     * {@return when a write into {@code registration} was last posted ({@link SimNetwork#now()}), or
     * {@link Long#MIN_VALUE} if none was, or if it is not a simulated link's registration} A flush of its writes comes
     * after that, and so after every straggler posted before it ({@link #stragglers()}).
     *
     * @param registration a registration of a simulated link
     */
    public static long lastWritePostedAt(Registration registration) {
        return registration instanceof SimRegistration r ? r.lastPostedAt : Long.MIN_VALUE;
    }

    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        requireUp();
        if (!(region instanceof Remote remote) || remote.link != this) {
            throw new IllegalArgumentException("region " + region + " was not attached on " + describe());
        }
        final SimRegistration reg = remote.reg;
        final SimFaults f = net.faults();
        if (!source.isHostAccessible()) {
            throw new IllegalArgumentException(describe() + " copies host memory; " + source + " is not");
        }
        for (int i = 0; i < count; i++) { // refuse a bad batch before posting any of it
            if (dst[off + i] < 0 || dst[off + i] >= reg.slots.length) {
                throw new IndexOutOfBoundsException("destination page " + dst[off + i] + " of a " + reg.slots.length + "-page region");
            }
            if (src[off + i] < 0 || src[off + i] >= source.pageCount()) {
                throw new IndexOutOfBoundsException("source page " + src[off + i] + " of " + source.pageCount());
            }
        }
        final int pageBytes = (int) source.layout().bytesPerPage();
        if (count > 0) {
            reg.lastPostedAt = net.now();
        }
        for (int i = 0; i < count; i++) {
            final int dstIndex = dst[off + i];
            final int srcSlot = src[off + i];
            final long token = firstToken + i;
            final double r = net.random().nextDouble();
            double edge = 0;
            final boolean fail = r < (edge += f.writeFail());
            final boolean lost = !fail && r < (edge += f.lostWrite());
            final boolean misdirect = !fail && !lost && r < (edge += f.misdirectedWrite());
            final boolean corrupt = !fail && !lost && !misdirect && r < (edge += f.corruptedWrite());
            final boolean straggle = net.random().nextDouble() < f.stragglerWrite();
            // no draw while lateLanding is 0: the other faults' draws, so a seed's run, are then a network's without this fault
            final boolean late = !straggle && f.lateLanding() > 0 && net.random().nextDouble() < f.lateLanding();
            final long landAt;
            final long doneAt;
            if (straggle) {
                landAt = net.now() + f.stragglerMinNanos() + net.delay(f.stragglerMaxNanos() - f.stragglerMinNanos());
                doneAt = landAt;
                stragglers.add(new Straggler(net.now(), landAt, reg.slots));
            } else if (late) {
                landAt = net.now() + f.lateLandingMinNanos() + net.delay(f.lateLandingMaxNanos() - f.lateLandingMinNanos());
                doneAt = net.now() + net.writeDelay(); // reported ended on time; a flush still waits for landAt
                lateLandings++;
            } else {
                landAt = net.now() + net.writeDelay();
                doneAt = net.now() + net.writeDelay(); // completion is not delivery: either may come first
            }
            int target = dstIndex;
            int flipAt = -1;
            if (misdirect && reg.slots.length > 1) {
                target = (dstIndex + 1 + net.random().nextInt(reg.slots.length - 1)) % reg.slots.length;
            } else if (misdirect || corrupt) {
                flipAt = net.random().nextInt(pageBytes);
            }
            final boolean lands = !lost && (!fail || net.random().nextBoolean());
            final PendingWrite pw = new PendingWrite(token, fail ? FAILED : OK);
            final long id = writeSeq++;
            pending.put(id, pw);
            final Window w = window;
            w.failed |= fail;
            // The source is read at the last moment a transport may read it: before the write completes (a buffer
            // may be reused once its write completed or was cancelled) and before it lands. A sender that frees a
            // source page while its write is in flight sends whatever the page holds by then, as it would over UCX.
            final int t = target, flip = flipAt;
            pw.read = () -> read(reg, t, source, srcSlot, flip, lands ? landAt : -1, pw, w);
            net.schedule(Math.min(landAt, doneAt), pw::readNow);
            net.schedule(doneAt, () -> complete(id));
            windowLastLanding = Math.max(windowLastLanding, Math.max(landAt, doneAt));
        }
    }

    /**
     * A write's transport reads its source page now and, unless {@code landAt < 0}, delivers it at {@code landAt}. A
     * source that cannot be read (its pool closed) lands nothing, and the write ends FAILED.
     */
    private void read(SimRegistration reg, int target, PageStorage source, int srcSlot, int flipAt, long landAt,
                      PendingWrite pw, Window w) {
        final byte[] bytes;
        try {
            bytes = source.hostPage(srcSlot).toArray(ValueLayout.JAVA_BYTE);
        } catch (IllegalStateException closed) {
            pw.status = FAILED;
            w.failed = true;
            return;
        }
        if (flipAt >= 0) {
            bytes[flipAt] ^= (byte) 0x5A;
        }
        if (landAt >= 0) {
            net.schedule(Math.max(landAt, net.now()), () -> net.land(reg, target, bytes));
        }
    }

    private void complete(long id) {
        final PendingWrite pw = pending.remove(id);
        if (pw == null || pw.done) {
            return;
        }
        pw.done = true;
        if (!crashed) {
            ready.add(new WriteEvent(pw.token, pw.status));
        }
    }

    @Override
    public void flush(long token) {
        requireUp();
        final Window w = window; // its writes have all been read by the time the flush answers (at ≥ each read)
        final long at = Math.max(net.now(), windowLastLanding) + 1;
        window = new Window();
        net.schedule(at, () -> {
            if (!crashed) {
                ready.add(new FlushEvent(token, up && !w.failed)); // a closed link still answers: not proven
            }
        });
    }

    @Override
    public void cancelWrites() {
        // like UCX's closeNonBlockingForce: every pending request ends CANCELED, the endpoint goes down,
        // and bytes already on the wire may still land unless the receiver tears down its side
        cancelPending();
        if (up) {
            down("writes force-cancelled");
            if (!failureQueued) { // this end learns it from poll too, as from any other failure of the link
                failureQueued = true;
                ready.add(new FailEvent("writes force-cancelled: the link is closed"));
            }
            final SimLink other = peer;
            net.schedule(net.now() + net.delay(net.faults().maxFrameDelayNanos()), () -> other.failFromPeer("peer force-closed"));
        }
    }

    private void cancelPending() {
        for (PendingWrite pw : pending.values()) {
            if (!pw.done) {
                pw.readNow(); // bytes already on the wire: read before the cancellation ends the write
                pw.done = true;
                ready.add(new WriteEvent(pw.token, CANCELED));
            }
        }
        pending.clear();
    }

    void down(String reason) {
        up = false;
    }

    void failFromPeer(String reason) {
        if (crashed || closed) {
            return;
        }
        up = false;
        if (!failureQueued) {
            failureQueued = true;
            ready.add(new FailEvent(reason));
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        cancelPending();
        final boolean wasUp = up;
        up = false;
        closed = true;
        if (wasUp) {
            final SimLink other = peer;
            // a close follows the frames sent before it, as on a stream (a REFUSE and the HELLO before it arrive)
            net.schedule(Math.max(net.now() + net.delay(net.faults().maxFrameDelayNanos()), lastFrameAt),
                () -> other.failFromPeer("peer closed"));
        }
    }

    @Override
    public String toString() {
        return describe();
    }
}
