package io.kvpool.examples.server.role;

import io.kvpool.Admission;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.examples.server.echo.EchoKv;
import io.kvpool.examples.server.link.FaultyLink;
import io.kvpool.examples.ui.PoolView;
import io.kvpool.micrometer.KvPoolMeterBinder;
import io.kvpool.micrometer.TransferSenderMeterBinder;
import io.kvpool.transfer.OutgoingTransfer;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.spi.PeerLink;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.time.Duration;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Supplier;

/**
 * The prefill role in this JVM: its own pool, the echo model's prefill, and a {@link TransferSender} on
 * its own {@link DutyCycle}, linked to the decode role by a link from {@code connector} (reconnected
 * after {@code reconnectDelay} whenever it fails; a fresh one at once when decode retires it, the old one left to
 * finish its transfers in flight).
 *
 * <pre>
 *   router thread:  prefill() ─ admit (typed refusal) ─ append ─ write KV ─┐
 *                   abort()  ──────────────────────────────────────────────┤ submit
 *   duty thread:    offer / abort · sender.doWork() · retire finished transfers · reconnect
 * </pre>
 * A request id is <b>reserved</b> in {@link #prefill} before anything is admitted or queued, and released only
 * when its transfer is over (or its admission failed): a second {@code prefill} under an id still in flight —
 * another router in front of this process, or a restarted one, reusing it — is refused at once with a
 * {@link DuplicateRequestException}, so it can never be answered from the KV offered under that id before.
 */
public final class PrefillRole implements PrefillService, MeteredRole {

    public static final String ROLE = "prefill";
    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final KvPool pool;
    private final TransferSender sender;
    private final Supplier<PeerLink> connector;
    /** A connect in progress, off the duty thread; the duty thread takes its link once it is done. Duty thread only. */
    private java.util.concurrent.CompletableFuture<PeerLink> connecting;
    /** The thread running {@link #connecting}. Duty thread only. */
    private Thread connectThread;
    private final long reconnectNanos;
    private final long handshakeNanos;
    private final DutyCycle duty;
    private final AutoCloseable transport;

    // ---- duty thread only ----
    private final Map<Long, OutgoingTransfer> offers = new HashMap<>();
    private PeerLink link;
    private int peer = -1;
    private long connectAt;
    private long connectedAt;
    private long injectedSeen; // faults the current link had injected when last counted

    // ---- any thread ----
    private volatile int active;
    /** Pages the sender is writing now (posted, not yet terminal): read by status, written by the duty thread. */
    private volatile long pagesInFlight;
    /** How long an abort of a request this role does not know is remembered (well past the router's call timeout). */
    public static final long REMEMBER_ABORTS_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(60);
    /**
     * Most early aborts remembered at once (an abort of a request not offered here, kept {@link #REMEMBER_ABORTS_NANOS}):
     * aborts beyond it are counted ({@code aborts_not_kept}), not kept, so that a flood of them (paired aborts after
     * transfers that finished, or an outside caller) cannot grow the map without bound.
     */
    public static final int MAX_EARLY_ABORTS = 65_536;
    /** Aborts of requests not (yet) offered here; added on the duty thread, taken on any. */
    private final ExpiringIds abortedBeforeArrival = new ExpiringIds(MAX_EARLY_ABORTS, REMEMBER_ABORTS_NANOS);
    /** Prefill calls refused or dropped because their abort came first. */
    private final LongAdder lateAfterAbort = new LongAdder();
    /** Requests admitted whose offer is queued for the duty thread (see {@link #activeTransfers()}). */
    private final java.util.concurrent.atomic.AtomicInteger pendingOffers = new java.util.concurrent.atomic.AtomicInteger();
    private volatile boolean linkUp;
    /** The decode engine's instance id while the link is up and reports one, else 0. */
    private volatile long linkedDecode;
    private final LongAdder admitted = new LongAdder();
    private final LongAdder rejected = new LongAdder();
    private final LongAdder placeholders = new LongAdder();
    private final LongAdder completed = new LongAdder();
    private final LongAdder drained = new LongAdder();
    private final LongAdder abortRequests = new LongAdder();
    private final LongAdder abortedTransfers = new LongAdder();
    private final LongAdder links = new LongAdder();
    private final LongAdder injectedFaults = new LongAdder();
    private final LongAdder duplicates = new LongAdder();
    /** Request ids admitted and not yet over (reserved by {@link #prefill}, released when the transfer ends). */
    private final Set<Long> inFlightIds = ConcurrentHashMap.newKeySet();
    /** The pages each request in flight holds here, for the live page: booked at admission, dropped with its id. */
    private final io.kvpool.examples.ui.PageHolders holders = new io.kvpool.examples.ui.PageHolders();
    private volatile boolean closed;

