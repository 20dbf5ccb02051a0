package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

/**
 * A receiver under random events from honest scripted senders, one seed at a time. A sender may write a transfer's
 * pages until it proved it stopped: a COMPLETION of its whole share, a DRAINED whose writes all ended, or a teardown of
 * its link that the transport proves. The events: starts with one or two senders; writes, whole or partial; honest
 * completions; proven and unproven DRAINEDs; sender aborts and refusals; application aborts; links that fail (their
 * writes may still land) and new links; teardowns proven at once, or only once the sender's process exits later;
 * clock steps past the completion and drain timeouts; suspect links retired or not. After every step no transfer whose
 * pages a sender may still write is COMMITTED or RELEASED, and each RELEASED one names, per rank, a proof that
 * happened ({@link IncomingTransfer#writeProof}). The controls switch {@link TransferSafeguard#DRAIN_WAIT} or
 * {@link TransferSafeguard#QUARANTINE_ON_TIMEOUT} off, and the same run catches the pages freed under a sender's writes. {@code -Dkvpool.randomEvents.seeds=N} runs
 * more seeds.
 */
class ReceiverRandomEventsTest {

    static final int SEEDS = Integer.getInteger("kvpool.randomEvents.seeds", 1000);

    /** A descriptor the receiver sent, and what its sender did with it. */
    static final class Rec {
        ScriptedLink link;
        Message.Descriptor d;
        IncomingTransfer t;
        boolean mayWrite = true;
        /** The sender proved its writes over itself: a completion of its share, a proven DRAINED, or a refusal. */
        boolean senderProved;
        boolean answered;
        boolean wrote;
        int registration;
    }

    @Test
    void noPagesReleasedOrCommittedWhileASenderMayStillWriteThem() {
        for (long seed = 1; seed <= SEEDS; seed++) {
            final String broken = run(seed);
            assertNull(broken, broken);
        }
    }

    @ParameterizedTest
    @EnumSource(value = TransferSafeguard.class, names = {"DRAIN_WAIT", "QUARANTINE_ON_TIMEOUT"})
    void withoutTheDrainSafeguardsPagesFreedUnderAWriteAreCaught(TransferSafeguard off) {
        String caught = null;
        for (long seed = 1; seed <= SEEDS && caught == null; seed++) {
            caught = run(seed, off);
        }
        assertNotNull(caught, off + " off: " + SEEDS + " seeds never released pages a sender could still write");
        System.out.println(off + " off: " + caught.lines().findFirst().orElseThrow());
    }

