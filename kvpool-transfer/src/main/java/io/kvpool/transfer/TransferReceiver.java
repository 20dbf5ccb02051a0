package io.kvpool.transfer;

import io.kvpool.Admission;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.PoolExhaustedException;
import io.kvpool.Sequence;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireFormat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The decode side of the transfer protocol (drawn in full in the {@link io.kvpool.transfer package
 * comment}): admits a request, pins destination pages, publishes descriptors, verifies completions,
 * commits — or holds a failed transfer's pages until every sender confirmed its writes ended.
 *
 * <h2>A transfer's states</h2>
 * <pre>
 *  start() ──admission refuses / no slot / no sender up──────────────────────────────▶ REJECTED
 *     │ admitted: append tokens, pin every page RECEIVING, register, DESCRIPTOR → each sender
 *     ▼
 *  RECEIVING ──a COMPLETION from every sender, then length ✓ canary ✓ checksums ✓──▶ COMMITTED
 *     │ a check fails · ABORT or DRAINED from a sender · abort() · deadline · sender lost
 *     │ (pages → DRAINING, the sequence is closed: only the writer pins hold the pages;
 *     │  ABORT → every sender that has not confirmed)
 *     ▼
 *  DRAINING ──DRAINED (this generation, every write proven) from every unconfirmed sender──▶ RELEASED   outcome=drained
 *     │ drain deadline (outcome=timeout) · an unconfirmed sender's link fails, or its DRAINED reports
 *     │ unproven writes, which may still land (outcome=error)
 *     ▼ (pages → QUARANTINED)
 *  QUARANTINED ──for every unconfirmed sender: registration revoked or link torn down, proven──▶ RELEASED
 *     (a sender that caused the quarantine is a suspect: only that proof counts for it; the others may
 *      still confirm with a proven DRAINED until the drain deadline — a healthy co-sender is not torn down)
 * </pre>
 * A suspect's link that is still up and cannot revoke the registration is <em>retired</em>, not torn down at once
 * ({@link Peer.State#RETIRING}): no new transfer starts on it, the transfers in flight on it finish (commit,
 * drain, or end quarantined themselves), and then it is torn down — the same teardown, the same proof, without
 * failing every other transfer on the link ({@link Builder#retireSuspectLinks}). The link of a sender that speaks
 * protocol version 1 or 2 is torn down at once instead: such a sender cannot be told of a retirement and would keep
 * offering work on the link.
 * A sender whose valid COMPLETION arrived counts as confirmed: it sends one only after a flush proved
 * every write it posted was delivered. Nothing here frees a page on a timer.
 *
 * <h2>Acknowledgements that are ignored (and counted in {@link ReceiverMetrics})</h2>
 * Completions and DRAINEDs are keyed by transfer slot <em>and</em> generation and accepted only from the
 * link of the sender of that rank: one for a generation not registered yet (before registration), for an
 * older generation (stale: a reused slot is never released by its previous tenant's ack), a second from
 * the same rank (duplicate), from another link (wrong peer), a DRAINED whose counts do not add up
 * (inconsistent), and a late ack: one after the transfer was released, or any from a suspect sender of a QUARANTINED
 * transfer (only the transport's proof releases those pages). An unproven DRAINED is never a proof: in RECEIVING or
 * DRAINING it quarantines the transfer, in QUARANTINED it makes its sender a suspect. A proven ack (a valid
 * COMPLETION, or a DRAINED with every write proven) from a sender that is not a suspect still confirms that sender in
 * QUARANTINED, as drawn above.
 *
 * <p><b>Threading:</b> single-threaded; {@link #start}, {@link #abort}, {@link #doWork} and the
 * {@link IncomingTransfer} getters run on one owner thread. {@link #metrics()} may be read from any thread.
 */
public final class TransferReceiver extends TransferEndpoint {

    private static final System.Logger LOG = System.getLogger("io.kvpool.transfer");

    /**
     * How often, at most, the duty cycle asks a transport again whether a torn-down peer's teardown is proven (10 ms):
     * over shared memory or CUDA IPC the proof is the peer process's exit, and each question reads its threads'
     * states from {@code /proc}. A quarantine waiting for it is released up to this much later than the exit.
     */
    static final long PROOF_RECHECK_NANOS = 10_000_000L;

    private final KvPool pool;
    private final KvLayout layout;
    private final long layoutFingerprint; // checkedFingerprint: computed once
    private final long completionTimeoutNanos;
    private final long drainTimeoutNanos;
    private final boolean checksums;
    private final PageChecksums checksummer;
    private final boolean tearDownOnTimeout;
    private final boolean retireSuspectLinks;
    /** Peers RETIRING: torn down once no transfer in flight uses them ({@link #retireIdle}). */
    private final List<Peer> retiring = new ArrayList<>();
    private final Set<TransferSafeguard> disabled;
    /** By transfer id; grows past {@link #maxTransfers} only for slots that quarantines hold ({@link #freeSlot}). */
    private IncomingTransfer[] slots;
    private int[] slotGeneration;
    private final int maxTransfers;
    private final List<IncomingTransfer> active = new ArrayList<>();
    private final List<IncomingTransfer> scratch = new ArrayList<>();
    private final ReceiverMetrics metrics = new ReceiverMetrics();
    /** Quarantines can come per transfer: one line per 10 s, the metrics count each. */
    private final RateLimitedLog quarantineLog;
    private int nextSlotHint;

    private TransferReceiver(Builder b) {
        super(b.identity, b.clock, b.strictBuild, b.heartbeat);
        this.pool = b.pool;
        this.layout = pool.layout();
        this.layoutFingerprint = checkedFingerprint(b.identity, layout);
        this.completionTimeoutNanos = b.completionTimeout.toNanos();
        this.drainTimeoutNanos = b.drainTimeout.toNanos();
        this.checksums = b.checksums;
        this.checksummer = b.checksummer;
        if (checksums && !checksummer.supports(pool.storage())) {
            throw new IllegalArgumentException("checksums are verified by " + checksummer + ", which cannot read " + pool.storage()
                + "; build with checksums(PageChecksums) that can (kvpool-cuda's DeviceChecksums for device pools) or checksums(false)");
        }
        this.tearDownOnTimeout = b.tearDownOnTimeout;
        this.retireSuspectLinks = b.retireSuspectLinks;
        this.disabled = b.disabled.isEmpty() ? Set.of() : Set.copyOf(b.disabled);
        this.quarantineLog = new RateLimitedLog(b.transferLog, b.clock, LOG_INTERVAL_NANOS);
        this.maxTransfers = b.maxTransfers;
        this.slots = new IncomingTransfer[b.maxTransfers];
        this.slotGeneration = new int[b.maxTransfers];
        Arrays.fill(slotGeneration, b.firstGenerationForTests);
        if (!disabled.isEmpty()) {
            LOG.log(System.Logger.Level.ERROR, "UNSAFE transfer receiver built with safeguards DISABLED: " + disabled
                + " — for tests and incident replays only; it can hand one request's KV to another");
        }
        if (!disabled.contains(TransferSafeguard.CANARY_CHECK) && pool.fillMode() != io.kvpool.storage.FillMode.CANARY) {
            LOG.log(System.Logger.Level.INFO, "transfer receiver on a pool with fill " + pool.fillMode() + ": the canary check "
                + "runs only on a pool filled with the canary, so KV a sender never wrote is not caught here (checksums "
                + "describe it faithfully, the length check counts it)");
        }
    }

    /**
     * Starts building a receiver for a decode pool.
     *
     * @param pool     the decode pool the KV is received into (host-accessible storage for the default checksums)
     * @param identity this side's identity; its layout fingerprint must be the pool's (checked by
     *                 {@link Builder#build})
     * @return a builder
     * @throws NullPointerException if an argument is null
     */
    public static Builder builder(KvPool pool, PeerIdentity identity) {
        return new Builder(pool, identity);
    }

    /** {@return the counters and gauges} */
    public ReceiverMetrics metrics() {
        return metrics;
    }

    /** {@return the pool} */
    public KvPool pool() {
        return pool;
    }

    /** {@return the transfers not yet in a terminal state} */
    public int activeTransfers() {
        return active.size();
    }

    /** {@return the most transfers under way at once ({@link Builder#maxTransfers}); quarantined ones are not counted} */
    public int maxTransfers() {
        return maxTransfers;
    }

    /** {@return the transfers under way: not yet terminal and not QUARANTINED, as {@link #maxTransfers()} counts} Owner thread. */
    public int transfersUnderWay() {
        int n = 0;
        for (int i = 0; i < active.size(); i++) {
            if (active.get(i).state != IncomingTransfer.State.QUARANTINED) {
                n++;
            }
        }
        return n;
    }

    /** {@return the safeguards switched off (empty in production)} */
    public Set<TransferSafeguard> disabledSafeguards() {
        return disabled;
    }

    private boolean on(TransferSafeguard s) {
        return !disabled.contains(s);
    }

    // ---------------------------------------------------------------------------------------------
    // start

    /**
     * Admits a request and asks its senders for its KV.
     *
     * @param requestId    the request (keys checksums; must be the id the senders were offered)
     * @param promptTokens the tokens whose KV the senders hold (the receiver expects exactly these)
     * @param maxNewTokens tokens decode may add (admission reserves pages for them)
     * @param senderPeers  the peer ids (from {@link #addPeer}) of the senders, rank 0 first; each writes a
     *                     contiguous share of the pages ({@link TransferPlan})
     * @return the transfer: REJECTED (with the admission's typed decision or the reason — also for a request of
     *         more pages than one descriptor carries (65,536), and for a request id this receiver
     *         is receiving already), or RECEIVING. A rejection, retryable or not, sends a CANCEL to each sender it can
     *         still reach (links of version 2 and later): their offers of this request end and release their pages, so
     *         trying again later needs the senders to offer the request again. For an id already receiving, the senders
     *         of that transfer are not told: their offers are its. A request that can never fit as asked is refused
     *         as such ({@link IncomingTransfer#retryLater()} false) even while a transient refusal also applies: the
     *         checks waiting cannot help with, admission's included, run before those it can (id still receiving,
     *         sender in its handshake, every transfer slot busy), which then carry the admission's decision
     * @throws IllegalArgumentException for {@code promptTokens < 1}, {@code maxNewTokens < 0}, no sender, a peer id
     *                                  never given by {@link #addPeer}, or a peer listed twice (not counted as started)
     * @throws AllocationFaultException if the pool admitted the request but failed to allocate its pages for another
     *                                  reason than a lack of them (the storage's fill failed; the cause says why).
     *                                  Nothing is held then, the senders were told, and the call is counted in
     *                                  {@link ReceiverMetrics#allocationFaults()}, not in started
     * @throws IllegalStateException    if the pool is closed, before or during the call (nothing is held then, and
     *                                  senders already asked were told), or the receiver is closed
     */
    public IncomingTransfer start(long requestId, int promptTokens, int maxNewTokens, int... senderPeers) {
        return start(requestId, null, promptTokens, maxNewTokens, senderPeers);
    }

    /**
     * Asks the senders for the KV of a request the pool admitted earlier: {@code admitted}, a sequence of this
     * receiver's pool that holds no page yet, typically admitted before prefill computed, so that prefill computes
     * nothing for a decode that has no room (a reservation). The receiver takes the sequence over unless the call
     * throws for the sequence itself or for a closed receiver: on COMMITTED it is {@link IncomingTransfer#sequence()},
     * and every other outcome closes it, a rejection, a failure and an exception for the other arguments included.
     * Until the transfer ends the caller must leave it alone: a sequence found closed, truncated or appended to when
     * the completion arrives fails the transfer ({@link FailureReason#ABORTED}) instead of committing KV that is no
     * longer the request's (a transfer that fails first for another reason keeps that reason).
     *
     * @param requestId    the request (keys checksums; must be the id the senders were offered)
     * @param admitted     the admitted sequence, without pages; admitted for at least {@code promptTokens}
     * @param promptTokens the tokens whose KV the senders hold
     * @param senderPeers  the sender peers, as for {@link #start(long, int, int, int...)}
     * @return the transfer, as {@link #start(long, int, int, int...)} returns it; REJECTED also when the sequence was
     *         admitted for fewer than {@code promptTokens} tokens (a prompt is never cut short, unless the pool's
     *         {@link io.kvpool.Safeguard#ADMISSION_REJECTION} is off: its one-token placeholder is then taken as
     *         {@link #start(long, int, int, int...)} takes it)
     * @throws IllegalArgumentException as {@link #start(long, int, int, int...)} does, and if {@code admitted} belongs to
     *                                  another pool, is closed or holds pages (the sequence is not taken over then)
     * @throws AllocationFaultException as {@link #start(long, int, int, int...)} does
     * @throws IllegalStateException    if the receiver is closed (the sequence is not taken over), or the pool is
     *                                  (the sequence is taken over and closed)
     */
    public IncomingTransfer start(long requestId, Sequence admitted, int promptTokens, int... senderPeers) {
        Objects.requireNonNull(admitted, "admitted");
        if (admitted.pool() != pool || admitted.isClosed() || admitted.pageCount() != 0) {
            throw new IllegalArgumentException("a reserved sequence must be an open sequence of this receiver's pool without "
                + "pages; got " + admitted + (admitted.pool() != pool ? " of another pool" : ""));
        }
        return start(requestId, admitted, promptTokens, 0, senderPeers);
    }

    /** Both starts: {@code reserved} is the admitted sequence, or {@code null} to admit here. */
    private IncomingTransfer start(long requestId, Sequence reserved, int promptTokens, int maxNewTokens, int[] senderPeers) {
        ensureOpen();
        final long now = clock.nanoTime();
        IncomingTransfer t = null;
        try {
            t = new IncomingTransfer(requestId, promptTokens, maxNewTokens, senderPeers, now); // throws for a null senderPeers
            return admitAndAsk(t, reserved, now);
        } finally {
            if (reserved != null && (t == null || t.sequence != reserved)) {
                reserved.close(); // refused or rejected before it held pages: the reservation goes back now
            }
        }
    }

    private IncomingTransfer admitAndAsk(IncomingTransfer t, Sequence reserved, long now) {
        final long requestId = t.requestId;
        final int promptTokens = t.promptTokens;
        final int maxNewTokens = t.maxNewTokens;
        final int[] senderPeers = t.senderPeers;
        if (promptTokens < 1 || maxNewTokens < 0) {
            throw new IllegalArgumentException("promptTokens must be ≥ 1 and maxNewTokens ≥ 0, were " + promptTokens + " and " + maxNewTokens);
        }
        if (senderPeers.length == 0) {
            throw new IllegalArgumentException("a transfer needs at least one sender");
        }
        for (int i = 0; i < senderPeers.length; i++) {
            final int id = requirePeer(senderPeers[i]);
            for (int j = 0; j < i; j++) {
                if (senderPeers[j] == id) {
                    throw new IllegalArgumentException("peer " + id + " is listed as sender " + j + " and " + i);
                }
            }
        }
        // counted as started where it ends: rejected (reject) or admitted and allocated (below); a call refused for
        // its arguments above, or one that throws, is not a transfer.
        // The refusals waiting cannot help come first, admission's among them, so that a transient refusal (below)
        // never hides one: retryLater() must not tell a caller to retry what can never fit.
        // A descriptor finds its offer by request id alone, so while another transfer of this id is receiving, its
        // senders' offers are that transfer's: every refusal here spares them its CANCEL (other senders get one)
        final IncomingTransfer other = receiving(requestId);
        final int[] spared = other != null ? other.senderPeers : NO_PEERS;
        if (layout.pagesFor(promptTokens) > WireFormat.MAX_ARRAY) {
            return reject(t, FailureReason.REJECTED, false, "request " + requestId + " of " + promptTokens + " tokens needs "
                + layout.pagesFor(promptTokens) + " pages of " + layout.tokensPerPage() + " tokens; one descriptor carries at most "
                + WireFormat.MAX_ARRAY + " (" + (long) WireFormat.MAX_ARRAY * layout.tokensPerPage() + " tokens)", spared);
        }
        if (reserved != null && reserved.admittedTokens() < promptTokens
            && !pool.disabledSafeguards().contains(io.kvpool.Safeguard.ADMISSION_REJECTION)) {
            // (with that safeguard off the pool admitted a placeholder, which is taken as below: the incident's case)
            return reject(t, FailureReason.REJECTED, false, "request " + requestId + " was admitted for " + reserved.admittedTokens()
                + " tokens, its prompt has " + promptTokens, spared);
        }
        for (int id : senderPeers) {
            final Peer p = peers.get(id);
            if (!p.isUp() && !stillHandshaking(p)) { // failed, refused or retiring: never takes it
                return reject(t, FailureReason.PEER_LOST, false, "sender " + p + " is not up"
                    + (p.state() == Peer.State.RETIRING ? ": it is retiring and takes no new transfer; start the request on a fresh link" : ""), spared);
            }
        }
        final Sequence seq;
        if (reserved == null) {
            final Admission a;
            try {
                a = pool.admit(promptTokens, maxNewTokens);
            } catch (IllegalStateException e) {
                if (pool.isClosed()) {
                    closedUnder(t, null, e); // the senders hear it now, as on the reserved path
                }
                throw e;
            }
            t.admissionDecision = a.decision();
            if (!a.admitted()) {
                return reject(t, FailureReason.REJECTED, a.decision() == Admission.Decision.RETRY_LATER,
                    "request " + requestId + " refused by admission (" + a.decision() + "): " + a.message(), spared);
            }
            seq = a.sequence();
        } else {
            t.admissionDecision = Admission.Decision.ADMITTED;
            seq = reserved;
        }
        // the refusals waiting helps with, last; each gives back what admission just promised
        Peer handshaking = null;
        for (int id : senderPeers) {
            if (stillHandshaking(peers.get(id))) {
                handshaking = peers.get(id);
                break;
            }
        }
        final int slot = other == null && handshaking == null ? freeSlot() : -1;
        if (slot < 0 && seq != reserved) {
            seq.close(); // a reserved sequence is closed by start, which took it over
        }
        if (other != null) {
            // a second transfer of the id could take the first's offers. Waiting can help: the first ends, one way or another
            return reject(t, FailureReason.REJECTED, true, "request " + requestId + " is already receiving (transfer "
                + other.transferId + "/" + other.generation + "): a request id names one transfer at a time", spared);
        }
        if (handshaking != null) {
            // waiting helps: the link comes up once both sides' duty cycles ran the handshake
            return reject(t, FailureReason.PEER_LOST, true, "sender " + handshaking + " is still in its handshake: run doWork() "
                + "until the peer isUp(), then start the request");
        }
        if (slot < 0) {
            return reject(t, FailureReason.REJECTED, true, "all " + maxTransfers + " transfer slots are busy; retry later");
        }
        // Admission (or, with ADMISSION_REJECTION off, its placeholder) decides what we can take: the
        // placeholder admits one token, and so the receiver expects one (the incident replay's stub).
        final int expected = (int) Math.min(promptTokens, seq.admittedTokens());
        try {
            pool.handles().appendPinned(seq, expected); // RECEIVING from the start: all or none
        } catch (PoolExhaustedException e) { // admission's reservation should prevent it; waiting can help if not
            seq.close();
            return reject(t, FailureReason.REJECTED, true, "could not allocate " + layout.pagesFor(expected) + " pages for "
                + expected + " tokens: " + e.getMessage());
        } catch (RuntimeException e) {
            if (pool.isClosed()) { // closed under us: a shutdown, not a fault; thrown as admit throws it on a closed pool
                closedUnder(t, seq, e);
                throw e;
            }
            throw allocationFault(t, seq, expected, e);
        } catch (Error e) { // nothing of it may stay either; the Error itself goes on
            allocationFault(t, seq, expected, e);
            throw e;
        }
        metrics.started.increment();
        final long[] handles = new long[seq.pageCount()];
        final int n = senderPeers.length;
        for (int i = 0; i < handles.length; i++) {
            handles[i] = seq.pageHandle(i);
        }
        t.sequence = seq;
        t.structureVersion = seq.structureVersion();
        t.handles = handles;
        t.expectedTokens = expected;
        t.transferId = slot;
        t.generation = ++slotGeneration[slot];
        slots[slot] = t;
        t.registrations = new Registration[n];
        t.completed = new boolean[n];
        t.confirmed = new boolean[n];
        t.tokenCounts = new int[n];
        t.state = IncomingTransfer.State.RECEIVING;
        t.deadline = now + completionTimeoutNanos;
        active.add(t);
        for (int r = 0; r < n; r++) {
            final Peer p = peers.get(senderPeers[r]);
            final int from = TransferPlan.firstPage(handles.length, n, r);
            final int to = TransferPlan.firstPage(handles.length, n, r + 1);
            try {
                t.registrations[r] = p.link.register(pool.storage(), slotsOf(handles, from, to));
            } catch (LinkFailedException e) { // the link went down: another link may take the request
                fail(t, FailureReason.PEER_LOST, "could not register " + (to - from) + " pages on " + p + ": " + e.getMessage(), now);
                return t;
            } catch (RuntimeException e) {
                // the link is up but cannot register these pages (storage it cannot reach, more pages than its key
                // holds, a link created to send only): a deployment fault that waiting does not cure, so not
                // PEER_LOST, which callers retry. A UCX thread that did not answer in time lands here too: a wedged
                // transport, which a retry on the same process would meet again
                fail(t, FailureReason.ABORTED, "could not register " + (to - from) + " pages on " + p + ", which is up: " + e, now);
                return t;
            }
            send(p, new Message.Descriptor(requestId, slot, t.generation, expected, layoutFingerprint, n, r, handles,
                t.registrations[r].key()));
            if (t.state != IncomingTransfer.State.RECEIVING) {
                return t; // the send took the peer down and failed the transfer: ask no other sender
            }
        }
        return t;
    }

    /** @return the slots of {@code handles[from, to)}: one sender's share (every page for one sender), which its link registers */
    private static int[] slotsOf(long[] handles, int from, int to) {
        final int[] slots = new int[to - from];
        for (int i = from; i < to; i++) {
            slots[i - from] = PageHandle.slot(handles[i]);
        }
        return slots;
    }

    /**
     * The pool admitted the request but could not hand out its pages for a reason that is not a lack of pages: the
     * storage failed (a fill before reuse) or an allocator invariant broke. That is not a refusal a client should
     * retry, so it leaves {@link #start} as an exception (an Error leaves as itself, after the same clean-up). Nothing
     * of it is left: the sequence is closed, the senders are told (CANCEL) so they release their offers now, and the
     * call is counted as an allocation fault, not as started.
     */
    private AllocationFaultException allocationFault(IncomingTransfer t, Sequence seq, int expected, Throwable e) {
        final String message = "request " + t.requestId + ": the decode pool admitted " + expected + " tokens but could not "
            + "allocate their " + layout.pagesFor(expected) + " pages: " + e;
        final AllocationFaultException fault = new AllocationFaultException(message, e);
        metrics.allocationFaults.increment(); // not a transfer, so not in started
        endBeforePages(t, seq, fault, message);
        return fault;
    }

    /** The pool closed before the request's pages were allocated: nothing is held, and the senders are told. */
    private void closedUnder(IncomingTransfer t, Sequence seq, RuntimeException e) {
        endBeforePages(t, seq, e, "request " + t.requestId + ": the decode pool closed");
    }

    /**
     * Ends a start that throws before the request held pages: closes its admitted sequence (what that close throws
     * is added to {@code thrown}) and tells every sender, so their offers end now.
     *
     * @param seq the admitted sequence, or {@code null} if there is none yet
     */
    private void endBeforePages(IncomingTransfer t, Sequence seq, Throwable thrown, String why) {
        if (seq != null) {
            try {
                seq.close();
            } catch (RuntimeException closing) {
                thrown.addSuppressed(closing);
            }
        }
        for (int id : t.senderPeers) {
            cancel(peers.get(id), t.requestId, Message.Cancel.ABORTED, why);
        }
    }

    /** @return whether a peer is still in its handshake on a link that has not failed: one that may still come up */
    private static boolean stillHandshaking(Peer p) {
        return p.state() == Peer.State.HANDSHAKE && p.link.isUp();
    }

    private IncomingTransfer reject(IncomingTransfer t, FailureReason reason, boolean retryLater, String message) {
        return reject(t, reason, retryLater, message, NO_PEERS);
    }

    private static final int[] NO_PEERS = new int[0];

    /**
     * @param retryLater whether the same request started again later can be received ({@link IncomingTransfer#retryLater()})
     * @param spared     senders told nothing: their offers of the request are another transfer's
     */
    private IncomingTransfer reject(IncomingTransfer t, FailureReason reason, boolean retryLater, String message, int[] spared) {
        metrics.started.increment();
        t.state = IncomingTransfer.State.REJECTED;
        t.failure = reason;
        t.retryLater = retryLater;
        t.message = message;
        metrics.failures.get(reason).increment();
        // no descriptor went out: without a CANCEL each sender would pin the request's pages until its timeout
        for (int id : t.senderPeers) {
            if (!contains(spared, id)) {
                cancel(peers.get(id), t.requestId, Message.Cancel.REJECTED, message);
            }
        }
        return t;
    }

    private static boolean contains(int[] a, int v) {
        for (int x : a) {
            if (x == v) {
                return true;
            }
        }
        return false;
    }

    /**
     * Tells a sender this request will not be received (links of version 1 lack CANCEL: their senders time out).
     *
     * @return whether the CANCEL was sent (a link that is up and speaks version 2 or later)
     */
    private boolean cancel(Peer p, long requestId, int reason, String detail) {
        if (p.carries() && p.version >= 2 && send(p, new Message.Cancel(requestId, reason, detail))) {
            metrics.cancelsSent.increment();
            return true;
        }
        return false;
    }

    /**
     * A free slot for a new transfer, or -1 if {@link #maxTransfers} transfers are under way. A QUARANTINED transfer
     * keeps its slot (a proven ack from a co-sender is matched by slot and generation) but is not under way: over
     * shared memory or CUDA IPC it may wait for its sender process's exit for good, and such quarantines must not
     * stop this receiver from taking new work. Their slots are added past the configured number; the pages they
     * hold bound how many there can be.
     */
    private int freeSlot() {
        if (transfersUnderWay() >= maxTransfers) {
            return -1;
        }
        for (int i = 0; i < slots.length; i++) {
            final int s = (nextSlotHint + i) % slots.length;
            // a slot whose generation would wrap is never used again: senders and acks compare generations by
            // size, and generation 0 means "none" (2^31 - 1 transfers through one slot; a new slot replaces it)
            if (slots[s] == null && slotGeneration[s] < Integer.MAX_VALUE) {
                nextSlotHint = s + 1;
                return s;
            }
        }
        final int s = slots.length; // every slot is under way, quarantined or worn out, and fewer than maxTransfers under way
        slots = Arrays.copyOf(slots, s + Math.max(1, Math.min(s, Integer.MAX_VALUE - 8 - s)));
        slotGeneration = Arrays.copyOf(slotGeneration, slots.length);
        nextSlotHint = s + 1;
        return s;
    }

    /**
     * Tells senders that this receiver will not take {@code requestId}, without a transfer: each ends its offer of
     * the request at once, or the offer when it comes, as after a rejected {@link #start}, so that the request's pages
     * at the sender are not held until its descriptor timeout. For an engine that refuses a request before it starts
     * a transfer (its own policy). A sender that is not up, or speaks a version without CANCEL (1), is not told. A
     * sender whose transfer of this request is receiving here is not told either: the request is that transfer's.
     * Owner thread only.
     *
     * @param requestId   the request
     * @param why         the reason, sent to the senders
     * @param senderPeers the senders to tell (peer ids of {@link #addPeer})
     * @return how many senders were told
     * @throws IllegalArgumentException if a peer id is unknown
     * @throws IllegalStateException    if the receiver is closed
     */
    public int decline(long requestId, String why, int... senderPeers) {
        ensureOpen();
        Objects.requireNonNull(why, "why");
        for (int id : senderPeers) {
            requirePeer(id);
        }
        final IncomingTransfer under = receiving(requestId);
        int told = 0;
        for (int id : senderPeers) {
            if ((under == null || !contains(under.senderPeers, id)) && cancel(peers.get(id), requestId, Message.Cancel.REJECTED, why)) {
                told++;
            }
        }
        return told;
    }

    /** @return the transfer of {@code requestId} receiving here (at most one: {@link #start} refuses a second), or null */
    private IncomingTransfer receiving(long requestId) {
        for (int i = 0; i < active.size(); i++) {
            final IncomingTransfer t = active.get(i);
            if (t.requestId == requestId && t.state == IncomingTransfer.State.RECEIVING) {
                return t;
            }
        }
        return null;
    }

    /** @return {@code id}, checked to name a peer of this receiver */
    private int requirePeer(int id) {
        if (id < 0 || id >= peers.size()) {
            throw new IllegalArgumentException("no peer " + id + " (" + peers.size() + " peers)");
        }
        return id;
    }

    /**
     * Aborts a transfer that has not committed: its pages go DRAINING and its senders are told to stop.
     * Does nothing to a transfer that already committed, failed or was rejected. Owner thread only.
     *
     * @param t   a transfer this receiver started
     * @param why the reason, sent to the senders and kept in the transfer's message
     * @return whether this call failed the transfer
     * @throws IllegalStateException if the receiver is closed
     */
    public boolean abort(IncomingTransfer t, String why) {
        ensureOpen();
        if (t.state != IncomingTransfer.State.RECEIVING) {
            return false;
        }
        fail(t, FailureReason.ABORTED, "aborted: " + why, clock.nanoTime());
        return true;
    }

    // ---------------------------------------------------------------------------------------------
    // messages

    @Override
    void onMessage(Peer p, Message m) {
        switch (m) {
            case Message.Completion c -> onCompletion(p, c);
            case Message.Drained d -> onDrained(p, d);
            case Message.Abort a -> {
                final IncomingTransfer t = current(p, a.transferId(), a.generation(), -1, false); // not an ack: not counted
                if (t != null && t.state == IncomingTransfer.State.RECEIVING) {
                    if (a.reason() == Message.Abort.SENDER_CLOSING) { // as if its link were lost, which it is about to be
                        fail(t, FailureReason.PEER_LOST, "sender " + p.id + " is closing: " + a.detail(), clock.nanoTime());
                    } else {
                        t.retryLater = a.reason() == Message.Abort.WRITE_FAILED; // the link's fault: another attempt can succeed
                        fail(t, FailureReason.SENDER_ABORTED, "sender " + p.id + " aborted (reason " + a.reason() + "): "
                            + a.detail(), clock.nanoTime());
                    }
                }
            }
            default -> {
                malformedFrames.increment();
                fail(p, Peer.State.FAILED, "protocol error: a receiver does not accept " + m.getClass().getSimpleName());
            }
        }
    }

    /**
     * @return the transfer an ack names if it is current and {@code rank} (≥ 0) is that peer's; else
     *         {@code null}, counted as the reason it was ignored
     */
    private IncomingTransfer current(Peer p, long transferId, int generation, int rank) {
        return current(p, transferId, generation, rank, true);
    }

    /** @param ack whether the frame is an acknowledgement, whose reason to be ignored is counted */
    private IncomingTransfer current(Peer p, long transferId, int generation, int rank, boolean ack) {
        if (transferId < 0 || transferId >= slots.length) {
            count(ack, metrics.ackBeforeRegistration);
            return null;
        }
        final int slot = (int) transferId;
        final int gen = slotGeneration[slot];
        if (generation > gen || gen == 0) {
            count(ack, metrics.ackBeforeRegistration);
            return null;
        }
        if (generation < gen) {
            count(ack, metrics.ackStaleGeneration);
            return null;
        }
        final IncomingTransfer t = slots[slot];
        if (t == null) {
            count(ack, metrics.ackLate); // the current generation already ended
            return null;
        }
        if (rank >= 0) {
            if (rank >= t.senderPeers.length || t.senderPeers[rank] != p.id) {
                count(ack, metrics.ackWrongPeer);
                return null;
            }
        } else if (rankOf(t, p) < 0) {
            count(ack, metrics.ackWrongPeer);
            return null;
        }
        return t;
    }

    private static void count(boolean ack, java.util.concurrent.atomic.LongAdder ignored) {
        if (ack) {
            ignored.increment();
        }
    }

    private static int rankOf(IncomingTransfer t, Peer p) {
        for (int r = 0; r < t.senderPeers.length; r++) {
            if (t.senderPeers[r] == p.id) {
                return r;
            }
        }
        return -1;
    }

    private void onCompletion(Peer p, Message.Completion c) {
        if (c.senderRank() < 0 || c.posted() < 0 || c.succeeded() < 0 || c.failed() < 0) {
            metrics.ackInconsistent.increment();
            return;
        }
        final IncomingTransfer t = current(p, c.transferId(), c.generation(), c.senderRank());
        if (t == null) {
            return;
        }
        final int r = c.senderRank();
        if (t.completed[r] || t.confirmed[r]) {
            metrics.ackDuplicate.increment();
            return;
        }
        if (t.state != IncomingTransfer.State.RECEIVING) {
            // a failed transfer: a completion still proves every write of this sender was delivered
            if (c.posted() == c.succeeded() && c.failed() == 0) {
                proven(t, r);
            } else {
                metrics.ackLate.increment();
            }
            return;
        }
        final long now = cycleNanos; // a completion comes from doWork's polls
        final int pages = t.handles.length;
        final int from = TransferPlan.firstPage(pages, t.senderPeers.length, r);
        final int to = TransferPlan.firstPage(pages, t.senderPeers.length, r + 1);
        t.completed[r] = true;
        if (c.posted() != c.succeeded() || c.failed() != 0) {
            fail(t, FailureReason.BAD_COMPLETION, "sender " + r + " completed with " + c.failed() + " failed of " + c.posted()
                + " posted writes (" + c.succeeded() + " succeeded)", now);
            return;
        }
        markConfirmed(t, r, WriteProof.SENDER); // every write it posted was delivered and is over
        if (c.tokenCount() >= t.expectedTokens && c.posted() != to - from) {
            fail(t, FailureReason.BAD_COMPLETION, "sender " + r + " claims " + c.tokenCount() + " tokens but wrote "
                + c.posted() + " of its " + (to - from) + " pages", now);
            return;
        }
        if (c.firstPage() != from) {
            fail(t, FailureReason.BAD_COMPLETION, "sender " + r + " covered pages from " + c.firstPage() + ", its share is ["
                + from + ", " + to + ")", now);
            return;
        }
        if (c.checksums() == null) {
            if (t.noChecksumsRank < 0) {
                t.noChecksumsRank = r;
            }
        } else if (c.checksums().length > to - from) {
            fail(t, FailureReason.BAD_COMPLETION, "sender " + r + " sent " + c.checksums().length + " checksums for "
                + (to - from) + " pages", now);
            return;
        } else {
            if (t.checksums == null) {
                t.checksums = new int[t.handles.length]; // made when the first checksums arrive: none with them off
            }
            System.arraycopy(c.checksums(), 0, t.checksums, from, c.checksums().length);
            if (c.checksums().length < to - from) {
                // a short sender checksums only the pages it has; the length check (or, with it off, the
                // checksum of a page it never covered) decides
                for (int i = from + c.checksums().length; i < to; i++) {
                    t.checksums[i] = 0;
                }
            }
        }
        t.tokenCounts[r] = c.tokenCount();
        for (boolean done : t.completed) {
            if (!done) {
                return;
            }
        }
        verifyAndCommit(t, now);
    }

    private void verifyAndCommit(IncomingTransfer t, long now) {
        if (sequenceUntouched(t, now) && verify(t, now) && fillLastPageTail(t, now)) {
            pool.handles().commitReceiveAll(t.handles, 0, t.handles.length);
            closeRegistrations(t);
            t.state = IncomingTransfer.State.COMMITTED;
            end(t);
            metrics.committed.increment();
        }
    }

    /**
     * Writes the pool's fill into the tail of a partial last page, past the expected tokens: the transport copied the
     * sender's whole page, so that tail holds the sender page's bytes (another request's KV on a sender pool that does not
     * fill its free pages), which no check reads. Off with the pool's free-page fill ({@link io.kvpool.storage.FillMode#NONE}).
     *
     * @return whether it was written; else {@code t} has failed
     */
    private boolean fillLastPageTail(IncomingTransfer t, long now) {
        final int tail = t.expectedTokens % layout.tokensPerPage();
        if (tail == 0 || t.handles.length == 0) {
            return true;
        }
        try {
            pool.handles().fillUnwrittenTail(t.handles[t.handles.length - 1], tail);
            return true;
        } catch (UnsupportedOperationException e) {
            // a storage of the application's that implements no fillTail: the tail keeps the sender's bytes, as before
            if (!tailFillUnsupportedLogged) {
                tailFillUnsupportedLogged = true;
                LOG.log(System.Logger.Level.WARNING, this + ": the pool's storage " + pool.storage().getClass().getName()
                    + " cannot fill the tail of a received partial page (" + e.getMessage() + "): past the request's last "
                    + "token it keeps the sender page's bytes; implement PageStorage.fillTail. Logged once");
            }
            return true;
        } catch (RuntimeException | InternalError e) { // InternalError: a fault in mapped memory (shm pools)
            return unverifiable(t, e, now);
        }
    }

    /**
     * Checks that nobody changed the sequence while it received. It is the receiver's until the transfer ends, but the
     * caller of {@link #start(long, Sequence, int, int...)} still holds it: a close, a truncate or an append there would
     * commit a sequence that is not the request's KV. Truncate then append is the dangerous one: it swaps received
     * pages for fresh ones that hold a free page's old bytes.
     *
     * @return whether it is as the transfer allocated it; else {@code t} has failed (ABORTED)
     */
    private boolean sequenceUntouched(IncomingTransfer t, long now) {
        final Sequence seq = t.sequence;
        final String change;
        if (seq.isClosed()) {
            change = "was closed";
        } else if (seq.structureVersion() != t.structureVersion) {
            change = "had pages removed or replaced (truncate)";
        } else if (seq.pageCount() != t.handles.length || seq.tokenCount() != t.expectedTokens) {
            change = "holds " + seq.tokenCount() + " tokens in " + seq.pageCount() + " pages"; // appended to, or cut within its last page
        } else {
            return true;
        }
        fail(t, FailureReason.ABORTED, "request " + t.requestId + ": its sequence " + change + " while it received "
            + t.expectedTokens + " tokens in " + t.handles.length + " pages; it is the receiver's until the transfer ends", now);
        return false;
    }

    /** Whether the storage's missing {@code fillTail} was logged (duty thread). */
    private boolean tailFillUnsupportedLogged;

    /** @return whether the received pages pass every check that is on; else {@code t} has failed */
    private boolean verify(IncomingTransfer t, long now) {
        if (on(TransferSafeguard.LENGTH_CHECK)) {
            for (int r = 0; r < t.tokenCounts.length; r++) {
                if (t.tokenCounts[r] != t.expectedTokens) {
                    fail(t, FailureReason.LENGTH_MISMATCH, "sender " + r + " transferred " + t.tokenCounts[r] + " tokens, expected "
                        + t.expectedTokens, now);
                    return false;
                }
            }
        }
        final int tpp = layout.tokensPerPage();
        // only on a canary-filled pool: the scan reads every token vector (~5 µs a MiB), and on another fill it would
        // find only a sender's own canary, never a page this transfer left unwritten (it holds zeros or older bytes)
        if (on(TransferSafeguard.CANARY_CHECK) && pool.fillMode() == io.kvpool.storage.FillMode.CANARY) {
            for (int i = 0; i < t.handles.length; i++) {
                final int valid = Math.min(tpp, t.expectedTokens - i * tpp);
                final int token;
                try {
                    token = pool.firstCanaryToken(t.handles[i], 0, valid);
                } catch (RuntimeException | InternalError e) { // InternalError: a fault in mapped memory (shm pools)
                    return unverifiable(t, e, now);
                }
                if (token >= 0) {
                    fail(t, FailureReason.CANARY, "page " + i + " (token " + (i * tpp + token) + " of " + t.expectedTokens
                        + ") still holds the free-page canary: its KV was never written", now);
                    return false;
                }
            }
        }
        if (checksums && on(TransferSafeguard.CHECKSUM)) {
            if (t.noChecksumsRank >= 0) {
                final int r = t.noChecksumsRank;
                final int n = t.senderPeers.length;
                fail(t, FailureReason.BAD_COMPLETION, "sender " + r + " sent no checksums for its "
                    + (TransferPlan.firstPage(t.handles.length, n, r + 1) - TransferPlan.firstPage(t.handles.length, n, r))
                    + " pages and this receiver requires them", now);
                return false;
            }
            final int[] got = new int[t.handles.length];
            try {
                checksummer.compute(pool, t.handles, 0, t.handles.length, t.requestId, t.expectedTokens, got);
            } catch (RuntimeException | InternalError e) {
                return unverifiable(t, e, now);
            }
            for (int i = 0; i < t.handles.length; i++) {
                if (got[i] != t.checksums[i]) {
                    fail(t, FailureReason.CHECKSUM_MISMATCH, "page " + i + " of " + t.handles.length + ": checksum 0x"
                        + Integer.toHexString(got[i]) + " received, sender's 0x" + Integer.toHexString(t.checksums[i]), now);
                    return false;
                }
            }
        }
        return true;
    }

    /**
     * A check failed on this side (a device's checksum kernel or a canary read threw, or mapped memory faulted): not the
     * sender's fault nor its link's, so the link stays up. Every sender confirmed its writes over, so the pages go back at once, never
     * committed unverified.
     *
     * @return false, for {@link #verify}
     */
    private boolean unverifiable(IncomingTransfer t, Throwable e, long now) {
        fail(t, FailureReason.ABORTED, "could not verify the received pages: " + e, now);
        return false;
    }

    private void onDrained(Peer p, Message.Drained d) {
        if (d.senderRank() < -1) {
            metrics.ackInconsistent.increment();
            return;
        }
        if (d.senderRank() == -1) {
            // "nothing of mine is in flight for this transfer": for every rank this link holds
            final IncomingTransfer t = current(p, d.transferId(), d.generation(), -1);
            if (t != null && d.posted() == 0 && d.succeeded() == 0 && d.failed() == 0) {
                boolean confirmedAny = false;
                for (int r = 0; r < t.senderPeers.length; r++) {
                    if (t.senderPeers[r] == p.id && !t.confirmed[r]) {
                        confirmedAny = true;
                        drainedFrom(t, r, d);
                    }
                }
                if (!confirmedAny) {
                    metrics.ackDuplicate.increment(); // every rank of this link had confirmed: a repeat
                }
            } else if (t != null) {
                metrics.ackInconsistent.increment();
            }
            return;
        }
        final IncomingTransfer t = current(p, d.transferId(), d.generation(), d.senderRank());
        if (t == null) {
            return;
        }
        final int r = d.senderRank();
        if (t.confirmed[r]) {
            metrics.ackDuplicate.increment();
            return;
        }
        if (d.posted() != d.succeeded() + d.failed() || d.posted() < 0 || d.succeeded() < 0 || d.failed() < 0) {
            metrics.ackInconsistent.increment(); // not a proof that its writes are over
            return;
        }
        if (d.failed() > 0) {
            unproven(t, r, d);
            return;
        }
        drainedFrom(t, r, d);
    }

    /**
     * A DRAINED with writes that failed or were not proven delivered: they may still land (docs/dependencies.md, "UCX from Java"), so it
     * proves nothing. The pages are quarantined until the transport proves this sender can no longer write.
     */
    private void unproven(IncomingTransfer t, int r, Message.Drained d) {
        final long now = clock.nanoTime();
        final String why = "sender " + r + " ended with " + d.failed() + " of " + d.posted() + " writes unproven; they may still land";
        if (t.state == IncomingTransfer.State.RECEIVING) {
            fail(t, FailureReason.SENDER_ABORTED, why, now);
        }
        switch (t.state) {
            case DRAINING -> quarantine(t, ReceiverMetrics.Outcome.ERROR, now, r);
            case QUARANTINED -> {
                if (t.suspect[r]) {
                    metrics.ackLate.increment(); // a suspect already: only the transport's proof counts
                }
                t.suspect[r] = true;
            }
            default -> metrics.ackLate.increment();
        }
    }

    private void drainedFrom(IncomingTransfer t, int r, Message.Drained d) {
        if (t.state == IncomingTransfer.State.RECEIVING) {
            markConfirmed(t, r, WriteProof.SENDER); // first: failing asks only the others, and releases if none is left
            fail(t, FailureReason.SENDER_ABORTED, "sender " + r + " stopped (posted " + d.posted() + ", " + d.failed()
                + " failed) without completing", clock.nanoTime());
            return;
        }
        proven(t, r);
    }

    /** Rank {@code r} proved every write it posted was delivered and is over. */
    private void proven(IncomingTransfer t, int r) {
        switch (t.state) {
            case DRAINING -> confirm(t, r);
            case QUARANTINED -> {
                if (t.suspect[r]) {
                    metrics.ackLate.increment(); // it caused the quarantine: only the transport's proof counts
                } else {
                    markConfirmed(t, r, WriteProof.SENDER);
                    tryReleaseQuarantine(t, clock.nanoTime());
                }
            }
            default -> metrics.ackLate.increment();
        }
    }

    /**
     * Rank {@code r} can write nothing more into {@code t}'s pages, as {@code proof} shows. The proof is kept once the
     * transfer failed; {@link #fail} records {@link WriteProof#SENDER} for the ranks confirmed while it was receiving.
     */
    private static void markConfirmed(IncomingTransfer t, int r, WriteProof proof) {
        t.confirmed[r] = true;
        if (t.proofs != null) {
            t.proofs[r] = proof;
        }
    }

    private void confirm(IncomingTransfer t, int rank) {
        markConfirmed(t, rank, WriteProof.SENDER);
        for (boolean c : t.confirmed) {
            if (!c) {
                return;
            }
        }
        releaseDrained(t, ReceiverMetrics.Outcome.DRAINED, clock.nanoTime());
    }

    // ---------------------------------------------------------------------------------------------
    // failure, drain, quarantine

    private void fail(IncomingTransfer t, FailureReason reason, String message, long now) {
        if (t.state != IncomingTransfer.State.RECEIVING) {
            return;
        }
        t.failure = reason;
        t.message = message;
        metrics.failures.get(reason).increment();
        t.proofs = new WriteProof[t.senderPeers.length];
        t.suspect = new boolean[t.senderPeers.length]; // read from DRAINING on, which only this method enters
        final boolean[] unregistered = new boolean[t.senderPeers.length];
        for (int r = 0; r < t.proofs.length; r++) {
            if (t.confirmed[r]) {
                t.proofs[r] = WriteProof.SENDER; // its completion or DRAINED came while it was receiving
            } else if (t.registrations[r] == null) {
                // its register failed, or came after one that did (start stops there): no descriptor went to it, so it
                // has no key to write the pages with. Nothing to wait for, and no link to retire for its silence
                unregistered[r] = true;
                markConfirmed(t, r, WriteProof.REVOKED);
            }
        }
        for (long h : t.handles) {
            pool.handles().beginDrain(h);
        }
        t.sequence.close(); // only the writer pins hold the pages now
        t.state = IncomingTransfer.State.DRAINING;
        t.holdStartedAt = now;
        t.deadline = now + drainTimeoutNanos;
        metrics.heldPages.addAndGet(t.handles.length);
        for (int r = 0; r < t.senderPeers.length; r++) {
            if (!t.confirmed[r]) {
                send(peers.get(t.senderPeers[r]), new Message.Abort(t.transferId, t.generation,
                    reason == FailureReason.ABORTED ? Message.Abort.REQUESTED : Message.Abort.RECEIVER_FAILED, message));
            }
            if (!t.confirmed[r] || unregistered[r]) {
                // and by request: a sender whose descriptor was lost (or never sent) still holds a waiting offer
                cancel(peers.get(t.senderPeers[r]), t.requestId, Message.Cancel.ABORTED, message);
            }
        }
        if (t.state != IncomingTransfer.State.DRAINING) {
            return; // an ABORT's failed send took its peer down, and onPeerDown already quarantined (maybe released) t
        }
        if (!on(TransferSafeguard.DRAIN_WAIT)) {
            releaseDrained(t, ReceiverMetrics.Outcome.DRAINED, now); // UNSAFE: writes may still be in flight
            return;
        }
        boolean all = true;
        for (int r = 0; r < t.senderPeers.length; r++) {
            if (!t.confirmed[r]) {
                all = false;
                if (!peers.get(t.senderPeers[r]).carries()) {
                    quarantine(t, ReceiverMetrics.Outcome.ERROR, now, r);
                    return;
                }
            }
        }
        if (all) {
            releaseDrained(t, ReceiverMetrics.Outcome.DRAINED, now);
        }
    }

    private void releaseDrained(IncomingTransfer t, ReceiverMetrics.Outcome outcome, long now) {
        for (long h : t.handles) {
            pool.handles().drained(h);
        }
        closeRegistrations(t);
        released(t, outcome, now);
    }

    /**
     * @param suspect the rank that caused it (its link is lost, or it reported unproven writes), or -1 for
     *                every unconfirmed rank (the drain deadline passed)
     */
    private void quarantine(IncomingTransfer t, ReceiverMetrics.Outcome outcome, long now, int suspect) {
        if (!on(TransferSafeguard.QUARANTINE_ON_TIMEOUT)) {
            releaseDrained(t, outcome, now); // UNSAFE: freed without proof; writes may land later
            return;
        }
        for (int r = 0; r < t.senderPeers.length; r++) {
            if (!t.confirmed[r] && (suspect < 0 || r == suspect || !peers.get(t.senderPeers[r]).carries())) {
                t.suspect[r] = true;
            }
        }
        for (long h : t.handles) {
            pool.handles().quarantine(h);
        }
        t.state = IncomingTransfer.State.QUARANTINED;
        t.outcome = outcome;
        metrics.deferredRelease.get(outcome).increment();
        metrics.quarantinedPages.addAndGet(t.handles.length);
        quarantineLog.log(System.Logger.Level.WARNING, "quarantine", () -> "transfer " + t.transferId + "/" + t.generation
            + " of request " + t.requestId + ": " + t.handles.length + " pages QUARANTINED (" + outcome + ", " + t.failure + ": "
            + t.message + "); held until the transport proves no write can land; now " + metrics.quarantinedPages.get()
            + " pages quarantined");
        tryReleaseQuarantine(t, now);
    }

    /**
     * A quarantine ends when every unconfirmed rank is proven unable to write: its registration revoked,
     * or its link torn down on this side. A suspect rank (it caused the quarantine) can only be proven so;
     * the others may still confirm with a proven DRAINED until the drain deadline, after which they are
     * suspects too.
     *
     * @return whether the quarantine ended
     */
    private boolean tryReleaseQuarantine(IncomingTransfer t, long now) {
        if (t.state != IncomingTransfer.State.QUARANTINED) {
            return false;
        }
        boolean all = true;
        for (int r = 0; r < t.senderPeers.length; r++) {
            if (t.confirmed[r]) {
                continue;
            }
            final Peer p = peers.get(t.senderPeers[r]);
            if (!t.suspect[r] && (!p.carries() || now - t.deadline >= 0)) {
                t.suspect[r] = true;
            }
            if (t.registrations[r] != null && t.registrations[r].revoke()) {
                markConfirmed(t, r, WriteProof.REVOKED);
            } else if (t.suspect[r] && (p.tornDown || proveUnableToWrite(p))) {
                markConfirmed(t, r, WriteProof.LINK_TORN_DOWN);
            } else {
                all = false;
            }
            if (t.state != IncomingTransfer.State.QUARANTINED) {
                return true; // a teardown re-entered and ended it
            }
        }
        if (!all) {
            return false;
        }
        for (long h : t.handles) {
            pool.handles().releaseQuarantine(h);
        }
        metrics.quarantinedPages.addAndGet(-t.handles.length);
        metrics.quarantineReleases.increment();
        closeRegistrations(t);
        released(t, t.outcome, now);
        return true;
    }

    /**
     * A suspect's link: torn down at once if it is down anyway (nothing else can use it); if it is up, retired
     * (torn down once the transfers in flight on it ended, {@link #retireIdle}) or, without retirement or on a link
     * of version 1 or 2, torn down now — failing every transfer on it.
     *
     * @return whether the teardown is proven now
     */
    private boolean proveUnableToWrite(Peer p) {
        if (!p.carries()) {
            return tearDown(p);
        }
        if (!tearDownOnTimeout) {
            return false;
        }
        if (retireSuspectLinks && p.version >= 3) {
            retire(p);
            return false;
        }
        // a sender before version 3 cannot be told of a retirement (it ignores CANCEL(link, RETIRING)) and would keep
        // the link, refused every new transfer on it, until the teardown: tearing down now lets it reconnect at once
        return tearDown(p);
    }

    private void retire(Peer p) {
        if (p.state != Peer.State.UP) {
            return; // already RETIRING (or HANDSHAKE: carries nothing yet)
        }
        p.moveTo(Peer.State.RETIRING);
        retiring.add(p);
        metrics.linksRetired.increment();
        // counted in linksRetired, not in cancelsSent (a request's CANCELs); only links of version 3 and later are retired
        send(p, new Message.Cancel(Message.Cancel.LINK, Message.Cancel.RETIRING, "link retired: a write on it was unproven; open a fresh link"));
        LOG.log(System.Logger.Level.WARNING, () -> this + ": " + p + " — a write on it is unproven and the link cannot revoke "
            + "one registration: no new transfer starts on it; torn down once the transfers in flight on it end");
    }

    /**
     * Tears down each RETIRING link that no transfer still RECEIVING or DRAINING needs (an unconfirmed rank on it);
     * quarantined transfers are what wait for that teardown.
     *
     * @return links torn down
     */
    private int retireIdle(long now) {
        if (retiring.isEmpty()) {
            return 0;
        }
        int work = 0;
        for (int i = retiring.size() - 1; i >= 0; i--) {
            final Peer p = retiring.get(i);
            if (p.state == Peer.State.RETIRING && inFlightOn(p)) {
                continue;
            }
            retiring.remove(i);
            tearDown(p); // FAILED now; its quarantines see tornDown (or retry tearDown) in tryReleaseQuarantine
            work++;
        }
        if (work > 0) {
            for (IncomingTransfer t : active.toArray(new IncomingTransfer[0])) {
                tryReleaseQuarantine(t, now);
            }
        }
        return work;
    }

    private boolean inFlightOn(Peer p) {
        for (int i = 0; i < active.size(); i++) {
            final IncomingTransfer t = active.get(i);
            if (t.state == IncomingTransfer.State.RECEIVING || t.state == IncomingTransfer.State.DRAINING) {
                final int r = rankOf(t, p);
                if (r >= 0 && !t.confirmed[r]) {
                    return true;
                }
            }
        }
        return false;
    }

    /**
     * The receiver's own teardown of a suspect's link (a failed transfer's writes not proven ended), from its duty
     * cycle: once asked, the transport is asked again at most every {@link #PROOF_RECHECK_NANOS}.
     */
    private boolean tearDown(Peer p) {
        if (!p.tornDown && p.nextProofCheckNanos != 0 && clock.nanoTime() - p.nextProofCheckNanos < 0) {
            return false; // asked recently: a proof may cost the transport a scan of the peer process's threads
        }
        final boolean proven = tearDown(p, p.state == Peer.State.RETIRING
            ? "retired and torn down by the receiver: a write on it was unproven; no transfer was in flight on it any more"
            : "torn down by the receiver: it did not prove that a failed transfer's writes ended");
        if (!proven) {
            p.nextProofCheckNanos = clock.nanoTime() + PROOF_RECHECK_NANOS;
        }
        return proven;
    }

    /** @param why the peer's failure, if it is not down yet */
    private boolean tearDown(Peer p, String why) {
        if (p.tornDown) {
            return true;
        }
        if (p.state == Peer.State.HANDSHAKE || p.state == Peer.State.UP || p.state == Peer.State.RETIRING) {
            fail(p, Peer.State.FAILED, why);
        }
        p.tornDown = p.link.tearDown();
        return p.tornDown;
    }

    /**
     * Tears down a peer's link (every transfer with it fails) and, once the transport proves the peer can
     * no longer write, releases what it held in quarantine. Owner thread only; call again until it
     * returns {@code true}.
     *
     * @param peerId the id {@link #addPeer} gave the peer
     * @return whether the teardown is proven
     * @throws IllegalStateException     if the receiver is closed
     * @throws IndexOutOfBoundsException if no peer has that id
     */
    public boolean tearDownPeer(int peerId) {
        ensureOpen();
        final boolean proven = tearDown(peers.get(peerId), "torn down by the application (tearDownPeer)");
        onDuty(clock.nanoTime());
        return proven;
    }

    private void released(IncomingTransfer t, ReceiverMetrics.Outcome outcome, long now) {
        for (int r = 0; r < t.proofs.length; r++) {
            if (t.proofs[r] == null) {
                t.proofs[r] = WriteProof.NONE; // only a safeguard switched off frees a rank's pages unproven
            }
            metrics.releasedRanks.get(t.proofs[r]).increment();
        }
        if (t.state != IncomingTransfer.State.QUARANTINED) {
            metrics.deferredRelease.get(outcome).increment();
            t.outcome = outcome;
        }
        t.state = IncomingTransfer.State.RELEASED;
        metrics.heldPages.addAndGet(-t.handles.length);
        metrics.holdEnded(Math.max(0, now - t.holdStartedAt)); // the cycle's time is read before its polls, which may start holds
        end(t);
    }

    private void end(IncomingTransfer t) {
        slots[t.transferId] = null;
        active.remove(t);
    }

    private static void closeRegistrations(IncomingTransfer t) {
        for (Registration reg : t.registrations) {
            if (reg != null) {
                try {
                    reg.close();
                } catch (RuntimeException ignored) {
                    // ending a registration is best effort; the pages' states are what protect them
                }
            }
        }
    }

    @Override
    int onDuty(long now) {
        int work = 0;
        // releasing one transfer can end others (a teardown): iterate a copy, made element by element (addAll would
        // allocate an array every cycle)
        scratch.clear();
        for (int i = 0; i < active.size(); i++) {
            scratch.add(active.get(i));
        }
        for (int i = 0; i < scratch.size(); i++) {
            final IncomingTransfer t = scratch.get(i);
            switch (t.state) {
                case RECEIVING -> {
                    if (now - t.deadline >= 0) {
                        fail(t, FailureReason.TIMEOUT, "no completion from " + notCompleted(t) + " within "
                            + Duration.ofNanos(completionTimeoutNanos).toMillis() + " ms", now);
                        work++;
                    }
                }
                case DRAINING -> {
                    if (now - t.deadline >= 0) {
                        quarantine(t, ReceiverMetrics.Outcome.TIMEOUT, now, -1);
                        work++;
                    }
                }
                case QUARANTINED -> work += tryReleaseQuarantine(t, now) ? 1 : 0;
                default -> {
                }
            }
        }
        return work + retireIdle(now);
    }

    /** @return the ranks of a RECEIVING transfer whose completion has not come, with their peers: "sender 1 (peer 3) of 2" */
    private static String notCompleted(IncomingTransfer t) {
        final StringBuilder ranks = new StringBuilder();
        int missing = 0;
        for (int r = 0; r < t.senderPeers.length; r++) {
            if (!t.completed[r]) {
                ranks.append(missing++ == 0 ? "" : ", ").append(r).append(" (peer ").append(t.senderPeers[r]).append(')');
            }
        }
        return (missing == 1 ? "sender " : "senders ") + ranks + " of " + t.senderPeers.length;
    }

    @Override
    void onPeerDown(Peer p) {
        final long now = clock.nanoTime();
        for (IncomingTransfer t : active.toArray(new IncomingTransfer[0])) {
            final int r = rankOf(t, p);
            if (r < 0 || t.confirmed[r]) {
                continue;
            }
            if (t.state == IncomingTransfer.State.RECEIVING) {
                fail(t, FailureReason.PEER_LOST, "sender " + r + " lost: " + p.failure, now);
            } else if (t.state == IncomingTransfer.State.DRAINING) {
                quarantine(t, ReceiverMetrics.Outcome.ERROR, now, r);
            } else if (t.state == IncomingTransfer.State.QUARANTINED) {
                t.suspect[r] = true;
            }
        }
    }

    @Override
    void onWriteDone(PeerLink link, long token, int status) {
        // receivers post no writes
    }

    @Override
    void onFlushDone(PeerLink link, long token, boolean ok) {
        // receivers post no flushes
    }

    /**
     * Closes the receiver: fails every transfer still RECEIVING (its pages go DRAINING) and closes the
     * links. Pages still DRAINING or QUARANTINED stay pinned in the pool, so its close report names them;
     * nothing is freed without proof. Idempotent.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        final long now = clock.nanoTime();
        for (IncomingTransfer t : active.toArray(new IncomingTransfer[0])) {
            fail(t, FailureReason.ABORTED, "receiver closed", now);
        }
        closed = true;
        closeLinks();
        quarantineLog.flush(toString());
    }

    @Override
    boolean sendsHelloFirst() {
        return true;
    }

    @Override
    public String toString() {
        return "TransferReceiver[" + identity.environment() + ", " + peers.size() + " peers, " + active.size() + " active"
            + (disabled.isEmpty() ? "" : ", UNSAFE: disabled " + disabled) + "]";
    }

    /** Builds a {@link TransferReceiver}. */
    public static final class Builder extends EndpointBuilder<Builder> {
        private Duration completionTimeout = Duration.ofSeconds(30);
        private Duration drainTimeout = Duration.ofSeconds(30);
        private boolean checksums = true;
        private PageChecksums checksummer = PageChecksums.HOST;
        private boolean tearDownOnTimeout = true;
        private boolean retireSuspectLinks = true;
        /** Where the rate-limited per-transfer lines go (tests read them). */
        System.Logger transferLog = LOG;
        private int maxTransfers = 1024;
        /** The generation every slot starts from (tests reach a slot's last generation without 2^31 transfers). */
        int firstGenerationForTests;

        private Builder(KvPool pool, PeerIdentity identity) {
            super(pool, identity);
        }

        /**
         * Sets how long a transfer may stay RECEIVING before it fails with {@link FailureReason#TIMEOUT}.
         *
         * @param d the timeout; 30 s by default
         * @return this builder
         * @throws IllegalArgumentException if {@code d} is null, zero or negative
         */
        public Builder completionTimeout(Duration d) {
            this.completionTimeout = positive("completionTimeout", d);
            return this;
        }

        /**
         * Sets how long a failed transfer waits for DRAINED before its pages are quarantined.
         *
         * @param d the timeout; 30 s by default
         * @return this builder
         * @throws IllegalArgumentException if {@code d} is null, zero or negative
         */
        public Builder drainTimeout(Duration d) {
            this.drainTimeout = positive("drainTimeout", d);
            return this;
        }

        /**
         * Sets whether commits require matching checksums; senders must then send them.
         *
         * @param on whether to verify checksums; true by default
         * @return this builder
         */
        public Builder checksums(boolean on) {
            this.checksums = on;
            return this;
        }

        /**
         * Commits require matching checksums, computed by {@code how} (default {@link PageChecksums#HOST}, which needs
         * host-accessible storage; a device pool passes kvpool-cuda's {@code DeviceChecksums}). Switches checksums on.
         *
         * @param how computes the checksums of the received pages
         * @return this builder
         * @throws NullPointerException if {@code how} is null
         */
        public Builder checksums(PageChecksums how) {
            this.checksummer = Objects.requireNonNull(how, "how");
            this.checksums = true;
            return this;
        }

        /**
         * Whether the receiver tears down the link of a sender that did not prove its writes ended — it
         * missed the drain deadline or reported unproven writes — so the quarantined pages can be released
         * once the transport proves the teardown (default true). With {@link #retireSuspectLinks} (the default, on
         * links of version 3) the link is retired first: the other transfers on it finish, then it is torn down;
         * without, every other transfer on it fails at once. With false, quarantined pages wait for a revocable
         * registration or {@link #tearDownPeer}.
         *
         * @param on whether to tear down such a sender's link
         * @return this builder
         */
        public Builder tearDownOnTimeout(boolean on) {
            this.tearDownOnTimeout = on;
            return this;
        }

        /**
         * How a suspect's link that is still up and cannot revoke one registration is torn down (with
         * {@link #tearDownOnTimeout} on): retired (default true) — no new transfer starts on it
         * ({@link Peer#isUp()} is false, {@link Peer.State#RETIRING}: open a fresh link for new work), the transfers in
         * flight on it finish, then it is torn down and the teardown proves its quarantined pages free — or, with
         * false, torn down at once, failing every transfer on it with {@link FailureReason#PEER_LOST}. The proof is
         * the same teardown either way. A sender that speaks protocol version 1 or 2 cannot be told of a retirement,
         * so its link is torn down at once whatever this says.
         *
         * @param on whether to retire such a link rather than tear it down at once
         * @return this builder
         */
        public Builder retireSuspectLinks(boolean on) {
            this.retireSuspectLinks = on;
            return this;
        }

        /**
         * Sets the number of transfer slots, i.e. of concurrent transfers; beyond it {@link #start} rejects
         * ({@link FailureReason#REJECTED}, retryable). A QUARANTINED transfer does not count: it may wait for its
         * sender process's exit for as long as that process lives, and the pages it holds bound how many there are.
         *
         * @param n the slots, ≥ 1; 1024 by default
         * @return this builder
         * @throws IllegalArgumentException if {@code n < 1}
         */
        public Builder maxTransfers(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("maxTransfers must be ≥ 1, was " + n);
            }
            this.maxTransfers = n;
            return this;
        }

        /**
         * Switches the receiver's safeguards off. For tests and incident replays only: logged as an error.
         *
         * @param safeguards the safeguards to switch off
         * @return this builder
         * @throws IllegalArgumentException if one is the sender's ({@link TransferSafeguard#isSenderSide()})
         */
        public Builder unsafeDisable(TransferSafeguard... safeguards) {
            return disable(false, safeguards);
        }

        /**
         * {@return the receiver}
         *
         * @throws IllegalArgumentException if the identity's layout fingerprint is not the pool's, or
         *                                  checksums are on and the checksummer cannot read the pool's storage
         */
        public TransferReceiver build() {
            return new TransferReceiver(this);
        }
    }
}
