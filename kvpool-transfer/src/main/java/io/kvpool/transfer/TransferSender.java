package io.kvpool.transfer;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.wire.Message;
import org.agrona.collections.Int2ObjectHashMap;
import org.agrona.collections.Long2ObjectHashMap;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The prefill side of the transfer protocol (drawn in full in the {@link io.kvpool.transfer package
 * comment}): writes a request's pages one-sidedly into the destinations a receiver's descriptor names,
 * in bounded batches, proves delivery with a flush, and sends a completion with checksums — or, once it
 * failed or was aborted, stops posting and confirms DRAINED only when every write it posted has reached
 * a terminal state.
 *
 * <h2>A transfer's states</h2>
 * <pre>
 *  offer() ─▶ WAITING ──DESCRIPTOR (matched by request id; may come first)──▶ WRITING
 *  WAITING ──CANCEL (the receiver rejected or aborted the request; may come first)──▶ DRAINED, pages released at once
 *      (a CANCEL never ends WRITING or FLUSHING: it names the request, not the attempt; the ABORT before it does)
 *  WRITING ──every page posted (≤ maxPagesInFlight at a time) and completed OK──▶ FLUSHING
 *  FLUSHING ──flush proves delivery──▶ COMPLETION sent ─▶ COMPLETED
 *  WRITING / FLUSHING ──a write or flush fails · ABORT received · abort() · link lost──▶ FAILING
 *      (marked failed FIRST: nothing more is posted; ABORT → receiver unless it asked)
 *  FAILING ──every posted write terminal (OK, FAILED or CANCELED), then a flush──▶ DRAINED(posted, proven,
 *      unproven) sent ─▶ DRAINED      (a deadline passes first: the transport force-cancels; still wait)
 * </pre>
 * One failed write never makes a transfer drained while its other writes are in flight. A write that
 * completed OK is proven delivered only by a flush, and one that failed or was cancelled may still land
 * (docs/dependencies.md, "UCX from Java"), so DRAINED says how many writes are proven; only {@code unproven = 0} lets the receiver free
 * the pages — otherwise they stay quarantined until the transport proves the link can no longer write. The source
 * pages are retained from {@link #offer} until every write reading them ended, so a source page is never
 * reused while the transport may still read it.
 * <p>
 * Close the sender, and let it drain ({@link #close()}), before its pool: a reference does not keep a closed pool's
 * storage, so a transport may still be reading pages the pool has freed. A pool closed under a running sender fails
 * every transfer that has not completed, since what the transport read may not be the KV (the receiver sees
 * {@link FailureReason#SENDER_ABORTED}); each still drains as usual, with nothing left to release.
 *
 * <p><b>Threading:</b> single-threaded, like {@link TransferReceiver}; {@link #metrics()} may be read from any thread.
 */
public final class TransferSender extends TransferEndpoint {

    private static final long FLUSH = 0xFFFF_FFFFL;

    private final KvPool pool;
    private final KvLayout layout;
    private final long layoutFingerprint; // checkedFingerprint: computed once
    private final int maxPagesInFlight;
    /** pump's destination and source page numbers, reused from batch to batch (owner thread only) */
    private int[] dstScratch = new int[0], srcScratch = new int[0];
    private final boolean checksums;
    private final PageChecksums checksummer;
    /** {@link TransferSafeguard#SOURCE_HOLD}; false only in a test that shows the hold is what stops a leak */
    private final boolean holdSource;
    /** {@link TransferSafeguard#DRAINED_AFTER_WRITES_END}; false only in a test that shows the wait is what stops a leak */
    private final boolean drainAfterWritesEnd;
    /** The safeguards switched off (empty in production): the two flags above, as a set. */
    private final Set<TransferSafeguard> disabled;
    private final long drainDeadlineNanos;
    private final long descriptorTimeoutNanos;
    private final Long2ObjectHashMap<OutgoingTransfer> offers = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<PendingDescriptor> early = new Long2ObjectHashMap<>();
    /**
     * CANCELs that came before their request's offer (decode refused it while prefill was still computing), by request
     * id: the offer ends at once when it comes. Each is kept for the descriptor timeout, and at most
     * {@link #MAX_EARLY_CANCELS} at a time. A later descriptor for the same request drops it: the receiver took the
     * request after all. A link that goes down keeps its CANCELs: the receiver still refused the request.
     */
    private final Long2ObjectHashMap<EarlyCancel> cancelledEarly = new Long2ObjectHashMap<>();
    /**
     * Offers aborted before their descriptor came, by request id: a descriptor that comes for one within the descriptor
     * timeout is refused at once, so that its receiver frees the pages it holds for it now, not at its completion
     * timeout. A new offer of the request drops the entry. At most {@link #MAX_EARLY_CANCELS} at a time.
     */
    private final Long2ObjectHashMap<EarlyCancel> abortedEarly = new Long2ObjectHashMap<>();
    static final int MAX_EARLY_CANCELS = 65_536;
    private long nextEarlyCancelPurge;
    private final Int2ObjectHashMap<OutgoingTransfer> bySerial = new Int2ObjectHashMap<>();
    private final List<OutgoingTransfer> active = new ArrayList<>();
    private final List<OutgoingTransfer> scratch = new ArrayList<>();
    private int nextSerial;
    private long inFlight;
    private final SenderMetrics metrics = new SenderMetrics();

    private record PendingDescriptor(Peer peer, Message.Descriptor d) {
    }

    private record EarlyCancel(FailureReason reason, String why, long expires) {
    }

    /**
     * What this sender knows of a receiver's transfer slot: the newest generation it saw a descriptor for
     * and, once that transfer is over, its counts — so an ABORT that arrives after the end is answered with
     * the truth, never with "nothing in flight". One per slot of each receiver: bounded by its slot count.
     */
    private static final class SlotRecord {
        int generation;
        int rank;
        boolean over;
        /** This generation's descriptor was taken by an offer (not refused, not only seen early). */
        boolean begun;
        /** The request of the offer that took it, when {@link #begun}. */
        long requestId;
        long posted;
        long proven;
    }

    private final Int2ObjectHashMap<Long2ObjectHashMap<SlotRecord>> slotRecords = new Int2ObjectHashMap<>();

    private SlotRecord record(Peer p, long transferId, boolean create) {
        Long2ObjectHashMap<SlotRecord> m = slotRecords.get(p.id);
        if (m == null) {
            if (!create) {
                return null;
            }
            m = new Long2ObjectHashMap<>();
            slotRecords.put(p.id, m);
        }
        SlotRecord r = m.get(transferId);
        if (r == null && create) {
            r = new SlotRecord();
            m.put(transferId, r);
        }
        return r;
    }

    /**
     * Notes a descriptor seen; {@code over} with counts when nothing of it can be in flight.
     *
     * @return the slot's record
     */
    private SlotRecord seen(Peer p, long transferId, int generation, int rank, boolean over, long posted, long proven) {
        final SlotRecord r = record(p, transferId, true);
        if (generation > r.generation || generation == r.generation && (!r.over || posted >= r.posted)) {
            if (generation > r.generation) {
                r.begun = false;
            }
            r.generation = generation;
            r.rank = rank;
            r.over = over;
            r.posted = posted;
            r.proven = proven;
        }
        return r;
    }

    private TransferSender(Builder b) {
        super(b.identity, b.clock, b.strictBuild, b.heartbeat);
        this.pool = b.pool;
        this.layout = pool.layout();
        this.layoutFingerprint = checkedFingerprint(b.identity, layout);
        this.maxPagesInFlight = b.maxPagesInFlight;
        this.checksums = b.checksums;
        this.checksummer = b.checksummer;
        if (checksums && !checksummer.supports(pool.storage())) {
            throw new IllegalArgumentException("checksums are computed by " + checksummer + ", which cannot read " + pool.storage()
                + "; build with checksums(PageChecksums) that can (kvpool-cuda's DeviceChecksums for device pools) or checksums(false)");
        }
        this.drainDeadlineNanos = b.drainDeadline.toNanos();
        this.descriptorTimeoutNanos = b.descriptorTimeout.toNanos();
        this.nextEarlyCancelPurge = clock.nanoTime(); // not 0: nanoTime's origin may lie in the future
        this.holdSource = !b.disabled.contains(TransferSafeguard.SOURCE_HOLD);
        this.drainAfterWritesEnd = !b.disabled.contains(TransferSafeguard.DRAINED_AFTER_WRITES_END);
        this.disabled = b.disabled.isEmpty() ? Set.of() : Set.copyOf(b.disabled);
        if (!disabled.isEmpty()) {
            LOG.log(System.Logger.Level.ERROR, "UNSAFE transfer sender built with safeguards DISABLED: " + disabled
                + " — for tests only; it can send one request's KV as another's");
        }
    }

    /** {@return the safeguards switched off (empty in production)} */
    public Set<TransferSafeguard> disabledSafeguards() {
        return disabled;
    }

    /**
     * Starts building a sender for a prefill pool.
     *
     * @param pool     the prefill pool the KV is read from
     * @param identity this side's identity; its layout fingerprint must be the pool's (checked by
     *                 {@link Builder#build})
     * @return a builder
     * @throws NullPointerException if an argument is null
     */
    public static Builder builder(KvPool pool, PeerIdentity identity) {
        return new Builder(pool, identity);
    }

    /**
     * The sender's counters. The object is the same for the sender's whole life and stays readable after
     * {@link #close()}.
     *
     * @return the counters, readable from any thread
     */
    public SenderMetrics metrics() {
        return metrics;
    }

    /** {@return pages being written now (across transfers)} */
    public long pagesInFlight() {
        return inFlight;
    }

    /** {@return transfers not yet COMPLETED or DRAINED (WAITING ones included)} */
    public int activeTransfers() {
        return offers.size();
    }

    /** {@return the transfers not yet over, for diagnostics} */
    public List<OutgoingTransfer> openTransfers() {
        return List.copyOf(offers.values());
    }

    /**
     * Offers a request's KV for transfer. Retains every page of the sequence (the caller may close it at
     * once); the references are dropped when the transfer is over.
     *
     * @param requestId the request; the receiver's descriptor names it
     * @param source    the prefill sequence holding the KV of its {@link Sequence#tokenCount()} tokens
     * @return the transfer
     * @throws IllegalArgumentException if the sequence belongs to another pool (the message names both pools)
     * @throws IllegalStateException    if the sender is closed, the sequence is closed (its KV is gone: nothing is
     *                                  offered), or the request id is offered already
     * @throws io.kvpool.StaleHandleException if a page of the sequence is no longer its (nothing is retained)
     * @throws io.kvpool.IllegalSlotTransitionException if a page cannot be retained, e.g. one still RECEIVING
     *                                  (nothing is retained)
     */
    public OutgoingTransfer offer(long requestId, Sequence source) {
        ensureOpen();
        if (source.pool() != pool) {
            throw new IllegalArgumentException("the sequence belongs to " + source.pool() + ", this sender to " + pool);
        }
        if (source.isClosed()) { // a closed sequence reads as empty: offering it would send 0 tokens for this request
            throw new IllegalStateException("request " + requestId + ": the sequence is closed, its KV is gone; offer it "
                + "before closing it (offer retains its pages)");
        }
        final long[] handles = new long[source.pageCount()];
        for (int i = 0; i < handles.length; i++) {
            handles[i] = source.pageHandle(i);
        }
        return offer(requestId, handles, source.tokenCount(), false); // our own array: the transfer keeps it
    }

    /**
     * Offers KV held in pages by handle. Retains each page (the handles must be current OWNED pages of
     * this sender's pool). If a receiver's CANCEL of this request id came first (it refused the request while
     * this side was still computing it), within the descriptor timeout, the offer ends at once and releases them.
     *
     * @param requestId  the request; an id must not name another request while a transfer of it may run (see the
     *                   package documentation, "Request ids": a descriptor finds its offer by this id alone)
     * @param handles    the pages, in logical order; {@code ceil(tokenCount / tokensPerPage)} of them
     * @param tokenCount tokens of KV they hold
     * @return the transfer
     * @throws IllegalArgumentException if {@code handles} is not {@code ceil(tokenCount / tokensPerPage)} long
     * @throws IllegalStateException    if the sender is closed, or the request id is offered already
     * @throws io.kvpool.StaleHandleException if a handle is not a current page of this pool (nothing is retained)
     * @throws io.kvpool.IllegalSlotTransitionException if a page cannot be retained, e.g. one still RECEIVING
     *                                  (nothing is retained)
     */
    public OutgoingTransfer offer(long requestId, long[] handles, int tokenCount) {
        return offer(requestId, handles, tokenCount, true);
    }

    /** @param copy whether {@code handles} is the caller's, which it may reuse: the transfer keeps a copy */
    private OutgoingTransfer offer(long requestId, long[] handles, int tokenCount, boolean copy) {
        ensureOpen();
        if (offers.containsKey(requestId)) {
            throw new IllegalStateException("request " + requestId + " is already offered");
        }
        if (handles.length != layout.pagesFor(tokenCount)) {
            throw new IllegalArgumentException(tokenCount + " tokens need " + layout.pagesFor(tokenCount) + " pages, got "
                + handles.length);
        }
        pool.retainAll(handles, 0, handles.length); // all or none
        final OutgoingTransfer t = new OutgoingTransfer(requestId, copy ? handles.clone() : handles, tokenCount, nextSerial++);
        metrics.offered.increment();
        offers.put(requestId, t);
        bySerial.put(t.serial, t);
        final long now = clock.nanoTime();
        t.deadline = now + descriptorTimeoutNanos;
        active.add(t);
        abortedEarly.remove(requestId); // offered again: a descriptor for it is this offer's
        final EarlyCancel ec = cancelledEarly.remove(requestId);
        if (ec != null && now - ec.expires() >= 0) {
            metrics.cancelsIgnored.increment(); // expired, not purged yet: as if it had been
        } else if (ec != null) { // the receiver refused the request before we offered it: release now, not at the timeout
            metrics.cancelled.increment();
            endWaiting(t, ec.reason(), ec.why() + " (before it was offered)");
            return t;
        }
        final PendingDescriptor pd = early.remove(requestId);
        if (pd != null) {
            begin(t, pd.peer, pd.d);
        }
        return t;
    }

    /**
     * Aborts a transfer: nothing more is posted, the receiver is told, and DRAINED follows once every
     * posted write ended. Does nothing to a transfer that is COMPLETED or already failing. Owner thread only.
     * An offer still waiting for its descriptor ends at once; a descriptor that comes for its request within the
     * descriptor timeout (and before the request is offered again) is refused, which tells its receiver then.
     *
     * @param t   a transfer this sender offered
     * @param why the reason, sent to the receiver and kept in the transfer's failure
     * @return whether this call failed it
     * @throws IllegalStateException if the sender is closed
     */
    public boolean abort(OutgoingTransfer t, String why) {
        ensureOpen();
        if (t.state == OutgoingTransfer.State.WAITING) {
            endWaiting(t, FailureReason.SENDER_ABORTED, "aborted before a descriptor arrived: " + why);
            if (abortedEarly.size() < MAX_EARLY_CANCELS) {
                abortedEarly.put(t.requestId, new EarlyCancel(FailureReason.SENDER_ABORTED, why, clock.nanoTime() + descriptorTimeoutNanos));
            }
            return true;
        }
        if (t.state != OutgoingTransfer.State.WRITING && t.state != OutgoingTransfer.State.FLUSHING) {
            return false;
        }
        fail(t, FailureReason.SENDER_ABORTED, "aborted: " + why, true, Message.Abort.REQUESTED);
        return true;
    }

    // ---------------------------------------------------------------------------------------------

    @Override
    void onMessage(Peer p, Message m) {
        final boolean afterAnsweredAbort = p.abortAnswered;
        p.abortAnswered = false;
        switch (m) {
            case Message.Descriptor d -> onDescriptor(p, d);
            case Message.Abort a -> onAbort(p, a);
            case Message.Cancel c -> onCancel(p, c, afterAnsweredAbort && p.abortAnsweredRequest == c.requestId());
            default -> {
                malformedFrames.increment();
                fail(p, Peer.State.FAILED, "protocol error: a sender does not accept " + m.getClass().getSimpleName());
            }
        }
    }

    private void onDescriptor(Peer p, Message.Descriptor d) {
        // first: a copy must never be refused (a refusal answers DRAINED(nothing posted) for its generation)
        final SlotRecord known = record(p, d.transferId(), false);
        if (known != null && known.generation >= d.generation()) {
            // a copy of a descriptor already seen (duplicated or delayed frame), or an older one: the transfer
            // it names is running, was refused or is over — acting on it again could only do harm
            metrics.duplicateDescriptors.increment();
            return;
        }
        final String bad = d.layoutFingerprint() != layoutFingerprint
            ? "layout fingerprint " + PeerIdentity.hex(d.layoutFingerprint()) + " is not this sender's " + PeerIdentity.hex(layoutFingerprint)
            : d.senders() < 1 || d.senderRank() < 0 || d.senderRank() >= d.senders()
            ? "rank " + d.senderRank() + " of " + d.senders() + " senders"
            : d.expectedTokens() < 0
            ? d.expectedTokens() + " tokens"
            : d.pages() == 0 || d.pages() != layout.pagesFor(d.expectedTokens())
            ? d.pages() + " pages for " + d.expectedTokens() + " tokens" : null;
        if (bad != null) {
            refuse(p, d.transferId(), d.generation(), d.senderRank(), "bad descriptor: " + bad);
            return;
        }
        final OutgoingTransfer t = offers.get(d.requestId());
        if (t == null) {
            final EarlyCancel aborted = abortedEarly.remove(d.requestId());
            if (aborted != null && clock.nanoTime() - aborted.expires() < 0) {
                refuse(p, d.transferId(), d.generation(), d.senderRank(), Message.Abort.REQUESTED, "request " + d.requestId()
                    + " was aborted before its descriptor came: " + aborted.why());
                return;
            }
            seen(p, d.transferId(), d.generation(), d.senderRank(), true, 0, 0); // nothing posted yet
            if (cancelledEarly.remove(d.requestId()) != null) {
                metrics.cancelsIgnored.increment(); // the receiver asks for the request again: its CANCEL is stale
            }
            final PendingDescriptor old = early.put(d.requestId(), new PendingDescriptor(p, d));
            if (old != null) {
                refuse(old.peer, old.d.transferId(), old.d.generation(), old.d.senderRank(), "superseded by a newer descriptor");
            }
            return;
        }
        if (t.state != OutgoingTransfer.State.WAITING) {
            refuse(p, d.transferId(), d.generation(), d.senderRank(), "request " + d.requestId() + " is already " + t.state);
            return;
        }
        begin(t, p, d);
    }

    /** Refuses a descriptor: ABORT, then DRAINED with nothing posted (true: nothing was). */
    private void refuse(Peer p, long transferId, int generation, int rank, String why) {
        refuse(p, transferId, generation, rank, Message.Abort.SENDER_FAILED, why);
    }

    private void refuse(Peer p, long transferId, int generation, int rank, int reason, String why) {
        seen(p, transferId, generation, rank, true, 0, 0);
        send(p, new Message.Abort(transferId, generation, reason, why));
        send(p, new Message.Drained(transferId, generation, rank, 0, 0, 0));
    }

    private void begin(OutgoingTransfer t, Peer p, Message.Descriptor d) {
        t.peer = p;
        p.users++;
        final SlotRecord begun = seen(p, d.transferId(), d.generation(), d.senderRank(), false, 0, 0);
        begun.begun = true;
        begun.requestId = t.requestId;
        t.transferId = d.transferId();
        t.generation = d.generation();
        t.rank = d.senderRank();
        t.senders = d.senders();
        final int pages = d.pages();
        t.firstPage = TransferPlan.firstPage(pages, d.senders(), d.senderRank());
        t.endPage = TransferPlan.firstPage(pages, d.senders(), d.senderRank() + 1);
        t.nextPage = t.firstPage;
        t.state = OutgoingTransfer.State.WRITING;
        if (!p.carries()) {
            fail(t, FailureReason.PEER_LOST, "link down: " + p.failure, false, 0);
            return;
        }
        try {
            t.region = p.link.attach(d.regionKey(), t.endPage - t.firstPage);
        } catch (RuntimeException e) {
            fail(t, FailureReason.SENDER_ABORTED, "could not attach the region: " + e.getMessage(), true, Message.Abort.SENDER_FAILED);
            return;
        }
        pump(t);
    }

    private void onAbort(Peer p, Message.Abort a) {
        final OutgoingTransfer t = find(p, a.transferId(), a.generation());
        if (t != null) {
            if (t.state == OutgoingTransfer.State.WRITING || t.state == OutgoingTransfer.State.FLUSHING) {
                fail(t, FailureReason.ABORTED, "aborted by the receiver (reason " + a.reason() + "): " + a.detail(), false, 0);
            }
            answered(p, t.requestId);
            return; // FAILING: its DRAINED follows once every posted write ended
        }
        for (PendingDescriptor pd : early.values()) {
            if (pd.peer == p && pd.d.transferId() == a.transferId() && pd.d.generation() == a.generation()) {
                early.remove(pd.d.requestId()); // its offer has not come: the CANCEL that follows ends it when it does
                break;
            }
        }
        final SlotRecord r = record(p, a.transferId(), false);
        if (r == null || r.generation < a.generation()) {
            // never saw this generation (its descriptor was lost): nothing of ours was ever in flight for it.
            // Rank -1 says so for every rank this link holds.
            send(p, new Message.Drained(a.transferId(), a.generation(), -1, 0, 0, 0));
        } else if (r.generation == a.generation() && r.over) {
            // over already: repeat the truth (its DRAINED may have been lost)
            send(p, new Message.Drained(a.transferId(), a.generation(), r.rank, r.posted, r.proven, r.posted - r.proven));
            if (r.begun) {
                answered(p, r.requestId); // an offer took it and it ended: its request's next CANCEL is this ABORT's echo
            } // refused, or only seen waiting for its offer: the CANCEL that follows is for that offer, to come
        }
        // an older generation's ABORT: stale, nothing to say
    }

    /** The last frame from {@code p} was an ABORT of an attempt of {@code requestId} that an offer had taken. */
    private static void answered(Peer p, long requestId) {
        p.abortAnswered = true;
        p.abortAnsweredRequest = requestId;
    }

    /**
     * The receiver will not take the request (it rejected or aborted an attempt of it): an offer still waiting releases
     * its pages at once (nothing was posted), and a request not offered yet is remembered, so that its offer ends at
     * once. A CANCEL names only the request id, and an id may see several attempts, so it ends nothing under way: a
     * transfer writing or flushing, and a descriptor waiting for its offer, are another attempt's (an aborted attempt
     * that reached this sender is ended by the ABORT before its CANCEL). A CANCEL(ABORTED) right after an ABORT of an
     * attempt of the same request that an offer had taken is that ABORT's echo, and does nothing, not even to an offer
     * waiting (a retry offered since).
     *
     * @param echo whether the frame before it from {@code p} was such an ABORT, of this request
     */
    private void onCancel(Peer p, Message.Cancel c, boolean echo) {
        if (c.reason() == Message.Cancel.RETIRING && c.requestId() == Message.Cancel.LINK) {
            if (p.state == Peer.State.UP) {
                p.moveTo(Peer.State.RETIRING); // its transfers in flight go on; the receiver sends no new descriptor
                metrics.linksRetired.increment();
                LOG.log(System.Logger.Level.WARNING, () -> this + ": " + p + " retired by the receiver (" + c.detail()
                    + "): open a fresh link for new work");
            } else {
                metrics.cancelsIgnored.increment(); // retired already, or not up: it ends nothing, and every CANCEL is counted
            }
            return;
        }
        final OutgoingTransfer t = offers.get(c.requestId());
        if (t == null && !(echo && c.reason() == Message.Cancel.ABORTED)) {
            // the attempt an aborted offer's mark was for is over (its descriptor, if it had one, came before this on
            // the link): a later descriptor is a retry's, to wait for its offer, not to be refused. An echo answers an
            // earlier attempt's ABORT, not the one the mark is for: the mark stays
            abortedEarly.remove(c.requestId());
        }
        final String why = "cancelled by the receiver (" + (c.reason() == Message.Cancel.REJECTED ? "rejected" : "aborted")
            + "): " + c.detail();
        final FailureReason cancelReason = c.reason() == Message.Cancel.REJECTED ? FailureReason.REJECTED : FailureReason.ABORTED;
        if (echo && c.reason() == Message.Cancel.ABORTED) {
            metrics.cancelsIgnored.increment(); // the ABORT before it ended that attempt; an offer waiting is a retry
        } else if (t != null && t.state == OutgoingTransfer.State.WAITING) {
            metrics.cancelled.increment();
            endWaiting(t, cancelReason, why);
        } else if (t == null && !early.containsKey(c.requestId()) && cancelledEarly.size() < MAX_EARLY_CANCELS) {
            // not offered yet: prefill may still be computing it. Kept so the offer ends when it comes
            if (cancelledEarly.put(c.requestId(), new EarlyCancel(cancelReason, why, clock.nanoTime() + descriptorTimeoutNanos)) != null) {
                metrics.cancelsIgnored.increment(); // the one it replaces ends nothing now
            }
        } else {
            // under way or over (another attempt's, or this one's echo), a descriptor waiting for its offer, or too many kept
            metrics.cancelsIgnored.increment();
        }
    }

    private OutgoingTransfer find(Peer p, long transferId, int generation) {
        for (int i = 0; i < active.size(); i++) {
            final OutgoingTransfer t = active.get(i);
            if (t.peer == p && t.transferId == transferId && t.generation == generation) {
                return t;
            }
        }
        return null;
    }

    /**
     * @return the end of the pages of {@code t}'s share that this sender holds: its share's end, or less when its
     *         KV is shorter — never before the share's start, so a sender holding none of its share still
     *         flushes and says how many tokens it has (the receiver's length check then fails the transfer at
     *         once, rather than at its completion timeout)
     */
    private static int sourceEnd(OutgoingTransfer t) {
        return Math.max(t.firstPage, Math.min(t.endPage, t.sourceHandles.length));
    }

    /** Posts as many pages as the in-flight bound allows; on the last completion, flushes. */
    private void pump(OutgoingTransfer t) {
        if (t.state != OutgoingTransfer.State.WRITING) {
            return;
        }
        final int end = sourceEnd(t);
        final int room = (int) Math.min(maxPagesInFlight - inFlight, end - t.nextPage);
        if (room > 0) {
            if (dstScratch.length < room) { // the link reads them during putBatch and keeps neither (PeerLink)
                dstScratch = new int[room];
                srcScratch = new int[room];
            }
            final int[] dst = dstScratch;
            final int[] src = srcScratch;
            for (int i = 0; i < room; i++) {
                final int page = t.nextPage + i;
                final long v;
                try {
                    v = pool.validate(t.sourceHandles[page]);
                } catch (IllegalStateException closed) { // its storage may be gone: nothing more is read from it
                    fail(t, FailureReason.SENDER_ABORTED, "the source pool was closed with " + (end - t.nextPage) + " pages still to write", true,
                        Message.Abort.SENDER_FAILED);
                    return;
                }
                if (v < 0) {
                    fail(t, FailureReason.SENDER_ABORTED, "source page " + page + " is no longer valid (code " + v + ")", true, Message.Abort.SENDER_FAILED);
                    return;
                }
                dst[i] = page - t.firstPage;
                src[i] = (int) v;
            }
            try {
                t.peer.link.putBatch(t.region, dst, pool.storage(), src, 0, room, ((long) t.serial << 32) | t.nextPage);
            } catch (RuntimeException e) {
                fail(t, FailureReason.SENDER_ABORTED, "putBatch failed: " + e.getMessage(), true, Message.Abort.SENDER_FAILED);
                return;
            } catch (Error e) {
                // A batch that throws posted nothing (PeerLink), except for a memory fault reported as the call
                // returns (ShmLink: an InternalError after the writes were copied and their completions queued).
                // Count the batch as posted, so its completions match and the transfer drains only once each write
                // is answered; then fail it. Which writes were posted is unknown, so this errs on the safe side: an
                // Error of another transport, thrown before it posted anything, leaves those writes unanswered, and
                // the transfer stays FAILING with its source pages retained for the sender's life. Other VM errors
                // still propagate.
                posted(t, room);
                fail(t, FailureReason.SENDER_ABORTED, "putBatch failed after posting " + room + " writes: " + e, true, Message.Abort.SENDER_FAILED);
                if (e instanceof VirtualMachineError && !(e instanceof InternalError)) {
                    throw e;
                }
                return;
            }
            posted(t, room);
            if (!holdSource && t.nextPage == end) {
                // SOURCE_HOLD off: the transport may still be reading these pages. The checksums describe them as
                // they are now (the KV), before they go; the completion then carries those
                if (checksums && (t.checksumsAtRelease = checksumsOrFail(t, end)) == null) {
                    return;
                }
                releaseSource(t);
            }
        }
        if (t.nextPage == end && t.succeeded == t.posted) {
            t.state = OutgoingTransfer.State.FLUSHING;
            t.flushPending = true;
            t.flushAttempted = true;
            try {
                t.peer.link.flush(((long) t.serial << 32) | FLUSH);
            } catch (RuntimeException e) {
                t.flushPending = false; // no answer comes for a flush that threw: DRAINED must not wait for one
                fail(t, FailureReason.SENDER_ABORTED, "flush failed: " + e.getMessage(), true, Message.Abort.WRITE_FAILED);
            }
        }
    }

    /** Counts {@code room} writes of {@code t} as posted. */
    private void posted(OutgoingTransfer t, int room) {
        t.nextPage += room;
        t.posted += room;
        inFlight += room;
        metrics.writesPosted.add(room);
    }

    /**
     * A run of successful writes of one transfer is counted at once, then pumped once: what {@link #onWriteDone}
     * does for each, without a lookup and a pump per page. Failed runs, and runs that cross into another
     * transfer's tokens, go write by write.
     */
    @Override
    void onWritesDone(PeerLink link, long firstToken, int count, int status) {
        if (status != PeerLink.OK || ((firstToken + count - 1) >>> 32) != (firstToken >>> 32)) {
            super.onWritesDone(link, firstToken, count, status);
            return;
        }
        final OutgoingTransfer t = bySerial.get((int) (firstToken >>> 32));
        if (t == null) {
            return;
        }
        inFlight -= count;
        t.succeeded += count;
        afterWrites(t);
    }

    /** After writes of {@code t} ended: post more, or, if it is failing, see whether it is drained. */
    private void afterWrites(OutgoingTransfer t) {
        if (t.state == OutgoingTransfer.State.WRITING) {
            pump(t);
        } else if (t.state == OutgoingTransfer.State.FAILING) {
            maybeDrained(t);
        }
    }

    @Override
    void onWriteDone(PeerLink link, long token, int status) {
        final OutgoingTransfer t = bySerial.get((int) (token >>> 32));
        if (t == null) {
            return;
        }
        inFlight--;
        if (status == PeerLink.OK) {
            t.succeeded++;
        } else {
            t.failed++;
            metrics.writesFailed.increment();
            if (t.state == OutgoingTransfer.State.WRITING || t.state == OutgoingTransfer.State.FLUSHING) {
                fail(t, FailureReason.SENDER_ABORTED, "write of page " + (int) token + " " + (status == PeerLink.CANCELED ? "cancelled" : "failed"), true,
                    Message.Abort.WRITE_FAILED);
            }
        }
        afterWrites(t);
    }

    @Override
    void onFlushDone(PeerLink link, long token, boolean ok) {
        final OutgoingTransfer t = bySerial.get((int) (token >>> 32));
        if (t == null) {
            return;
        }
        if (t.flushPending) {
            t.flushPending = false;
            t.flushed = ok;
        }
        if (t.state == OutgoingTransfer.State.FAILING) {
            maybeDrained(t);
            return;
        }
        if (t.state != OutgoingTransfer.State.FLUSHING) {
            return;
        }
        if (!ok) {
            fail(t, FailureReason.SENDER_ABORTED, "flush did not prove delivery", true, Message.Abort.WRITE_FAILED);
            return;
        }
        if (pool.isClosed()) {
            // a closed pool's storage may have been freed while the transport read it: the delivered bytes prove nothing
            fail(t, FailureReason.SENDER_ABORTED, "the source pool was closed while its pages were being written", true, Message.Abort.SENDER_FAILED);
            return;
        }
        int[] cs = t.checksumsAtRelease;
        if (checksums && cs == null && (cs = checksumsOrFail(t, sourceEnd(t))) == null) {
            return;
        }
        // the transfer is over before the send: a send that fails takes the peer down re-entrantly, and
        // that must find nothing left to fail (every write was flushed: an ABORT later gets the truth)
        t.state = OutgoingTransfer.State.COMPLETED;
        seen(t.peer, t.transferId, t.generation, t.rank, true, t.posted, t.posted);
        metrics.completed.increment();
        finish(t);
        send(t.peer, new Message.Completion(t.transferId, t.generation, t.rank, t.tokenCount, t.firstPage, cs, t.posted,
            t.succeeded, t.failed));
    }

    /**
     * {@return the checksums of {@code t}'s source pages up to {@code end}, or {@code null} after failing {@code t} when
     * they cannot be computed} This side's fault (a device kernel's, or a fault in mapped memory): the receiver hears
     * it at once, not at its completion timeout, and the transfer drains as usual.
     */
    private int[] checksumsOrFail(OutgoingTransfer t, int end) {
        final int[] cs = new int[end - t.firstPage];
        try {
            checksummer.compute(pool, t.sourceHandles, t.firstPage, end, t.requestId, t.tokenCount, cs);
            return cs;
        } catch (RuntimeException | InternalError e) { // InternalError: a fault in mapped memory
            fail(t, FailureReason.SENDER_ABORTED, "could not compute the checksums: " + e, true, Message.Abort.SENDER_FAILED);
            return null;
        }
    }

    /** Ends an offer still WAITING for its descriptor: nothing was posted, so its source pages are released now. */
    private void endWaiting(OutgoingTransfer t, FailureReason typed, String why) {
        t.failureReason = typed;
        t.failure = why;
        t.state = OutgoingTransfer.State.FAILING;
        maybeDrained(t);
    }

    /** Marks the transfer failed first (no new writes), tells the receiver, then waits for terminal states. */
    private void fail(OutgoingTransfer t, FailureReason typed, String why, boolean tellReceiver, int reason) {
        t.state = OutgoingTransfer.State.FAILING;
        t.failureReason = typed;
        t.failure = why;
        t.deadline = clock.nanoTime() + drainDeadlineNanos;
        if (tellReceiver && t.peer != null) {
            send(t.peer, new Message.Abort(t.transferId, t.generation, reason, why));
        }
        maybeDrained(t);
    }

    /**
     * Sends DRAINED once every posted write is terminal — after a flush, so that the writes that completed
     * OK are proven delivered and cannot land later. DRAINED's {@code succeeded} counts only proven writes;
     * {@code failed} counts the rest (failed, cancelled, or OK but unproven), which may still land: the
     * receiver must not free the pages on such a DRAINED. With {@link TransferSafeguard#DRAINED_AFTER_WRITES_END} off, one
     * DRAINED goes out as soon as the transfer fails instead, and none at the end.
     */
    private void maybeDrained(OutgoingTransfer t) {
        if (!drainAfterWritesEnd && t.state == OutgoingTransfer.State.FAILING && !t.drainedEarly && t.peer != null) {
            // UNSAFE (DRAINED_AFTER_WRITES_END off): every write not known to have failed is reported proven, now
            t.drainedEarly = true;
            if (send(t.peer, new Message.Drained(t.transferId, t.generation, t.rank, t.posted, t.posted - t.failed, t.failed))) {
                metrics.drainedSent.increment();
            }
        }
        if (t.flushPending && (t.peer == null || !t.peer.carries())) {
            t.flushPending = false; // a link that is down proves nothing; do not wait for its answer
            t.flushed = false;
        }
        if (t.state != OutgoingTransfer.State.FAILING || t.succeeded + t.failed != t.posted || t.flushPending) {
            return;
        }
        if (t.succeeded > 0 && !t.flushed && !t.flushAttempted && t.peer != null && t.peer.carries()) {
            t.flushAttempted = true;
            t.flushPending = true;
            try {
                t.peer.link.flush(((long) t.serial << 32) | FLUSH);
                return;
            } catch (RuntimeException e) {
                t.flushPending = false;
            }
        }
        final long proven = t.flushed ? t.succeeded : 0;
        if (t.peer != null) {
            seen(t.peer, t.transferId, t.generation, t.rank, true, t.posted, proven);
        }
        if (t.peer != null && !t.drainedEarly
            && send(t.peer, new Message.Drained(t.transferId, t.generation, t.rank, t.posted, proven, t.posted - proven))) {
            metrics.drainedSent.increment();
        }
        t.state = OutgoingTransfer.State.DRAINED;
        finish(t);
    }

    /**
     * Every write ended: the transfer leaves the sender, then its source references are dropped. A source pool closed
     * meanwhile took its pages with it: nothing is left to release then.
     */
    private void finish(OutgoingTransfer t) {
        if (t.finished) {
            return;
        }
        t.finished = true;
        if (t.state != OutgoingTransfer.State.COMPLETED) { // completed() counted it already
            metrics.failed(t.failureReason);
        }
        if (t.peer != null) {
            t.peer.users--;
        }
        offers.remove(t.requestId);
        bySerial.remove(t.serial);
        active.remove(t);
        releaseSource(t);
    }

    /** Drops {@code t}'s source references, once. */
    private void releaseSource(OutgoingTransfer t) {
        if (!t.sourceReleased) {
            t.sourceReleased = true;
            try {
                pool.releaseAll(t.sourceHandles, 0, t.sourceHandles.length);
            } catch (IllegalStateException e) {
                if (!pool.isClosed()) {
                    throw e; // a refusal of our own references: a bug, not to be hidden
                }
            }
        }
    }

    @Override
    int onDuty(long now) {
        int work = 0;
        if ((!cancelledEarly.isEmpty() || !abortedEarly.isEmpty()) && now - nextEarlyCancelPurge >= 0) { // a scan at most every 100 ms
            nextEarlyCancelPurge = now + 100_000_000L;
            cancelledEarly.values().removeIf(ec -> {
                if (now - ec.expires() >= 0) {
                    metrics.cancelsIgnored.increment(); // its offer never came
                    return true;
                }
                return false;
            });
            abortedEarly.values().removeIf(ab -> now - ab.expires() >= 0);
        }
        // a copy: ending one transfer can end others (a failed send takes its peer down). Copied element by element:
        // addAll would allocate an array every cycle
        scratch.clear();
        for (int i = 0; i < active.size(); i++) {
            scratch.add(active.get(i));
        }
        for (int i = 0; i < scratch.size(); i++) {
            final OutgoingTransfer t = scratch.get(i);
            if (t.state == OutgoingTransfer.State.WAITING && now - t.deadline >= 0) {
                endWaiting(t, FailureReason.TIMEOUT, "no descriptor within " + Duration.ofNanos(descriptorTimeoutNanos).toMillis() + " ms");
                work++;
                continue;
            }
            if (t.state == OutgoingTransfer.State.FAILING && !t.forced && now - t.deadline >= 0 && t.peer != null) {
                t.forced = true;
                metrics.forcedCancels.increment();
                try {
                    t.peer.link.cancelWrites();
                } catch (RuntimeException ignored) {
                    // the transport still owes terminal states
                }
                work++;
            } else if (t.state == OutgoingTransfer.State.WRITING) {
                final long before = t.posted;
                pump(t);
                work += (int) (t.posted - before);
            }
            if (t.state == OutgoingTransfer.State.FAILING) {
                maybeDrained(t);
            }
        }
        return work;
    }

    @Override
    void onPeerDown(Peer p) {
        for (OutgoingTransfer t : active.toArray(new OutgoingTransfer[0])) {
            if (t.peer == p && (t.state == OutgoingTransfer.State.WRITING || t.state == OutgoingTransfer.State.FLUSHING)) {
                fail(t, FailureReason.PEER_LOST, "link lost: " + p.failure, false, 0);
            }
        }
        early.values().removeIf(pd -> pd.peer == p);
    }

    /** @return links this sender keeps per-slot records for (tests: the records of a gone link must be dropped) */
    int slotRecordLinks() {
        return slotRecords.size();
    }

    @Override
    void onPeerGone(Peer p) {
        slotRecords.remove(p.id); // its ABORTs can no longer arrive: nothing to answer
    }

    @Override
    boolean workAfterClose() {
        return true;
    }

    /**
     * Closes the sender: aborts every transfer (the receivers are told that the sender is closing, which they
     * fail as {@link FailureReason#PEER_LOST}: a retry can succeed elsewhere) and closes the links. Source pages
     * of writes that have not reported a terminal state stay retained, since a transport may still read
     * them: keep calling {@link #doWork()} until {@link #activeTransfers()} is 0 to collect those states
     * and release the pages. Idempotent.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        for (OutgoingTransfer t : active.toArray(new OutgoingTransfer[0])) {
            if (t.state == OutgoingTransfer.State.WRITING || t.state == OutgoingTransfer.State.FLUSHING) {
                fail(t, FailureReason.PEER_LOST, "sender closed", true, Message.Abort.SENDER_CLOSING);
            }
        }
        for (OutgoingTransfer t : offers.values().toArray(new OutgoingTransfer[0])) {
            if (t.state == OutgoingTransfer.State.WAITING) {
                t.state = OutgoingTransfer.State.DRAINED;
                t.failureReason = FailureReason.PEER_LOST;
                t.failure = "sender closed before a descriptor arrived";
                finish(t);
            }
        }
        closed = true;
        closeLinks();
        doWork(); // collect what the closed links report at once
    }

    @Override
    boolean sendsHelloFirst() {
        return false;
    }

    @Override
    public String toString() {
        return "TransferSender[" + identity.environment() + ", " + peers.size() + " peers, " + offers.size() + " offered"
            + (disabled.isEmpty() ? "" : ", UNSAFE: disabled " + disabled) + "]";
    }

    /** Builds a {@link TransferSender}. */
    public static final class Builder extends EndpointBuilder<Builder> {
        private int maxPagesInFlight = 64;
        private boolean checksums = true;
        private PageChecksums checksummer = PageChecksums.HOST;
        private Duration drainDeadline = Duration.ofSeconds(10);
        private Duration descriptorTimeout = Duration.ofSeconds(60);

        private Builder(KvPool pool, PeerIdentity identity) {
            super(pool, identity);
        }

        /**
         * Switches the sender's safeguards off. For tests only: logged as an error.
         *
         * @param safeguards the safeguards to switch off
         * @return this builder
         * @throws IllegalArgumentException if one is the receiver's ({@link TransferSafeguard#isSenderSide()} false)
         */
        public Builder unsafeDisable(TransferSafeguard... safeguards) {
            return disable(true, safeguards);
        }

        /**
         * Sets the most pages being written at once, across transfers.
         *
         * @param n the limit, ≥ 1; 64 by default
         * @return this builder
         * @throws IllegalArgumentException if {@code n < 1}
         */
        public Builder maxPagesInFlight(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("maxPagesInFlight must be ≥ 1, was " + n);
            }
            this.maxPagesInFlight = n;
            return this;
        }

        /**
         * Sets whether completions carry checksums; receivers require them by default.
         *
         * @param on whether to send checksums; true by default
         * @return this builder
         */
        public Builder checksums(boolean on) {
            this.checksums = on;
            return this;
        }

        /**
         * Completions carry checksums computed by {@code how} (default {@link PageChecksums#HOST}, which needs
         * host-accessible storage; a device pool passes kvpool-cuda's {@code DeviceChecksums}). Switches checksums on.
         *
         * @param how computes the checksums of the sent pages
         * @return this builder
         * @throws NullPointerException if {@code how} is null
         */
        public Builder checksums(PageChecksums how) {
            this.checksummer = Objects.requireNonNull(how, "how");
            this.checksums = true;
            return this;
        }

        /**
         * Sets how long a failing transfer waits for its writes' terminal states before force-cancelling them.
         *
         * @param d the deadline; 10 s by default
         * @return this builder
         * @throws IllegalArgumentException if {@code d} is null, zero or negative
         */
        public Builder drainDeadline(Duration d) {
            this.drainDeadline = positive("drainDeadline", d);
            return this;
        }

        /**
         * Sets how long an offer waits for the receiver's descriptor before it is dropped and its pages released.
         *
         * @param d the timeout; 60 s by default
         * @return this builder
         * @throws IllegalArgumentException if {@code d} is null, zero or negative
         */
        public Builder descriptorTimeout(Duration d) {
            this.descriptorTimeout = positive("descriptorTimeout", d);
            return this;
        }

        /**
         * {@return the sender}
         *
         * @throws IllegalArgumentException if the identity's layout fingerprint is not the pool's, or
         *                                  checksums are on and the checksummer cannot read the pool's storage
         */
        public TransferSender build() {
            return new TransferSender(this);
        }
    }
}