    /**
     * One seed's 300 random steps.
     *
     * @param off the receiver's safeguards to switch off (none for the real run)
     * @return the first write found able to land in pages the receiver released or committed, with the seed and the
     *         steps that led there; {@code null} if none was
     */
    static String run(long seed, TransferSafeguard... off) {
        final SplittableRandom rnd = new SplittableRandom(seed);
        final ManualClock clock = new ManualClock();
        final boolean retire = rnd.nextBoolean();
        try (KvPool pool = Kv.pool(48)) {
            final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(clock).heartbeat(Heartbeat.OFF)
                .checksums(false).retireSuspectLinks(retire).maxTransfers(6)
                .completionTimeout(Duration.ofMillis(100)).drainTimeout(Duration.ofMillis(100)).unsafeDisable(off).build();
            final List<ScriptedLink> links = new ArrayList<>();
            final List<Integer> ids = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                final ScriptedLink l = new ScriptedLink().hello(Kv.identity());
                l.tearDownProves = rnd.nextInt(3) != 0;
                links.add(l);
                ids.add(rx.addPeer(l));
            }
            rx.doWork();
            final List<IncomingTransfer> started = new ArrayList<>();
            final java.util.Map<ScriptedLink, Integer> flipAt = new java.util.IdentityHashMap<>();
            final List<Rec> recs = new ArrayList<>();
            final int[] seenSent = new int[64];
            final List<String> trace = new ArrayList<>();
            long req = 100;
            for (int step = 0; step < 300 && links.size() < 60; step++) {
                // discover descriptors the receiver sent
                for (int li = 0; li < links.size(); li++) {
                    final ScriptedLink l = links.get(li);
                    for (; seenSent[li] < l.sent.size(); seenSent[li]++) {
                        if (l.sent.get(seenSent[li]) instanceof Message.Descriptor d) {
                            final Rec r = new Rec();
                            r.link = l;
                            r.d = d;
                            r.registration = d.regionKey()[0] & 0xFF;
                            for (IncomingTransfer t : started) {
                                if (t.transferId() == d.transferId() && t.generation() == d.generation()) {
                                    r.t = t;
                                }
                            }
                            recs.add(r);
                        }
                    }
                }
                final int op = rnd.nextInt(14);
                switch (op) {
                    case 0, 1 -> { // start
                        final List<Integer> up = new ArrayList<>();
                        for (int id : ids) {
                            if (rx.peer(id).isUp()) {
                                up.add(id);
                            }
                        }
                        if (up.isEmpty()) {
                            break;
                        }
                        final int n = up.size() >= 2 && rnd.nextInt(3) == 0 ? 2 : 1;
                        final int[] s = new int[n];
                        s[0] = up.get(rnd.nextInt(up.size()));
                        if (n == 2) {
                            do {
                                s[1] = up.get(rnd.nextInt(up.size()));
                            } while (s[1] == s[0]);
                        }
                        final IncomingTransfer t = rx.start(req++, 1 + rnd.nextInt(20), 0, s);
                        trace.add("start " + t);
                        if (t.state() != IncomingTransfer.State.REJECTED) {
                            started.add(t);
                        }
                    }
                    case 2, 3, 4 -> { // a sender writes (it may, as long as it did not prove it stopped)
                        final Rec r = pick(rnd, recs, true);
                        if (r != null && r.t != null && r.registration < r.link.registrations.size()) {
                            final IncomingTransfer.State st = r.t.state();
                            if (st == IncomingTransfer.State.COMMITTED || st == IncomingTransfer.State.RELEASED) {
                                return "seed " + seed + ": a write that may still land hits " + r.t + " (link " + r.link.up + ", tearDowns "
                                    + r.link.tearDowns + ")\n" + String.join("\n", trace);
                            }
                            write(pool, r, rnd.nextInt(10) == 0);
                        }
                    }
                    case 5, 6 -> { // complete honestly
                        final Rec r = pick(rnd, recs, true);
                        if (r != null && !r.answered && r.link.up && r.registration < r.link.registrations.size()) {
                            write(pool, r, false);
                            final int pages = r.d.pageHandles().length;
                            final int from = TransferPlan.firstPage(pages, r.d.senders(), r.d.senderRank());
                            final int to = TransferPlan.firstPage(pages, r.d.senders(), r.d.senderRank() + 1);
                            r.link.inject(new Message.Completion(r.d.transferId(), r.d.generation(), r.d.senderRank(), r.d.expectedTokens(),
                                from, null, to - from, to - from, 0));
                            r.answered = true;
                            r.mayWrite = false;
                            r.senderProved = true;
                            trace.add("completion " + r.d);
                        }
                    }
                    case 7 -> { // DRAINED, proven or not
                        final Rec r = pick(rnd, recs, true);
                        if (r != null && r.link.up) {
                            if (rnd.nextBoolean()) {
                                r.link.inject(new Message.Drained(r.d.transferId(), r.d.generation(), r.d.senderRank(), 3, 3, 0));
                                r.mayWrite = false;
                                r.senderProved = true;
                                trace.add("drained proven " + r.d);
                            } else {
                                r.link.inject(new Message.Drained(r.d.transferId(), r.d.generation(), r.d.senderRank(), 3, 2, 1));
                                trace.add("drained unproven " + r.d);
                            }
                            r.answered = true;
                        }
                    }
                    case 8 -> { // a sender aborts
                        final Rec r = pick(rnd, recs, true);
                        if (r != null && r.link.up && !r.answered) {
                            r.link.inject(new Message.Abort(r.d.transferId(), r.d.generation(), Message.Abort.SENDER_FAILED, "random"));
                            trace.add("sender abort " + r.d);
                        }
                    }
                    case 9 -> {
                        clock.advanceMillis(rnd.nextInt(90));
                        trace.add("time");
                    }
                    case 10 -> {
                        if (!started.isEmpty()) {
                            final IncomingTransfer t = started.get(rnd.nextInt(started.size()));
                            rx.abort(t, "random");
                            trace.add("app abort " + t);
                        }
                    }
                    case 11 -> { // a link fails; the sender's writes may still land until the teardown
                        if (rnd.nextInt(4) == 0) {
                            final int li = rnd.nextInt(links.size());
                            final ScriptedLink l = links.get(li);
                            if (l.up) {
                                l.failLink("random");
                                trace.add("link " + li + " fails");
                                final ScriptedLink n = new ScriptedLink().hello(Kv.identity());
                                n.tearDownProves = rnd.nextInt(3) != 0;
                                links.add(n);
                                ids.add(rx.addPeer(n));
                            }
                        }
                    }
                    case 12 -> { // the sender refuses a descriptor it never wrote for: ABORT, DRAINED(nothing posted)
                        final Rec r = pick(rnd, recs, true);
                        if (r != null && r.link.up && !r.answered && !r.wrote) {
                            r.link.inject(new Message.Abort(r.d.transferId(), r.d.generation(), Message.Abort.SENDER_FAILED, "refused"));
                            r.link.inject(new Message.Drained(r.d.transferId(), r.d.generation(), r.d.senderRank(), 0, 0, 0));
                            r.answered = true;
                            r.mayWrite = false;
                            r.senderProved = true;
                            trace.add("refuse " + r.d);
                        }
                    }
                    default -> { // open a new link for new work when one retired
                        for (int i = 0; i < ids.size(); i++) {
                            if (rx.peer(ids.get(i)).state() == Peer.State.RETIRING && rnd.nextInt(3) == 0) {
                                final ScriptedLink n = new ScriptedLink().hello(Kv.identity());
                                n.tearDownProves = rnd.nextInt(3) != 0;
                                links.add(n);
                                ids.add(rx.addPeer(n));
                                break;
                            }
                        }
                    }
                }
                rx.doWork();
                // a proven teardown ends every write of its link
                for (Rec r : recs) {
                    if (r.link.tearDownProves && r.link.tearDowns > flipAt.getOrDefault(r.link, 0)) {
                        r.mayWrite = false;
                    }
                }
                // a sender process exits now and then: the next teardown question proves
                if (rnd.nextInt(20) == 0) {
                    for (ScriptedLink l : links) {
                        if (!l.tearDownProves && l.tearDowns > 0) {
                            l.tearDownProves = true;
                            flipAt.put(l, l.tearDowns);
                            trace.add("exit of a sender behind an unproven teardown");
                            break;
                        }
                    }
                }
                for (Rec r : recs) {
                    if (r.mayWrite && r.t != null && (r.t.state() == IncomingTransfer.State.COMMITTED
                        || r.t.state() == IncomingTransfer.State.RELEASED)) {
                        return "seed " + seed + ": " + r.t + " ended while rank " + r.d.senderRank() + " (link up " + r.link.up
                            + ") may still write\n" + String.join("\n", trace);
                    }
                    // the proof a freed transfer names for the rank is one that happened (the controls free unproven)
                    if (off.length == 0 && r.t != null && r.t.state() == IncomingTransfer.State.RELEASED) {
                        final WriteProof p = r.t.writeProof(r.d.senderRank());
                        final boolean happened = p == WriteProof.SENDER ? r.senderProved
                            : p == WriteProof.LINK_TORN_DOWN ? r.link.tearDownProves && r.link.tearDowns > flipAt.getOrDefault(r.link, 0)
                            : p == WriteProof.REVOKED && r.link.revocable;
                        if (!happened) {
                            return "seed " + seed + ": " + r.t + " names " + p + " for rank " + r.d.senderRank() + ", which did not happen"
                                + " (sender proved " + r.senderProved + ", link tearDowns " + r.link.tearDowns + " proving "
                                + r.link.tearDownProves + ")\n" + String.join("\n", trace);
                        }
                    }
                }
            }
            rx.close();
        }
        return null;
    }

    static Rec pick(SplittableRandom rnd, List<Rec> recs, boolean mayWrite) {
        final List<Rec> c = new ArrayList<>();
        for (Rec r : recs) {
            if (!mayWrite || r.mayWrite) {
                c.add(r);
            }
        }
        return c.isEmpty() ? null : c.get(rnd.nextInt(c.size()));
    }

    /** Writes the rank's share (whole pages of "KV", no canary). */
    static void write(KvPool pool, Rec r, boolean partial) {
        r.wrote = true;
        final int[] slots = r.link.registrations.get(r.registration).slots;
        for (int i = 0; i < slots.length; i++) {
            if (partial && i > 0) {
                break;
            }
            final MemorySegment page = pool.storage().hostPage(slots[i]);
            page.fill((byte) 0x11);
        }
    }
}
