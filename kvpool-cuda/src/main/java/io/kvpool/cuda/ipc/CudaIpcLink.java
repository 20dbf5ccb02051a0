package io.kvpool.cuda.ipc;

import io.kvpool.KvLayout;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.shm.ShmLink;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.FixedRegistration;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.spi.SlotChecks;
import io.kvpool.transfer.wire.WireFormat;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/**
 * A {@link PeerLink} between two processes on one node whose pools live in GPU memory
 * ({@link io.kvpool.cuda.DevicePageStorage}): control frames over a Unix domain socket (the shared-memory
 * transport's framing and bootstrap, {@link ShmLink}), page writes as one kernel launch per batch from
 * this process's arena into the peer's arena, opened here with {@code cuIpcOpenMemHandle}. Made by
 * {@link CudaIpcTransport#connect} (prefill) and {@link CudaIpcListener#accept} (decode). The protocol and
 * lifetime are drawn in the package comment.
 *
 * <h2>How it keeps the {@link PeerLink} semantics</h2>
 * <ul>
 *   <li><b>Register</b> exports the storage's arena ({@code cuIpcGetMemHandle}, through
 *       {@link io.kvpool.cuda.DeviceIpc}: a versioned handle carrying the layout fingerprint) and puts it,
 *       with the slots, into the region key ({@link RegionKey}). The key names the slots the peer may
 *       address; the handle maps the whole arena. {@link Registration#revoke()} is {@code false}: an
 *       exporter cannot take back a mapping another process opened. The export is a lease
 *       ({@link io.kvpool.cuda.DeviceIpc.ExportLease}), one per link and storage: the storage keeps its arena past
 *       its close until the lease ends once the peer process is gone: at a proven {@link #tearDown()}, at
 *       {@link #close()} if it is gone already, else from a thread that asks once a second. A closed storage is
 *       not registered.</li>
 *   <li><b>Attach</b> checks the key; the first {@link #putBatch} for a handle opens the peer's arena,
 *       once per link and handle ({@link io.kvpool.cuda.DeviceIpc#open}: a handle for another layout is
 *       refused naming both fingerprints).</li>
 *   <li><b>Put batch</b>: every index is checked first (an exception means nothing was posted); then ONE
 *       kernel launch copies the batch's pages on the link's stream and ONE event is recorded after it —
 *       never a driver call per page. The batch's writes become terminal when that event completes
 *       ({@code cuEventQuery} in {@link #poll}): {@link #OK} (the copy finished: the source may be reused,
 *       and the bytes are in the peer's memory), or {@link #FAILED} if the event reports an error (the copy
 *       may have written all, part or none of the pages) — and a device error takes the link down. A batch
 *       whose kernel was launched but whose event could not be recorded is posted and takes the link down; its
 *       writes report {@link #FAILED} only once a drain proved the copy ended ({@link #close()} waits for the
 *       stream before it unmaps anything): until then it may still read its source pages, which a terminal state
 *       would let the sender reuse.</li>
 *   <li><b>Flush</b> is answered once every batch posted before it has completed; {@code ok} iff all of them
 *       completed without error. On one node that proves delivery: the copy is a kernel on this process's
 *       stream writing the peer's device memory, and an event after it completes only when the kernel's
 *       writes are done. (Batches complete in stream order, so events are queried oldest first.)</li>
 *   <li><b>Cancel</b> cannot recall anything: every write is enqueued on the device inside
 *       {@link #putBatch}. {@link #cancelWrites()} therefore changes nothing; each write still reports the
 *       state its event reports, and this link never reports {@link #CANCELED} — it would claim that a
 *       write which may land did not.</li>
 *   <li><b>Close</b> closes the socket, waits until the device finished this link's enqueued copies
 *       ({@code cuStreamSynchronize}: normally microseconds to milliseconds), queues their true terminal
 *       states (delivered by later {@link #poll}s), and only then closes the opened arenas
 *       ({@code cuIpcCloseMemHandle}) and frees the stream: an arena is never unmapped under a running copy.</li>
 * </ul>
 *
 * <h2>What proves that the peer can no longer write into this side's arena ({@link #tearDown()})</h2>
 * A process that opened our export handle keeps its mapping until it calls {@code cuIpcCloseMemHandle} or
 * its CUDA context is destroyed; the exporter has no call that revokes it, and closing the socket only
 * tells a well-behaved peer to stop (its {@link #close()} then unmaps — but a frozen or buggy one may not).
 * So, as for the shared-memory transport, the proof is that the <b>peer process is gone</b>
 * ({@link ShmLink#peerProcessGone()}: no such pid, not alive, a zombie, or a pid reused by a process with
 * another start time), because its context — mapping, streams and queued kernels — dies with it.
 * {@link #tearDown()} returns {@code true} only then, or when this link never exported anything
 * ({@link #register} was never called: the peer cannot have learnt a handle from it). It returns
 * {@code false} while the peer lives (call again later) and always when the peer is this process.
 * Conservative limits, stated rather than guessed around:
 * <ul>
 *   <li>The peer must be a plain process that owns its CUDA context. Under <b>MPS</b> the client's work runs
 *       in the MPS server, which may finish or abort it after the client's pid is gone; a peer that
 *       <b>forked</b> a child holding its CUDA file descriptors, or passed our handle to a third process, is
 *       not tracked. Do not use this transport's teardown proof there.</li>
 *   <li>The link refuses (at the bootstrap) a peer whose pid is not a live process it can see (another pid
 *       namespace): its end could never be proven.</li>
 *   <li>Trust: region keys limit what <em>this</em> code writes, but a peer holding the handle can write any
 *       page of the arena, as with shared memory: same node, equally trusted processes.</li>
 * </ul>
 * Not thread-safe: one owner thread calls every method; events come only from {@link #poll}.
 */
