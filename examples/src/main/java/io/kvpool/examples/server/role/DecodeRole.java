package io.kvpool.examples.server.role;

import io.kvpool.Admission;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.echo.EchoDecoder;
import io.kvpool.examples.server.echo.EchoKv;
import io.kvpool.examples.server.link.GrantingLink;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.examples.server.link.LocalGrants;
import io.kvpool.examples.ui.PoolView;
import io.kvpool.micrometer.KvPoolMeterBinder;
import io.kvpool.micrometer.TransferReceiverMeterBinder;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.AllocationFaultException;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.spi.PeerLink;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

/**
 * The decode role in this JVM: its own pool (in a mapped file, which the shared-memory transport lets
 * prefill write), a {@link TransferReceiver} on its own {@link DutyCycle} accepting prefill's links from
 * a {@link LinkSource} (the shared-memory listener, or UCX's acceptor), and the echo model's decode, run on the calling router thread once the KV
 * committed.
 *
 * <pre>
 *   router thread:  reserve() ─submit─▶ duty: pool.admit → the reservation, kept by request id (waits for this step)
 *                   start() ──submit──▶ duty: receiver.start (the reservation or an admission, pin, DESCRIPTOR on the link to
 *                                 the prefill engine the call names; naming none, the newest link of the one engine
 *                                 linked, refused with several) → admission future
 *                   unreserve() ─submit─▶ duty: the reservation closed, if start did not take it; else the id
 *                                 remembered a while, so that a reserve arriving after it is refused
 *                   abort()  ──submit──▶ duty: receiver.abort (pages DRAINING → drain handshake)
 *   duty thread:    accept links · receiver.doWork() · COMMITTED → sequence handed over / failed → outcome
 *                   · reservations older than twice the request timeout closed
 *   router thread:  generate(): read every page of the block table, rebuild the prompt, append tokens
 * </pre>
 * A committed sequence goes to exactly one owner: {@link DecodeCall#generate} or an abort, whichever takes
 * it first (an atomic hand-over); the owner closes it.
 */
public final class DecodeRole implements DecodeService, MeteredRole, Drains {

    public static final String ROLE = "decode";
    /**
     * The failure of a transfer the decode pool admitted but could not allocate pages for, for another reason than
     * a lack of them (its storage failed): answered 502 {@code transfer_failed}, reason {@code allocation_fault}.
     */
    public static final String ALLOCATION_FAULT = "ALLOCATION_FAULT";
    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final KvPool pool;
    private final TransferReceiver receiver;
    private final LinkSource listener;
    private final LocalGrants grants;
    private final Duration tokenDelay;
    private final Runnable cleanup;
    private final DutyCycle duty;
    private final long reservationTtlNanos;

    // ---- duty thread only ----
    private final List<Integer> senders = new ArrayList<>();
    private final List<Call> receiving = new ArrayList<>();
    /** Admissions made ahead of prefill, by request id, until start takes them, unreserve, expiry or close. */
    private final Map<Long, Reserved> reservations = new java.util.HashMap<>();
    /**
     * Ids given back while no reservation was held for them, until when: mostly ids whose reserve has not arrived yet
     * (a router whose reserve call timed out while this role was frozen; the calls then arrive in any order), whose
     * late reserve is refused instead of held until it expires; also ids whose reservation expired or was taken.
     * Kept as long as a prefill role remembers an early abort, at most {@link #MAX_EARLY_GIVE_BACKS}; give-backs beyond
     * that are counted ({@code give_backs_not_kept}), and a reserve arriving after one of them is held until it expires.
     */
    private final ExpiringIds givenBackEarly = new ExpiringIds(MAX_EARLY_GIVE_BACKS, PrefillRole.REMEMBER_ABORTS_NANOS);
    /**
     * Longest a {@link #reserve} waits for the duty thread, which answers in microseconds unless it is stuck. Half the
     * router's call timeout, so that a router calling over HTTP gets this role's answer, not a timeout of its own that
     * would count the process as lost.
     */
    static final Duration RESERVE_WAIT = Duration.ofSeconds(5);

    /** Most give-backs of unreserved ids decode remembers at once. */
    public static final int MAX_EARLY_GIVE_BACKS = 65_536;
    private long nextExpiryScan;
    private int senderPeer = -1;
    /** Whether a prefill link up here reports no engine id (a build before them); set with {@link #linkedPrefills}. */
    private boolean unknownLinkUp;
    /**
     * Why the newest prefill link to go down was refused (its handshake failed: environment, model, layout), until a
     * link is up; {@code null} if it was lost for another reason.
     */
    private String lastRefusal;

