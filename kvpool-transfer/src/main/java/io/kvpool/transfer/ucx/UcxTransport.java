package io.kvpool.transfer.ucx;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.TransferException;
import io.kvpool.transfer.spi.LinkFailedException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * The UCX transport: one {@link UcpContext}, one {@link UcpWorker} per link, and the one thread that owns
 * them all (a {@code UcpWorker} is not thread-safe, see docs/dependencies.md, "UCX from Java"). Every UCX call of every
 * {@link UcxLink} made by this transport runs on that thread, fed by a command queue; the thread also calls
 * {@code progress()} on every link's worker (over tcp the receiver must progress for one-sided puts to
 * land). UCX callbacks run inside {@code progress()} on that thread and only queue events; listeners run
 * only from {@link UcxLink#poll} on the link owner's thread.
 *
 * <h2>Why a worker per link</h2>
 * Force-closing this side's endpoint does not stop the peer's puts: over tcp they arrive as messages on
 * the peer's own connection to our worker, and our worker keeps applying them into registered memory
 * ({@code UcxProtocolTwoProcessTest}: a frozen sender, thawed after the receiver had force-closed its
 * endpoint and released the pages, flushed successfully and its bytes landed in FREE pages). Destroying
 * the worker closes every connection and listening socket it has, so nothing from that peer can be applied
 * any more: {@link UcxLink#tearDown} is proven only once the link's worker is closed.
 *
 * <h2>Bootstrap</h2>
 * {@link #connect} exchanges worker addresses (and the tag each side receives control frames on) over
 * an already connected TCP socket, e.g. on loopback; both sides call it, in either order. The socket is
 * used for nothing else and the caller closes it afterwards. Endpoints are created with peer error
 * handling (failure detection on), and the context allows only UCX's tcp transport ({@code TLS=tcp}):
 * the teardown fence below is established for tcp only.
 *
 * <h2>Registrations</h2>
 * Each storage is registered with UCX once, as a whole, on its first {@link UcxLink#register} and kept
 * until this transport closes; close the transport before the storages it registered.
 */
public final class UcxTransport implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.kvpool.transfer.ucx");

    private static final long PARK_NANOS = 20_000;
    private static final int SPINS_BEFORE_PARK = 200;
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(10);

    private final String name;
    private final Duration keepaliveInterval;
    private final UcpContext context;
    private final Thread thread;
    private final ConcurrentLinkedQueue<Runnable> commands = new ConcurrentLinkedQueue<>();
    private final AtomicLong nextTag = new AtomicLong(1);
    /** UCX-thread only. */
    private final Map<PageStorage, UcpMemory> registered = new IdentityHashMap<>();
    /** UCX-thread only. */
    private final List<UcxLink> links = new ArrayList<>();
    /**
     * Workers made for a connect that no link holds yet (owner thread only): closed by the connect when it fails, or
     * by the shutdown if the transport closed before the connect could (the context must not outlive them).
     */
    private final java.util.Set<UcpWorker> unlinked = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
    /** How often the UCX thread looks for closed links whose workers can go ({@link UcxLink#reapClosed}). */
    private static final long REAP_INTERVAL_NANOS = TimeUnit.MILLISECONDS.toNanos(100);
    /** How long a closed link's worker stays after its endpoint closed (UCX thread reads it; tests shorten it). */
    volatile long closedWorkerGraceNanos = TimeUnit.SECONDS.toNanos(5);
    private long lastReap;
    private volatile boolean running = true;
    /** Whether {@link #execute} takes commands; cleared by the owner thread under {@link #commands}' lock once it drained them. */
    private boolean accepting = true;
    /** How long a {@link #call} waits for the owner thread (tests shorten it). */
    volatile Duration callTimeout = CALL_TIMEOUT;
    private volatile boolean closed;
    private final CompletableFuture<Void> stopped = new CompletableFuture<>();

    /** The JUCX class whose absence means the optional dependency was left out. */
    static final String JUCX_PROBE_CLASS = "org.openucx.jucx.ucp.UcpContext";

    private UcxTransport(String name, Duration keepaliveInterval) {
        this.name = Objects.requireNonNull(name, "name");
        this.keepaliveInterval = checkKeepalive(keepaliveInterval);
        requireJucx(name);
        final UcpContext ctx;
        try {
            // tcp only: a link's teardown is proven by closing its worker, which fences a peer's puts because over
            // tcp our worker is what applies them. Shared-memory or RDMA transports would write without it, so
            // enabling them needs that fence re-established first (a destroyed QP, a revoked memory key).
            final UcpParams params = new UcpParams().requestTagFeature().requestRmaFeature().setConfig("TLS", "tcp");
            // how often an endpoint checks its peer (UCX's default is 20 s). Over tcp a failed check shows only as a
            // socket error: an idle endpoint whose peer tore its side down during a cut learns it at the old
            // connection's next retransmission after the heal; the protocol's heartbeat bounds longer cuts
            params.setConfig("KEEPALIVE_INTERVAL", keepaliveInterval.toMillis() + "ms");
            ctx = new UcpContext(params);
        } catch (LinkageError e) {
            throw new UcxUnavailableException("UCX transport '" + name + "' cannot load UCX: " + e, e);
        }
        this.context = ctx;
        try {
            ctx.newWorker(new UcpWorkerParams()).close(); // a probe: fail here, not on the first connect
        } catch (RuntimeException e) {
            ctx.close();
            throw new TransferException("UCX transport '" + name + "': cannot create a worker: " + e.getMessage(), e);
        }
        this.thread = Thread.ofPlatform().daemon().name("ucx-" + name).unstarted(this::loop);
        thread.start();
    }

    /**
     * JUCX is an optional dependency of kvpool-transfer: a user of the shared-memory or in-JVM transports does not
     * get it. Checked before any JUCX class is touched, so its absence gets this message and not a bare
     * {@link NoClassDefFoundError}.
     */
    private static void requireJucx(String name) {
        try {
            Class.forName(JUCX_PROBE_CLASS, false, UcxTransport.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            throw new UcxUnavailableException("UCX transport '" + name + "' needs JUCX, an optional dependency of kvpool-transfer "
                + "that is not on the class path: add org.openucx:jucx:1.12.1 to your build (and install UCX 1.13.1, Debian's "
                + "libucx0)", e);
        }
    }

    /**
     * Opens a transport: creates the UCX context and worker and starts the owner thread.
     *
     * @param name for thread names and messages
     * @return the transport
     * @throws UcxUnavailableException if UCX (libucp) cannot be loaded
     */
    public static UcxTransport open(String name) {
        return new UcxTransport(name, DEFAULT_KEEPALIVE);
    }

    /** The keepalive interval of {@link #open(String)}: 250 ms (UCX's own default is 20 s). */
    public static final Duration DEFAULT_KEEPALIVE = Duration.ofMillis(250);

    /**
     * Opens a transport whose endpoints check their peers every {@code keepaliveInterval} (UCX's
     * {@code KEEPALIVE_INTERVAL}), so that an endpoint whose peer is gone fails and its side reconnects. Over tcp a
     * check fails only on a socket error: an idle endpoint whose peer tore its side down while the path was cut
     * learns it at the old connection's next TCP retransmission after the heal (0.27–1.26 s measured), whatever the
     * interval. Cuts longer than the protocol's heartbeat timeout are bounded by the heartbeat instead (see
     * docs/transfer.md, "UCX keepalive"). Each round sends a few bytes per endpoint.
     *
     * @param name              for thread names and messages
     * @param keepaliveInterval between two keepalive rounds, 10 ms to 1 hour
     * @return the transport
     * @throws UcxUnavailableException  if UCX (libucp) cannot be loaded
     * @throws IllegalArgumentException if the interval is out of range
     */
    public static UcxTransport open(String name, Duration keepaliveInterval) {
        return new UcxTransport(name, keepaliveInterval);
    }

    private static Duration checkKeepalive(Duration d) {
        if (d == null || d.compareTo(Duration.ofMillis(10)) < 0 || d.compareTo(Duration.ofHours(1)) > 0) {
            throw new IllegalArgumentException("the UCX keepalive interval must be 10 ms to 1 hour, was " + d);
        }
        return d;
    }

    /** {@return the keepalive interval its endpoints use} */
    public Duration keepaliveInterval() {
        return keepaliveInterval;
    }

    /**
     * Checks whether UCX can be loaded here, without keeping anything open.
     *
     * @return empty if UCX works, else why not (e.g. the {@link UnsatisfiedLinkError} text)
     */
    public static Optional<String> unavailableReason() {
        try {
            new UcxTransport("probe", DEFAULT_KEEPALIVE).close();
            return Optional.empty();
        } catch (UcxUnavailableException e) {
            return Optional.of(e.getMessage());
        } catch (RuntimeException | LinkageError e) {
            return Optional.of("UCX does not work here: " + e);
        }
    }

    /** {@return the name given to {@link #open}} */
    public String name() {
        return name;
    }

    /**
     * Makes a link to the peer at the other end of {@code socket}: creates the link's own worker, and both
     * sides write its address and their receive tag, read the peer's, and create an endpoint to the peer's
     * worker with failure detection.
     *
     * @param socket  a connected socket to the peer (left open; the caller closes it)
     * @param label   names the link in {@link UcxLink#describe()}, e.g. {@code "prefill-0→decode-1"}
     * @param timeout how long to wait for the peer's half of the exchange
     * @return the link, up
     * @throws LinkFailedException  if the exchange fails or times out, or the transport is closed
     * @throws TransferException    (not a LinkFailedException) if the transport's UCX thread does not answer within
     *                              its call timeout, or the caller is interrupted while it waits: a wedged transport,
     *                              which another link would meet too
     * @throws RuntimeException     as UCX throws it ({@code org.openucx.jucx.UcxException}) if the link's worker
     *                              cannot be made
     * @throws NullPointerException if an argument is null (before anything is made)
     */
    public UcxLink connect(Socket socket, String label, Duration timeout) {
        java.util.Objects.requireNonNull(socket, "socket");
        java.util.Objects.requireNonNull(label, "label"); // before a worker is made for it
        java.util.Objects.requireNonNull(timeout, "timeout");
        ensureOpen();
        final long myTag = nextTag.getAndIncrement();
        final UcpWorker worker = call(() -> {
            final UcpWorker w = context.newWorker(new UcpWorkerParams());
            unlinked.add(w);
            return w;
        }, callTimeout, this::closeUnlinked);
        final byte[] myAddress;
        try {
            myAddress = call(() -> {
                final ByteBuffer a = worker.getAddress();
                final byte[] b = new byte[a.remaining()];
                a.duplicate().get(b);
                return b;
            });
        } catch (RuntimeException e) {
            closeWorker(worker);
            throw e;
        }
        final byte[] peerAddress;
        final long peerTag;
        try {
            socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE, timeout.toMillis())));
            final DataOutputStream out = new DataOutputStream(socket.getOutputStream());
            out.writeInt(MAGIC);
            out.writeLong(myTag);
            out.writeInt(myAddress.length);
            out.write(myAddress);
            out.flush();
            final DataInputStream in = new DataInputStream(deadlineStream(socket, System.nanoTime() + timeout.toNanos()));
            final int magic = in.readInt();
            if (magic != MAGIC) {
                throw new LinkFailedException("UCX bootstrap of '" + label + "': bad magic 0x" + Integer.toHexString(magic)
                    + " from " + socket.getRemoteSocketAddress() + ", expected 0x" + Integer.toHexString(MAGIC));
            }
            peerTag = in.readLong();
            final int len = in.readInt();
            if (len < 1 || len > MAX_ADDRESS_BYTES) {
                throw new LinkFailedException("UCX bootstrap of '" + label + "': worker address of " + len
                    + " bytes from " + socket.getRemoteSocketAddress() + ", expected 1.." + MAX_ADDRESS_BYTES);
            }
            peerAddress = new byte[len];
            in.readFully(peerAddress);
        } catch (IOException e) {
            closeWorker(worker);
            throw new LinkFailedException("UCX bootstrap of '" + label + "' with " + socket.getRemoteSocketAddress()
                + " failed after up to " + timeout.toMillis() + " ms: " + e, e);
        } catch (RuntimeException e) {
            closeWorker(worker);
            throw e;
        }
        final UcxLink link = new UcxLink(this, worker, label, myTag, peerTag);
        return call(() -> {
            try {
                link.start(peerAddress);
            } catch (RuntimeException e) {
                unlinked.remove(worker); // first: whatever the close throws, the shutdown must not close it again
                link.closeWorkerNow(); // the caller gets no link to close: nothing of it may stay
                throw new LinkFailedException("UCX endpoint of '" + label + "' to " + socket.getRemoteSocketAddress()
                    + " could not be created: " + e, e);
            }
            links.add(link); // progressed from now on
            unlinked.remove(worker);
            return link;
        }, callTimeout, l -> { // the caller timed out and holds no link: nothing of it may stay
            links.remove(l);
            l.closeWorkerNow();
        }, () -> closeUnlinked(worker)); // the caller gave up before the link was made: its worker is closed instead
    }

    /**
     * The socket's input, each read waiting only for what is left of the time until {@code deadlineNanos}: the
     * bootstrap's timeout bounds the whole wait for the peer's half, so a peer that trickles it byte by byte, each
     * within the socket timeout, cannot hold a connect for longer.
     */
    private static java.io.InputStream deadlineStream(Socket socket, long deadlineNanos) throws IOException {
        return new java.io.FilterInputStream(socket.getInputStream()) {
            private void arm() throws IOException {
                final long left = deadlineNanos - System.nanoTime();
                if (left <= 0) {
                    throw new java.net.SocketTimeoutException("the peer's half did not arrive in time");
                }
                socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE, TimeUnit.NANOSECONDS.toMillis(left))));
            }

            @Override
            public int read() throws IOException {
                arm();
                return super.read();
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                arm();
                return super.read(b, off, len);
            }
        };
    }

    /** Closes a worker no link took (owner thread). */
    private void closeUnlinked(UcpWorker w) {
        if (unlinked.remove(w)) {
            w.close();
        }
    }

    private void closeWorker(UcpWorker w) {
        try {
            call(() -> {
                closeUnlinked(w);
                return null;
            });
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "UCX transport '" + name + "': closing an unused worker failed: " + e);
        }
    }

    private static final int MAGIC = 0x55435831; // "UCX1"
    private static final int MAX_ADDRESS_BYTES = 64 * 1024;

    // ---- owner thread ----

    boolean isOwnerThread() {
        return Thread.currentThread() == thread;
    }

    /**
     * Queues a command for the owner thread (runs in queue order). A command accepted here always runs: the owner
     * thread stops accepting only once its queue is empty, under {@link #commands}' lock.
     *
     * @throws LinkFailedException if the transport closed
     */
    void execute(Runnable r) {
        synchronized (commands) {
            if (!accepting) {
                throw new LinkFailedException("UCX transport '" + name + "' is closed");
            }
            commands.add(r);
        }
        LockSupport.unpark(thread);
    }

    /** Runs a command on the owner thread and waits for its result. */
    <T> T call(Callable<T> c) {
        return call(c, callTimeout, null);
    }

    /**
     * Runs a command on the owner thread and waits up to {@code timeout} for its result. A command that makes
     * something ({@code ifAbandoned} given) leaves nothing behind when its caller gives up (times out or is
     * interrupted): it does not run if it had not started, and what it returns if it had is handed to
     * {@code ifAbandoned} (on the owner thread) to be released. A command without one always runs, so that a
     * command that releases something (a close, a teardown) is never lost to its caller's impatience.
     *
     * @param ifAbandoned releases the result of a command whose caller gave up; {@code null} for a command that must
     *                    run whatever its caller does
     * @throws TransferException if no answer came in time, the caller was interrupted, or the command threw a checked
     *                           exception
     */
    <T> T call(Callable<T> c, Duration timeout, java.util.function.Consumer<? super T> ifAbandoned) {
        return call(c, timeout, ifAbandoned, null);
    }

    /**
     * As {@link #call(Callable, Duration, java.util.function.Consumer)}; a command its caller gave up on before it
     * started runs {@code ifSkipped} instead (on the owner thread), to release what the caller made for it.
     *
     * @param ifSkipped releases the command's inputs when it does not run; {@code null} if there are none
     */
    <T> T call(Callable<T> c, Duration timeout, java.util.function.Consumer<? super T> ifAbandoned, Runnable ifSkipped) {
        if (isOwnerThread()) {
            try {
                return c.call();
            } catch (RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw new TransferException("UCX transport '" + name + "': " + e, e);
            }
        }
        final CompletableFuture<T> f = new CompletableFuture<>();
        execute(() -> {
            if (ifAbandoned != null && f.isDone()) {
                if (ifSkipped != null) {
                    ifSkipped.run();
                }
                return; // it makes something, and its caller gave up before it ran: nobody would take it
            }
            final T v;
            try {
                v = c.call();
            } catch (Throwable t) {
                f.completeExceptionally(t);
                return;
            }
            if (!f.complete(v) && ifAbandoned != null) {
                ifAbandoned.accept(v); // its caller gave up while it ran: nobody else will release what it made
            }
        });
        try {
            return f.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw rethrown(e);
        } catch (TimeoutException e) {
            if (!f.completeExceptionally(new CancellationException("its caller gave up"))) {
                return resultOf(f); // it finished just now: the result is the caller's after all
            }
            throw new TransferException("UCX transport '" + name + "': no answer from the UCX thread within "
                + timeout.toMillis() + " ms");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            if (!f.completeExceptionally(new CancellationException("its caller was interrupted"))) {
                return resultOf(f); // it finished just now: the caller takes it (and keeps its interrupt)
            }
            throw new TransferException("UCX transport '" + name + "': interrupted while waiting for the UCX thread");
        }
    }

    /** @return the result of a command that completed, or what it threw */
    private <T> T resultOf(CompletableFuture<T> f) {
        try {
            return f.getNow(null);
        } catch (java.util.concurrent.CompletionException done) {
            throw rethrown(done);
        }
    }

    private RuntimeException rethrown(Exception e) {
        if (e.getCause() instanceof RuntimeException r) {
            return r;
        }
        return new TransferException("UCX transport '" + name + "': " + e.getCause(), e.getCause());
    }

    /** Owner thread: the storage's registration, made on first use (the whole storage, once). */
    UcpMemory registration(PageStorage storage) {
        UcpMemory m = registered.get(storage);
        if (m == null) {
            final int pages = storage.pageCount();
            final long pageBytes = storage.layout().bytesPerPage();
            final MemorySegment first = storage.hostPage(0);
            final MemorySegment last = storage.hostPage(pages - 1);
            if (last.address() != first.address() + (pages - 1) * pageBytes) {
                throw new IllegalArgumentException("UCX transport '" + name + "' needs contiguous pages: page " + (pages - 1)
                    + " is at 0x" + Long.toHexString(last.address()) + ", expected 0x"
                    + Long.toHexString(first.address() + (pages - 1) * pageBytes));
            }
            m = context.memoryMap(new UcpMemMapParams().setAddress(first.address()).setLength(pages * pageBytes));
            registered.put(storage, m);
        }
        return m;
    }

    private void loop() {
        int idle = 0;
        try {
            while (running) {
                int work = 0;
                Runnable r;
                while ((r = commands.poll()) != null) {
                    runCommand(r);
                    work++;
                }
                if (work > 0) {
                    links.removeIf(UcxLink::workerClosed); // torn down by a command
                }
                final int progressed = progressOnce();
                if (progressed > 0) {
                    for (int i = 0; i < links.size(); i++) {
                        final UcxLink l = links.get(i);
                        guarded(l, "finishing its close", l::afterProgress);
                    }
                    links.removeIf(UcxLink::workerClosed);
                }
                final long now = System.nanoTime();
                if (now - lastReap > REAP_INTERVAL_NANOS) {
                    lastReap = now;
                    links.removeIf(l -> {
                        guarded(l, "reaping its worker", () -> l.reapClosed(now, closedWorkerGraceNanos));
                        return l.workerClosed();
                    });
                }
                work += progressed;
                if (work == 0) {
                    if (busy()) {
                        // writes or flushes in flight: never park (a park delays their completion by its whole
                        // length, ≥ 50 µs on Linux); spin, then yield so that an oversubscribed machine can run the
                        // threads we wait for (the peer's, the caller's)
                        if (++idle > SPINS_BEFORE_PARK) {
                            Thread.yield();
                        } else {
                            Thread.onSpinWait();
                        }
                    } else if (++idle > SPINS_BEFORE_PARK) {
                        LockSupport.parkNanos(PARK_NANOS);
                    } else {
                        Thread.onSpinWait();
                    }
                } else {
                    idle = 0;
                }
            }
            shutdown();
        } finally {
            stopped.complete(null);
        }
    }

    private void runCommand(Runnable r) {
        try {
            r.run();
        } catch (Throwable t) {
            // commands report their own failures; this is a bug guard, never let the owner thread die
            LOG.log(System.Logger.Level.ERROR, "UCX transport '" + name + "': command failed: " + t, t);
        }
    }

    /**
     * Runs one link's share of a round on the owner thread. What it throws is a bug: it must not end the thread, or the
     * transport would go on accepting commands that never run and every link on it would hang. The link fails, so
     * that its engine gives it up, and the first such throw of each link is logged (a call that throws once may throw
     * every round).
     */
    private void guarded(UcxLink l, String what, Runnable r) {
        try {
            r.run();
        } catch (Throwable t) {
            bug(l, what, t);
        }
    }

    private void bug(UcxLink l, String what, Throwable t) {
        if (l.failOnBug(what, t)) {
            LOG.log(System.Logger.Level.ERROR, "UCX transport '" + name + "': " + l.describe() + " failed " + what + ": " + t, t);
        }
    }

    private boolean busy() {
        for (int i = 0; i < links.size(); i++) {
            if (links.get(i).busy()) {
                return true;
            }
        }
        return false;
    }

    /** @return links whose workers this transport still progresses (tests: closed links must leave) */
    int linkCount() {
        return call(links::size);
    }

    /** Owner thread: progresses every open link's worker. @return progress calls that did something */
    int progressOnce() {
        int n = 0;
        for (int i = 0; i < links.size(); i++) {
            final UcxLink l = links.get(i);
            try {
                n += l.progress();
            } catch (Throwable t) { // as in guarded()
                bug(l, "progressing", t);
            }
        }
        return n;
    }

    /** Owner thread: progress until {@code done} or the deadline. */
    boolean progressUntil(java.util.function.BooleanSupplier done, long deadlineNanos) {
        while (!done.getAsBoolean()) {
            if (System.nanoTime() - deadlineNanos > 0) {
                return false;
            }
            if (progressOnce() == 0) {
                Thread.onSpinWait();
            }
        }
        return true;
    }

    private void shutdown() {
        // run what was queued, then stop accepting: under the queue's lock, so nothing is accepted after the last poll
        while (true) {
            Runnable r;
            while ((r = commands.poll()) != null) {
                runCommand(r);
            }
            synchronized (commands) {
                if (commands.isEmpty()) {
                    accepting = false;
                    break;
                }
            }
        }
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        for (UcxLink l : links) {
            guarded(l, "closing", () -> l.closeOnOwner(deadline));
        }
        for (UcxLink l : links) {
            guarded(l, "closing its worker", l::closeWorkerNow); // those whose close did not complete in time: the context must not outlive them
        }
        links.clear();
        for (UcpWorker w : unlinked) { // a connect the close overtook: its own close of the worker was refused
            try {
                w.close();
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, "UCX transport '" + name + "': closing an unused worker failed: " + e);
            }
        }
        unlinked.clear();
        // deregister every UcpMemory before the context closes, or the JVM aborts (docs/dependencies.md, "UCX from Java")
        for (UcpMemory m : registered.values()) {
            try {
                m.deregister();
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, "UCX transport '" + name + "': deregister failed: " + e);
            }
        }
        registered.clear();
        context.close();
    }

    private void ensureOpen() {
        if (closed) {
            throw new LinkFailedException("UCX transport '" + name + "' is closed");
        }
    }

    /**
     * Closes every link (force-closing its endpoint, so pending writes end canceled), deregisters all memory,
     * closes the worker and the context and stops the owner thread. Idempotent; waits up to 10 s for the owner thread.
     *
     * @throws TransferException if the owner thread did not stop within 10 s (a UCX call that does not return): the
     *                           transport is marked closed all the same, and a second call returns at once
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        running = false;
        LockSupport.unpark(thread);
        if (Thread.currentThread() != thread) {
            try {
                stopped.get(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (ExecutionException | TimeoutException e) {
                throw new TransferException("UCX transport '" + name + "': owner thread did not stop within 10 s");
            }
        }
    }

    @Override
    public String toString() {
        return "UcxTransport[" + name + (closed ? ", closed" : "") + "]";
    }
}
