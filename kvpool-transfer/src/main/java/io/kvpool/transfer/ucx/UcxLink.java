package io.kvpool.transfer.ucx;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.spi.SlotChecks;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireFormat;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpRemoteKey;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpTagMessage;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucs.UcsConstants;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

/**
 * A {@link PeerLink} over one UCX endpoint, made by {@link UcxTransport#connect}.
 *
 * <ul>
 *   <li>Control frames travel as tagged messages on the endpoint, each frame one message (UCX keeps their
 *       order per endpoint and tag); one receive is posted at a time, into a buffer of the largest frame.</li>
 *   <li>{@link #register} exposes the whole storage (registered once per storage by the transport); the key
 *       carries the packed rkey, the base address, the page size and the slots, so a well-behaved sender
 *       only ever addresses the listed slots. UCX cannot restrict access to those slots (over tcp a put is
 *       applied in software at the address the message names, so a process that reaches a link worker's port is
 *       trusted with this process's memory, not only the storage: run UCX links on a network only the deployment
 *       reaches), and
 *       {@link Registration#revoke} returns {@code false}: deregistration does not revoke remote access on
 *       tcp/shm (docs/dependencies.md, "UCX from Java").</li>
 *   <li>{@link #putBatch} posts one {@code putNonBlocking} per page; its callback is the write's terminal
 *       state. {@link #flush} is {@code flushNonBlocking} on the endpoint, the only proof of delivery.</li>
 *   <li>{@link #cancelWrites} force-closes the endpoint ({@code closeNonBlockingForce}): every pending
 *       request ends (canceled), the control channel goes with it, the link goes down and
 *       {@link LinkListener#onLinkFailed} reports it.</li>
 *   <li>{@link #tearDown} force-closes this side's endpoint to the peer, waits until UCX reports it closed, and
 *       then destroys the link's own worker: only that closes the connections the peer's puts arrive on
 *       (closing the endpoint alone does not; see {@link UcxTransport}). It is proven once the worker is closed.
 *       {@link #close} and {@link #cancelWrites} only force-close the endpoint; the worker then stays until a
 *       {@code tearDown()}, the transport's close, or 5 s after the endpoint closed with no write, flush or remote
 *       key left, when the transport's thread destroys it (after which {@code tearDown()} is proven at once).</li>
 * </ul>
 * Events are queued by the transport's UCX thread and delivered only by {@link #poll} on the caller's thread.
 */
public final class UcxLink implements PeerLink {
    private static final System.Logger LOG = System.getLogger("io.kvpool.transfer.ucx");
    /** Owner thread: failed progress calls, and how many of them the log has told (see progressFailed). */
    private long progressFailures, progressFailuresLogged, lastProgressFailureLog;

    private static final int KEY_MAGIC = 0x4B584355; // "UCXK" little-endian
    private static final int KEY_FIXED_BYTES = 4 + 8 + 8 + 4 + 4 + 4;
    private static final int MAX_FRAME = WireFormat.HEADER_BYTES + WireFormat.MAX_BODY_BYTES;
    private static final long CLOSE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(5);

    private final UcxTransport transport;
    /** This link's own worker (UCX-thread only); {@code null} once closed. */
    private UcpWorker worker;
    private final String label;
    private final long recvTag;
    private final long sendTag;
    private final ConcurrentLinkedQueue<Event> events = new ConcurrentLinkedQueue<>();
    private volatile boolean up = true;
    /** Proven: the worker is closed, nothing from the peer can be applied any more. */
    private volatile boolean endpointClosed;
    /** {@link #tearDown} was asked: close the worker once the endpoint is closed (UCX thread reads it). */
    private volatile boolean fence;
    private volatile boolean closed;
    private volatile String downReason = "closed";

