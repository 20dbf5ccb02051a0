package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Safeguard;
import io.kvpool.Sequence;
import io.kvpool.StaleHandleException;
import io.kvpool.IllegalSlotTransitionException;
import io.kvpool.storage.FillMode;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The leak hunter: a disaggregated cluster (prefill nodes → decode nodes) on a {@link SimNetwork}, where
 * many tenants' requests move KV that embeds their request id and position ({@link Kv}), through random
 * aborts, failed, lost, misdirected, corrupted and straggling writes, writes that land long after they were reported
 * ended (where a control asks for them), lost and duplicated control frames,
 * link failures, prefill crashes and over-capacity requests. Decode reads every token of every committed
 * sequence before releasing it, and some readers keep using their handles after release (an abort racing
 * a decode step). Everything is deterministic under the seed.
 *
 * <p>It reports:
 * <ul>
 *   <li><b>leaks</b> — a reader saw another request's KV (foreign bytes);</li>
 *   <li><b>corrupted reads</b> — a reader saw canary, zeros, misplaced KV, or a committed context shorter
 *       than the request's (the incident's placeholder), or a stale handle was served;</li>
 *   <li>and at quiescence, whether every pool's accounting balances with every page free.</li>
 * </ul>
 *
 * <p>Prefill-side faults model the bugs the receiver's checks exist for: a prefill that holds fewer tokens
 * than it announced (the length check's case), and one that never wrote some of its KV (the canary's).
 */
final class LeakHunter {

    /** What to run. */
    static final class Config {
        long seed = Long.getLong("kvpool.hunter.seed", 1);
        int transfers = 100_000;
        int prefillNodes = 2;
        int decodeNodes = 2;
        int prefillPages = 1024;  // 4,096 tokens: requests above that are over capacity for prefill
        int decodePages = 4096;   // 16,384 tokens
        int maxPrompt = 40;
        double overCapacity = 0.002;
        double twoSenders = 0.15;
        double truncatedPrefill = 0.002;
        double unwrittenPrefill = 0.002;
        double routerAbort = 0.01;
        double senderAbort = 0.003;
        double prefillCrash = 0.00002;
        double staleProbe = 0.2;
        int arrivalsPerStep = 1;
        int maxHoldSteps = 1_000; // decode holds a committed sequence up to 10 ms
        boolean decodeSizedByRouter = false; // the incident: decode preallocates for the original request
        FillMode decodeFill = FillMode.CANARY;
        FillMode prefillFill = FillMode.CANARY; // NONE: a sender pool that does not fill its free pages (partial pages' tails hold old KV)
        boolean checksums = true;
        Boolean revocableLinks = null;  // null: alternate (half like RDMA, half like UCX over tcp)
        long senderDrainDeadlineMs = 30;
        boolean retireSuspectLinks = true; // false: a suspect's link is torn down at once (before link retirement)
        EnumSet<Safeguard> poolOff = EnumSet.noneOf(Safeguard.class);
        EnumSet<TransferSafeguard> transferOff = EnumSet.noneOf(TransferSafeguard.class);
        SimFaults faults = SimFaults.NONE.withWrites(0.002, 0.0005, 0.0005, 0.0005)
            .withStragglers(0.0001, 30_000_000, 80_000_000).withFrames(0.0005, 0.002);
    }