public final class CudaIpcLink implements PeerLink {

    /** Most slots one registration can list. */
    public static final int MAX_REGISTERED_SLOTS = RegionKey.MAX_SLOTS;
    /** Most pages one {@link #putBatch} may copy (a descriptor's page limit). */
    public static final int MAX_BATCH_PAGES = WireFormat.MAX_ARRAY;

    /**
     * Test-only switches that break one rule each, so the tests can show the rule is what their checks
     * catch. Never set in production code (the constructor that takes them is package-private).
     */
    enum Unsafe {
        /** Flush answers ok at once, without waiting for the batches' events. */
        FLUSH_EARLY,
        /** Writes report OK when launched, before their event completed (the source may still be read). */
        WRITE_DONE_AT_LAUNCH,
        /** cancelWrites() reports every pending write CANCELED at once (they still land). */
        CANCEL_CLAIMS_NOT_LANDED,
        /** tearDown() claims the proof without the peer process being gone. */
        TEARDOWN_WITHOUT_PROOF,
        /** close() frees the engine at once and drops the pending batches: their writes never report a terminal state. */
        CLOSE_FORGETS_PENDING
    }

    private static final int EV_WRITE = 1, EV_FLUSH = 2;

    private record Event(int kind, long token, int status) {
    }

    /** A launched batch: engine id ({@code -1}: launched without a marker, {@code code} is its failure). */
    private static final class Batch {
        final long seq;
        final long id;
        final long firstToken;
        final int count;
        final int code;
        boolean reported;

        Batch(long seq, long id, long firstToken, int count, int code) {
            this.seq = seq;
            this.id = id;
            this.firstToken = firstToken;
            this.count = count;
            this.code = code;
        }
    }

    private record PendingFlush(long token, long upToSeq) {
    }