    /**
     * A reservation, with what decode knows of the request it was made for: its tenant and sizes. Two routers (or a
     * restarted one) may reuse a request id; a decode call that is not for this request does not take it. The prefill
     * engine is not part of it: the call may name another engine than the reservation did (prefill's answer named the
     * one that took the offer, behind a balancer), and the KV is read on the link to the engine the call names, so a
     * reservation only promises pages.
     */
    private record Reserved(Sequence seq, long expiresAt, String tenant, int promptTokens, int maxNewTokens) {
        boolean isFor(Call c) {
            return tenant.equals(c.tenant) && promptTokens == c.promptTokens && maxNewTokens == c.maxNewTokens;
        }
    }

    // ---- any thread ----
    private volatile boolean ready;
    /** Set by {@link #beginDrain}: no new request is taken; reserved ones go on. */
    private volatile boolean draining;
    /** How many reservations are held, for {@link #pendingWork} on other threads (the map is the duty thread's). */
    private volatile int reservedNow;
    private volatile int activeTransfers;
    private volatile int senderLinks;
    /** The instance ids of the prefill engines whose links are up (those that report one), published by the duty thread. */
    private volatile List<Long> linkedPrefills = List.of();
    private final AtomicInteger heldSequences = new AtomicInteger();
    private final java.util.Set<Call> handedOver = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** The pages each request holds here, for the live page: booked at admission and at commit, dropped when it is over. */
    private final io.kvpool.examples.ui.PageHolders holders = new io.kvpool.examples.ui.PageHolders();
    private final LongAdder admitted = new LongAdder();
    private final LongAdder rejected = new LongAdder();
    private final LongAdder committed = new LongAdder();
    private final LongAdder failed = new LongAdder();
    private final LongAdder abortRequests = new LongAdder();
    private final LongAdder abortedTransfers = new LongAdder();
    private final LongAdder releasedUnused = new LongAdder();
    private final LongAdder reservedAhead = new LongAdder();
    private final LongAdder reservationsExpired = new LongAdder();
    private final LongAdder generated = new LongAdder();
    private final LongAdder links = new LongAdder();
    private final LongAdder acceptFailures = new LongAdder();
    private static final long ACCEPT_WARNING_INTERVAL_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
    private long nextAcceptWarning = System.nanoTime(); // duty thread only
    private volatile boolean closed;

    /**
     * @param pool     the decode pool, on the listener's mapped storage (owned: closed with the role)
     * @param receiver the engine, on {@code pool} (owned)
     * @param listener where prefill's links arrive (owned; closed after the receiver, before the pool)
     * @param grants   grants shared with a prefill role in this JVM, or {@code null}
     * @param reservationTtl how long a {@link #reserve} holds its pages for a {@link #start} that does not come (see
     *                       {@link #reservationTtl}); one that expires only makes the start admit anew
     * @param cleanup  run after everything is closed (e.g. delete the work directory)
     */
    DecodeRole(KvPool pool, TransferReceiver receiver, LinkSource listener, LocalGrants grants, Duration tokenDelay,
               Duration reservationTtl, Runnable cleanup) {
        this.pool = Objects.requireNonNull(pool, "pool");
        this.receiver = Objects.requireNonNull(receiver, "receiver");
        this.listener = Objects.requireNonNull(listener, "listener");
        this.grants = grants;
        this.tokenDelay = Objects.requireNonNull(tokenDelay, "tokenDelay");
        this.cleanup = Objects.requireNonNull(cleanup, "cleanup");
        this.reservationTtlNanos = reservationTtl.toNanos();
        this.nextExpiryScan = System.nanoTime(); // not 0: nanoTime's origin may lie in the future
        this.duty = new DutyCycle("kvpool-decode", this::work, this::shutdown);
    }

    /**
     * How long a reservation waits for its decode call: twice the request timeout. The router asks prefill between the
     * two and starts its request deadline only at the decode call, so one request timeout alone could expire the
     * reservation of a slow prefill; an expired one is not a fault (the decode call then admits as without one).
     */
    static Duration reservationTtl(ServerConfig cfg) {
        return reservationTtl(cfg.requestTimeout());
    }

    /** @return how long a reservation waits for its decode call under {@code requestTimeout}: twice that (see above) */
    public static Duration reservationTtl(Duration requestTimeout) {
        return requestTimeout.multipliedBy(2);
    }

    /** @return the decode pool (for accounting checks) */
    public KvPool pool() {
        return pool;
    }

    /** @return prefill links this role still considers (handshaking or up); dead ones are dropped at once */
    int senderLinks() {
        return senderLinks;
    }

