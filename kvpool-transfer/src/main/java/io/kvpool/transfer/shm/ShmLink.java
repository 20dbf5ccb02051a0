package io.kvpool.transfer.shm;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.TransferException;
import io.kvpool.transfer.spi.FixedRegistration;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.spi.SlotChecks;
import io.kvpool.transfer.wire.MalformedMessageException;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireFormat;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Objects;
import java.util.Optional;

/**
 * A {@link PeerLink} between two processes on one host: control frames through two shared-memory rings
 * ({@link ShmRingFile}), page writes as plain memory copies into the receiver's pool file, which the sender
 * maps ({@link MappedPageStorage}). A Unix domain socket carries the bootstrap and then only its end: the
 * peer's close (or death) is its EOF. Made by {@link ShmTransport#connect} (sender) and
 * {@link ShmListener#accept} (receiver).
 *
 * <h2>How it keeps the {@link PeerLink} semantics</h2>
 * <ul>
 *   <li><b>Bootstrap.</b> Before any kvpool frame each side sends its pid, pid namespace and start time
 *       ({@link Bootstrap}) and, if it exposes a pool, the path and identity of its pool file. A receiver
 *       reveals its path only after it has the peer's pid, and refuses a peer whose pid is not a live
 *       process it can see, or which runs in another pid namespace, or whose pid started here at another
 *       time than the peer says: the death of that pid would prove nothing about the peer.</li>
 *   <li><b>Control frames</b> go through the rings once the bootstrap is done: no system call per frame.
 *       The listener creates the ring file when the connector's bootstrap is version 3 and names it in its
 *       answer; the connector maps it and deletes its name. A version-2 connector, or a listener that could
 *       not create the file, keeps the frames on the socket. Frames sent before the bootstrap exchange is
 *       done wait in this link until it is. In ring mode the socket is read at most every
 *       {@value #SOCKET_CHECK_MICROS} µs, for its EOF, by a {@link #poll} whose first ring read finds nothing (an
 *       EOF matters only once the ring is empty): the frames the peer put in the ring before it closed
 *       are all delivered before the failure is. A listener that closes before the connector mapped the ring
 *       leaves the ring's name for it when frames wait there.</li>
 *   <li><b>Writes</b> ({@link #putBatch}) are synchronous {@link MemorySegment#copy} calls from the source
 *       page into the mapped destination page: truly one-sided (the receiver does nothing). Each reaches
 *       its terminal state ({@link #OK}, or {@link #FAILED} if the copy itself threw) before
 *       {@code putBatch} returns and is reported by the next {@link #poll}.</li>
 *   <li><b>Flush</b> is a full fence: every write before it is in the shared memory, visible to the
 *       receiver; {@link LinkListener#onFlushDone} reports it through {@link #poll}.</li>
 *   <li><b>No revocation.</b> The peer's mapping covers the whole pool file and cannot be taken away:
 *       {@link Registration#revoke()} returns {@code false}, and {@link #tearDown()} returns {@code true}
 *       only once the peer process is gone (its mappings died with it). A peer that forked a child
 *       holding the mapping is not tracked: run senders that do not fork.</li>
 *   <li><b>Trust.</b> Region keys limit which slots <em>this</em> code writes, but a peer process can
 *       write any page of the file it mapped: the shared-memory transport is for peers that are equally
 *       trusted (same host, same user; the file is created {@code rw-------}). The pid a peer announces is
 *       checked against what this host sees, not proven by the kernel (the JDK exposes no socket peer pid:
 *       {@code SO_PEERCRED} through an FFM socket would), so a peer that lies about it can make a teardown
 *       look proven — but such a process could write into the pool at any time anyway.</li>
 * </ul>
 * Not thread-safe: one owner thread calls every method; events come only from {@link #poll}.
 */
public final class ShmLink implements PeerLink {

    private static final int KEY_MAGIC = 0x4B4D4853; // "SHMK"
    private static final int KEY_FIXED_BYTES = 4 + 8 + 4 + 4;
    /** A region key's fields, little-endian: magic at 0, pool file identity at 4, registration id at 12, count at 16, slots from 20. */
    private static final VarHandle KEY_INT = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle KEY_LONG = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    /** Most slots one registration can list (its key must fit {@link WireFormat#MAX_KEY_BYTES}). */
    public static final int MAX_REGISTERED_SLOTS = (WireFormat.MAX_KEY_BYTES - KEY_FIXED_BYTES) / 4;

    private static final int EV_WRITE = 1, EV_FLUSH = 2;
    /**
     * Most bytes of control frames queued for a peer that does not read before the link fails (frames are ≤ 1 MiB;
     * a descriptor of 65,536 pages is ½ MiB, so 64 MiB is far beyond a slow but live peer).
     */
    static final long MAX_QUEUED_BYTES = 64L << 20;

    /** How often, at most, a link in ring mode reads its socket to see whether the peer closed it. */
    static final long SOCKET_CHECK_MICROS = 1_000;

    /**
     * A flush, or a run of {@code count} writes with consecutive tokens from {@code token} and one status. Reused: one
     * taken off {@link #events} goes to the free list once its fields are read, before the listener hears of it.
     */
    private static final class Event {
        int kind, status;
        long token;
        int count;
        Event nextFree;
    }