    /**
     * @param pool      the prefill pool (owned: closed with the role)
     * @param sender    the engine, on {@code pool} (owned)
     * @param connector makes a new link to the decode role; called on a thread of its own, one call at a time, and
     *                  its link handed to the duty thread; may throw {@link io.kvpool.transfer.spi.LinkFailedException}
     *                  when decode is not listening
     */
    PrefillRole(KvPool pool, TransferSender sender, Supplier<PeerLink> connector, Duration reconnectDelay, Duration handshakeTimeout) {
        this(pool, sender, connector, reconnectDelay, handshakeTimeout, null);
    }

    /**
     * @param transport what the connector's links run on (e.g. a {@code UcxTransport}), or {@code null}: closed
     *                  with the role, after the engine and its links, before the pool
     */
    PrefillRole(KvPool pool, TransferSender sender, Supplier<PeerLink> connector, Duration reconnectDelay, Duration handshakeTimeout,
                AutoCloseable transport) {
        this.transport = transport;
        this.pool = Objects.requireNonNull(pool, "pool");
        this.sender = Objects.requireNonNull(sender, "sender");
        this.connector = Objects.requireNonNull(connector, "connector");
        this.reconnectNanos = reconnectDelay.toNanos();
        this.handshakeNanos = handshakeTimeout.toNanos();
        this.connectAt = System.nanoTime();
        this.duty = new DutyCycle("kvpool-prefill", this::work, this::shutdown);
    }

    /** @return the prefill pool (for accounting checks) */
    public KvPool pool() {
        return pool;
    }

    /** @return the instance id of this role's transfer engine (see {@link PrefillService#instance()}) */
    @Override
    public long instance() {
        return sender.instance();
    }

    /** @return whether the link to decode is up (handshake passed) */
    public boolean linkUp() {
        return linkUp;
    }