    /** @return the receiver's metrics (readable from any thread) */
    io.kvpool.transfer.ReceiverMetrics metrics() {
        return receiver.metrics();
    }

    /**
     * {@inheritDoc} The transfer starts on the newest link up to that prefill engine
     * ({@link TransferReceiver#upPeerOf}); with {@code prefillInstance} 0, on the newest prefill link up while links from
     * one engine are up (links that report no id count as one), refused while links from several are.
     */
    @Override
    public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
        if (closed) {
            throw new RoleUnavailableException("decode role is closed");
        }
        final Call c = new Call(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
        duty.submit(() -> begin(c));
        return c;
    }

    /**
     * {@inheritDoc} The admission runs on the duty thread, which this call waits for, at most {@link #RESERVE_WAIT}.
     *
     * @throws IllegalStateException if the role is closed, or the duty thread did not answer within {@link #RESERVE_WAIT}
     *                               (a reservation it makes later is closed by the give-back that follows)
     */
    @Override
    public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
        throws InterruptedException {
        if (closed) {
            throw new RoleUnavailableException("decode role is closed");
        }
        final CompletableFuture<Rejection> answer = new CompletableFuture<>();
        duty.submit(() -> {
            try {
                answer.complete(admitAhead(requestId, tenant, promptTokens, maxNewTokens, prefillInstance));
            } catch (RuntimeException e) {
                answer.completeExceptionally(e);
            } catch (Error e) { // the caller hears of it at once; the duty cycle counts and logs it
                answer.completeExceptionally(e);
                throw e;
            }
        });
        try {
            return answer.get(RESERVE_WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause() instanceof RuntimeException r ? r : new IllegalStateException(e.getCause());
        } catch (java.util.concurrent.TimeoutException e) { // a reservation made later is closed by the give-back that follows
            throw new RoleUnavailableException("the reservation of request " + requestId + " got no answer from the duty thread in "
                + RESERVE_WAIT.toSeconds() + " s");
        }
    }

    @Override
    public void unreserve(long requestId, String why, long prefillInstance) {
        try {
            duty.submit(() -> {
                final Reserved r = reservations.remove(requestId);
                if (r != null) {
                    reservationsChanged();
                    r.seq().close();
                    releasedUnused.increment();
                } else {
                    // if it is not kept (too many), a reserve arriving after it is held until it expires
                    givenBackEarly.add(requestId, System.nanoTime());
                }
                declineAt(prefillInstance, requestId, "decode: " + why);
            });
        } catch (IllegalStateException closedAlready) {
            // the role's close closes every reservation
        }
    }

    /**
     * @return whether the prefill link is up and the role takes new requests: not while it drains (its status says
     *         which, in {@link RoleStatus#LINK_UP} and {@link RoleStatus#DRAINING})
     */
    @Override
    public boolean ready() {
        return ready && !draining;
    }

    @Override
    public void beginDrain() {
        draining = true;
    }

    @Override
    public int pendingWork() {
        return reservedNow + activeTransfers();
    }

    /** The refusal of a new request while the role drains. */
    private Rejection stopping(int promptTokens, int maxNewTokens) {
        return new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: this process is stopping and takes no new request; "
            + "retry later or on another decode process", numbers(promptTokens, maxNewTokens));
    }

    /** Duty thread: publishes the number of reservations after a change. */
    private void reservationsChanged() {
        reservedNow = reservations.size();
    }

    // ---- duty thread ----