    /** Most events the free list keeps: a batch and a flush per transfer in flight need few, and none is kept for ever. */
    private static final int MAX_FREE_EVENTS = 16;

    private final SocketChannel channel;
    private final String socketName;
    private final MappedPageStorage local;
    private final long selfPid = ProcessHandle.current().pid();
    private final ArrayDeque<ByteBuffer> out = new ArrayDeque<>();
    private long queuedBytes; // of out's buffers
    private final ArrayDeque<Event> events = new ArrayDeque<>();
    private Event freeEvents; // a stack linked by nextFree, of freeEventCount events that no one reads
    private int freeEventCount;
    private ByteBuffer in = ByteBuffer.allocate(64 * 1024);
    private int readPos;
    private ByteBuffer inView, inViewOf; // frameView()'s view, and the buffer it views
    private boolean ownBootstrapSent;
    private ByteBuffer bootstrapOut; // this side's bootstrap, written to the socket ahead of everything else
    /** Where a listener creates the ring file for a version-3 peer; {@code null}: frames stay on the socket. */
    private final Path ringDirectory;
    private ShmRingFile ringFile;    // non-null in ring mode
    private ShmRing ringOut, ringIn;
    private boolean ringNameLive;    // listener: the ring file's name exists until the peer's first bytes prove it mapped it
    private boolean peerEof;         // the socket reported EOF (ring mode, or a connector before the bootstrap): fail once the ring, if any, is empty
    private long lastSocketCheck = System.nanoTime();
    private final ByteBuffer socketProbe = ByteBuffer.allocate(64);
    private Bootstrap peer;
    private Optional<Instant> peerStart = Optional.empty();
    private MappedPageStorage remote;
    private int nextRegistration = 1;
    private String failure;          // non-null once the link failed
    private boolean failureDelivered;
    private boolean tornDown;
    private boolean closed;

    /**
     * @param bootstrapFirst whether to send our bootstrap now (connector) or only after the peer's
     *                       arrived (listener, so the path is revealed only to a peer whose pid we know)
     */
    ShmLink(SocketChannel channel, String socketName, MappedPageStorage local, boolean bootstrapFirst) {
        this(channel, socketName, local, bootstrapFirst, null);
    }

    /**
     * @param ringDirectory where a listener creates the ring file for a peer that speaks rings; {@code null}
     *                      keeps the frames on the socket (ignored by a connector)
     */
    ShmLink(SocketChannel channel, String socketName, MappedPageStorage local, boolean bootstrapFirst, Path ringDirectory) {
        this.channel = Objects.requireNonNull(channel, "channel");
        this.socketName = socketName;
        this.local = local;
        this.ringDirectory = ringDirectory;
        if (bootstrapFirst) {
            queueOwnBootstrap(Bootstrap.VERSION, null);
        }
    }

    private void queueOwnBootstrap(int version, ShmRingFile ring) {
        Bootstrap own = local == null ? new Bootstrap(selfPid, 0, "")
            : new Bootstrap(selfPid, local.identity(), local.file().toAbsolutePath().toString());
        own = own.withVersion(version);
        if (ring != null) {
            own = own.withRing(ring);
        }
        bootstrapOut = ByteBuffer.wrap(own.encode());
        ownBootstrapSent = true;
        flushOut();
    }

    /** {@return the ring file's path, or {@code null} outside ring mode (tests: its name must not be left behind)} */
    Path ringFile() {
        return ringFile == null ? null : ringFile.file();
    }

    /**
     * Maps the ring a listener named: at its path or, if this process reaches the socket's directory by another path (a
     * bind mount in a container), next to the socket as this process sees it. The nonce proves it is the ring named.
     */
    private ShmRingFile mapRing(Bootstrap b) {
        final Path named = Path.of(b.ringFile());
        try {
            return ShmRingFile.map(named, b.ringNonce());
        } catch (RuntimeException first) {
            final Path socketDir = Path.of(socketName).toAbsolutePath().getParent();
            final Path local = socketDir == null || named.getFileName() == null ? null : socketDir.resolve(named.getFileName());
            if (local == null || local.equals(named)) {
                throw first;
            }
            try {
                return ShmRingFile.map(local, b.ringNonce());
            } catch (RuntimeException second) {
                first.addSuppressed(second);
                throw first;
            }
        }
    }

    /** {@return whether control frames go through the shared-memory rings (else through the socket)} */
    public boolean usesRings() {
        return ringIn != null;
    }

    // ---- state ----

    @Override
    public String describe() {
        return "shm:" + socketName + "[pid " + selfPid + "↔" + (peer == null ? "?" : Long.toString(peer.pid())) + "]";
    }

    @Override
    public boolean isUp() {
        return failure == null && !closed && !tornDown;
    }

    /** {@return whether the bootstrap exchange is complete (the peer's pid and pool file are known)} */
    public boolean isReady() {
        return peer != null;
    }

    /** {@return the peer's pid, or -1 before the bootstrap arrived} */
    public long peerPid() {
        return peer == null ? -1 : peer.pid();
    }

    /**
     * {@return the layout of the peer's pool file (the pages {@link #putBatch} writes)}
     *
     * @throws LinkFailedException if the link is not ready or the peer exposes no pool
     */
    public io.kvpool.KvLayout remoteLayout() {
        ensureReady();
        if (remote == null) {
            throw new LinkFailedException(describe() + ": the peer exposes no pool");
        }
        return remote.layout();
    }

