package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A sender under random receiver frames and transport events, one seed at a time: offers; descriptors (repeated,
 * stale, of one or two senders); ABORTs of descriptors it was sent; CANCELs, of requests and of the link (retiring);
 * write and flush results in any order, failed ones among them; links that fail with writes outstanding, and new links;
 * clock steps; application aborts; and a close at the end. After every step:
 * <ul>
 *   <li>no source page is released while a write reading it may still be outstanding;</li>
 *   <li>no DRAINED or COMPLETION goes out for a transfer with a write outstanding on that link;</li>
 *   <li>a DRAINED of a rank reports the writes the transfer posted, and DRAINED(−1) ("nothing of mine") never
 *       answers a transfer the sender began;</li>
 * </ul>
 * and the sender's counts balance (every offer is completed, failed for its reason, or active, counted once); after the
 * close, once the transport reported every write, no transfer is left and every source was released.
 * The controls switch {@link TransferSafeguard#SOURCE_HOLD} off, and the same run catches the early release, and
 * {@link TransferSafeguard#DRAINED_AFTER_WRITES_END}, and it catches the early DRAINED.
 * {@code -Dkvpool.randomEvents.seeds=N} runs more seeds.
 */
class SenderRandomEventsTest {

    static final int SEEDS = Integer.getInteger("kvpool.randomEvents.seeds", 400);

    @Test
    void noSourceReleasedNorDrainClaimedBeforeEveryWriteEnds() {
        for (long seed = 1; seed <= SEEDS; seed++) {
            final String broken = run(seed, null);
            assertNull(broken, broken);
        }
    }

    @Test
    void withoutTheSourceHoldAnEarlyReleaseIsCaught() {
        String caught = null;
        for (long seed = 1; seed <= SEEDS && caught == null; seed++) {
            caught = run(seed, TransferSafeguard.SOURCE_HOLD);
        }
        assertNotNull(caught, "SOURCE_HOLD off: " + SEEDS + " seeds never released a source with a write outstanding");
        assertTrue(caught.contains("source released with"), caught);
        System.out.println("SOURCE_HOLD off: " + caught.lines().findFirst().orElseThrow());
    }

    @Test
    void withoutTheWaitForEveryWriteToEndAnEarlyDrainedIsCaught() {
        String caught = null;
        for (long seed = 1; seed <= SEEDS && caught == null; seed++) {
            caught = run(seed, TransferSafeguard.DRAINED_AFTER_WRITES_END);
        }
        assertNotNull(caught, "DRAINED_AFTER_WRITES_END off: " + SEEDS + " seeds never sent DRAINED with a write outstanding");
        assertTrue(caught.lines().findFirst().orElseThrow().contains("DRAINED"), caught); // not the source's release
        System.out.println("DRAINED_AFTER_WRITES_END off: " + caught.lines().findFirst().orElseThrow());
    }

    /**
     * The sender's counts against the transfers it returned: every offer counted once, as completed, as failed for its
     * own reason once it ended, or as active.
     *
     * @return what does not balance, or {@code null}
     */
    static String balance(TransferSender tx, List<OutgoingTransfer> transfers) {
        final SenderMetrics m = tx.metrics();
        if (m.offered() != transfers.size()) {
            return "offered() " + m.offered() + " but " + transfers.size() + " offers returned: " + m;
        }
        final long completed = transfers.stream().filter(t -> t.state == OutgoingTransfer.State.COMPLETED).count();
        if (m.completed() != completed) {
            return "completed() " + m.completed() + " but " + completed + " transfers COMPLETED: " + m;
        }
        long failed = 0;
        for (FailureReason r : FailureReason.values()) {
            final long ended = transfers.stream()
                .filter(t -> t.finished && t.state != OutgoingTransfer.State.COMPLETED && t.failureReason == r).count();
            if (m.failures(r) != ended) {
                return "failures(" + r + ") " + m.failures(r) + " but " + ended + " offers ended for it: " + m;
            }
            failed += ended;
        }
        if (m.offered() != completed + failed + tx.activeTransfers()) {
            return "offered() " + m.offered() + " ≠ completed " + completed + " + failed " + failed + " + active "
                + tx.activeTransfers() + ": " + m;
        }
        return null;
    }

    /**
     * One seed's 400 random steps.
     *
     * @param off        the sender's safeguard switched off, or {@code null} for none
     * @return the first invariant broken, with the seed and the steps that led there; {@code null} if none was
     */
    static String run(long seed, TransferSafeguard off) {
        final SplittableRandom rnd = new SplittableRandom(seed);
        final ManualClock clock = new ManualClock();
        try (KvPool pool = Kv.pool(64)) {
            final TransferSender.Builder b = TransferSender.builder(pool, Kv.identity()).clock(clock).maxPagesInFlight(3)
                .heartbeat(Heartbeat.OFF).drainDeadline(Duration.ofMillis(50)).descriptorTimeout(Duration.ofMillis(200));
            final TransferSender tx = (off == null ? b : b.unsafeDisable(off)).build();
            final List<ScriptedLink> links = new ArrayList<>();
            ScriptedLink link = new ScriptedLink().hello(Kv.identity());
            links.add(link);
            tx.addPeer(link);
            tx.doWork();
            final List<OutgoingTransfer> transfers = new ArrayList<>();
            final Map<ScriptedLink, Set<Long>> done = new HashMap<>();
            final Map<ScriptedLink, Set<Long>> flushedOk = new HashMap<>(); // the flush tokens each link answered OK
            int gen = 1;
            final Map<ScriptedLink, List<long[]>> sentDescs = new HashMap<>();
            long nextReq = 1;
            final List<String> trace = new ArrayList<>();
            for (int step = 0; step < 400; step++) {
                final int op = rnd.nextInt(14);
                final long req = 1 + rnd.nextInt((int) Math.max(1, nextReq));
                try {
                    switch (op) {
                        case 0 -> { // offer
                            final int tokens = 1 + rnd.nextInt(12);
                            final Sequence s = pool.admit(tokens, 0).sequence();
                            if (s == null) {
                                break;
                            }
                            s.append(tokens);
                            Kv.write(s, nextReq);
                            final long r = nextReq++;
                            try {
                                transfers.add(tx.offer(r, s));
                                trace.add("offer " + r);
                            } finally {
                                s.close();
                            }
                        }
                        case 1, 2 -> { // descriptor
                            final int tokens = 1 + rnd.nextInt(12);
                            final int pages = (int) Kv.LAYOUT.pagesFor(tokens);
                            final int senders = rnd.nextInt(4) == 0 ? 2 : 1;
                            final int rank = rnd.nextInt(senders);
                            final long tid = rnd.nextInt(3);
                            final int g = rnd.nextInt(6) == 0 ? 1 + rnd.nextInt(gen) : ++gen;
                            sentDescs.computeIfAbsent(link, k -> new ArrayList<>()).add(new long[] {tid, g});
                            link.inject(new Message.Descriptor(req, tid, g, tokens, Kv.LAYOUT.fingerprint(), senders, rank, new long[pages],
                                new byte[1]));
                            trace.add("desc req " + req + " " + tid + "/" + g);
                        }
                        case 3 -> {
                            final List<long[]> sentHere = sentDescs.computeIfAbsent(link, k -> new ArrayList<>());
                            if (!sentHere.isEmpty()) {
                                final long[] tg = sentHere.get(rnd.nextInt(sentHere.size()));
                                link.inject(new Message.Abort(tg[0], (int) tg[1], 3, "random"));
                                trace.add("abort " + tg[0] + "/" + tg[1]);
                            }
                        }
                        case 4 -> {
                            link.inject(new Message.Cancel(req, 1 + rnd.nextInt(2), "random"));
                            trace.add("cancel " + req);
                        }
                        case 5, 6, 7 -> { // complete a posted write
                            final Set<Long> d = done.computeIfAbsent(link, k -> new HashSet<>());
                            final List<Long> open = link.postedTokens.stream().filter(tok -> !d.contains(tok)).toList();
                            if (!open.isEmpty()) {
                                final long tok = open.get(rnd.nextInt(open.size()));
                                d.add(tok);
                                final int st = rnd.nextInt(8) == 0 ? PeerLink.FAILED : PeerLink.OK;
                                link.completeWrite(tok, st);
                                trace.add("write " + Long.toHexString(tok) + " " + st);
                            }
                        }
                        case 8 -> {
                            if (!link.flushTokens.isEmpty()) {
                                final long tok = link.flushTokens.remove(0);
                                final boolean ok = rnd.nextInt(6) != 0;
                                if (ok) {
                                    flushedOk.computeIfAbsent(link, k -> new HashSet<>()).add(tok);
                                }
                                link.completeFlush(tok, ok);
                                trace.add("flush " + Long.toHexString(tok) + (ok ? " ok" : " failed"));
                            }
                        }
                        case 9 -> {
                            clock.advanceMillis(rnd.nextInt(80));
                            trace.add("time");
                        }
                        case 10 -> {
                            if (!transfers.isEmpty() && rnd.nextInt(3) == 0) {
                                final OutgoingTransfer t = transfers.get(rnd.nextInt(transfers.size()));
                                tx.abort(t, "random");
                                trace.add("app abort " + t.requestId);
                            }
                        }
                        case 11 -> {
                            if (rnd.nextInt(8) == 0) {
                                // the link dies: writes still outstanding end CANCELED (as a real transport reports)
                                final Set<Long> d = done.computeIfAbsent(link, k -> new HashSet<>());
                                link.failLink("random");
                                for (long tok : link.postedTokens) {
                                    if (d.add(tok)) {
                                        link.completeWrite(tok, PeerLink.CANCELED);
                                    }
                                }
                                for (long tok : link.flushTokens) {
                                    link.completeFlush(tok, false);
                                }
                                link.flushTokens.clear();
                                trace.add("linkfail");
                                tx.doWork();
                                link = new ScriptedLink().hello(Kv.identity());
                                links.add(link);
                                tx.addPeer(link);
                            }
                        }
                        case 12 -> {
                            if (rnd.nextInt(5) == 0) {
                                link.inject(new Message.Cancel(Message.Cancel.LINK, Message.Cancel.RETIRING, "retire"));
                                trace.add("retire");
                            }
                        }
                        default -> {
                            if (rnd.nextInt(4) == 0) { // a second link beside the first
                                link = new ScriptedLink().hello(Kv.identity());
                                links.add(link);
                                tx.addPeer(link);
                                trace.add("newlink");
                            } else if (links.size() > 1) {
                                link = links.get(rnd.nextInt(links.size()));
                            }
                        }
                    }
                    tx.doWork();
                } catch (IllegalStateException | IllegalArgumentException e) {
                    if (op != 0) {
                        return "seed " + seed + " step " + step + " op " + op + ": " + e + "\n" + trace;
                    }
                }
                // invariants
                final String unbalanced = balance(tx, transfers);
                if (unbalanced != null) {
                    return "seed " + seed + " step " + step + ": " + unbalanced + "\n" + trace;
                }
                for (ScriptedLink l : links) {
                    final Set<Long> d = done.computeIfAbsent(l, k -> new HashSet<>());
                    for (OutgoingTransfer t : transfers) {
                        long outstanding = 0;
                        for (long tok : l.postedTokens) {
                            if ((int) (tok >>> 32) == t.serial && !d.contains(tok)) {
                                outstanding++;
                            }
                        }
                        if (outstanding > 0 && t.sourceReleased) {
                            return "seed " + seed + ": source released with " + outstanding + " writes outstanding: " + t + "\n" + trace;
                        }
                        if (outstanding > 0 && t.peer != null && t.peer.link == l) {
                            for (Message m : l.sent) {
                                if (m instanceof Message.Drained dr && dr.transferId() == t.transferId && dr.generation() == t.generation) {
                                    return "seed " + seed + ": DRAINED " + dr + " with " + outstanding + " writes outstanding: " + t + "\n" + trace;
                                }
                                if (m instanceof Message.Completion c && c.transferId() == t.transferId && c.generation() == t.generation) {
                                    return "seed " + seed + ": COMPLETION " + c + " with writes outstanding: " + t + "\n" + trace;
                                }
                            }
                        }
                    }
                    // a DRAINED that claims fewer posted writes than were posted for that transfer, or proven without a flush
                    for (Message m : l.sent) {
                        if (m instanceof Message.Drained dr && dr.senderRank() >= 0) {
                            for (OutgoingTransfer t : transfers) {
                                if (t.peer != null && t.peer.link == l && dr.transferId() == t.transferId && dr.generation() == t.generation
                                    && dr.posted() != t.posted) {
                                    return "seed " + seed + ": DRAINED " + dr + " but posted " + t.posted + ": " + t + "\n" + trace;
                                }
                                // a write is proven delivered only by an OK flush of its transfer (its token's high half)
                                if (t.peer != null && t.peer.link == l && dr.transferId() == t.transferId && dr.generation() == t.generation
                                    && dr.succeeded() > 0 && flushedOk.getOrDefault(l, Set.of()).stream().noneMatch(f -> (int) (f >>> 32) == t.serial)) {
                                    return "seed " + seed + ": DRAINED " + dr + " proves " + dr.succeeded() + " writes without an OK flush: "
                                        + t + "\n" + trace;
                                }
                            }
                        }
                        if (m instanceof Message.Drained dr && dr.senderRank() == -1) {
                            for (OutgoingTransfer t : transfers) {
                                if (t.peer != null && t.peer.link == l && dr.transferId() == t.transferId && dr.generation() == t.generation) {
                                    return "seed " + seed + ": DRAINED(-1) " + dr + " for a begun transfer " + t + "\n" + trace;
                                }
                            }
                        }
                    }
                }
            }
            tx.close();
            // the transport reports every outstanding write and flush, as the SPI says it does after a close
            for (int round = 0; round < 3; round++) {
                for (ScriptedLink l : links) {
                    final Set<Long> d = done.computeIfAbsent(l, k -> new HashSet<>());
                    for (long tok : l.postedTokens) {
                        if (d.add(tok)) {
                            l.completeWrite(tok, PeerLink.CANCELED);
                        }
                    }
                    for (long tok : l.flushTokens) {
                        l.completeFlush(tok, false);
                    }
                    l.flushTokens.clear();
                }
                tx.doWork();
            }
            if (tx.activeTransfers() != 0) {
                return "seed " + seed + ": after close and every write's end, transfers remain: " + tx.openTransfers() + "\n" + trace;
            }
            final String unbalanced = balance(tx, transfers);
            if (unbalanced != null) {
                return "seed " + seed + " after close: " + unbalanced + "\n" + trace;
            }
            for (OutgoingTransfer t : transfers) {
                if (!t.sourceReleased) {
                    return "seed " + seed + ": source never released: " + t + "\n" + trace;
                }
            }
        }
        return null;
    }
}