    /** What it found. */
    static final class Report {
        long transfers;
        long committed;
        long rejected;
        long readsVerified;
        long leaks;
        long corrupted;
        long staleServed;
        long truncated;
        long crashes;
        long settleSteps;
        long staleRefused;
        /** Committed partial last pages whose tail (past the request's tokens) held another request's KV (counted in leaks too). */
        long tailForeign;
        /**
         * Transfers failed by their link's handling of another transfer's suspect write: PEER_LOST because the receiver
         * tore the link down, or timed out or lost its link once it was RETIRING; not those {@link #stalled}, nor the
         * suspects themselves. An upper bound: a write frozen after this transfer's last write, before its flush, is not
         * known to have held it.
         */
        long collateral;
        /** Of those: transfers that timed out, or whose link failed, after it was RETIRING. */
        long collateralTimeouts;
        /**
         * Transfers that failed the same ways but could not have committed on their link under any handling: a write
         * of another transfer, posted on the link before this one's last write there, froze past this one's deadline, and every
         * flush waits for it ({@link SimLink#stragglers()}).
         */
        long stalled;
        /** Transfers that failed the same ways and had a write of their own freeze: the suspects, not collateral. */
        long frozenSuspects;
        /** Writes that froze (straggled), on every link of the run. */
        long frozenWrites;
        /** Writes reported ended on time that landed late ({@link SimFaults#lateLanding()}), on every link of the run. */
        long lateLandings;
        /** Fresh links opened: for a failed link, or beside a RETIRING one. */
        long reconnects;
        long linksRetired;
        final java.util.EnumMap<FailureReason, Long> failures = new java.util.EnumMap<>(FailureReason.class);
        final java.util.EnumMap<ReceiverMetrics.Outcome, Long> outcomes = new java.util.EnumMap<>(ReceiverMetrics.Outcome.class);
        /**
         * What each committed sequence's read found at its worst (FOREIGN before the rest), by finding: which harm a control
         * caught, where {@link #corrupted} lumps canary, zeros, misplaced KV and stale handles served together.
         */
        final java.util.EnumMap<Kv.Finding, Long> committedReads = new java.util.EnumMap<>(Kv.Finding.class);
        long lateWritesLanded;
        long lateWritesDropped;
        boolean balanced;
        String accounting = "";
        final List<String> examples = new ArrayList<>();
        final List<String> leakExamples = new ArrayList<>();
        final StringBuilder metrics = new StringBuilder();

        void example(String s) {
            if (examples.size() < 5) {
                examples.add(s);
            }
        }

        @Override
        public String toString() {
            return "transfers=" + transfers + " committed=" + committed + " rejected=" + rejected + " reads=" + readsVerified
                + " LEAKS=" + leaks + " CORRUPTED=" + corrupted + " (stale served " + staleServed + ", truncated " + truncated
                + ") staleRefused=" + staleRefused + " collateral=" + collateral + " (timeouts on a retiring link " + collateralTimeouts + ") stalled=" + stalled
                + " frozenSuspects=" + frozenSuspects + " frozenWrites=" + frozenWrites + " lateLandings=" + lateLandings + " reconnects=" + reconnects + " retired=" + linksRetired
                + " committedReads=" + committedReads + " failures=" + failures + " deferredRelease=" + outcomes
                + " tailForeign=" + tailForeign + " crashes=" + crashes + " settle=" + settleSteps + " balanced=" + balanced + " " + accounting + " leaks: " + leakExamples + " examples=" + examples;
        }
    }

    // ---- the cluster ----