    /** {@return why the link failed, or {@code null} if it has not} */
    public String failureReason() {
        return failure;
    }

    private void ensureUp() {
        if (closed) {
            throw new LinkFailedException(describe() + " is closed");
        }
        if (tornDown) {
            throw new LinkFailedException(describe() + " was torn down");
        }
        if (failure != null) {
            throw new LinkFailedException(describe() + " failed: " + failure);
        }
    }

    private void ensureReady() {
        ensureUp();
        if (peer == null) {
            throw new LinkFailedException(describe() + ": the bootstrap exchange is not complete yet (poll until isReady())");
        }
    }

    private void fail(String reason) {
        if (failure != null || closed || tornDown) {
            return;
        }
        failure = reason;
        closeChannel(false); // the peer is gone or broken: no one will map the ring from now on
    }

    /**
     * Closes the socket and drops the frames not yet sent. The ring file's name goes too, unless {@code forPeer} and the
     * peer has the bootstrap that names it and frames wait in the ring for it: then the name stays, without this side's
     * lock, so that the peer maps it, reads them and deletes it (or a later ring create's sweep does).
     */
    private void closeChannel(boolean forPeer) {
        final boolean leave = forPeer && framesWaitForUnmappedPeer();
        try {
            channel.close();
        } catch (IOException ignored) {
            // closing: nothing more to do with the socket
        }
        out.clear();
        bootstrapOut = null;
        if (leave) {
            ringNameLive = false;
            ringFile.leaveName();
        } else {
            deleteRingName();
        }
    }

    /** {@return whether the peer was sent this side's whole bootstrap naming the ring, and has unread frames in it} */
    private boolean framesWaitForUnmappedPeer() {
        if (!ringNameLive || bootstrapOut != null) {
            return false;
        }
        try {
            return ringOut.unread() > 0;
        } catch (ShmRing.CorruptRingException | InternalError e) {
            return false; // a broken ring: nothing in it is worth keeping
        }
    }

    private void deleteRingName() {
        if (ringNameLive) {
            ringNameLive = false;
            ringFile.deleteFile();
        }
    }

    // ---- control channel ----

    @Override
    public void send(byte[] frame) {
        ensureUp();
        send(ByteBuffer.wrap(Objects.requireNonNull(frame, "frame")));
    }

    /** As {@link #send(byte[])}, from the buffer: into the ring when nothing is queued ahead of it, with no copy in between. */
    @Override
    public void send(ByteBuffer frame) {
        ensureUp();
        final int start = Objects.requireNonNull(frame, "frame").position();
        final int length = frame.remaining();
        if (length < WireFormat.HEADER_BYTES) {
            throw new IllegalArgumentException("frame of " + length + " bytes is shorter than the "
                + WireFormat.HEADER_BYTES + "-byte header");
        }
        final int body = WireCodec.bodyLength(frame, start, frame.limit());
        if (body != length - WireFormat.HEADER_BYTES) {
            throw new IllegalArgumentException("frame header declares a " + body + "-byte body, the buffer carries "
                + (length - WireFormat.HEADER_BYTES));
        }
        try {
            if (out.isEmpty() && ringOut != null && failure == null) {
                // nothing queued ahead of it: straight into the ring, and only what does not fit is kept (a copy: the
                // caller may reuse its buffer once send returns)
                if (!writeRing(frame)) {
                    throw new LinkFailedException(describe() + ": " + failure);
                }
                if (!frame.hasRemaining()) {
                    return;
                }
            }
            queuedBytes += frame.remaining();
            out.add(copyOfRemaining(frame));
        } finally {
            frame.position(start);
        }
        flushOut();
        if (queuedBytes > MAX_QUEUED_BYTES) {
            // a peer that stopped reading: the control frames would pile up here without end
            fail("the peer reads nothing: " + queuedBytes + " bytes of control frames are queued for it (at most "
                + MAX_QUEUED_BYTES + ")");
            throw new LinkFailedException(describe() + ": " + failure);
        }
    }

    /** @return a new buffer of exactly {@code b}'s remaining bytes ({@code b} is not moved) */
    private static ByteBuffer copyOfRemaining(ByteBuffer b) {
        final byte[] copy = new byte[b.remaining()];
        b.get(b.position(), copy);
        return ByteBuffer.wrap(copy);
    }

    private void flushOut() {
        if (failure != null || closed || tornDown) {
            return;
        }
        try {
            if (bootstrapOut != null) {
                channel.write(bootstrapOut);
                if (bootstrapOut.hasRemaining()) {
                    return;
                }
                bootstrapOut = null;
            }
            if (peer == null) {
                return; // frames wait for the bootstrap exchange: it says whether they go to a ring or the socket
            }
            while (!out.isEmpty()) {
                final ByteBuffer b = out.peek();
                if (ringOut == null) {
                    channel.write(b);
                } else if (!writeRing(b)) {
                    return;
                }
                if (b.hasRemaining()) {
                    return; // ring or socket buffer full: the rest goes out on a later poll
                }
                queuedBytes -= b.capacity();
                out.poll();
            }
        } catch (IOException e) {
            fail("socket write failed: " + e);
        }
    }