    /**
     * {@inheritDoc}
     *
     * @throws DuplicateRequestException if {@code requestId} is still in flight here (nothing is admitted for this call)
     */
    @Override
    public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
        if (closed) {
            throw new RoleUnavailableException("prefill role is closed");
        }
        if (abortedBeforeArrival.take(requestId)) { // its router gave up on this call and aborted it first
            lateAfterAbort.increment();
            return new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "prefill: request " + requestId
                + " was aborted before it arrived here (its router gave up on the call); nothing admitted", java.util.Map.of());
        }
        if (!inFlightIds.add(requestId)) {
            duplicates.increment();
            throw new DuplicateRequestException("prefill: request id " + requestId + " is already in flight here (two routers, or a"
                + " restarted one, reusing an id); refused without touching the request in flight");
        }
        boolean queued = false;
        try {
            final Admission a = pool.admit(tokens.size(), 0);
            if (!a.admitted()) {
                rejected.increment();
                return Rejection.of(ROLE, a);
            }
            final Sequence seq = a.sequence();
            try {
                // what admission let prefill compute: the prompt — or, with the safeguard off, a one-token placeholder
                final int computed = (int) Math.min(tokens.size(), seq.admittedTokens());
                if (computed < tokens.size()) {
                    placeholders.increment();
                    LOG.log(System.Logger.Level.WARNING, "UNSAFE: request " + requestId + " of " + tokens.size()
                        + " tokens became a " + computed + "-token placeholder (" + a.message() + ")");
                }
                seq.append(computed);
                EchoKv.of(pool).writePrompt(seq, tokens, computed, tenant);
                holders.hold(requestId, tenant, "prefill", seq);
                pendingOffers.incrementAndGet(); // counted as active from here: the duty thread offers it later
                try {
                    duty.submit(() -> offer(requestId, seq));
                } catch (RuntimeException | Error e) {
                    pendingOffers.decrementAndGet();
                    throw e;
                }
                queued = true;
            } catch (RuntimeException | Error e) { // an Error too: the pages go back whatever stopped the call
                seq.close();
                throw e;
            }
            admitted.increment();
            return null;
        } finally {
            if (!queued) {
                endRequest(requestId);
            }
        }
    }

    /** The request is over here: its id may be used again, and it holds no pages. */
    private void endRequest(long requestId) {
        holders.release(requestId);
        inFlightIds.remove(requestId);
    }

    /** <b>Test hook</b>: runs on the duty thread just before each offer; {@code null} (none) but in tests. */
    volatile Runnable beforeOffer;

    private void offer(long requestId, Sequence seq) {
        try {
            if (abortedBeforeArrival.take(requestId)) { // aborted while its admission was on the way here
                lateAfterAbort.increment();
                endRequest(requestId);
                return; // the finally releases its pages
            }
            final Runnable hook = beforeOffer;
            if (hook != null) {
                hook.run();
            }
            offers.put(requestId, sender.offer(requestId, seq)); // retains the pages for the transfer
        } catch (RuntimeException e) {
            endRequest(requestId);
            LOG.log(System.Logger.Level.WARNING, "prefill: offering request " + requestId + " failed: " + e);
        } catch (Error e) { // not offered, so its id is free again; the duty cycle counts and logs the Error
            endRequest(requestId);
            throw e;
        } finally {
            seq.close();
            active = sender.activeTransfers(); // the offer is counted there before it stops being counted as pending
            pendingOffers.decrementAndGet();
        }
    }

    @Override
    public void abort(long requestId, String why) {
        duty.submit(() -> {
            abortRequests.increment();
            final OutgoingTransfer t = offers.get(requestId);
            if (t == null) {
                // not offered (yet): a call the router gave up on may still arrive, or sit in this queue; remember
                // the abort for a while, so that it is refused then instead of offered to nobody. One not kept (too
                // many) lets such a call be offered, and decode's abort ends it
                abortedBeforeArrival.add(requestId, System.nanoTime());
            } else if (sender.abort(t, why)) {
                abortedTransfers.increment();
            }
        });
    }

    private int work() {
        int n = maintainLink();
        n += sender.doWork();
        if (!offers.isEmpty()) {
            for (Iterator<OutgoingTransfer> it = offers.values().iterator(); it.hasNext(); ) {
                final OutgoingTransfer t = it.next();
                if (t.isDone()) {
                    (t.state() == OutgoingTransfer.State.COMPLETED ? completed : drained).increment();
                    it.remove();
                    endRequest(t.requestId()); // only now may the id be used again
                    n++;
                }
            }
        }
        active = sender.activeTransfers();
        pagesInFlight = sender.pagesInFlight();
        return n;
    }

    /** Connects, and reconnects a link that failed or never finished its handshake. */
    private int maintainLink() {
        final Peer p = peer < 0 ? null : sender.peer(peer);
        final long now = System.nanoTime();
        if (p != null) {
            if (link instanceof FaultyLink f) {
                injectedFaults.add(f.injectedFaults() - injectedSeen);
                injectedSeen = f.injectedFaults();
            }
            final boolean up = p.isUp();
            linkUp = up;
            linkedDecode = up ? p.remoteInstance() : 0;
            if (p.state() == Peer.State.RETIRING) {
                // decode retired the link (a write on it was unproven): the transfers in flight on it finish there
                // and decode tears it down after; new work needs a fresh link now. The sender keeps the old one.
                LOG.log(System.Logger.Level.WARNING, "prefill: decode retired the link (" + p + "); opening a fresh one");
                peer = -1;
                link = null;
                connectAt = now;
                return 1;
            }
            final boolean dead = p.state() == Peer.State.FAILED || p.state() == Peer.State.REFUSED
                || p.state() == Peer.State.HANDSHAKE && now - connectedAt > handshakeNanos;
            if (!dead) {
                return 0;
            }
            if (p.state() == Peer.State.HANDSHAKE) {
                link.close();
            }
            LOG.log(System.Logger.Level.WARNING, "prefill: link to decode lost (" + p + "); reconnecting in "
                + reconnectNanos / 1_000_000 + " ms");
            peer = -1;
            link = null;
            connectAt = now + reconnectNanos;
            return 1;
        }
        if (connecting != null) {
            if (!connecting.isDone()) {
                return 0;
            }
            final java.util.concurrent.CompletableFuture<PeerLink> done = connecting;
            connecting = null;
            try {
                link = done.join();
                injectedSeen = 0;
                peer = sender.addPeer(link);
                connectedAt = now; // the handshake's time starts now, not when the connect began
                links.increment();
            } catch (java.util.concurrent.CompletionException | java.util.concurrent.CancellationException e) {
                final Throwable why = e.getCause() != null ? e.getCause() : e;
                // decode not listening yet is routine; anything else (a linkage error, a bug) is not, and must be seen
                LOG.log(why instanceof io.kvpool.transfer.spi.LinkFailedException ? System.Logger.Level.DEBUG
                    : System.Logger.Level.WARNING, "prefill: cannot connect to decode yet: " + why);
                connectAt = now + reconnectNanos;
            }
            return 1;
        }
        if (now - connectAt < 0) {
            return 0;
        }
        // on a thread of its own: a connect may take seconds (UCX's worker exchange with a paused decode), and this
        // cycle must go on serving aborts, offers and the heartbeats of the links it has
        final java.util.concurrent.CompletableFuture<PeerLink> next = new java.util.concurrent.CompletableFuture<>();
        connectThread = Thread.ofVirtual().name("kvpool-prefill-connect").start(() -> {
            try {
                next.complete(connector.get());
            } catch (Throwable t) {
                next.completeExceptionally(t);
            }
        });
        connecting = next;
        return 1;
    }

    /** On the duty thread, when it stops: abort what is in flight, collect the writes' terminal states, close. */
    private void shutdown() {
        if (connecting != null) {
            // end the connect before the transport closes after this: a connect still running then would leave what
            // it made (a UCX worker) behind a closed transport. Interrupted, its socket exchange ends at once
            connectThread.interrupt();
            try {
                connectThread.join(java.time.Duration.ofSeconds(2));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            connecting.thenAccept(PeerLink::close); // a link it made anyway is nobody's
            connecting = null;
        }
        sender.close();
        final long end = System.nanoTime() + 2_000_000_000L;
        while (sender.activeTransfers() > 0 && System.nanoTime() - end < 0) {
            if (sender.doWork() == 0) {
                Thread.onSpinWait();
            }
        }
        active = sender.activeTransfers();
        pagesInFlight = sender.pagesInFlight();
        linkUp = false;
        linkedDecode = 0;
    }

    /** @return whether {@link #close()} has begun: a call that fails from now on fails for the close */
    public boolean isClosed() {
        return closed;
    }

    @Override
    public String roleName() {
        return ROLE;
    }

    /** Binds the prefill pool ({@link KvPoolMeterBinder}) and the sender ({@link TransferSenderMeterBinder}). */
    @Override
    public void bindMeters(MeterRegistry registry, Tags tags) {
        new KvPoolMeterBinder(pool, tags).bindTo(registry);
        new TransferSenderMeterBinder(sender, tags).bindTo(registry);
    }

    @Override
    public RoleStatus status() {
        final Map<String, Long> c = new LinkedHashMap<>();
        c.put("admitted", admitted.sum());
        c.put("rejected", rejected.sum());
        c.put("placeholders", placeholders.sum());
        c.put("transfers_completed", completed.sum());
        c.put("transfers_drained", drained.sum());
        c.put("abort_requests", abortRequests.sum());
        c.put("aborts_not_kept", abortedBeforeArrival.notKept());
        c.put("aborted_transfers", abortedTransfers.sum());
        c.put("links_connected", links.sum());
        c.put("injected_faults", injectedFaults.sum());
        c.put("duplicate_ids_refused", duplicates.sum());
        c.put("refused_after_abort", lateAfterAbort.sum());
        c.put("duty_failures", duty.failures()); // commands and work calls that threw, Errors included
        final Map<String, Long> g = new LinkedHashMap<>();
        g.put(RoleStatus.ACTIVE_TRANSFERS, (long) active);
        g.put(RoleStatus.LINK_UP, linkUp ? 1L : 0L);
        g.put(RoleStatus.PAGES_IN_FLIGHT, pagesInFlight);
        final long decodeInstance = linkedDecode;
        return new RoleStatus(ROLE, PoolView.of(ROLE, pool).withHolders(holders.snapshot()), c, g)
            .withInstances(sender.instance(), decodeInstance == 0 ? List.of() : List.of(decodeInstance));
    }

    /**
     * @return transfers not over, counting a request admitted whose offer the duty thread has not made yet (else a
     *         caller waiting for quiescence could see 0 while that request still holds its pages)
     */
    @Override
    public int activeTransfers() {
        return pendingOffers.get() + active;
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            duty.close();
            if (transport != null) {
                try {
                    transport.close();
                } catch (Exception e) {
                    LOG.log(System.Logger.Level.WARNING, "prefill: closing the transport failed: " + e);
                }
            }
        } finally {
            pool.close();
        }
    }

    @Override
    public String toString() {
        return "PrefillRole[" + pool + ", " + active + " active, link " + (linkUp ? "up" : "down") + "]";
    }
}