    /** {@link #reserve} on the duty thread. @return the refusal, or {@code null} once the pages are promised */
    private Rejection admitAhead(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
        if (closed) { // run by the closing thread after shutdown: nothing may be promised any more
            throw new RoleUnavailableException("decode role is closed");
        }
        if (draining) {
            return refuseAhead(stopping(promptTokens, maxNewTokens));
        }
        final Rejection noLink = noLinkFor(prefillInstance, promptTokens, maxNewTokens); // prefill would compute for nothing
        if (noLink != null) {
            return refuseAhead(noLink);
        }
        if (givenBackEarly.take(requestId)) { // its router gave it back before this call arrived
            return refuseAhead(new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: request " + requestId + " was given back "
                + "before its reservation arrived; not reserved", numbers(promptTokens, maxNewTokens)));
        }
        if (reservations.containsKey(requestId)) { // two routers, or a restarted one, reusing an id
            return refuseAhead(new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: request id " + requestId + " is already "
                + "reserved here; refused without touching that reservation", numbers(promptTokens, maxNewTokens)));
        }
        final long promptPages = pool.layout().pagesFor(promptTokens);
        if (promptPages > ServerConfig.MAX_PAGES_PER_TRANSFER) { // the transfer would refuse it after prefill computed
            return refuseAhead(new Rejection(ROLE, Rejection.Reason.EXCEEDS_TRANSFER, "decode: request " + requestId + " needs "
                + promptPages + " pages; one transfer carries at most " + ServerConfig.MAX_PAGES_PER_TRANSFER,
                numbers(promptTokens, maxNewTokens)));
        }
        // a reservation promises a transfer slot as well as pages: else prefill computes a request whose start finds
        // every slot taken (maxTransfers transfers under way or reserved)
        final int underWay = receiver.transfersUnderWay();
        if (underWay + reservations.size() >= receiver.maxTransfers()) {
            final Map<String, Long> n = numbers(promptTokens, maxNewTokens);
            n.put("transfers_under_way", (long) underWay);
            n.put("transfers_reserved", (long) reservations.size());
            n.put("max_transfers", (long) receiver.maxTransfers());
            return refuseAhead(new Rejection(ROLE, Rejection.Reason.RETRY_LATER, "decode: all " + receiver.maxTransfers()
                + " transfer slots are taken (" + underWay + " transfers under way, " + reservations.size() + " reserved ahead); "
                + "retry later", n));
        }
        final Admission a = pool.admit(promptTokens, maxNewTokens);
        if (!a.admitted()) {
            return refuseAhead(new Rejection(ROLE, reason(FailureReason.REJECTED, a.decision(), promptPages), "decode pool: "
                + a.message(), numbers(promptTokens, maxNewTokens)));
        }
        reservations.put(requestId, new Reserved(a.sequence(), System.nanoTime() + reservationTtlNanos, tenant, promptTokens,
            maxNewTokens));
        reservationsChanged();
        reservedAhead.increment();
        return null;
    }

    /** Counts a refused reservation. @return {@code r} */
    private Rejection refuseAhead(Rejection r) {
        rejected.increment();
        return r;
    }

    /**
     * The refusal of a request while no prefill link is up: waiting can help (a link comes back, or a redeployed
     * prefill connects). If the newest link to go down was refused, it says why: the operator's lead.
     * Its numbers read the pool now.
     */
    private Rejection noPrefillLink(int promptTokens, int maxNewTokens) {
        final String refused = lastRefusal;
        return new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: no prefill link is up"
            + (refused == null ? "" : " (the last prefill to connect was refused: " + refused + ")") + "; retry later",
            numbers(promptTokens, maxNewTokens));
    }

    /**
     * Why no link here can carry a request that prefill engine computes, on the duty thread: no prefill link is up;
     * none is up to that engine; or the call names no engine ({@code prefillInstance} 0) while links from several are
     * up, so that the newest link may reach a prefill holding another request's offer under the same id.
     *
     * @return the refusal, or {@code null} when a link can ({@link #senderPeer}, or {@code upPeerOf(prefillInstance)})
     */
    private Rejection noLinkFor(long prefillInstance, int promptTokens, int maxNewTokens) {
        if (senderPeer < 0) {
            return noPrefillLink(promptTokens, maxNewTokens);
        }
        if (prefillInstance != 0 && receiver.upPeerOf(prefillInstance) < 0) {
            return notLinkedTo(prefillInstance, promptTokens, maxNewTokens);
        }
        return prefillInstance == 0 && severalEngines() ? unnamed(promptTokens, maxNewTokens) : null;
    }

    /**
     * Whether the prefill links up here reach more than one engine (two ids, or an id and links that report none), on
     * the duty thread: a call that names no engine is then refused, since the newest link may hold another request's
     * offer. Links that report no id count together as one engine.
     */
    private boolean severalEngines() {
        final int ids = linkedPrefills.size();
        return ids >= 2 || ids == 1 && unknownLinkUp;
    }

    /**
     * The refusal of a request whose prefill engine has no link up here: another prefill process computed it (one this
     * decode is not linked to, or not yet). Waiting can help (that link may come). The message names the instances.
     */
    private Rejection notLinkedTo(long prefillInstance, int promptTokens, int maxNewTokens) {
        return new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: no KV link from prefill instance "
            + RoleStatus.hex(prefillInstance) + " is up here (links up from: " + RoleStatus.hex(linkedPrefills) + "); retry later, or route "
            + "to a prefill linked to this decode", numbers(promptTokens, maxNewTokens));
    }

    /**
     * The refusal of a call that names no prefill engine while links from several are up: the newest link may reach a
     * prefill that holds another request's offer under the same id. The router names its prefill's engine once its
     * status probe read it; a router of a build before instance ids never does. Waiting can help (the probe reads it).
     */
    private Rejection unnamed(int promptTokens, int maxNewTokens) {
        return new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: prefill links from several engines are up here ("
            + RoleStatus.hex(linkedPrefills) + (unknownLinkUp ? " and links that report none" : "") + ") and the call names none; "
            + "refused rather than guess which one holds the request's KV; retry later", numbers(promptTokens, maxNewTokens));
    }

    /**
     * Tells the prefill engine that holds a request's offer (the router named it) that decode will not take the request,
     * on the duty thread: it ends the offer now, not at its descriptor timeout. Nothing when the engine is unnamed (0) or
     * not linked here.
     */
    private void declineAt(long prefillInstance, long requestId, String why) {
        final int peer = prefillInstance == 0 ? -1 : receiver.upPeerOf(prefillInstance);
        if (peer >= 0) {
            receiver.decline(requestId, why, peer);
        }
    }

    /** Closes the reservations no start took within their time (a router that died, or lost the request). */
    private int expireReservations() {
        final long now = System.nanoTime();
        if ((reservations.isEmpty() && givenBackEarly.isEmpty()) || now - nextExpiryScan < 0) {
            return 0;
        }
        nextExpiryScan = now + 100_000_000L; // a scan at most every 100 ms
        givenBackEarly.sweep(now);
        int n = 0;
        for (java.util.Iterator<Reserved> it = reservations.values().iterator(); it.hasNext(); ) {
            final Reserved r = it.next();
            if (now - r.expiresAt() >= 0) {
                it.remove();
                r.seq().close();
                reservationsExpired.increment();
                n++;
            }
        }
        if (n > 0) {
            reservationsChanged();
        }
        return n;
    }

    private void begin(Call c) {
        final Reserved held = reservations.get(c.requestId);
        if (held != null && !held.isFor(c)) {
            // another request reserved this id (two routers, or a restarted one, reusing ids): it keeps its reservation
            c.reject(new Rejection(ROLE, Rejection.Reason.UNAVAILABLE, "decode: request id " + c.requestId + " is reserved here "
                + "for another request (tenant or sizes differ); refused without touching that reservation", numbers(c)),
                "request id " + c.requestId + " is reserved for another request");
            return;
        }
        if (held == null && draining) { // a new request: reserved ones are what a drain lets finish
            c.reject(stopping(c.promptTokens, c.maxNewTokens), "decode is stopping");
            declineAt(c.prefillInstance, c.requestId, "decode is stopping and takes no new request");
            return;
        }
        final Reserved r = held == null ? null : reservations.remove(c.requestId); // taken by this call whatever follows
        if (r != null) {
            reservationsChanged();
        }
        try {
            final Rejection noLink = noLinkFor(c.prefillInstance, c.promptTokens, c.maxNewTokens);
            if (noLink != null) {
                if (r != null) {
                    r.seq().close();
                }
                c.reject(noLink, noLink.message());
                return;
            }
            // the link to the prefill engine that computed the request: its offer is there, and only there
            final int peer = c.prefillInstance == 0 ? senderPeer : receiver.upPeerOf(c.prefillInstance);
            final IncomingTransfer t;
            try {
                t = r == null ? receiver.start(c.requestId, c.promptTokens, c.maxNewTokens, peer)
                    : receiver.start(c.requestId, r.seq(), c.promptTokens, peer); // takes the sequence over
            } catch (IllegalArgumentException | IllegalStateException e) { // refused before it took the sequence over
                if (r != null && r.seq().pageCount() == 0) { // never a sequence whose pages a transfer has pinned
                    r.seq().close();
                }
                throw e;
            } catch (AllocationFaultException fault) { // admitted, then the pool's storage failed: a failed transfer, not a "retry"
                admitted.increment();
                failed.increment();
                c.admission.complete(DecodeCall.Admitted.YES);
                c.outcome.complete(new DecodeCall.TransferOutcome(false, ALLOCATION_FAULT, fault.getMessage()));
                return;
            }
            if (t.state() == IncomingTransfer.State.REJECTED) {
                c.reject(rejection(c, t), t.message());
                return;
            }
            c.transfer = t;
            receiving.add(c);
            holders.hold(c.requestId, c.tenant, "receiving", (int) pool.layout().pagesFor(c.promptTokens));
            admitted.increment();
            c.admission.complete(DecodeCall.Admitted.YES);
        } catch (RuntimeException e) {
            // a role closed under the call cannot take it (503, retry elsewhere); anything else is a fault of the role
            final RuntimeException failed;
            if (closed && !(e instanceof RoleUnavailableException)) {
                LOG.log(System.Logger.Level.DEBUG, "decode: request " + c.requestId + " met the role's close: " + e);
                failed = new RoleUnavailableException("decode role closed while it admitted request " + c.requestId); // text: log
            } else {
                failed = e;
            }
            c.admission.completeExceptionally(failed);
            c.outcome.completeExceptionally(failed);
        } catch (Error e) { // as above, and the duty cycle counts and logs it
            c.admission.completeExceptionally(e);
            c.outcome.completeExceptionally(e);
            throw e;
        }
    }

    private Rejection rejection(Call c, IncomingTransfer t) {
        final Rejection.Reason reason = reason(t.failure(), t.admissionDecision(), pool.layout().pagesFor(c.promptTokens));
        final Map<String, Long> n = numbers(c);
        if (t.admissionDecision() == null || t.admissionDecision() == Admission.Decision.ADMITTED) {
            // refused by the receiver itself, not by admission: the transfer slots may be what is short
            n.put("transfers_under_way", (long) receiver.transfersUnderWay());
            n.put("max_transfers", (long) receiver.maxTransfers());
        }
        return new Rejection(ROLE, reason, "decode pool: " + t.message(), n);
    }

    /**
     * Why the receiver refused a transfer, as the router answers it: retryable (429/503) only when waiting can help.
     *
     * @param failure     the transfer's failure (REJECTED or PEER_LOST)
     * @param decision    the pool's admission decision, or {@code null} when the receiver refused before admission
     * @param promptPages pages the prompt needs
     */
    static Rejection.Reason reason(FailureReason failure, Admission.Decision decision, long promptPages) {
        if (failure == FailureReason.PEER_LOST) {
            return Rejection.Reason.UNAVAILABLE; // the link may come back
        }
        if (decision == Admission.Decision.REJECTED_CONTEXT_TOO_LONG) {
            return Rejection.Reason.CONTEXT_TOO_LONG;
        }
        if (decision == Admission.Decision.REJECTED_EXCEEDS_POOL) {
            return Rejection.Reason.EXCEEDS_POOL;
        }
        if (decision == null && promptPages > ServerConfig.MAX_PAGES_PER_TRANSFER) {
            return Rejection.Reason.EXCEEDS_TRANSFER; // more pages than one descriptor carries: no wait makes it fit
        }
        return Rejection.Reason.RETRY_LATER; // pages or transfer slots taken now
    }

    /**
     * The numbers of a refusal, read on the duty thread right after the decision (the pages a rejection names
     * as available are the pool's free pages no admission has promised, as admission counted them).
     */
    private Map<String, Long> numbers(Call c) {
        return numbers(c.promptTokens, c.maxNewTokens);
    }

    private Map<String, Long> numbers(int promptTokens, int maxNewTokens) {
        final Map<String, Long> n = new LinkedHashMap<>();
        final long requested = (long) promptTokens + maxNewTokens;
        final io.kvpool.PoolSnapshot s = pool.snapshot();
        n.put("requested_tokens", requested);
        n.put("max_context_tokens", pool.maxContextTokens());
        n.put("pages_needed", pool.layout().pagesFor(requested));
        n.put("prompt_pages", pool.layout().pagesFor(promptTokens)); // what one transfer descriptor must carry
        n.put("max_pages_per_transfer", (long) ServerConfig.MAX_PAGES_PER_TRANSFER);
        n.put("pages_available", Math.max(0, s.free() - s.reserved()));
        n.put("pages_in_service", s.capacity() - s.retired());
        return n;
    }

    private void onAbort(Call c, String why) {
        abortRequests.increment();
        final IncomingTransfer t = c.transfer;
        if (t != null && t.state() == IncomingTransfer.State.RECEIVING && receiver.abort(t, why)) {
            abortedTransfers.increment();
        }
        if (c.release()) {
            releasedUnused.increment();
        }
    }

    private int work() {
        int n = 0;
        try {
            for (PeerLink l; (l = listener.accept()) != null; n++) {
                senders.add(receiver.addPeer(new GrantingLink(l, grants)));
                links.increment();
            }
        } catch (RuntimeException e) {
            // e.g. out of file descriptors: new links wait, but the links already up and their deadlines must not
            acceptFailures.increment();
            final long now = System.nanoTime();
            if (now - nextAcceptWarning >= 0) {
                nextAcceptWarning = now + ACCEPT_WARNING_INTERVAL_NANOS;
                LOG.log(System.Logger.Level.WARNING, "decode: accepting links at " + listener.describe() + " failed ("
                    + acceptFailures.sum() + " times so far; logged at most every 10 s): " + e);
            }
        }
        n += receiver.doWork();
        senderPeer = -1;
        final List<Long> linked = new ArrayList<>(2);
        boolean unknown = false; // a link up from a prefill that reports no engine id (a build before them)
        boolean newestDead = true; // senders runs oldest to newest, this loop newest first
        for (int i = senders.size() - 1; i >= 0; i--) {
            final io.kvpool.transfer.Peer p = receiver.peer(senders.get(i));
            if (p.state() == io.kvpool.transfer.Peer.State.FAILED || p.state() == io.kvpool.transfer.Peer.State.REFUSED) {
                // a dead link is never a candidate again: forget it here (transfers on it hold their own peer id, and
                // the receiver keeps the peer for its quarantine), so this list does not grow with every reconnect
                senders.remove(i);
                if (newestDead) { // the newest link to go down says why none is up: refused, or lost (no lead then)
                    lastRefusal = p.state() == io.kvpool.transfer.Peer.State.REFUSED ? p.failure() : null;
                    newestDead = false;
                }
            } else if (p.isUp()) {
                if (senderPeer < 0) {
                    senderPeer = senders.get(i);
                }
                if (p.remoteInstance() == 0) {
                    unknown = true;
                } else if (!linked.contains(p.remoteInstance())) {
                    linked.add(p.remoteInstance());
                }
            }
        }
        if (!linked.equals(linkedPrefills)) {
            linkedPrefills = List.copyOf(linked);
        }
        unknownLinkUp = unknown;
        senderLinks = senders.size();
        ready = senderPeer >= 0;
        if (ready) {
            lastRefusal = null;
        }
        n += expireReservations();
        for (int i = receiving.size() - 1; i >= 0; i--) {
            final Call c = receiving.get(i);
            final IncomingTransfer t = c.transfer;
            if (t.state() == IncomingTransfer.State.RECEIVING) {
                continue;
            }
            receiving.remove(i);
            n++;
            if (t.state() == IncomingTransfer.State.COMMITTED) {
                committed.increment();
                heldSequences.incrementAndGet();
                c.committed.set(t.sequence()); // handed over: generate() or an abort takes it
                holders.hold(c.requestId, c.tenant, "decoding", t.sequence());
                handedOver.add(c);
                c.outcome.complete(DecodeCall.TransferOutcome.COMMITTED);
            } else {
                failed.increment();
                holders.release(c.requestId);
                c.outcome.complete(new DecodeCall.TransferOutcome(false, String.valueOf(t.failure()), t.message(), t.retryLater()));
            }
        }
        activeTransfers = receiver.activeTransfers();
        return n;
    }

    private void shutdown() {
        try {
            receiver.close(); // transfers still receiving fail; their pages stay held until proven
            for (Call c : receiving) {
                c.outcome.complete(new DecodeCall.TransferOutcome(false, FailureReason.ABORTED.name(), "decode role closed"));
            }
            receiving.clear();
            reservations.values().forEach(r -> r.seq().close());
            reservations.clear();
            reservationsChanged();
        } finally {
            listener.close();
            ready = false;
            senderPeer = -1;
            linkedPrefills = List.of();
            unknownLinkUp = false;
        }
    }

    /** @return whether {@link #close()} has begun: a call that fails from now on fails for the close */
    public boolean isClosed() {
        return closed;
    }

    @Override
    public String roleName() {
        return ROLE;
    }

    /** Binds the decode pool ({@link KvPoolMeterBinder}) and the receiver ({@link TransferReceiverMeterBinder}). */
    @Override
    public void bindMeters(MeterRegistry registry, Tags tags) {
        new KvPoolMeterBinder(pool, tags).bindTo(registry);
        new TransferReceiverMeterBinder(receiver, tags).bindTo(registry);
    }

    @Override
    public RoleStatus status() {
        final Map<String, Long> c = new LinkedHashMap<>();
        c.put("admitted", admitted.sum());
        c.put("rejected", rejected.sum());
        c.put("transfers_committed", committed.sum());
        c.put("transfers_failed", failed.sum());
        c.put("abort_requests", abortRequests.sum());
        c.put("aborted_transfers", abortedTransfers.sum());
        c.put("released_unused", releasedUnused.sum());
        c.put("reserved_ahead", reservedAhead.sum());
        c.put("reservations_expired", reservationsExpired.sum());
        c.put("give_backs_not_kept", givenBackEarly.notKept());
        c.put("generated_tokens", generated.sum());
        c.put("links_accepted", links.sum());
        c.put("accept_failures", acceptFailures.sum());
        c.put("duty_failures", duty.failures()); // commands and work calls that threw, Errors included
        c.put("quarantine_releases", receiver.metrics().quarantineReleases());
        final Map<String, Long> g = new LinkedHashMap<>();
        g.put(RoleStatus.ACTIVE_TRANSFERS, (long) activeTransfers);
        g.put(RoleStatus.HELD_SEQUENCES, (long) heldSequences.get());
        g.put(RoleStatus.LINK_UP, ready ? 1L : 0L);
        g.put(RoleStatus.DRAINING, draining ? 1L : 0L);
        return new RoleStatus(ROLE, PoolView.of(ROLE, pool).withHolders(holders.snapshot()), c, g)
            .withInstances(receiver.instance(), linkedPrefills);
    }

    @Override
    public int activeTransfers() {
        return activeTransfers + heldSequences.get();
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        duty.close();
        for (Call c : handedOver) {
            c.aborted = true; // first: a generate that finds the KV gone then reads a cancellation, not a bug
            c.release(); // committed, never decoded
        }
        pool.close(); // reports pages still held (and keeps their memory) if any transfer is still draining
        cleanup.run();
    }

    @Override
    public String toString() {
        return "DecodeRole[" + pool + ", " + activeTransfers + " receiving, " + heldSequences.get() + " decoding, "
            + (ready ? "ready" : "no prefill link") + "]";
    }

    /** One request on the decode side. */
    private final class Call implements DecodeCall {
        final long requestId;
        final String tenant;
        final int promptTokens;
        final int maxNewTokens;
        /** The prefill engine whose link carries the transfer, or 0 for none named. */
        final long prefillInstance;
        final CompletableFuture<Admitted> admission = new CompletableFuture<>();
        final CompletableFuture<TransferOutcome> outcome = new CompletableFuture<>();
        final AtomicReference<Sequence> committed = new AtomicReference<>();
        volatile boolean aborted;
        IncomingTransfer transfer; // duty thread

        Call(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
            this.requestId = requestId;
            this.tenant = tenant;
            this.promptTokens = promptTokens;
            this.maxNewTokens = maxNewTokens;
            this.prefillInstance = prefillInstance;
        }

        /** Closes the committed sequence if nobody took it. @return whether this call closed it */
        boolean release() {
            final Sequence s = committed.getAndSet(null);
            if (s == null) {
                return false;
            }
            handedOver.remove(this);
            holders.release(requestId);
            s.close();
            heldSequences.decrementAndGet();
            return true;
        }

        void reject(Rejection r, String message) {
            rejected.increment();
            admission.complete(new Admitted(false, r));
            outcome.complete(new TransferOutcome(false, FailureReason.REJECTED.name(), message));
        }

        @Override
        public Admitted awaitAdmission(Duration timeout) throws InterruptedException {
            return DecodeCall.await(admission, timeout, "decode role: request " + requestId);
        }

        @Override
        public TransferOutcome awaitTransfer(Duration timeout) throws InterruptedException {
            return DecodeCall.await(outcome, timeout, "decode role: request " + requestId);
        }

        @Override
        public Generation generate(int maxTokens, EchoDecoder.TokenSink sink) throws IOException, InterruptedException {
            final Sequence seq = committed.getAndSet(null);
            handedOver.remove(this);
            if (seq == null && aborted) { // an abort that won the race with this call: its KV is released already
                throw DecodeCall.abortedBeforeDecode(requestId);
            }
            if (seq == null) {
                throw new IllegalStateException("request " + requestId + " has no committed KV to decode (transfer "
                    + outcome.getNow(null) + ")");
            }
            try {
                final EchoKv kv = EchoKv.of(pool);
                final EchoDecoder.Reconstruction r = EchoDecoder.reconstruct(kv, seq, Math.min(promptTokens, seq.tokenCount()));
                final String text = EchoDecoder.generate(kv, seq, maxTokens, tenant, tokenDelay, token -> {
                    if (aborted) {
                        throw new IOException("request " + requestId + " was aborted");
                    }
                    sink.token(token);
                    generated.increment();
                });
                return new Generation(text, maxTokens, r);
            } finally {
                holders.release(requestId);
                seq.close();
                heldSequences.decrementAndGet();
            }
        }

        @Override
        public void abort(String why) {
            synchronized (this) { // the client's close and the request's own end may abort at once: one onAbort
                if (aborted) {
                    return;
                }
                aborted = true;
            }
            try {
                duty.submit(() -> onAbort(this, why));
            } catch (IllegalStateException closedAlready) {
                LOG.log(System.Logger.Level.DEBUG, "abort of request " + requestId + " after close: " + why);
            }
        }
    }
}