    /** Writes what fits of {@code b} into the outgoing ring. @return false if the ring is broken: the link failed */
    private boolean writeRing(ByteBuffer b) {
        try {
            ringOut.write(b);
            return true;
        } catch (ShmRing.CorruptRingException e) {
            fail(e.getMessage());
        } catch (InternalError e) {
            fail(ringFault(e));
        }
        return false;
    }

    /**
     * InternalError is the JVM's answer to SIGBUS on a mapped file: the ring file was truncated under the mapping
     * (a broken peer). It fails the link like any broken peer, not the thread that polls it.
     */
    private String ringFault(InternalError e) {
        return "the control ring " + ringFile.file() + " faulted (truncated under its mapping?): " + e.getMessage();
    }

    /**
     * Reads what the peer sent into {@code in}.
     *
     * @param probe in ring mode, whether this read may check the socket for the peer's EOF (the first read of a poll)
     */
    private void readIn(boolean probe) {
        if (failure != null || closed || tornDown) {
            return;
        }
        if (ringIn != null) {
            readRing(probe);
            return;
        }
        try {
            while (in.hasRemaining()) {
                final int r = channel.read(in);
                if (r < 0) {
                    if (peer == null && ownBootstrapSent) {
                        // a connector before the peer's bootstrap is done: the ring it may name can hold frames the
                        // peer wrote before it closed; readRing fails the link once that ring is empty
                        peerEof = true;
                        return;
                    }
                    fail("peer closed the socket (EOF)");
                    return;
                }
                if (r == 0) {
                    return;
                }
            }
        } catch (IOException e) {
            fail("socket read failed: " + e);
        }
    }

    /**
     * Ring mode: moves what the peer published into {@code in}, and reads the socket — for its EOF only — at
     * most every {@value #SOCKET_CHECK_MICROS} µs, and only when {@code probe} and the ring gave nothing. After the
     * EOF the link fails once the ring is empty, so that every frame the peer wrote before it closed is delivered first.
     *
     * @param probe whether this read may check the socket: the first of a poll, so that the clock is read at most once
     *              per poll (and not at all while the ring delivers)
     */
    private void readRing(boolean probe) {
        try {
            final int n = ringIn.read(in);
            if (n > 0 && ringNameLive) {
                deleteRingName(); // the peer wrote into the ring, so it has mapped it: the name is no longer needed
            }
            if (!peerEof) {
                if (!probe || n > 0) {
                    return; // the EOF matters only once the ring is empty: a later poll that finds it empty checks
                }
                final long now = System.nanoTime();
                if (now - lastSocketCheck < SOCKET_CHECK_MICROS * 1_000) {
                    return;
                }
                lastSocketCheck = now;
                socketProbe.clear();
                final int r = channel.read(socketProbe);
                if (r > 0) {
                    fail("the peer sent " + r + " bytes on the socket after the bootstrap, where it sends nothing in ring mode");
                    return;
                }
                peerEof = r < 0;
            }
            if (peerEof && ringIn.available() == 0) {
                // its close came after its last ring write: nothing more will ever be published
                fail("peer closed the socket (EOF)");
            }
        } catch (IOException e) {
            fail("socket read failed: " + e);
        } catch (ShmRing.CorruptRingException e) {
            failHard(e.getMessage());
        } catch (InternalError e) {
            failHard(ringFault(e));
        }
    }

    /** Sends queued bytes, reads what arrived and completes the bootstrap if it can. Never blocks. */
    void progress() {
        progress(true);
    }

    /** As {@link #progress()}; {@code probe} as {@link #readIn}'s. */
    private void progress(boolean probe) {
        flushOut();
        readIn(probe);
        if (peer == null && (failure == null || in.position() > 0)) {
            tryBootstrap();
        }
        if (peerEof && ringIn == null && failure == null) {
            fail("peer closed the socket (EOF)"); // no ring to drain: the EOF fails the link now
        }
    }