    private final PeerLink control;
    private final ShmLink shm;
    private final Supplier<IpcEngine> engineFactory;
    private final BooleanSupplier peerGone;
    /** Ends the exports once the peer is gone, for a link closed while it lived. */
    ExportReaper reaper = ExportReaper.SHARED;
    private final Set<Unsafe> unsafe;
    private final Forward forward = new Forward();
    private final ArrayDeque<Batch> batches = new ArrayDeque<>();
    private final ArrayDeque<PendingFlush> flushes = new ArrayDeque<>();
    private final ArrayDeque<Event> events = new ArrayDeque<>();
    private final Map<ByteBuffer, IpcEngine.Mapping> mappings = new HashMap<>();
    /** Ended once the teardown is proven; until then each keeps its storage's arena past the storage's close. */
    private final Map<PageStorage, IpcEngine.Export> exports = new IdentityHashMap<>();
    private IpcEngine engine;
    private boolean engineClosed;
    private long nextSeq = 1;
    private long retiredSeq;
    private long firstFailedSeq = Long.MAX_VALUE;
    /** A drain answered DONE: every copy enqueued before it ended, those launched without a marker too. */
    private boolean drainedAll;
    private int nextRegistration = 1;
    private boolean exported;
    private String failure;          // non-null once the link failed (device or control)
    private boolean failureDelivered;
    private boolean closed;
    private boolean tornDown;
    private long writesPosted;
    private long batchesLaunched;
    private long cancelRequests;

    /**
     * @param control       carries the control frames (a {@link ShmLink} in production; any link in tests)
     * @param engineFactory makes the engine on first use (the CUDA one needs a device)
     * @param peerGone      the teardown proof: whether the peer process is gone
     * @param unsafe        test-only rule breakers, normally empty
     */
    CudaIpcLink(PeerLink control, Supplier<IpcEngine> engineFactory, BooleanSupplier peerGone, Set<Unsafe> unsafe) {
        this.control = Objects.requireNonNull(control, "control");
        this.shm = control instanceof ShmLink s ? s : null;
        this.engineFactory = Objects.requireNonNull(engineFactory, "engineFactory");
        this.peerGone = Objects.requireNonNull(peerGone, "peerGone");
        this.unsafe = unsafe.isEmpty() ? EnumSet.noneOf(Unsafe.class) : EnumSet.copyOf(unsafe);
    }

    /** Over a shared-memory control link, proving teardown by the peer process being gone. */
    CudaIpcLink(ShmLink control, Supplier<IpcEngine> engineFactory, Set<Unsafe> unsafe) {
        this(control, engineFactory, control::peerProcessGone, unsafe);
    }

    // ---- state ----

    @Override
    public String describe() {
        return "cuda-ipc:" + control.describe();
    }

    @Override
    public boolean isUp() {
        return failure == null && !closed && !tornDown && control.isUp();
    }

    /**
     * {@return whether the control channel's bootstrap is complete (always {@code true} over a non-shm
     * control link)}
     */
    public boolean isReady() {
        return shm == null || shm.isReady();
    }

    /** {@return the peer's pid, or -1 before the bootstrap (or over a non-shm control link)} */
    public long peerPid() {
        return shm == null ? -1 : shm.peerPid();
    }

    /** {@return why the link failed, or {@code null} if it has not} */
    public String failureReason() {
        if (failure != null) {
            return failure;
        }
        return shm != null && shm.failureReason() != null ? "control channel: " + shm.failureReason() : null;
    }

    /** {@return writes posted by {@link #putBatch}} */
    public long writesPosted() {
        return writesPosted;
    }

    /** {@return kernel launches, one per non-empty {@link #putBatch}} */
    public long batchesLaunched() {
        return batchesLaunched;
    }

    /** {@return batches whose terminal state has not been queued yet} */
    public int pendingBatches() {
        return batches.size();
    }

    /** {@return how often {@link #cancelWrites()} was called (it cannot recall anything)} */
    public long cancelRequests() {
        return cancelRequests;
    }