    // ---- UCX-thread state ----
    private UcpEndpoint ep;
    private UcpRequest closeRequest;
    private boolean failed;
    /** Whether a call of the transport's round into this link has thrown ({@link #failOnBug}). */
    private boolean bugSeen;
    /** The control receive's buffer (a direct MiB); dropped with the worker, so a closed link an engine keeps holds none. */
    private ByteBuffer recvBuffer = ByteBuffer.allocateDirect(MAX_FRAME);
    /** The receive of the control message last probed, while it runs (a large one completes in a later progress). */
    private UcpRequest recvRequest;
    private boolean receiving;
    /**
     * While {@link #progress} runs the worker: a failure UCX reports then (the endpoint's error, a control send's or
     * receive's) waits for the round's messages ({@link #endpointError}).
     */
    private boolean inWorkerProgress;
    /** The first failure reported inside the running round ({@link #failAfterRound}), failed once its messages were taken. */
    private String endpointError;
    /**
     * Unpacked remote keys by their packed bytes: one per remote memory registration, not one per attach (a
     * sender attaches once per transfer on a long-lived link; the registration, and so the rkey, is the same).
     */
    private final java.util.Map<ByteBuffer, UcpRemoteKey> remoteKeys = new java.util.HashMap<>();
    private boolean remoteKeysClosed;
    private long unpackedKeys;
    /** When the endpoint's close finished ({@link #finishClose}); the worker of a closed link goes after a grace. */
    private long closedAtNanos;
    private long outstandingWrites;
    /** UCX thread: puts posted and not yet reported, so a destroyed worker can still end each one. */
    private final java.util.Set<WriteCallback> inFlight = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
    private boolean tearDownStarted;
    private int pendingFlushes;
    /** Flushes posted and not answered yet: a worker destroyed under them answers them not ok. Transport thread. */
    private final java.util.Set<FlushCallback> flushesPending = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());

    /** One event; WRITES carries the write completions of one progress round (tokens[i] ended statuses[i]). */
    private record Event(int kind, long token, int status, byte[] frame, String reason, long[] tokens, int[] statuses) {
        static final int FRAME = 0, WRITES = 1, FLUSH = 2, FAILED = 3;
    }

    // ---- UCX-thread: write completions of the current progress round, published as one WRITES event ----
    private long[] doneTokens = new long[64];
    private int[] doneStatuses = new int[64];
    private int doneCount;
    /** Completed callbacks, reused for the next puts (UCX thread only). */
    private final java.util.ArrayDeque<WriteCallback> spareCallbacks = new java.util.ArrayDeque<>();

    // ---- link owner's thread: a WRITES event partly delivered (poll's limit) ----
    private Event partial;
    private int partialNext;

    /** UCX thread: queues an event after the write completions that came before it. */
    private void event(Event e) {
        publishWrites();
        events.add(e);
    }

    /** UCX thread: publishes the buffered write completions as one event (one queue node instead of one per write). */
    private void publishWrites() {
        if (doneCount > 0) {
            events.add(new Event(Event.WRITES, 0, 0, null, null, java.util.Arrays.copyOf(doneTokens, doneCount),
                java.util.Arrays.copyOf(doneStatuses, doneCount)));
            doneCount = 0;
        }
    }

    private void writeDone(long token, int status) {
        if (doneCount == doneTokens.length) {
            doneTokens = java.util.Arrays.copyOf(doneTokens, doneCount * 2);
            doneStatuses = java.util.Arrays.copyOf(doneStatuses, doneCount * 2);
        }
        doneTokens[doneCount] = token;
        doneStatuses[doneCount] = status;
        doneCount++;
    }

    UcxLink(UcxTransport transport, UcpWorker worker, String label, long recvTag, long sendTag) {
        this.transport = transport;
        this.worker = Objects.requireNonNull(worker, "worker");
        this.label = Objects.requireNonNull(label, "label");
        this.recvTag = recvTag;
        this.sendTag = sendTag;
    }

    /** Owner thread: creates the endpoint (failure detection on); control messages are taken by {@link #progress}. */
    void start(byte[] peerAddress) {
        final ByteBuffer addr = ByteBuffer.allocateDirect(peerAddress.length).put(peerAddress).flip();
        ep = worker.newEndpoint(new UcpEndpointParams()
            .setUcpAddress(addr)
            .setPeerErrorHandlingMode()
            .setName(label)
            .setErrorHandler((endpoint, status, message) -> {
                if (closeRequest != null) {
                    return;
                }
                failAfterRound("UCX endpoint error " + status + " (" + message + ")");
            }));
    }

    /**
     * UCX thread: fails the link, after the messages of the running progress round when it runs inside one. The peer's
     * last messages may have come in the same round as the failure: they wait in UCX's queue until this round's probe,
     * and the failure is queued after them ({@link #progress}), as the peer sent them first. Every failure UCX reports
     * from inside progress goes this way: the endpoint's error, and the error of a control send or receive that the
     * endpoint's failure ended (UCX ends those before it calls the error handler).
     */
    private void failAfterRound(String why) {
        if (inWorkerProgress) {
            up = false;
            if (endpointError == null) {
                endpointError = why;
            }
        } else {
            fail(why);
        }
    }

    // ---- PeerLink ----

    @Override
    public String describe() {
        return "ucx:" + label;
    }

    @Override
    public boolean isUp() {
        return up;
    }

    @Override
    public void send(byte[] frame) {
        ensureUp("send a frame");
        if (frame.length < WireFormat.HEADER_BYTES || frame.length > MAX_FRAME) {
            throw new IllegalArgumentException(describe() + ": frame of " + frame.length + " bytes, expected "
                + WireFormat.HEADER_BYTES + ".." + MAX_FRAME);
        }
        final int body = WireCodec.bodyLength(ByteBuffer.wrap(frame));
        if (body != frame.length - WireFormat.HEADER_BYTES) {
            throw new IllegalArgumentException(describe() + ": frame header declares a " + body + "-byte body, array carries "
                + (frame.length - WireFormat.HEADER_BYTES));
        }
        final ByteBuffer buf = ByteBuffer.allocateDirect(frame.length).put(frame).flip();
        transport.execute(() -> {
            if (endpointDead()) {
                return; // a frame may be lost only when the link failed (it has)
            }
            try {
                ep.sendTaggedNonBlocking(buf, sendTag, new UcxCallback() {
                    @Override
                    public void onSuccess(UcpRequest request) {
                        keep(buf);
                    }

                    @Override
                    public void onError(int status, String message) {
                        if (closeRequest == null) { // a send canceled by our own close is no failure of the link
                            failAfterRound("control frame of " + frame.length + " bytes not sent: UCX status " + status + " (" + message + ")");
                        }
                    }
                });
            } catch (RuntimeException e) {
                fail("control frame of " + frame.length + " bytes not sent: " + e.getMessage());
            }
        });
    }

    private static void keep(Object o) {
        // the buffer must stay reachable until UCX is done with it; the callback's capture does that
        Objects.requireNonNull(o);
    }

    @Override
    public int poll(LinkListener listener, int limit) {
        int n = 0;
        while (n < limit && partial != null) { // the rest of a WRITES event a previous poll's limit cut short
            final Event w = partial;
            final int i = partialNext++;
            if (partialNext == w.tokens.length) {
                partial = null;
            }
            listener.onWriteDone(this, w.tokens[i], w.statuses[i]);
            n++;
        }
        Event e;
        while (n < limit && (e = events.poll()) != null) {
            switch (e.kind) {
                case Event.FRAME -> listener.onFrame(this, ByteBuffer.wrap(e.frame).asReadOnlyBuffer());
                case Event.WRITES -> {
                    partial = e;
                    partialNext = 0;
                    while (n < limit && partial != null) {
                        final int i = partialNext++;
                        if (partialNext == e.tokens.length) {
                            partial = null;
                        }
                        listener.onWriteDone(this, e.tokens[i], e.statuses[i]);
                        n++;
                    }
                    continue; // counted per write
                }
                case Event.FLUSH -> listener.onFlushDone(this, e.token, e.status == OK);
                case Event.FAILED -> listener.onLinkFailed(this, e.reason);
                default -> throw new AssertionError(e.kind);
            }
            n++;
        }
        return n;
    }

    // ---- receiver side ----

    @Override
    public Registration register(PageStorage storage, int[] slots) {
        ensureUp("register");
        if (!storage.isHostAccessible()) {
            throw new IllegalArgumentException(describe() + ": UCX registers host memory only; " + storage.getClass().getSimpleName()
                + " is not host-accessible");
        }
        final int storagePages = storage.pageCount();
        if (KEY_FIXED_BYTES + 4L * slots.length > WireFormat.MAX_KEY_BYTES) { // checked again below, with the rkey's length
            throw new IllegalArgumentException(describe() + ": a key for " + slots.length + " slots needs more than the "
                + WireFormat.MAX_KEY_BYTES + " bytes the wire allows");
        }
        SlotChecks.requireDistinct(slots, storagePages, "registered twice");
        final int keyBytes;
        final byte[][] rkeyAndBase = transport.call(() -> {
            final UcpMemory m = transport.registration(storage);
            final ByteBuffer rk = m.getRemoteKeyBuffer();
            final byte[] b = new byte[rk.remaining()];
            rk.duplicate().get(b);
            return new byte[][] {b, ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(m.getAddress()).array()};
        });
        final byte[] rkey = rkeyAndBase[0];
        final long base = ByteBuffer.wrap(rkeyAndBase[1]).order(ByteOrder.LITTLE_ENDIAN).getLong();
        keyBytes = KEY_FIXED_BYTES + 4 * slots.length + rkey.length;
        if (keyBytes > WireFormat.MAX_KEY_BYTES) {
            throw new IllegalArgumentException(describe() + ": a key for " + slots.length + " slots and a " + rkey.length
                + "-byte rkey needs " + keyBytes + " bytes, the wire allows " + WireFormat.MAX_KEY_BYTES
                + " (at most " + (WireFormat.MAX_KEY_BYTES - KEY_FIXED_BYTES - rkey.length) / 4 + " slots per registration)");
        }
        final ByteBuffer k = ByteBuffer.allocate(keyBytes).order(ByteOrder.LITTLE_ENDIAN);
        k.putInt(KEY_MAGIC).putLong(base).putLong(storage.layout().bytesPerPage()).putInt(storagePages).putInt(slots.length);
        for (int s : slots) {
            k.putInt(s);
        }
        k.putInt(rkey.length).put(rkey);
        final byte[] key = k.array();
        return new Registration() {
            @Override
            public byte[] key() {
                return key.clone();
            }

            @Override
            public boolean revoke() {
                return false; // deregistration does not revoke remote access on tcp/shm (docs/dependencies.md, "UCX from Java"); tearDown does
            }

            @Override
            public void close() {
                // the storage stays registered (once per storage) until the transport closes
            }
        };
    }

    @Override
    public boolean tearDown() {
        up = false;
        fence = true;
        if (endpointClosed) {
            return true;
        }
        // the first call waits (bounded) for the close; later calls only look again, so a receiver that
        // retries every duty cycle is never stalled by a close that takes long
        final long wait = tearDownStarted ? 0 : CLOSE_WAIT_NANOS;
        tearDownStarted = true;
        if (transport.isOwnerThread()) {
            closeOnOwner(System.nanoTime() + wait);
        } else {
            try {
                transport.call(() -> {
                    closeOnOwner(System.nanoTime() + wait);
                    return null;
                });
            } catch (RuntimeException e) {
                return endpointClosed; // transport gone: its shutdown closed the endpoint (or will)
            }
        }
        return endpointClosed;
    }

    // ---- sender side ----

    private record UcxRegion(UcxLink link, UcpRemoteKey rkey, long base, long pageBytes, int[] slots) implements RemoteRegion {
        @Override
        public int pages() {
            return slots.length;
        }
    }

    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        ensureUp("attach");
        final ByteBuffer k = ByteBuffer.wrap(regionKey).order(ByteOrder.LITTLE_ENDIAN);
        final long base, pageBytes;
        final int[] slots;
        final byte[] rkey;
        try {
            final int magic = k.getInt();
            if (magic != KEY_MAGIC) {
                throw new LinkFailedException(describe() + ": region key has magic 0x" + Integer.toHexString(magic)
                    + ", expected 0x" + Integer.toHexString(KEY_MAGIC) + " (not a UCX key)");
            }
            base = k.getLong();
            pageBytes = k.getLong();
            final int storagePages = k.getInt();
            final int n = k.getInt();
            if (n != pages) {
                throw new LinkFailedException(describe() + ": region key lists " + n + " slots, the descriptor " + pages + " pages");
            }
            if (n < 0 || n > k.remaining() / 4) {
                throw new LinkFailedException(describe() + ": region key lists " + n + " slots but holds " + k.remaining()
                    + " bytes after its header, room for " + k.remaining() / 4);
            }
            slots = new int[n];
            for (int i = 0; i < n; i++) {
                slots[i] = k.getInt();
                if (slots[i] < 0 || slots[i] >= storagePages) {
                    throw new LinkFailedException(describe() + ": region key slot " + slots[i] + " outside 0.." + (storagePages - 1));
                }
            }
            final int len = k.getInt();
            if (len < 1 || len != k.remaining()) {
                throw new LinkFailedException(describe() + ": region key declares a " + len + "-byte rkey, " + k.remaining() + " bytes left");
            }
            rkey = new byte[len];
            k.get(rkey);
        } catch (java.nio.BufferUnderflowException e) {
            throw new LinkFailedException(describe() + ": region key of " + regionKey.length + " bytes ends inside its fields");
        }
        if (pageBytes < 1) {
            throw new LinkFailedException(describe() + ": region key page size " + pageBytes);
        }
        final ByteBuffer rb = ByteBuffer.allocateDirect(rkey.length).put(rkey).flip();
        final UcpRemoteKey remote = transport.call(() -> {
            if (endpointDead()) {
                throw new LinkFailedException(describe() + " is down");
            }
            final ByteBuffer packed = ByteBuffer.wrap(rkey); // content equality: the same registration's bytes
            UcpRemoteKey r = remoteKeys.get(packed);
            if (r == null) {
                r = ep.unpackRemoteKey(rb);
                unpackedKeys++;
                final UcpRemoteKey was = remoteKeys.put(packed, r);
                if (was != null) {
                    was.close(); // unreachable while the lookup above runs; never leak a native key
                }
            }
            return r;
        });
        return new UcxRegion(this, remote, base, pageBytes, slots);
    }

    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        ensureUp("putBatch");
        if (!(region instanceof UcxRegion r) || r.link != this) {
            throw new IllegalArgumentException(describe() + ": region " + region + " was not attached on this link");
        }
        if (!source.isHostAccessible()) {
            throw new IllegalArgumentException(describe() + ": UCX writes from host memory only; " + source.getClass().getSimpleName()
                + " is not host-accessible");
        }
        if (source.layout().bytesPerPage() != r.pageBytes) {
            throw new IllegalArgumentException(describe() + ": source pages are " + source.layout().bytesPerPage()
                + " bytes, destination pages " + r.pageBytes);
        }
        Objects.checkFromIndexSize(off, count, dst.length);
        Objects.checkFromIndexSize(off, count, src.length);
        final long[] local = new long[count];
        final long[] remote = new long[count];
        for (int i = 0; i < count; i++) {
            final int d = dst[off + i];
            if (d < 0 || d >= r.slots.length) {
                throw new IllegalArgumentException(describe() + ": destination page " + d + " outside the region's 0.."
                    + (r.slots.length - 1));
            }
            local[i] = source.hostPage(src[off + i]).address();
            remote[i] = r.base + r.slots[d] * r.pageBytes;
        }
        final long size = r.pageBytes;
        transport.execute(() -> postPuts(r.rkey, local, remote, size, firstToken));
    }

    /** One put's terminal state. Reused once UCX has called it (UCX thread only; UCX calls it exactly once). */
    private final class WriteCallback extends UcxCallback {
        private long token;
        private boolean done;

        WriteCallback() {
        }

        WriteCallback reset(long token) {
            this.token = token;
            this.done = false;
            return this;
        }

        @Override
        public void onSuccess(UcpRequest request) {
            finish(OK);
            spareCallbacks.push(this); // UCX is done with it
        }

        @Override
        public void onError(int status, String message) {
            finish(status == UcsConstants.STATUS.UCS_ERR_CANCELED ? CANCELED : FAILED);
            spareCallbacks.push(this);
        }

        void finish(int status) {
            if (!done) {
                done = true;
                outstandingWrites--;
                inFlight.remove(this);
                writeDone(token, status);
            }
        }
    }

    /** Answers one flush once: by UCX, or not ok when the worker is destroyed first. Transport thread. */
    private final class FlushCallback extends UcxCallback {
        private final long token;
        private boolean done;

        FlushCallback(long token) {
            this.token = token;
        }

        @Override
        public void onSuccess(UcpRequest request) {
            report(OK);
        }

        @Override
        public void onError(int status, String message) {
            report(FAILED);
        }

        void report(int status) {
            if (!done) {
                done = true;
                pendingFlushes--;
                flushesPending.remove(this);
                event(new Event(Event.FLUSH, token, status, null, null, null, null));
            }
        }
    }

    private void postPuts(UcpRemoteKey rkey, long[] local, long[] remote, long size, long firstToken) {
        for (int i = 0; i < local.length; i++) {
            final WriteCallback spare = spareCallbacks.poll();
            final WriteCallback cb = (spare != null ? spare : new WriteCallback()).reset(firstToken + i);
            outstandingWrites++;
            inFlight.add(cb);
            if (endpointDead()) {
                cb.finish(CANCELED); // never posted
                continue;
            }
            try {
                ep.putNonBlocking(local[i], size, remote[i], rkey, cb);
            } catch (RuntimeException e) {
                cb.finish(FAILED); // UCX refused it at once (no-op if its callback already reported); not reused
            }
        }
        publishWrites(); // those that ended at once
    }

    @Override
    public void flush(long token) {
        ensureUp("flush");
        transport.execute(() -> {
            if (endpointDead()) {
                event(new Event(Event.FLUSH, token, FAILED, null, null, null, null));
                return;
            }
            final FlushCallback cb = new FlushCallback(token);
            pendingFlushes++;
            flushesPending.add(cb);
            try {
                ep.flushNonBlocking(cb);
            } catch (RuntimeException e) {
                cb.onError(UcsConstants.STATUS.UCS_ERR_IO_ERROR, e.getMessage());
            }
        });
    }

    @Override
    public void cancelWrites() {
        if (endpointClosed || closed) {
            return; // closed: its close force-closed the endpoint already (and a closed link reports no failure)
        }
        up = false;
        transport.execute(() -> {
            forceClose();
            fail("writes canceled: endpoint force-closed by cancelWrites()");
        });
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        up = false;
        if (endpointClosed) {
            return;
        }
        // force-closes the endpoint and waits until UCX reports it closed (pending writes end canceled and are
        // reported through poll); the worker stays until tearDown(), the transport's close or the reap after its
        // grace (reapClosed): only a destroyed worker fences
        if (transport.isOwnerThread()) {
            closeOnOwner(System.nanoTime() + CLOSE_WAIT_NANOS);
            return;
        }
        try {
            transport.call(() -> {
                closeOnOwner(System.nanoTime() + CLOSE_WAIT_NANOS);
                return null;
            });
        } catch (RuntimeException e) {
            // the transport is closed: its shutdown closed the endpoint and the worker
        }
    }

    // ---- UCX thread ----

    private boolean endpointDead() {
        return failed || closeRequest != null || ep == null || worker == null;
    }

    private void fail(String reason) {
        up = false;
        if (!failed) {
            downReason = reason;
            failed = true;
            event(new Event(Event.FAILED, 0, 0, null, describe() + ": " + reason, null, null));
        }
    }

    /**
     * Owner thread: receives the control messages UCX holds for this link, one at a time, each into the receive buffer
     * at the length the probe reports. The length is known before the receive, so no frame is ever completed with
     * bytes of an earlier message (JUCX 1.12.1 reports no size for a receive posted after its message arrived), and a
     * message longer or shorter than its frame header says fails the link.
     *
     * @return messages taken
     */
    private int receiveControl() {
        int n = 0;
        while (!receiving && closeRequest == null && worker != null && !failed && n < MAX_CONTROL_PER_PROGRESS) {
            final UcpTagMessage m;
            try {
                m = worker.tagProbeNonBlocking(0, 0, true); // any tag: the worker is this link's own, only the peer sends
            } catch (RuntimeException e) {
                fail("cannot probe for a control message: " + e.getMessage());
                return n;
            }
            if (m == null) {
                return n;
            }
            n++;
            if (m.getSenderTag() != recvTag) {
                // taken off UCX's queue by the probe: the worker's close discards it with the rest
                fail("malformed control message: a message of " + m.getRecvLength() + " bytes on tag " + m.getSenderTag()
                    + ", this link receives on tag " + recvTag);
                return n;
            }
            final long length = m.getRecvLength();
            if (length < WireFormat.HEADER_BYTES || length > MAX_FRAME) {
                // taken off UCX's queue by the probe: the worker's close discards it with the rest
                fail("malformed control frame: a message of " + length + " bytes, frames are " + WireFormat.HEADER_BYTES
                    + ".." + MAX_FRAME);
                return n;
            }
            final int size = (int) length;
            receiving = true;
            try {
                recvRequest = worker.recvTaggedMessageNonBlocking(recvBuffer.clear().limit(size), m, new UcxCallback() {
                    @Override
                    public void onSuccess(UcpRequest request) {
                        receiving = false;
                        onFrameReceived(size);
                    }

                    @Override
                    public void onError(int status, String message) {
                        receiving = false;
                        if (closeRequest == null) {
                            failAfterRound("control receive failed: UCX status " + status + " (" + message + ")");
                        }
                    }
                });
            } catch (RuntimeException e) {
                receiving = false;
                fail("cannot receive a control message: " + e.getMessage());
                return n;
            }
        }
        return n;
    }

    /** Most control messages one {@link #progress} takes, so that the thread's other links get their turn. */
    private static final int MAX_CONTROL_PER_PROGRESS = 256;

    /** A control message of {@code size} bytes (the probe's length) is in the receive buffer. */
    private void onFrameReceived(int size) {
        final int body;
        try {
            body = WireCodec.bodyLength(recvBuffer.duplicate().clear());
        } catch (RuntimeException e) {
            fail("malformed control frame header (a message of " + size + " bytes): " + e.getMessage());
            return;
        }
        if (WireFormat.HEADER_BYTES + body != size) {
            fail("control frame header declares a " + body + "-byte body, the message carried " + size + " bytes");
            return;
        }
        final byte[] frame = new byte[size];
        recvBuffer.get(0, frame);
        event(new Event(Event.FRAME, 0, 0, frame, null, null, null));
    }

    private void forceClose() {
        if (worker == null) {
            return; // closed already, endpoint and all
        }
        if (closeRequest == null && ep != null) {
            try {
                closeRequest = ep.closeNonBlockingForce();
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, describe() + ": force close failed: " + e);
                closeRequest = null;
                if (fence) {
                    closeWorkerNow(); // a teardown: the only other way to stop the peer's writes
                }
                return;
            }
        }
    }

    /** Owner thread: force-closes the endpoint and progresses until UCX reports it closed (or the deadline). */
    void closeOnOwner(long deadlineNanos) {
        up = false;
        forceClose();
        if (closeRequest != null && transport.progressUntil(closeRequest::isCompleted, deadlineNanos)) {
            transport.progressUntil(() -> outstandingWrites == 0, deadlineNanos);
            finishClose();
        }
    }

    private void finishClose() {
        if (worker == null || (remoteKeysClosed && !fence)) {
            return;
        }
        if (remoteKeysClosed) {
            closeWorkerNow();
            return;
        }
        if (recvRequest != null && !recvRequest.isCompleted()) {
            try {
                worker.cancelRequest(recvRequest);
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, describe() + ": cancel of the control receive failed: " + e);
            }
        }
        destroyRemoteKeys();
        closedAtNanos = System.nanoTime();
        if (fence) {
            // Only a teardown destroys the worker. cancelWrites() and close() only force-close the endpoint (as
            // before per-link workers): destroying the worker drops its connections abruptly, and a receiver still
            // applying our puts then acks on a failed endpoint, which aborts it in UCX 1.13.1 ("ucp_request.inl:346
            // Fatal: unexpected error: Endpoint timeout", docs/dependencies.md, "UCX from Java"; UcxLinkInJvmTest's cancel case hit it 3 in 8).
            closeWorkerNow();
        }
    }

    /**
     * Owner thread: destroys the remote keys unpacked on this link's endpoint, once. UCX wants each destroyed after the
     * writes that used it ended and before its endpoint goes. A key whose close throws is logged; the others still go.
     */
    private void destroyRemoteKeys() {
        remoteKeysClosed = true;
        for (UcpRemoteKey k : remoteKeys.values()) {
            try {
                k.close();
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, describe() + ": destroying a remote key failed: " + e);
            }
        }
        remoteKeys.clear();
    }

    /**
     * Owner thread: a call of the transport's round into this link threw, a bug. The link fails (its engine gives it
     * up and closes it).
     *
     * @return whether this was the link's first such throw (the transport logs that one)
     */
    boolean failOnBug(String what, Throwable t) {
        fail("the UCX transport failed " + what + ": " + t);
        final boolean first = !bugSeen;
        bugSeen = true;
        return first;
    }

    /** Owner thread, never inside progress(): destroys the worker, its connections and listening sockets. */
    void closeWorkerNow() {
        if (worker == null) {
            return;
        }
        if (!remoteKeysClosed) { // the endpoint's close did not finish (it failed, or missed its deadline)
            if (inFlight.isEmpty()) {
                destroyRemoteKeys(); // no write uses them, and their endpoint goes with the worker: now or never
            } else {
                // writes in flight may still use them, so they are not destroyed; nor may they be after the worker, whose
                // close takes their memory pool (UCX warns that they were not returned): they are dropped, never closed
                LOG.log(System.Logger.Level.WARNING, describe() + ": " + remoteKeys.size() + " remote keys left to the "
                    + "worker's close, " + inFlight.size() + " writes still using them");
                remoteKeysClosed = true;
                remoteKeys.clear();
            }
        }
        final UcpWorker w = worker;
        worker = null;
        boolean closedOk = true;
        try {
            w.close();
        } catch (RuntimeException e) {
            closedOk = false;
            LOG.log(System.Logger.Level.WARNING, describe() + ": closing the worker failed, so its teardown is NOT proven: " + e);
        }
        publishWrites(); // completions that fired inside close()
        if (closedOk) {
            for (WriteCallback cb : java.util.List.copyOf(inFlight)) {
                cb.finish(CANCELED); // the worker is gone: this put will never report; it ends unproven
            }
            publishWrites();
        } else if (!inFlight.isEmpty()) {
            // the worker may live on: UCX may still read these puts' sources and apply them at the peer, so they are
            // never reported (PeerLink: a transport that cannot guarantee a write's end never reports it), and the
            // sender keeps their source pages
            LOG.log(System.Logger.Level.WARNING, describe() + ": " + inFlight.size() + " writes were in flight on the worker "
                + "whose close failed: they are never reported ended, and their source pages stay held");
        }
        for (FlushCallback cb : java.util.List.copyOf(flushesPending)) {
            cb.report(FAILED); // nor will this flush: every flush is answered, here not ok
        }
        if (closedOk) {
            endpointClosed = true; // nothing from the peer can be applied any more
            recvBuffer = null;     // nor received: UCX no longer holds it
        }
    }

    /** Owner thread: progresses this link's worker. @return progress calls that did something */
    int progress() {
        if (worker == null) {
            return 0;
        }
        int n = 0;
        inWorkerProgress = true;
        try {
            while (n < 10_000 && worker.progress() != 0) {
                n++;
            }
        } catch (Exception e) {
            progressFailed(e);
        } finally {
            inWorkerProgress = false;
        }
        n += receiveControl(); // the messages the peer sent before an error of this round too
        if (endpointError != null) {
            fail(endpointError);
            endpointError = null;
        }
        publishWrites();
        return n;
    }

    /**
     * Owner thread: logs a failed progress call, the first at once and then at most one line a second with the count
     * since: progress runs in the engine's busy loop, so a worker that keeps failing would otherwise log each turn.
     */
    private void progressFailed(Exception e) {
        progressFailures++;
        final long now = System.nanoTime();
        if (progressFailures == 1 || now - lastProgressFailureLog >= 1_000_000_000L) {
            final long since = progressFailures - progressFailuresLogged;
            LOG.log(System.Logger.Level.WARNING, describe() + ": progress failed" + (since > 1 ? " (" + since + " times since the last line)" : "")
                + ": " + e);
            lastProgressFailureLog = now;
            progressFailuresLogged = progressFailures;
        }
    }

    /** Owner thread: whether UCX owes this link a completion (a write or flush in flight): progress without parking. */
    boolean busy() {
        return worker != null && (outstandingWrites > 0 || pendingFlushes > 0);
    }

    /** @return remote keys this link ever unpacked (tests: one per remote registration, not one per attach) */
    long unpackedKeyCount() {
        return transport.call(() -> unpackedKeys);
    }

    /** @return whether this link still holds its receive buffer, read on the UCX thread (tests) */
    boolean holdsReceiveBuffer() {
        return transport.call(() -> recvBuffer != null);
    }

    /** @return whether the worker is destroyed, read on the UCX thread (tests) */
    boolean workerClosedForTests() {
        return transport.call(this::workerClosed);
    }

    boolean workerClosed() {
        return worker == null;
    }

    /**
     * Owner thread: destroys the worker of a link that was closed (not torn down) once its endpoint's close
     * finished, every write ended and {@code graceNanos} passed — else every closed link kept its worker, sockets
     * and place in the progress loop until the transport closed. The grace is for the peer: destroying a worker
     * drops its connections at once, and a peer still applying our last puts then acks on a failed endpoint,
     * which UCX 1.13.1 answers with a fatal abort of that process (docs/dependencies.md, "UCX from Java"). After it the link is torn down
     * for good ({@link #tearDown} then reports the proof at once). @return whether the worker was destroyed
     */
    boolean reapClosed(long nowNanos, long graceNanos) {
        if (worker == null || fence || !remoteKeysClosed || outstandingWrites > 0 || pendingFlushes > 0
            || nowNanos - closedAtNanos < graceNanos) {
            return false;
        }
        closeWorkerNow();
        return worker == null;
    }

    /** Owner thread, after each progress round: notices an endpoint close that completed in the background. */
    void afterProgress() {
        if (closeRequest != null && worker != null && (fence || !remoteKeysClosed) && closeRequest.isCompleted()
            && outstandingWrites == 0) {
            finishClose();
        }
    }

    private void ensureUp(String what) {
        if (!up) {
            throw new LinkFailedException(describe() + " is down (" + downReason + "); cannot " + what);
        }
    }

    @Override
    public String toString() {
        return describe() + (up ? "" : " (down)");
    }
}