    private void tryBootstrap() {
        final int len;
        final Bootstrap b;
        try {
            len = Bootstrap.length(in);
            if (len < 0 || in.position() < len) {
                return;
            }
            b = Bootstrap.decode(in, len);
        } catch (TransferException e) {
            failHard(e.getMessage());
            return;
        }
        final Optional<ProcessHandle> ph = ProcessHandle.of(b.pid());
        if (ph.isEmpty() || !ph.get().isAlive()) {
            failHard("peer claims pid " + b.pid() + ", which is not a live process here (another pid namespace?): "
                + "its death could never be proven, so the link is refused");
            return;
        }
        if (b.pidNamespace() != 0 && Bootstrap.OWN_PID_NAMESPACE != 0 && b.pidNamespace() != Bootstrap.OWN_PID_NAMESPACE) {
            failHard("peer runs in pid namespace " + b.pidNamespace() + ", this side in " + Bootstrap.OWN_PID_NAMESPACE
                + ": its pid " + b.pid() + " names another process here (or none), so its death could never be proven; "
                + "the link is refused (run both sides in one pid namespace)");
            return;
        }
        final long startedHere = Bootstrap.startTicks(b.pid());
        if (b.startTicks() != 0 && startedHere != 0 && b.startTicks() != startedHere) {
            failHard("peer claims pid " + b.pid() + " started at tick " + b.startTicks() + ", but pid " + b.pid() + " here started at tick "
                + startedHere + ": not the process on this socket, so its death would prove nothing; the link is refused");
            return;
        }
        if (b.identity() != 0) {
            MappedPageStorage m = null;
            try {
                m = MappedPageStorage.map(Path.of(b.poolFile()));
                if (m.identity() != b.identity()) {
                    m.close();
                    failHard("peer's pool file " + b.poolFile() + " has identity 0x" + Long.toHexString(m.identity())
                        + ", the peer announced 0x" + Long.toHexString(b.identity()));
                    return;
                }
                remote = m;
            } catch (RuntimeException | InternalError e) { // InternalError: a fault map's own handler did not see (its Javadoc)
                if (m != null && remote != m) {
                    m.close(); // the fault came after map returned: the mapping is not kept, so it is closed here
                }
                failHard("cannot map the peer's pool file " + b.poolFile() + ": " + e.getMessage());
                return;
            }
        }
        if (in.position() > len && b.version() > 2 && (!ownBootstrapSent || !b.ringFile().isEmpty())) {
            // a version-3 connector holds its frames until it has our bootstrap, and a listener that named a ring
            // puts them there: these bytes are not from a peer that speaks version 3
            failHard("peer sent " + (in.position() - len) + " bytes on the socket after its version-" + b.version() + " bootstrap");
            return;
        }
        if (!ownBootstrapSent && !b.ringFile().isEmpty()) {
            failHard("peer names a control ring in its connector's bootstrap; only a listener creates one");
            return;
        }
        if (ownBootstrapSent && !b.ringFile().isEmpty()) {
            try {
                ringFile = mapRing(b);
            } catch (RuntimeException e) {
                failHard("cannot map the peer's control ring " + b.ringFile() + ": " + e.getMessage()
                    + (e.getSuppressed().length > 0 ? "; nor next to the socket as this process sees it: " + e.getSuppressed()[0].getMessage() : ""));
                return;
            }
            ringFile.deleteFile(); // mapped: the name is no longer needed by anyone
            startRings(true);
        }
        final boolean connector = ownBootstrapSent;
        peer = b;
        peerStart = ph.get().info().startInstant();
        readPos = len;
        if (!ownBootstrapSent) {
            ShmRingFile ring = null;
            if (b.version() > 2 && ringDirectory != null && failure == null) {
                try {
                    ring = ShmRingFile.create(ringDirectory);
                } catch (RuntimeException e) {
                    // not fatal: the frames stay on the socket, as with a version-2 peer
                    System.getLogger("io.kvpool.transfer.shm").log(System.Logger.Level.WARNING, describe()
                        + ": cannot create a control ring in " + ringDirectory + ", control frames use the socket: " + e.getMessage());
                }
            }
            if (ring != null) {
                ringFile = ring;
                ringNameLive = true;
                startRings(false);
            }
            queueOwnBootstrap(b.version(), ring);
        }
        if (connector) {
            flushOut(); // the frames held for the bootstrap go out now, not on the next poll
        }
    }

    private void startRings(boolean connector) {
        ringOut = ringFile.outgoing(connector);
        ringIn = ringFile.incoming(connector);
        lastSocketCheck = System.nanoTime();
    }

    /** A failure before or during the bootstrap: nothing buffered may be delivered as a frame. */
    private void failHard(String reason) {
        in.clear();
        readPos = 0;
        fail(reason);
    }

    /**
     * Delivers the peer's frames and local completions in rounds: each round the frames received, then the completions
     * queued when the round began. A completion's listener may post more writes, and theirs wait for the next round,
     * after the peer's frames: a CANCEL or ABORT from the receiver is read before the next batch of a transfer, not after
     * all of them (copies here complete at once, so a transfer's whole pipeline could otherwise run in one poll), also
     * when a round's completions fill the limit (the next poll starts with the frames).
     */
    @Override
    public int poll(LinkListener listener, int limit) {
        Objects.requireNonNull(listener, "listener");
        int n = 0;
        while (n < limit) {
            final int round = n;
            n += deliverFrames(listener, limit - n, round == 0); // a later round follows one that delivered: no probe
            if (n >= limit) {
                return n;
            }
            n += deliverCompletions(listener, limit - n, events.size());
            if (n == round) {
                break;
            }
        }
        if (n < limit && failure != null && !failureDelivered && !hasCompleteFrame()) {
            failureDelivered = true;
            listener.onLinkFailed(this, describe() + ": " + failure);
            n++;
        }
        return n;
    }

    /** Delivers at most {@code entries} queued completion entries, each write counting as one event. */
    private int deliverCompletions(LinkListener listener, int limit, int entries) {
        int n = 0;
        while (n < limit && entries > 0 && !events.isEmpty()) {
            final Event e = events.peek();
            final long token = e.token;
            final int status = e.status;
            if (e.kind == EV_WRITE) {
                final int k = Math.min(e.count, limit - n); // each write counts as one event against the limit
                if (k == e.count) {
                    events.poll();
                    free(e); // read above: the listener may post writes that take it
                    entries--;
                } else {
                    e.token += k; // stays queued with the rest of its run
                    e.count -= k;
                }
                listener.onWritesDone(this, token, k, status);
                n += k;
            } else {
                events.poll();
                free(e);
                entries--;
                listener.onFlushDone(this, token, status == OK);
                n++;
            }
        }
        return n;
    }