    private void ensureUp(String call) {
        if (closed) {
            throw new LinkFailedException(describe() + " is closed (" + call + ")");
        }
        if (tornDown) {
            throw new LinkFailedException(describe() + " was torn down (" + call + ")");
        }
        if (failure != null) {
            throw new LinkFailedException(describe() + " failed: " + failure + " (" + call + ")");
        }
        if (!control.isUp()) {
            final String why = failureReason();
            throw new LinkFailedException(describe() + ": the control channel is down" + (why == null ? "" : ": " + why) + " (" + call + ")");
        }
    }

    private IpcEngine engine() {
        if (engine == null) {
            engine = Objects.requireNonNull(engineFactory.get(), "engine");
        }
        return engine;
    }

    /** The link fails (once): the socket closes so the peer learns it; reported through {@link #poll}. */
    private void fail(String reason) {
        if (failure != null || closed || tornDown) {
            return;
        }
        failure = reason;
        control.close();
    }

    // ---- control channel ----

    /** @throws LinkFailedException if the link is down */
    @Override
    public void send(byte[] frame) {
        ensureUp("send");
        control.send(frame);
    }

    /** Passes the frame to the control link, which copies it (no array made here). */
    @Override
    public void send(ByteBuffer frame) {
        ensureUp("send");
        control.send(frame);
    }

    /**
     * Queries the device for finished batches (oldest first), then delivers write and flush completions,
     * control frames, and a link failure (once). Never blocks.
     */
    @Override
    public int poll(LinkListener listener, int limit) {
        Objects.requireNonNull(listener, "listener");
        retire();
        int n = 0;
        while (n < limit && !events.isEmpty()) {
            final Event e = events.poll();
            if (e.kind() == EV_WRITE) {
                listener.onWriteDone(this, e.token(), e.status());
            } else {
                listener.onFlushDone(this, e.token(), e.status() == OK);
            }
            n++;
        }
        if (n < limit) {
            forward.to = listener;
            try {
                n += control.poll(forward, limit - n);
            } finally {
                forward.to = null;
            }
        }
        if (n < limit && failure != null && !failureDelivered) {
            failureDelivered = true;
            listener.onLinkFailed(this, describe() + ": " + failure);
            n++;
        }
        return n;
    }