    private final Config cfg;
    private final SplittableRandom rnd;
    private final SimNetwork net;
    private final Report report = new Report();
    private final PrefillNode[] prefills;
    private final DecodeNode[] decodes;
    private final List<Request> inFlight = new ArrayList<>();
    private final ArrayDeque<Request> retry = new ArrayDeque<>();
    private final List<Held> held = new ArrayList<>();
    private final List<Probe> probes = new ArrayList<>();
    private final List<SimLink> allLinks = new ArrayList<>(); // every prefill end ever connected
    private final java.util.Set<SimLink> everRetiring = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());

    private long nextRequestId = 1;
    private long step;
    private int crashGeneration;

    private final class PrefillNode {
        final int index;
        KvPool pool;
        TransferSender sender;
        final SimLink[] ends;     // ends[d]: this node's end of the link to decode d
        final int[] senderPeer;   // peer id of decode d in this sender
        final int[] receiverPeer; // peer id of this node in decode d's receiver

        PrefillNode(int index) {
            this.index = index;
            this.ends = new SimLink[cfg.decodeNodes];
            this.senderPeer = new int[cfg.decodeNodes];
            this.receiverPeer = new int[cfg.decodeNodes];
            boot();
        }

        void boot() {
            pool = KvPool.builder(Kv.LAYOUT).pages(cfg.prefillPages).maxContextTokens(cfg.prefillPages * 4L).fillMode(cfg.prefillFill)
                .unsafeDisable(cfg.poolOff.stream().filter(s -> s == Safeguard.ADMISSION_REJECTION).toArray(Safeguard[]::new))
                .build();
            sender = TransferSender.builder(pool, Kv.identity()).clock(net.clock()).maxPagesInFlight(256)
                .checksums(cfg.checksums).drainDeadline(Duration.ofMillis(cfg.senderDrainDeadlineMs)).descriptorTimeout(Duration.ofMillis(100))
                .unsafeDisable(cfg.transferOff.stream().filter(TransferSafeguard::isSenderSide).toArray(TransferSafeguard[]::new)).build();
            for (int d = 0; d < cfg.decodeNodes; d++) {
                connect(d);
            }
        }

        void connect(int d) {
            final SimLink[] l = net.connect("prefill-" + index + "." + crashGeneration, "decode-" + d,
                cfg.revocableLinks != null ? cfg.revocableLinks : (index + d) % 2 == 0);
            ends[d] = l[0];
            allLinks.add(l[0]);
            senderPeer[d] = sender.addPeer(l[0]);
            receiverPeer[d] = decodes[d].receiver.addPeer(l[1]);
        }

        boolean linkUp(int d) {
            return sender.peer(senderPeer[d]).isUp() && decodes[d].receiver.peer(receiverPeer[d]).isUp();
        }

        boolean linkDead(int d) {
            final Peer a = sender.peer(senderPeer[d]);
            final Peer b = decodes[d].receiver.peer(receiverPeer[d]);
            return a.state() == Peer.State.FAILED || a.state() == Peer.State.REFUSED
                || b.state() == Peer.State.FAILED || b.state() == Peer.State.REFUSED;
        }
    }

    private final class DecodeNode {
        final KvPool pool;
        final TransferReceiver receiver;

        DecodeNode(int index) {
            pool = KvPool.builder(Kv.LAYOUT).pages(cfg.decodePages).maxContextTokens(cfg.decodePages * 4L).fillMode(cfg.decodeFill)
                .unsafeDisable(cfg.poolOff.toArray(new Safeguard[0])).build();
            receiver = TransferReceiver.builder(pool, Kv.identity()).clock(net.clock()).checksums(cfg.checksums)
                .completionTimeout(Duration.ofMillis(COMPLETION_TIMEOUT_MS)).drainTimeout(Duration.ofMillis(20)).maxTransfers(4096)
                .retireSuspectLinks(cfg.retireSuspectLinks)
                .unsafeDisable(cfg.transferOff.stream().filter(s -> !s.isSenderSide()).toArray(TransferSafeguard[]::new)).build();
            prewarm(pool);
        }
    }

    /** Decode's completion timeout: a transfer not committed this long after its start fails TIMEOUT. */
    static final long COMPLETION_TIMEOUT_MS = 20;

    private final class Request {
        final long id;
        final int prompt;          // the user's tokens: the truth decode must see
        int announced;             // what prefill says it computed
        int decodeNode;
        int[] prefillNodes;
        PrefillNode[] nodes;
        OutgoingTransfer[] out;
        IncomingTransfer in;
        SimLink[] links;           // links[k]: the link of sender k, as of the start
        int attempts;
        boolean counted;
        IncomingTransfer.State lastState;

        Request(long id, int prompt) {
            this.id = id;
            this.prompt = prompt;
        }
    }

    /**
     * Earlier tenants used every page: each holds KV of a request that is long gone (ids from 1,000,000,000),
     * then is freed — and filled, unless {@link Safeguard#FREE_PAGE_FILL} is off.
     */
    private static void prewarm(KvPool pool) {
        final long[] handles = new long[pool.capacity()];
        for (int i = 0; i < handles.length; i++) {
            handles[i] = pool.tryAllocate();
            final MemorySegment page = pool.page(handles[i]);
            final long owner = 1_000_000_000L + i;
            for (int t = 0; t < Kv.LAYOUT.tokensPerPage(); t++) {
                for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final long off = Kv.LAYOUT.offset(layer, kv, t);
                        page.set(Kv.LONG, off, owner);
                        page.set(Kv.LONG, off + 8, Kv.position(layer, kv, t));
                    }
                }
            }
        }
        for (long h : handles) {
            pool.release(h);
        }
    }

    private record Held(Request r, Sequence seq, long until, DecodeNode node) {
    }

    private record Probe(long requestId, long[] handles, int tokens, long at, DecodeNode node) {
    }

    LeakHunter(Config cfg) {
        this.cfg = cfg;
        this.rnd = new SplittableRandom(cfg.seed);
        this.net = new SimNetwork(cfg.seed * 31 + 7, cfg.faults);
        this.decodes = new DecodeNode[cfg.decodeNodes];
        for (int d = 0; d < cfg.decodeNodes; d++) {
            decodes[d] = new DecodeNode(d);
        }
        this.prefills = new PrefillNode[cfg.prefillNodes];
        for (int p = 0; p < cfg.prefillNodes; p++) {
            prefills[p] = new PrefillNode(p);
        }
    }

    static Report hunt(Config cfg) {
        return new LeakHunter(cfg).run();
    }

    Report run() {
        while (report.transfers < cfg.transfers) {
            for (int i = 0; i < cfg.arrivalsPerStep; i++) {
                arrive();
            }
            chaos();
            tick();
        }
        // quiescence: no new work; abort what waits, let every drain, quarantine and hold end
        retry.forEach(this::withdraw);
        retry.clear();
        int settle = 0;
        for (; settle < 200_000 && !quiet(); settle++) {
            tick();
        }
        report.settleSteps = settle;
        for (int i = 0; i < 10; i++) {
            tick();
        }
        finish();
        return report;
    }

    private boolean quiet() {
        if (!inFlight.isEmpty() || !held.isEmpty() || !probes.isEmpty() || net.pendingEvents() > 0) {
            return false;
        }
        for (DecodeNode d : decodes) {
            if (d.receiver.activeTransfers() > 0) {
                return false;
            }
        }
        for (PrefillNode p : prefills) {
            if (p.sender.activeTransfers() > 0) {
                return false;
            }
        }
        return true;
    }

    // ---- one step of 10 µs ----

    private void tick() {
        step++;
        for (PrefillNode p : prefills) {
            p.sender.doWork();
        }
        for (DecodeNode d : decodes) {
            d.receiver.doWork();
        }
        net.advance(10_000);
        reconnect();
        progress();
        readHeld();
        probe();
    }

    private void reconnect() {
        for (PrefillNode p : prefills) {
            for (int d = 0; d < cfg.decodeNodes; d++) {
                if (decodes[d].receiver.peer(p.receiverPeer[d]).state() == Peer.State.RETIRING
                    || p.sender.peer(p.senderPeer[d]).state() == Peer.State.RETIRING) {
                    everRetiring.add(p.ends[d]); // its later failures (a force-cancel, a teardown) count as the retirement's
                }
                if (p.linkDead(d)) {
                    // the old link stays with the engines until its transfers ended; a new one takes over
                    decodes[d].receiver.tearDownPeer(p.receiverPeer[d]);
                    p.connect(d);
                    report.reconnects++;
                } else if (p.sender.peer(p.senderPeer[d]).state() == Peer.State.RETIRING) {
                    // decode retired the link (a suspect write) and told prefill (CANCEL(link, retiring), which may
                    // be lost: then the teardown is what tells): its transfers in flight finish there, new work takes
                    // a fresh link; the receiver tears the old one down once it is idle
                    p.connect(d);
                    report.reconnects++;
                }
            }
        }
    }

    private void arrive() {
        final boolean over = rnd.nextDouble() < cfg.overCapacity;
        final int prompt = over ? cfg.prefillPages * 4 + 1 + rnd.nextInt(40) : 1 + rnd.nextInt(cfg.maxPrompt);
        final Request r = new Request(nextRequestId++, prompt);
        r.decodeNode = rnd.nextInt(cfg.decodeNodes);
        final int senders = cfg.prefillNodes > 1 && rnd.nextDouble() < cfg.twoSenders ? 2 : 1;
        final int first = rnd.nextInt(cfg.prefillNodes);
        r.prefillNodes = senders == 1 ? new int[] {first} : new int[] {first, (first + 1) % cfg.prefillNodes};
        r.nodes = new PrefillNode[senders];
        r.out = new OutgoingTransfer[senders];
        // prefill: admit, compute (write the KV), offer
        final boolean truncate = rnd.nextDouble() < cfg.truncatedPrefill;
        final boolean unwritten = rnd.nextDouble() < cfg.unwrittenPrefill;
        for (int k = 0; k < senders; k++) {
            final PrefillNode p = prefills[r.prefillNodes[k]];
            final io.kvpool.Admission a = p.pool.admit(prompt, 0);
            if (!a.admitted()) {
                report.rejected++; // refused with a typed reason before any handoff
                for (int j = 0; j < k; j++) {
                    prefills[r.prefillNodes[j]].sender.abort(r.out[j], "a co-sender refused the request");
                }
                return;
            }
            final Sequence s = a.sequence();
            // the tokens admission let prefill compute: the prompt, or the placeholder's one token
            r.announced = (int) Math.min(prompt, s.admittedTokens());
            final int computed = truncate && r.announced > 1 ? 1 + rnd.nextInt(r.announced - 1) : r.announced;
            try {
                s.append(computed);
            } catch (RuntimeException e) {
                s.close();
                report.rejected++;
                for (int j = 0; j < k; j++) {
                    prefills[r.prefillNodes[j]].sender.abort(r.out[j], "co-sender out of pages");
                }
                return;
            }
            Kv.write(s, r.id, unwritten && computed > 1 ? rnd.nextInt(computed) : computed);
            r.out[k] = p.sender.offer(r.id, s);
            r.nodes[k] = p;
            s.close();
        }
        startDecode(r);
    }

    private void startDecode(Request r) {
        final DecodeNode d = decodes[r.decodeNode];
        final int[] peers = new int[r.prefillNodes.length];
        for (int k = 0; k < peers.length; k++) {
            final PrefillNode p = prefills[r.prefillNodes[k]];
            if (p != r.nodes[k] || !p.linkUp(r.decodeNode)) {
                requeue(r);
                return;
            }
            peers[k] = p.receiverPeer[r.decodeNode];
        }
        final int tokens = cfg.decodeSizedByRouter ? r.prompt : r.announced;
        final IncomingTransfer t = d.receiver.start(r.id, tokens, 4, peers);
        if (t.state() == IncomingTransfer.State.REJECTED) {
            // the rejection CANCELled the senders' offers, retryable or not: their pages are released, and another
            // start of this request would find no offer (a server retries with a new prefill, which this does not)
            report.rejected++;
            withdraw(r);
            return;
        }
        r.in = t;
        r.links = new SimLink[peers.length];
        for (int k = 0; k < peers.length; k++) {
            r.links[k] = prefills[r.prefillNodes[k]].ends[r.decodeNode];
        }
        report.transfers++;
        if (r.id == TRACE) {
            final Sequence dbg = null;
            System.out.println("TRACE start " + r.id + " decode " + r.decodeNode + " tokens " + tokens + " prefills "
                + java.util.Arrays.toString(r.prefillNodes) + " at " + net.now() + " " + t);
        }
        inFlight.add(r);
    }

    private void requeue(Request r) {
        if (++r.attempts > 50) {
            report.rejected++;
            withdraw(r);
        } else {
            retry.add(r);
        }
    }

    private void withdraw(Request r) {
        for (int k = 0; k < r.out.length; k++) {
            if (r.out[k] != null && r.nodes[k] == prefills[r.prefillNodes[k]] && !r.out[k].isDone()) {
                r.nodes[k].sender.abort(r.out[k], "decode did not take it");
            }
        }
    }

    static final long TRACE = Long.getLong("kvpool.hunter.trace", -1);

    private void progress() {
        for (int i = 0, n = retry.size(); i < n && i < 8; i++) {
            startDecode(retry.poll());
        }
        for (int i = inFlight.size() - 1; i >= 0; i--) {
            final Request r = inFlight.get(i);
            final IncomingTransfer t = r.in;
            if (r.id == TRACE && t.state() != r.lastState) {
                r.lastState = t.state();
                System.out.println("TRACE " + r.id + " at " + net.now() + " " + t + " outs=" + java.util.Arrays.toString(r.out));
            }
            if (t.state() == IncomingTransfer.State.RECEIVING) {
                continue;
            }
            if (t.state() == IncomingTransfer.State.COMMITTED) {
                report.committed++;
                final Sequence seq = t.sequence();
                held.add(new Held(r, seq, step + rnd.nextInt(cfg.maxHoldSteps), decodes[r.decodeNode]));
                inFlight.remove(i);
            } else {
                // failed: the receiver holds the pages (DRAINING, QUARANTINED) until released; the router tells prefill
                if (!r.counted) {
                    r.counted = true;
                    final boolean tornDown = t.failure() == FailureReason.PEER_LOST && t.message() != null
                        && t.message().contains("torn down by the receiver");
                    boolean onRetiring = false;
                    for (int id : t.senderPeers) {
                        onRetiring |= decodes[r.decodeNode].receiver.peer(id).state() == Peer.State.RETIRING;
                    }
                    for (SimLink l : r.links) {
                        onRetiring |= everRetiring.contains(l); // retired, then failed under it (a sender's force-cancel)
                    }
                    final boolean retiredTimeout = !tornDown && onRetiring
                        && (t.failure() == FailureReason.TIMEOUT || t.failure() == FailureReason.PEER_LOST);
                    if (tornDown || retiredTimeout) {
                        if (frozeItself(r)) {
                            report.frozenSuspects++;
                        } else if (stalledBehindAFrozenWrite(r)) {
                            report.stalled++;
                        } else {
                            report.collateral++;
                            if (retiredTimeout) {
                                report.collateralTimeouts++;
                            }
                        }
                    }
                }
                withdraw(r);
                if (t.isTerminal()) {
                    inFlight.remove(i);
                }
            }
        }
    }

    /** @return whether a write into one of {@code r}'s pages froze on one of its links (it is the suspect itself) */
    private boolean frozeItself(Request r) {
        final long deadline = r.in.startedAt + COMPLETION_TIMEOUT_MS * 1_000_000;
        final java.util.Set<Integer> mine = new java.util.HashSet<>();
        if (r.in.handles != null) {
            for (long h : r.in.handles) {
                mine.add(io.kvpool.PageHandle.slot(h));
            }
        }
        for (SimLink link : r.links) {
            for (SimLink.Straggler s : link.stragglers()) {
                if (s.postedAt() >= r.in.startedAt && s.postedAt() <= deadline) {
                    for (int slot : s.slots()) {
                        if (mine.contains(slot)) {
                            return true;
                        }
                    }
                }
            }
        }
        return false;
    }

    /**
     * @return whether a write posted on one of {@code r}'s links before {@code r}'s last write on it (or, if it wrote
     *         none there, before it started) lands only after {@code r}'s deadline: {@code r}'s flush on that link comes
     *         after its last write and waits for every write posted before, so {@code r} could not commit on that link
     *         whatever its handling (conservative: a straggler posted between {@code r}'s last write and its flush is
     *         not counted)
     */
    private boolean stalledBehindAFrozenWrite(Request r) {
        final long deadline = r.in.startedAt + COMPLETION_TIMEOUT_MS * 1_000_000;
        for (int k = 0; k < r.links.length; k++) {
            final io.kvpool.transfer.spi.Registration reg = r.in.registrations != null && k < r.in.registrations.length
                ? r.in.registrations[k] : null;
            final long before = Math.max(r.in.startedAt - 1, reg == null ? Long.MIN_VALUE : SimLink.lastWritePostedAt(reg));
            for (SimLink.Straggler s : r.links[k].stragglers()) {
                if (s.postedAt() <= before && s.landAt() > deadline) {
                    return true;
                }
            }
        }
        return false;
    }

    private void chaos() {
        if (!inFlight.isEmpty() && rnd.nextDouble() < cfg.routerAbort) {
            final Request r = inFlight.get(rnd.nextInt(inFlight.size()));
            decodes[r.decodeNode].receiver.abort(r.in, "router abort");
        }
        if (!inFlight.isEmpty() && rnd.nextDouble() < cfg.senderAbort) {
            final Request r = inFlight.get(rnd.nextInt(inFlight.size()));
            final int k = rnd.nextInt(r.out.length);
            if (r.out[k] != null && r.nodes[k] == prefills[r.prefillNodes[k]]) {
                r.nodes[k].sender.abort(r.out[k], "prefill abort");
            }
        }
        if (rnd.nextDouble() < cfg.prefillCrash) {
            crash(rnd.nextInt(cfg.prefillNodes));
        }
    }

    /** A prefill process dies: its links fail, its posted writes may still land; a fresh node replaces it. */
    private void crash(int index) {
        report.crashes++;
        crashGeneration++;
        final PrefillNode p = prefills[index];
        for (SimLink end : p.ends) {
            net.crash(end);
        }
        prefills[index] = new PrefillNode(index);
    }

    // ---- decode reads ----

    private void readHeld() {
        for (int i = held.size() - 1; i >= 0; i--) {
            final Held h = held.get(i);
            if (h.until > step) {
                continue;
            }
            held.remove(i);
            verify(h);
            final long[] handles = new long[h.seq.pageCount()];
            for (int p = 0; p < handles.length; p++) {
                handles[p] = h.seq.pageHandle(p);
            }
            final int tokens = h.seq.tokenCount();
            h.seq.close();
            if (rnd.nextDouble() < cfg.staleProbe) {
                probes.add(new Probe(h.r.id, handles, tokens, step + 1 + rnd.nextInt(200), h.node));
            }
        }
    }

    private void verify(Held h) {
        report.readsVerified++;
        final Sequence seq = h.seq;
        if (seq.tokenCount() < h.r.prompt) {
            report.corrupted++;
            report.truncated++;
            report.example("request " + h.r.id + ": decode got a " + seq.tokenCount() + "-token context for a " + h.r.prompt
                + "-token prompt");
        }
        final int n = Math.min(seq.tokenCount(), h.r.prompt);
        Kv.Finding worst = Kv.Finding.OK;
        int at = -1;
        for (int t = 0; t < n && worst != Kv.Finding.FOREIGN; t++) {
            final Kv.Finding f = Kv.check(seq.page(t / Kv.LAYOUT.tokensPerPage()), h.r.id, t);
            if (f != Kv.Finding.OK && (worst == Kv.Finding.OK || f == Kv.Finding.FOREIGN)) {
                worst = f;
                at = t;
            }
        }
        // the tail of a partial last page, tokens [tokenCount, pageCount × tpp): the transport copied the sender's whole
        // page, so it may hold another request's KV; only the pool's fill (or this request's own) may be there
        final int tpp = Kv.LAYOUT.tokensPerPage();
        for (int t = seq.tokenCount(); t < seq.pageCount() * tpp; t++) {
            if (Kv.check(seq.page(t / tpp), h.r.id, t) == Kv.Finding.FOREIGN) {
                report.tailForeign++;
                if (worst != Kv.Finding.FOREIGN) {
                    worst = Kv.Finding.FOREIGN;
                    at = t;
                }
                break;
            }
        }
        if (worst != Kv.Finding.OK) {
            report.committedReads.merge(worst, 1L, Long::sum);
            final MemorySegment pg = seq.page(at / Kv.LAYOUT.tokensPerPage());
            final long off = Kv.LAYOUT.offset(0, 0, at % Kv.LAYOUT.tokensPerPage());
            record(worst, "request " + h.r.id + " token " + at + " of " + n + ": " + worst + " (holds request "
                + pg.get(Kv.LONG, off) + " position 0x" + Long.toHexString(pg.get(Kv.LONG, off + 8)) + ", slot "
                + seq.pageIndex(at / Kv.LAYOUT.tokensPerPage()) + " of decode " + h.r.decodeNode + ")");
        }
    }

    private void record(Kv.Finding f, String what) {
        if (f == Kv.Finding.FOREIGN) {
            report.leaks++;
            if (report.leakExamples.size() < 5) {
                report.leakExamples.add(what);
            }
        } else {
            report.corrupted++;
        }
        report.example(what);
    }

    /** A decode step that still holds a released sequence's handles (an abort raced it) reads through them. */
    private void probe() {
        for (int i = probes.size() - 1; i >= 0; i--) {
            final Probe p = probes.get(i);
            if (p.at > step) {
                continue;
            }
            probes.remove(i);
            for (int page = 0; page < p.handles.length; page++) {
                final MemorySegment seg;
                try {
                    seg = p.node.pool.page(p.handles[page]);
                } catch (StaleHandleException | IllegalSlotTransitionException refused) {
                    report.staleRefused++;
                    continue; // refused, as it must be
                }
                report.staleServed++;
                final int tpp = Kv.LAYOUT.tokensPerPage();
                Kv.Finding worst = Kv.Finding.OK;
                for (int t = page * tpp; t < Math.min(p.tokens, (page + 1) * tpp); t++) {
                    final Kv.Finding f = Kv.check(seg, p.requestId, t);
                    if (f == Kv.Finding.FOREIGN) {
                        worst = f;
                        break;
                    }
                    if (f != Kv.Finding.OK) {
                        worst = f;
                    }
                }
                record(worst == Kv.Finding.OK ? Kv.Finding.MISPLACED : worst,
                    "stale handle of request " + p.requestId + " page " + page + " was served: " + worst);
                break;
            }
        }
    }

    private void finish() {
        report.lateWritesLanded = net.landedWrites();
        report.lateWritesDropped = net.droppedWrites();
        for (SimLink l : allLinks) {
            report.frozenWrites += l.stragglers().size();
            report.lateLandings += l.lateLandings();
        }
        boolean balanced = true;
        final StringBuilder acc = new StringBuilder();
        for (DecodeNode d : decodes) {
            final var s = d.pool.snapshot();
            final boolean ok = d.pool.verifyAccounting().balanced() && s.free() == d.pool.capacity();
            balanced &= ok;
            if (!ok) {
                acc.append("decode ").append(s).append("; ");
            }
            report.metrics.append(d.receiver.metrics()).append('\n');
            report.linksRetired += d.receiver.metrics().linksRetired();
            for (FailureReason f : FailureReason.values()) {
                report.failures.merge(f, d.receiver.metrics().failures(f), Long::sum);
            }
            for (ReceiverMetrics.Outcome o : ReceiverMetrics.Outcome.values()) {
                report.outcomes.merge(o, d.receiver.metrics().deferredRelease(o), Long::sum);
            }
        }
        for (PrefillNode p : prefills) {
            final var s = p.pool.snapshot();
            final boolean ok = p.pool.verifyAccounting().balanced() && s.free() == p.pool.capacity();
            balanced &= ok;
            if (!ok) {
                acc.append("prefill ").append(s).append(" open=").append(p.sender.openTransfers().stream().limit(3).toList()).append("; ");
            }
        }
        report.balanced = balanced;
        report.accounting = acc.toString();
    }
}