    /** Queues a completion entry, on an event from the free list when it has one. */
    private Event queueEvent(int kind, long token, int count, int status) {
        Event e = freeEvents;
        if (e != null) {
            freeEvents = e.nextFree;
            e.nextFree = null;
            freeEventCount--;
        } else {
            e = new Event();
        }
        e.kind = kind;
        e.token = token;
        e.count = count;
        e.status = status;
        events.add(e);
        return e;
    }

    /** Puts an event that is off {@link #events}, and whose fields were read, on the free list (unless it is full). */
    private void free(Event e) {
        if (freeEventCount < MAX_FREE_EVENTS) {
            e.nextFree = freeEvents;
            freeEvents = e;
            freeEventCount++;
        }
    }

    /**
     * Reads what the peer sent and delivers at most {@code limit} complete frames.
     *
     * @param probe whether its first read may check the socket ({@link #readRing}); the reads after a frame do not
     */
    private int deliverFrames(LinkListener listener, int limit, boolean probe) {
        int n = 0;
        progress(probe);
        while (n < limit && peer != null && !closed) {
            final int avail = in.position() - readPos;
            if (avail < WireFormat.HEADER_BYTES) {
                break;
            }
            final int body;
            try {
                body = WireCodec.bodyLength(in, readPos, in.position());
            } catch (MalformedMessageException e) {
                failHard("malformed frame header from the peer: " + e.getMessage());
                break;
            }
            final int frameBytes = WireFormat.HEADER_BYTES + body;
            if (avail < frameBytes) {
                if (frameBytes > in.capacity() - readPos) {
                    grow(frameBytes);
                    readIn(false);
                    continue;
                }
                break;
            }
            final ByteBuffer frame = frameView().limit(readPos + frameBytes).position(readPos);
            readPos += frameBytes;
            listener.onFrame(this, frame);
            n++;
            if (avail - frameBytes < WireFormat.HEADER_BYTES && failure == null && !closed && !tornDown) {
                compact();
                readIn(false);
            }
        }
        if (failure != null || closed || tornDown) {
            // nothing more will be read: a partial frame left in the buffer is dropped with the link
        } else {
            compact();
        }
        return n;
    }

    /**
     * @return a read-only view of {@link #in} for one frame at a time (LinkListener: a frame is decoded before its call
     *         returns), cleared; made again only when {@code in} was replaced
     */
    private ByteBuffer frameView() {
        if (inView == null || inViewOf != in) {
            inViewOf = in;
            inView = in.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
        }
        return inView.clear();
    }

    private boolean hasCompleteFrame() {
        if (peer == null) {
            return false;
        }
        final int avail = in.position() - readPos;
        if (avail < WireFormat.HEADER_BYTES) {
            return false;
        }
        try {
            return avail >= WireFormat.HEADER_BYTES + WireCodec.bodyLength(in, readPos, in.position());
        } catch (MalformedMessageException e) {
            return false;
        }
    }

    private void compact() {
        if (readPos > 0) {
            in.limit(in.position()).position(readPos);
            in.compact();
            readPos = 0;
        }
    }

    /** Makes room for a frame of {@code frameBytes} at the buffer's start: compacts, and allocates only if that is not enough. */
    private void grow(int frameBytes) {
        compact();
        if (frameBytes <= in.capacity()) {
            return; // a small frame that straddled the end: compacting made its room, and a bigger buffer would stay for good
        }
        final ByteBuffer bigger = ByteBuffer.allocate(Math.max(frameBytes, in.capacity() * 2));
        in.flip();
        bigger.put(in);
        in = bigger;
        inView = inViewOf = null; // the view of the old buffer goes with it
    }

    // ---- receiver side ----

    /**
     * Exposes slots of this side's pool file to the peer.
     *
     * @param storage must be the {@link MappedPageStorage} this link announced to the peer
     * @param slots   distinct slots, at most {@link #MAX_REGISTERED_SLOTS}
     * @throws LinkFailedException       if the link is down
     * @throws IllegalStateException     if this side exposes no pool (the link was created to send only)
     * @throws IndexOutOfBoundsException if a slot is outside the pool file
     * @throws IllegalArgumentException  if the storage is another one, a slot is repeated, or there are more slots than
     *                                   one region key holds
     */
    @Override
    public Registration register(PageStorage storage, int[] slots) {
        ensureUp();
        if (local == null) {
            // a deployment fault, not a lost link: the receiver counts it ABORTED, which callers do not retry
            throw new IllegalStateException(describe() + " exposes no mapped pool: create the link with one to receive");
        }
        if (storage != local) {
            throw new IllegalArgumentException("register needs the mapped storage this link exposes (" + local + "), got " + storage);
        }
        if (slots.length > MAX_REGISTERED_SLOTS) {
            throw new IllegalArgumentException(slots.length + " slots in one registration, at most " + MAX_REGISTERED_SLOTS
                + " fit a " + WireFormat.MAX_KEY_BYTES + "-byte region key");
        }
        SlotChecks.requireDistinct(slots, local.pageCount(), "registered twice");
        final int id = nextRegistration++;
        final byte[] key = new byte[KEY_FIXED_BYTES + 4 * slots.length];
        KEY_INT.set(key, 0, KEY_MAGIC);
        KEY_LONG.set(key, 4, local.identity());
        KEY_INT.set(key, 12, id);
        KEY_INT.set(key, 16, slots.length);
        for (int i = 0; i < slots.length; i++) {
            KEY_INT.set(key, KEY_FIXED_BYTES + 4 * i, slots[i]);
        }
        // the peer maps the whole pool file: nothing to revoke. The key is handed out without a copy: nothing in this
        // link reads it again (a sender checks every slot a key names when it attaches)
        return FixedRegistration.taking(key);
    }