    /** Hands the control link's frames and failure on as this link's. */
    private final class Forward implements LinkListener {
        LinkListener to;

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            to.onFrame(CudaIpcLink.this, frame);
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            throw new IllegalStateException("the control link " + link.describe() + " reported a write: it never posts any");
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            throw new IllegalStateException("the control link " + link.describe() + " reported a flush: it never gets any");
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            if (failure == null) {
                failure = "control channel: " + reason;
            }
            if (!failureDelivered) {
                failureDelivered = true;
                to.onLinkFailed(CudaIpcLink.this, describe() + ": " + failure);
            }
        }
    }

    /** Retires finished batches in launch order and answers the flushes they complete. */
    private void retire() {
        while (!batches.isEmpty()) {
            final Batch b = batches.peek();
            // a batch without a marker ends, as far as anything can tell, only at a drain that answered DONE: until then
            // its copy may still read the source pages, which a terminal state would hand back to the sender
            final int code = b.id >= 0 ? engine.query(b.id) : drainedAll ? b.code : IpcEngine.NOT_READY;
            if (code == IpcEngine.NOT_READY) {
                break;
            }
            batches.poll();
            finish(b, code);
        }
        answerFlushes();
    }

    private void finish(Batch b, int code) {
        if (b.id >= 0) {
            engine.release(b.id);
        }
        retiredSeq = b.seq;
        final int status = code == IpcEngine.DONE ? OK : FAILED;
        if (status == FAILED) {
            firstFailedSeq = Math.min(firstFailedSeq, b.seq);
            fail("device: a put batch of " + b.count + " pages (tokens " + b.firstToken + ".." + (b.firstToken + b.count - 1)
                + ") ended " + engine.describe(code) + "; its pages may have landed in part");
        }
        if (!b.reported) {
            b.reported = true;
            for (int i = 0; i < b.count; i++) {
                events.add(new Event(EV_WRITE, b.firstToken + i, status));
            }
        }
    }

    private void answerFlushes() {
        if (batches.isEmpty()) {
            retiredSeq = nextSeq - 1;
        }
        while (!flushes.isEmpty() && flushes.peek().upToSeq() <= retiredSeq) {
            final PendingFlush f = flushes.poll();
            events.add(new Event(EV_FLUSH, f.token(), firstFailedSeq > f.upToSeq() ? OK : FAILED));
        }
    }

    // ---- receiver side ----

    /**
     * Exposes slots of a device pool to the peer: the region key carries the arena's export handle and
     * the slots. From this call on, {@link #tearDown()} needs the peer process to be gone.
     *
     * @param storage the receiver's pool storage ({@link io.kvpool.cuda.DevicePageStorage})
     * @param slots   distinct slots, at most {@link #MAX_REGISTERED_SLOTS}
     * @throws LinkFailedException       if the link is down
     * @throws IndexOutOfBoundsException if a slot is outside the storage
     * @throws IllegalArgumentException  if the storage cannot be exported, a slot is repeated, or there are more slots
     *                                   than one region key holds
     * @throws IllegalStateException     if the storage is closed
     */
    @Override
    public Registration register(PageStorage storage, int[] slots) {
        ensureUp("register");
        Objects.requireNonNull(storage, "storage");
        if (slots.length > MAX_REGISTERED_SLOTS) {
            throw new IllegalArgumentException(slots.length + " slots in one registration, at most " + MAX_REGISTERED_SLOTS);
        }
        SlotChecks.requireDistinct(slots, storage.pageCount(), "registered twice");
        IpcEngine.Export export = exports.get(storage);
        if (export == null) {
            export = engine().export(storage);
            exports.put(storage, export);
        }
        final byte[] handle = export.handle(); // throws for a closed storage: its arena is not handed out again
        exported = true; // conservative: from here on the peer may hold a handle to this arena
        // an exporter cannot close a mapping another process opened: nothing to revoke (tearDown() is the proof)
        return FixedRegistration.of(new RegionKey(handle, nextRegistration++, slots.clone()).encode());
    }

    /**
     * Closes the socket and everything this side opened ({@link #close()}), then says whether the peer can
     * no longer write into this side's arena: {@code true} once the peer process is gone, or if this link
     * never exported anything; {@code false} while the peer lives (call again) and when it is this process.
     * Once proven it ends this link's exports: a closed storage may then free its arena
     * ({@link io.kvpool.cuda.DeviceIpc.ExportLease}). Idempotent.
     */
    @Override
    public boolean tearDown() {
        if (!tornDown) {
            close();
            tornDown = true;
        }
        final boolean proven = !exported || unsafe.contains(Unsafe.TEARDOWN_WITHOUT_PROOF) || peerGone.getAsBoolean();
        if (proven) {
            endExports();
        }
        return proven;
    }

    private void endExports() {
        RuntimeException first = null;
        for (IpcEngine.Export e : exports.values()) {
            try {
                e.end();
            } catch (RuntimeException failure) {
                first = first == null ? failure : first;
            }
        }
        exports.clear();
        if (first != null) {
            throw first;
        }
    }

    // ---- sender side ----

    /**
     * @throws LinkFailedException if the link is down, the key is not a CUDA IPC key, or it lists another
     *                             number of pages than the descriptor
     */
    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        ensureUp("attach");
        final RegionKey k;
        try {
            k = RegionKey.decode(regionKey);
        } catch (IllegalArgumentException e) {
            throw new LinkFailedException(describe() + ": " + e.getMessage(), e);
        }
        if (k.slots().length != pages) {
            throw new LinkFailedException(describe() + ": region key " + k.id() + " lists " + k.slots().length + " pages, the descriptor "
                + pages);
        }
        return new Region(this, ByteBuffer.wrap(k.handle()), k.id(), k.slots());
    }

    private record Region(CudaIpcLink link, ByteBuffer handle, int id, int[] slots) implements RemoteRegion {
        @Override
        public int pages() {
            return slots.length;
        }

        @Override
        public String toString() {
            return "cuda-ipc region " + id + " of " + slots.length + " pages";
        }
    }

    private IpcEngine.Mapping mapping(Region r, KvLayout layout) {
        IpcEngine.Mapping m = mappings.get(r.handle());
        if (m == null) {
            final byte[] h = new byte[r.handle().remaining()];
            r.handle().duplicate().get(h);
            m = engine().open(h, layout);
            mappings.put(r.handle(), m);
        }
        if (m.fingerprint() != layout.fingerprint()) {
            throw new IllegalArgumentException("source layout " + layout + " (fingerprint 0x" + Long.toHexString(layout.fingerprint())
                + ") differs from the peer arena's, opened for fingerprint 0x" + Long.toHexString(m.fingerprint()));
        }
        return m;
    }

    /**
     * Copies {@code region[dst[off+i]] ← source[src[off+i]]} for {@code i < count} with one kernel launch
     * and records one event after it; each write reports its terminal state once that event completes.
     * Everything is checked before the launch, so an exception means nothing was posted.
     *
     * @param source this side's device storage
     * @throws LinkFailedException       if the link is down, or the device refused the launch (the link
     *                                   then fails; nothing was posted)
     * @throws IllegalArgumentException  if the region is not from this link, the source has another layout
     *                                   or cannot be copied from, a destination repeats, or the batch is
     *                                   larger than {@link #MAX_BATCH_PAGES}
     * @throws IndexOutOfBoundsException if an index is out of range (the peer's arena included)
     */
    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        ensureUp("putBatch");
        if (!(region instanceof Region r) || r.link() != this) {
            throw new IllegalArgumentException("region " + region + " was not attached on " + describe());
        }
        Objects.requireNonNull(source, "source");
        if (count < 0 || count > MAX_BATCH_PAGES) {
            throw new IllegalArgumentException("a put batch of " + count + " pages; expected 0.." + MAX_BATCH_PAGES);
        }
        Objects.checkFromIndexSize(off, count, dst.length);
        Objects.checkFromIndexSize(off, count, src.length);
        if (count == 0) {
            return;
        }
        final IpcEngine.Mapping m = mapping(r, source.layout());
        final int[] srcPages = new int[count];
        final int[] dstPages = new int[count];
        for (int i = 0; i < count; i++) {
            final int d = Objects.checkIndex(dst[off + i], r.slots().length);
            final int page = r.slots()[d];
            if (page >= m.pages()) {
                throw new IndexOutOfBoundsException("region " + r.id() + " page " + d + " is slot " + page + "; the peer's arena has "
                    + m.pages() + " pages");
            }
            dstPages[i] = page;
            srcPages[i] = Objects.checkIndex(src[off + i], source.pageCount());
        }
        SlotChecks.requireDistinct(dstPages, m.pages(), "a destination twice in one put batch");
        final long id;
        try {
            id = engine.submit(m, source, srcPages, dstPages, count);
        } catch (SubmitException e) {
            if (!e.enqueued()) {
                fail("device: a put batch of " + count + " pages was refused: " + e.getMessage());
                throw new LinkFailedException(describe() + ": put batch of " + count + " pages not launched: " + e.getMessage(), e);
            }
            // launched, but without a marker: posted, it may land, and only a drain (close()) tells when it ended
            batches.add(new Batch(nextSeq++, -1, firstToken, count, e.code()));
            writesPosted += count;
            batchesLaunched++;
            fail("device: a put batch of " + count + " pages was launched but cannot be tracked: " + e.getMessage());
            return;
        }
        final Batch b = new Batch(nextSeq++, id, firstToken, count, IpcEngine.DONE);
        batches.add(b);
        writesPosted += count;
        batchesLaunched++;
        if (unsafe.contains(Unsafe.WRITE_DONE_AT_LAUNCH)) {
            b.reported = true;
            for (int i = 0; i < count; i++) {
                events.add(new Event(EV_WRITE, firstToken + i, OK));
            }
        }
    }

    /**
     * Asks for proof of delivery of every write posted so far: answered through {@link #poll} once all
     * their batches completed, {@code ok} iff none failed.
     *
     * @throws LinkFailedException if the link is down
     */
    @Override
    public void flush(long token) {
        ensureUp("flush");
        if (unsafe.contains(Unsafe.FLUSH_EARLY)) {
            events.add(new Event(EV_FLUSH, token, OK));
            return;
        }
        flushes.add(new PendingFlush(token, nextSeq - 1));
        answerFlushes();
    }

    /**
     * Recalls nothing: every posted write is already enqueued on the device and may land. Each still
     * reports the state its batch's event reports ({@link #OK} or {@link #FAILED}), never
     * {@link #CANCELED}. Counted ({@link #cancelRequests()}).
     */
    @Override
    public void cancelWrites() {
        cancelRequests++;
        if (unsafe.contains(Unsafe.CANCEL_CLAIMS_NOT_LANDED)) {
            for (Batch b : batches) {
                if (!b.reported) {
                    b.reported = true;
                    for (int i = 0; i < b.count; i++) {
                        events.add(new Event(EV_WRITE, b.firstToken + i, CANCELED));
                    }
                }
            }
        }
    }

    /**
     * Closes the socket, waits until the device finished every copy this link enqueued, queues their
     * terminal states (delivered by later {@link #poll}s, as are pending flushes' answers), then closes the
     * opened arenas and frees the engine. If the peer process is gone already, ends this link's exports as a proven
     * {@link #tearDown()} does; otherwise they stay open until it is: a proven {@code tearDown()} ends them, and a
     * daemon thread checks once a second ({@code ExportReaper}). Idempotent.
     *
     * @throws RuntimeException what the control channel's close threw, once the rest is done
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        RuntimeException controlFailure = null;
        try {
            try {
                control.close();
            } catch (RuntimeException e) {
                controlFailure = e; // thrown once the copies are drained: a failed socket close must not leave them unended
            }
            if (engine != null && !engineClosed) {
                if (unsafe.contains(Unsafe.CLOSE_FORGETS_PENDING)) {
                    batches.clear();
                } else {
                    final int drained = engine.drain();
                    drainedAll = drained == IpcEngine.DONE;
                    retire(); // every batch has an answer now: DONE, or its error
                    while (!batches.isEmpty()) { // still not ready after a drain: unknown, so FAILED (it may land)
                        finish(batches.poll(), drained == IpcEngine.DONE ? IpcEngine.NOT_READY : drained);
                    }
                    answerFlushes();
                }
                engineClosed = true;
                engine.close();
            }
        } finally {
            // also after a close that threw: a later close() returns at once, and the exports must still be ended or watched.
            // A link closed after its peer exited (a clean shutdown of both sides) proves here what tearDown() would, so a
            // closed storage may free its arena; while the peer lives the reaper asks again until it is gone (nobody else
            // asks a closed link), and a tearDown() meanwhile ends them at once
            if (!exports.isEmpty()) {
                if (!exported || peerGone.getAsBoolean()) {
                    endExports();
                } else {
                    reaper.watch(peerGone, exports.values(), describe());
                }
            }
        }
        if (controlFailure != null) {
            throw controlFailure;
        }
    }

    @Override
    public String toString() {
        return describe() + (unsafe.isEmpty() ? "" : " UNSAFE" + unsafe);
    }
}
