package io.kvpool.transfer;

import io.kvpool.Admission;
import io.kvpool.KvCopy;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * An engine author's loop over prefill and decode pools linked by the simulated network: admit (some over capacity),
 * prefill with prefix attach and publish, offer, receive, decode in appendEach batch steps, fork (beams), truncate
 * (speculative rollback), aborts at every stage; at the end both pools balance and every token read back carries the
 * tag of the request that wrote it.
 */
class EngineLoopTest {

    static final int TPP = Kv.LAYOUT.tokensPerPage();
    static final long SALT = 77;

    /** tokens × 2 layers × 2 (K/V) × 16-byte vectors, [layer][kv][token], each vector (tag, position). */
    static MemorySegment kvRun(Arena arena, long tag, int from, int n) {
        final MemorySegment s = arena.allocate((long) n * Kv.LAYOUT.bytesPerToken());
        long off = 0;
        for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                for (int t = 0; t < n; t++) {
                    s.set(Kv.LONG, off, tag);
                    s.set(Kv.LONG, off + 8, Kv.position(layer, kv, from + t));
                    off += 16;
                }
            }
        }
        return s;
    }

    /** Reads every token back through KvCopy and checks it against the expected tags. */
    static void check(Arena arena, KvCopy copy, Sequence seq, long[] tags, String what) {
        final int n = seq.tokenCount();
        assertTrue(tags.length >= n, what);
        final MemorySegment out = arena.allocate((long) Math.max(1, n) * Kv.LAYOUT.bytesPerToken());
        copy.copyOut(seq, 0, n, out, 0);
        long off = 0;
        for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                for (int t = 0; t < n; t++) {
                    assertEquals(tags[t], out.get(Kv.LONG, off), what + ": token " + t + " layer " + layer + " kv " + kv);
                    assertEquals(Kv.position(layer, kv, t), out.get(Kv.LONG, off + 8), what + ": token " + t + " position");
                    off += 16;
                }
            }
        }
    }

    static int[] prompt(int group, int len, int salt) {
        final int[] p = new int[len];
        for (int i = 0; i < len; i++) {
            p[i] = i < 8 ? group * 1000 + i : salt * 100_000 + i; // the first 8 tokens (2 pages) shared in a group
        }
        return p;
    }

    /** A live decode request: its sequence and the tag of every token it holds. */
    static final class Live {
        final long id;
        final Sequence seq;
        long[] tags;

        Live(long id, Sequence seq, long[] tags) {
            this.id = id;
            this.seq = seq;
            this.tags = tags;
        }
    }

    @Test
    void anEngineLoopBalancesBothPoolsAndNoRequestReadsAnothersKv() {
        try (KvPool prefill = Kv.pool(48); KvPool decode = Kv.pool(64);
             SimPair rig = new SimPair(new SimPair.Setup(prefill, decode).seed(11)
                 .sender(p -> TransferSender.builder(p, Kv.identity()).maxPagesInFlight(4).drainDeadline(Duration.ofMillis(50))
                     .descriptorTimeout(Duration.ofMillis(100)))
                 .receiver(p -> TransferReceiver.builder(p, Kv.identity()).completionTimeout(Duration.ofMillis(20))
                     .drainTimeout(Duration.ofMillis(20))));
             Arena arena = Arena.ofConfined()) {
            final KvCopy pc = KvCopy.of(prefill), dc = KvCopy.of(decode);

            // --- admission over capacity: typed refusals
            try (Admission a = prefill.admit(prompt(9, 10, 1), 48 * TPP, SALT)) {
                assertEquals(Admission.Decision.REJECTED_CONTEXT_TOO_LONG, a.decision(), a.message());
            }
            final Map<Integer, Long> groupPrefixTag = new HashMap<>();
            final List<Live> decoding = new ArrayList<>();
            final List<IncomingTransfer> aborted = new ArrayList<>();
            int stepsRun = 0;
            int forks = 0, attached = 0, abortedBeforeOffer = 0, rollbacks = 0, abortedMidDecode = 0;
            long nextId = 1;
            for (int round = 0; round < 6; round++) {
                for (int r = 0; r < 4; r++) {
                    final long id = nextId++;
                    final int group = r % 2;
                    final int len = 9 + (int) (id % 7);
                    final int[] ids = prompt(group, len, (int) id);
                    final int maxNew = 6;
                    final Sequence src;
                    final long[] tags = new long[len + 64];
                    try (Admission a = prefill.admit(ids, maxNew, SALT)) {
                        if (!a.admitted()) {
                            assertEquals(Admission.Decision.RETRY_LATER, a.decision(), a.message());
                            continue;
                        }
                        src = a.sequence();
                    }
                    final int cached = src.tokenCount();
                    if (cached > 0) {
                        attached++;
                        assertEquals(8, cached);
                        for (int t = 0; t < cached; t++) {
                            tags[t] = groupPrefixTag.get(group);
                        }
                    }
                    src.append(len - cached);
                    pc.copyIn(src, cached, len - cached, kvRun(arena, id, cached, len - cached), 0);
                    for (int t = cached; t < len; t++) {
                        tags[t] = id;
                    }
                    src.publish(ids, SALT);
                    groupPrefixTag.putIfAbsent(group, id);
                    check(arena, pc, src, tags, "prefill " + id);
                    if (id % 11 == 3) { // abort before offer
                        abortedBeforeOffer++;
                        src.close();
                        continue;
                    }
                    final OutgoingTransfer out = rig.sender.offer(id, src);
                    src.close();
                    final IncomingTransfer in = rig.receiver.start(id, len, maxNew, rig.rp);
                    if (in.state() == IncomingTransfer.State.REJECTED) {
                        assertTrue(in.retryLater(), in::toString);
                        continue;
                    }
                    if (id % 7 == 2) { // abort mid-transfer, by the receiver
                        rig.run(2);
                        rig.receiver.abort(in, "client gone");
                        aborted.add(in);
                        continue;
                    }
                    if (id % 13 == 5) { // abort mid-transfer, by the sender
                        rig.run(1);
                        rig.sender.abort(out, "prefill gone");
                        rig.run(200);
                        assertNotEquals(IncomingTransfer.State.COMMITTED, in.state(), in::toString);
                        aborted.add(in);
                        continue;
                    }
                    rig.run(200);
                    assertEquals(IncomingTransfer.State.COMMITTED, in.state(), in::toString);
                    final Sequence got = in.sequence();
                    check(arena, dc, got, tags, "received " + id);
                    decoding.add(new Live(id, got, tags));
                }

                // --- decode: a few appendEach steps over everything running
                stepsRun += decodeSteps(arena, dc, decode, decoding, 3);

                // --- speculative decoding: append 3 draft tokens, accept 1, truncate the rest (before the beam's steps, which
                // would leave no room for 3 drafts within a sequence's admitted tokens)
                for (Live l : decoding) {
                    final int before = l.seq.tokenCount();
                    if (before + 3 > l.seq.admittedTokens()) {
                        continue;
                    }
                    l.seq.append(3);
                    dc.copyIn(l.seq, before, 3, kvRun(arena, l.id + 500, before, 3), 0);
                    l.seq.truncate(before + 1);
                    rollbacks++;
                    dc.copyIn(l.seq, before, 1, kvRun(arena, l.id, before, 1), 0);
                    l.tags[before] = l.id;
                    check(arena, dc, l.seq, l.tags, "speculative " + l.id);
                }

                // --- beam search: fork the first request, each beam writes its own tag
                if (!decoding.isEmpty()) {
                    final Live parent = decoding.get(0);
                    final Sequence child = parent.seq.tryFork();
                    if (child != null) {
                        forks++;
                        final Live beam = new Live(parent.id + 1_000_000, child, parent.tags.clone());
                        decoding.add(beam);
                        stepsRun += decodeSteps(arena, dc, decode, decoding, 2);
                    }
                }

                // --- abort mid-decode: end the oldest
                if (decoding.size() > 3) {
                    abortedMidDecode++;
                    decoding.remove(0).seq.close();
                }
                rig.run(50);
            }
            for (Live l : decoding) {
                check(arena, dc, l.seq, l.tags, "final " + l.id);
                l.seq.close();
            }
            rig.run(500);
            for (IncomingTransfer t : aborted) {
                assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            }
            // every path of the loop ran: a loop that skipped them would prove nothing about them
            final ReceiverMetrics m = rig.receiver.metrics();
            assertTrue(m.committed() > 0 && m.failures(FailureReason.REJECTED) > 0 && m.failures(FailureReason.ABORTED) > 0
                && m.failures(FailureReason.SENDER_ABORTED) > 0, m::toString);
            assertTrue(forks > 0, "no beam was forked");
            assertTrue(attached > 0, "no prefix was attached from the cache");
            assertTrue(abortedBeforeOffer > 0, "no request was aborted before its offer");
            assertTrue(rollbacks > 0, "no speculative rollback ran");
            assertTrue(abortedMidDecode > 0, "no request was aborted mid-decode");
            assertTrue(stepsRun > 0, "no appendEach step ran");
            assertEquals(0, rig.receiver.activeTransfers());
            assertEquals(0, rig.sender.activeTransfers(), () -> rig.sender.openTransfers().toString());
            // the sender's counts balance: every offer completed or failed for a reason, once
            final SenderMetrics sm = rig.sender.metrics();
            long senderFailed = 0;
            for (FailureReason r : FailureReason.values()) {
                senderFailed += sm.failures(r);
            }
            assertEquals(sm.offered(), sm.completed() + senderFailed, sm::toString);
            assertTrue(sm.completed() > 0 && senderFailed > 0, sm::toString);
            final PoolSnapshot ps = prefill.verifyAccounting(), ds = decode.verifyAccounting();
            assertTrue(ps.balanced() && ds.balanced());
            // prefill keeps published pages cached (FREE), which is allowed
            assertTrue(ps.idle(), ps::toString);
            assertTrue(ds.idle(), ds::toString);
        }
    }

    /** @return the appendEach steps that appended to at least one sequence */
    static int decodeSteps(Arena arena, KvCopy dc, KvPool decode, List<Live> decoding, int steps) {
        int ran = 0;
        for (int s = 0; s < steps; s++) {
            final List<Live> batch = new ArrayList<>();
            for (Live l : decoding) {
                if (l.seq.tokenCount() + 1 <= l.seq.admittedTokens()) {
                    batch.add(l);
                }
            }
            final Sequence[] seqs = batch.stream().map(l -> l.seq).toArray(Sequence[]::new);
            final int got = decode.appendEach(seqs, seqs.length, 1);
            if (got < 0) {
                continue;
            }
            if (!batch.isEmpty()) {
                ran++;
            }
            for (Live l : batch) {
                final int t = l.seq.tokenCount() - 1;
                dc.copyIn(l.seq, t, 1, kvRun(arena, l.id, t, 1), 0);
                l.tags[t] = l.id;
            }
            for (Live l : batch) {
                check(arena, dc, l.seq, l.tags, "decode " + l.id);
            }
        }
        return ran;
    }
}