    /**
     * Closes the socket, then proves whether the peer can still write: {@code true} only once the peer
     * process is gone (no such process, not alive, a zombie, or a different process now holding its pid),
     * since its mapping of the pool file dies only with it. Returns {@code false} while it lives (call
     * again later), always when the peer is this very process, and when this side exposed a pool but the
     * peer's pid never arrived. A side that exposes no pool has nothing to protect: {@code true}.
     */
    @Override
    public boolean tearDown() {
        if (!tornDown) {
            tornDown = true;
            closeChannel(true);
        }
        if (local == null) {
            return true;
        }
        if (peer == null || peer.pid() == selfPid) {
            return false;
        }
        return processGone(peer.pid(), peerStart);
    }

    /**
     * Whether the peer process is proven gone, by the same test as {@link #tearDown()}: no such process,
     * not alive, a zombie, or its pid now held by a process that started at another instant than the one
     * seen at the bootstrap. {@code false} before the bootstrap arrived and when the peer is this process.
     * For transports that expose memory to the peer some other way and reuse this link for control frames.
     *
     * @return whether the peer process is proven gone
     */
    public boolean peerProcessGone() {
        return peer != null && peer.pid() != selfPid && processGone(peer.pid(), peerStart);
    }

    static boolean processGone(long pid, Optional<Instant> start) {
        final Optional<ProcessHandle> ph = ProcessHandle.of(pid);
        if (ph.isEmpty() || !ph.get().isAlive()) {
            return true;
        }
        final Optional<Instant> now = ph.get().info().startInstant();
        if (start.isPresent() && now.isPresent() && !start.get().equals(now.get())) {
            return true; // the pid was reused by another process
        }
        // A zombie (killed, not yet reaped) has no memory left, but some JDKs report it alive. "Zombie" must hold
        // for every thread: /proc/<pid>/stat describes the main thread only, which shows Z as soon as it exits
        // while the other threads — and the mapping, the CUDA context, the queued copies — live on.
        try (var tasks = Files.list(Path.of("/proc/" + pid + "/task"))) {
            final java.util.Iterator<Path> it = tasks.iterator();
            while (it.hasNext()) {
                final char state = taskState(it.next().resolve("stat"));
                if (state != 'Z' && state != 'X' && state != 0) {
                    return false; // a live thread: the process can still write
                }
            }
            return true; // every thread is dead (or gone while we looked)
        } catch (IOException | RuntimeException e) {
            return ProcessHandle.of(pid).isEmpty(); // no /proc (not Linux) or the process just went away
        }
    }

    /** @return the state letter of a /proc task's stat file, or 0 if the task went away while we looked */
    private static char taskState(Path stat) {
        try {
            final String s = Files.readString(stat);
            final int paren = s.lastIndexOf(')');
            return paren > 0 && paren + 2 < s.length() ? s.charAt(paren + 2) : '?';
        } catch (IOException e) {
            return 0;
        }
    }

    // ---- sender side ----

    /**
     * @throws LinkFailedException if the link is down, not ready, the peer exposes no pool, or the key is
     *                             not a key of the peer's pool file or lists another number of pages
     */
    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        ensureReady();
        if (remote == null) {
            throw new LinkFailedException(describe() + ": the peer exposes no pool to write into");
        }
        if (regionKey.length < KEY_FIXED_BYTES || (int) KEY_INT.get(regionKey, 0) != KEY_MAGIC) {
            throw new LinkFailedException(describe() + ": region key of " + regionKey.length + " bytes is not a shm key");
        }
        final long identity = (long) KEY_LONG.get(regionKey, 4);
        final int id = (int) KEY_INT.get(regionKey, 12);
        final int count = (int) KEY_INT.get(regionKey, 16);
        if (identity != remote.identity()) {
            throw new LinkFailedException(describe() + ": region key " + id + " is for pool file identity 0x" + Long.toHexString(identity)
                + ", this link maps 0x" + Long.toHexString(remote.identity()) + " (" + remote.file() + ")");
        }
        if (count < 0 || regionKey.length != KEY_FIXED_BYTES + 4L * count) {
            throw new LinkFailedException(describe() + ": region key " + id + " lists " + count + " slots in "
                + regionKey.length + " bytes");
        }
        if (count != pages) {
            throw new LinkFailedException(describe() + ": region key " + id + " lists " + count + " pages, the descriptor " + pages);
        }
        final int[] slots = new int[count];
        for (int i = 0; i < count; i++) {
            slots[i] = (int) KEY_INT.get(regionKey, KEY_FIXED_BYTES + 4 * i);
            if (slots[i] < 0 || slots[i] >= remote.pageCount()) {
                throw new LinkFailedException(describe() + ": region key " + id + " lists slot " + slots[i] + ", the pool file has "
                    + remote.pageCount() + " pages");
            }
        }
        return new Region(this, slots);
    }

    private record Region(ShmLink link, int[] slots) implements RemoteRegion {
        @Override
        public int pages() {
            return slots.length;
        }

        @Override
        public String toString() {
            return "shm region of " + slots.length + " pages";
        }
    }

    /**
     * Copies each source page into its destination slot of the peer's pool file, now. Everything is
     * checked before the first copy, so an exception means nothing was posted. Each write then reports
     * {@link #OK}, or {@link #FAILED} if its copy threw (e.g. the source was closed meanwhile).
     *
     * @throws LinkFailedException      if the link is down
     * @throws IllegalArgumentException if the region is not from this link, the source is not host
     *                                  accessible or has another page layout
     * @throws IndexOutOfBoundsException if an index is out of range
     */
    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        ensureReady();
        if (!(region instanceof Region r) || r.link() != this) {
            throw new IllegalArgumentException("region " + region + " was not attached on " + describe());
        }
        if (!source.isHostAccessible()) {
            throw new IllegalArgumentException("shm writes copy from host memory; source storage " + source + " is not host accessible");
        }
        if (!source.layout().equals(remote.layout())) { // equal layouts, equal fingerprints (and equals is cheap)
            throw new IllegalArgumentException("source layout " + source.layout() + " (fingerprint 0x"
                + Long.toHexString(source.layout().fingerprint()) + ") differs from the peer's " + remote.layout()
                + " (fingerprint 0x" + Long.toHexString(remote.layout().fingerprint()) + ")");
        }
        Objects.checkFromIndexSize(off, count, dst.length);
        Objects.checkFromIndexSize(off, count, src.length);
        for (int i = off; i < off + count; i++) {
            Objects.checkIndex(dst[i], r.slots().length);
            Objects.checkIndex(src[i], source.pageCount());
        }
        final MemorySegment dstAll = remote.segment();
        final long pageBytes = remote.layout().bytesPerPage();
        final MemorySegment srcAll = wholeSegment(source); // one segment, not a slice per page
        final Runnable lateFault = lateFaultForTests;
        Event run = null;
        int runs = 0; // this batch's events, the last ones queued
        try {
            for (int i = 0; i < count; i++) {
                int status;
                try {
                    final long to = r.slots()[dst[off + i]] * pageBytes;
                    if (srcAll != null) {
                        MemorySegment.copy(srcAll, src[off + i] * pageBytes, dstAll, to, pageBytes);
                    } else {
                        MemorySegment.copy(source.hostPage(src[off + i]), 0, dstAll, to, pageBytes);
                    }
                    status = OK;
                } catch (RuntimeException e) { // e.g. the source closed meanwhile: this write alone
                    status = FAILED; // may have landed in part, as FAILED allows
                }
                if (run != null && run.status == status) {
                    run.count++;
                } else {
                    run = queueEvent(EV_WRITE, firstToken + i, 1, status);
                    runs++;
                }
                if (lateFault != null) {
                    lateFault.run();
                }
            }
        } catch (InternalError fault) {
            // The JVM's answer to SIGBUS, e.g. the pool file shrank under the mapping. Compiled code reports it at its
            // next safepoint check, which may come during a later copy or after the copy's own catch (MappedPageStorage
            // #map says so), so which write faulted is unknown: every write of the batch ends FAILED (each may have
            // landed in part), and putBatch returns normally, its writes posted. A fault reported only at this
            // method's return escapes it; nothing here can catch that one.
            for (; runs > 0; runs--) {
                free(events.pollLast());
            }
            queueEvent(EV_WRITE, firstToken, count, FAILED);
        }
    }

    /** Test seam: runs after each write of a batch, where compiled code may report a late fault. Null in production. */
    static Runnable lateFaultForTests;

    /** @return the segment over all of a host storage's pages (page p at p × bytesPerPage), or null to go page by page */
    private static MemorySegment wholeSegment(PageStorage storage) {
        try {
            return storage instanceof HostPageStorage h ? h.segment()
                : storage instanceof MappedPageStorage m ? m.segment() : null;
        } catch (RuntimeException e) {
            return null; // closed: each page's copy fails on its own, and reports FAILED
        }
    }

    /** A full fence: every copy before it is visible in the shared memory; reported {@code ok} through {@link #poll}. */
    @Override
    public void flush(long token) {
        ensureUp();
        VarHandle.fullFence();
        queueEvent(EV_FLUSH, token, 1, OK);
    }

    /** Nothing to cancel: every write completed inside {@link #putBatch} and its terminal state is already queued. */
    @Override
    public void cancelWrites() {
        // writes are synchronous memory copies: none is ever pending
    }

    /**
     * Closes the socket and this side's mapping of the peer's pool file. Idempotent. Queued completions
     * (all writes are already terminal) are still delivered by {@link #poll}. Frames already in the ring stay readable
     * by the peer, also one that has not mapped it yet.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        closeChannel(true);
        if (remote != null) {
            remote.close();
        }
        if (ringFile != null) {
            ringFile.close();
            ringIn = null;
            ringOut = null;
        }
        in = ByteBuffer.allocate(0); // no frame is read or delivered after close: an engine may keep a closed link long
        inView = inViewOf = null;    // nor the view of the old buffer
        readPos = 0;
    }

    /** @return bytes of the input buffer this link holds (tests: a closed link gives it back; the view shares it) */
    int inputBufferBytes() {
        return in.capacity() + (inViewOf == null || inViewOf == in ? 0 : inViewOf.capacity());
    }

    @Override
    public String toString() {
        return describe();
    }
}
