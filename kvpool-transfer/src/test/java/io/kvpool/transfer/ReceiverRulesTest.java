package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.SlotState;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireFormat;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Each rule of the receiver's side of the protocol, driven step by step through {@link ScriptedLink}s
 * standing in for the senders.
 */
class ReceiverRulesTest extends TwoSenderReceiverFixture {

    static final long REQ = 7;
    /** The one-sided writes of a sender: request REQ's KV into the registered slots, pages [from, to). */
    static int[] deliver(KvPool pool, ScriptedLink link, int registration, int firstPage, int tokens) {
        return deliver(pool.storage(), link, registration, firstPage, tokens);
    }

    /** {@link #deliver(KvPool, ScriptedLink, int, int, int)} into the pages of a host-accessible storage. */
    static int[] deliver(io.kvpool.storage.PageStorage storage, ScriptedLink link, int registration, int firstPage, int tokens) {
        final int[] slots = link.registrations.get(registration).slots;
        final int tpp = Kv.LAYOUT.tokensPerPage();
        final int[] checksums = new int[slots.length];
        for (int i = 0; i < slots.length; i++) {
            final MemorySegment page = storage.hostPage(slots[i]);
            final int p = firstPage + i;
            for (int t = p * tpp; t < Math.min(tokens, (p + 1) * tpp); t++) {
                for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final long off = Kv.LAYOUT.offset(layer, kv, t % tpp);
                        page.set(Kv.LONG, off, REQ);
                        page.set(Kv.LONG, off + 8, Kv.position(layer, kv, t));
                    }
                }
            }
            checksums[i] = p * tpp < tokens ? KvChecksum.of(Kv.LAYOUT, page, REQ, p, tokens) : 0;
        }
        return checksums;
    }

    Message.Completion completion(IncomingTransfer t, int rank, int tokens, int firstPage, int[] cs) {
        return new Message.Completion(t.transferId(), t.generation(), rank, tokens, firstPage, cs, cs.length, cs.length, 0);
    }

    List<SlotState> states(IncomingTransfer t, Message.Descriptor d) {
        return java.util.Arrays.stream(d.pageHandles()).mapToObj(h -> pool.stateOfSlot(PageHandle.slot(h))).toList();
    }

    /** A receiver of {@code pool} with the heartbeat off and a clock that stands still: a silent peer stays in its handshake. */
    static TransferReceiver quietReceiver(KvPool pool) {
        return TransferReceiver.builder(pool, Kv.identity()).heartbeat(Heartbeat.OFF).clock(new ManualClock()).build();
    }

    IncomingTransfer startOne(int tokens) {
        final IncomingTransfer t = rx.start(REQ, tokens, 0, pa);
        assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
        return t;
    }

    @Test
    void aRejectionSaysWhetherTheSameRequestCanBeReceivedLater() {
        final int tpp = Kv.LAYOUT.tokensPerPage();
        final IncomingTransfer first = startOne(20 * tpp); // 20 of the pool's 32 pages
        assertFalse(first.retryLater(), "not rejected");
        final IncomingTransfer sameId = rx.start(REQ, tpp, 0, pb);
        assertEquals(FailureReason.REJECTED, sameId.failure(), sameId::toString);
        assertTrue(sameId.retryLater(), () -> "the first transfer of the id ends: " + sameId);
        final IncomingTransfer full = rx.start(REQ + 1, 20 * tpp, 0, pb);
        assertEquals(io.kvpool.Admission.Decision.RETRY_LATER, full.admissionDecision(), full::toString);
        assertTrue(full.retryLater(), () -> "fits the pool, not now: " + full);
        assertTrue(full.message().startsWith("request " + (REQ + 1) + " refused by admission (RETRY_LATER): "), full::message);
        final IncomingTransfer tooLong = rx.start(REQ + 2, (int) pool.maxContextTokens() + 1, 0, pb);
        assertEquals(io.kvpool.Admission.Decision.REJECTED_CONTEXT_TOO_LONG, tooLong.admissionDecision(), tooLong::toString);
        assertFalse(tooLong.retryLater(), () -> "never fits: " + tooLong);
    }

    @Test
    void aRequestThatNeverFitsIsNotRetryableWhileATransientRefusalAlsoApplies() {
        setUp(x -> x.maxTransfers(1));
        final int tpp = Kv.LAYOUT.tokensPerPage();
        final IncomingTransfer busy = startOne(tpp); // takes the only transfer slot
        final long reservedBefore = pool.snapshot().reserved();
        final IncomingTransfer tooLong = rx.start(REQ + 1, (int) pool.maxContextTokens() + 1, 0, pb);
        assertEquals(io.kvpool.Admission.Decision.REJECTED_CONTEXT_TOO_LONG, tooLong.admissionDecision(), tooLong::toString);
        assertFalse(tooLong.retryLater(), () -> "never fits, whatever the slots: " + tooLong);
        final int overDescriptor = (WireFormat.MAX_ARRAY + 1) * tpp;
        final IncomingTransfer sameId = rx.start(REQ, overDescriptor, 0, pb); // the id is receiving, too
        assertFalse(sameId.retryLater(), () -> "more pages than one descriptor carries: " + sameId);
        try (io.kvpool.Admission small = pool.admit(tpp, 0)) {
            final IncomingTransfer cut = rx.start(REQ + 2, small.sequence(), 2 * tpp, pb);
            assertFalse(cut.retryLater(), () -> "admitted for fewer tokens than its prompt: " + cut);
        }
        final IncomingTransfer fits = rx.start(REQ + 3, tpp, 0, pb);
        assertEquals(io.kvpool.Admission.Decision.ADMITTED, fits.admissionDecision(), fits::toString);
        assertTrue(fits.retryLater(), () -> "admitted, only the slot is short: " + fits);
        assertTrue(fits.message().contains("slots are busy"), fits::message);
        assertEquals(reservedBefore, pool.snapshot().reserved(), "the refused start gave its reservation back");
        assertEquals(IncomingTransfer.State.RECEIVING, busy.state(), busy::toString);
    }

    @Test
    void aTooLongRequestOnALinkStillInItsHandshakeIsNotRetryable() {
        try (KvPool other = Kv.pool(16)) {
            final TransferReceiver receiver = quietReceiver(other);
            final int p = receiver.addPeer(new ScriptedLink()); // says nothing: stays in its handshake
            receiver.doWork();
            final IncomingTransfer t = receiver.start(REQ, (int) other.maxContextTokens() + 1, 0, p);
            assertFalse(t.retryLater(), () -> "never fits, whatever the handshake: " + t);
            assertTrue(other.snapshot().idle(), () -> "nothing held: " + other.snapshot());
            final IncomingTransfer fits = receiver.start(REQ + 1, 8, 0, p);
            assertTrue(fits.retryLater(), () -> "the handshake ends: " + fits);
            assertEquals(0, other.snapshot().reserved(), "the refused start gave its reservation back");
            receiver.close();
        }
    }

    @Test
    void aStartOnALinkStillInItsHandshakeCanBeRetriedAndOneOnAFailedLinkCannot() {
        try (KvPool other = Kv.pool(16)) {
            final TransferReceiver receiver = quietReceiver(other);
            final int p = receiver.addPeer(new ScriptedLink()); // says nothing: stays in its handshake
            receiver.doWork();
            final IncomingTransfer early = receiver.start(REQ, 8, 0, p);
            assertEquals(FailureReason.PEER_LOST, early.failure(), early::toString);
            assertTrue(early.retryLater(), () -> "the handshake ends: " + early);
            assertTrue(early.message().contains("handshake") && early.message().contains("doWork()"), early::message);
            final int q = receiver.addPeer(new ScriptedLink()); // a second sender, torn down below
            receiver.doWork();
            receiver.tearDownPeer(q);
            for (int[] senders : new int[][] {{p, q}, {q, p}}) { // the answer does not depend on the senders' order
                final IncomingTransfer mixed = receiver.start(REQ + 1, 8, 0, senders);
                assertEquals(FailureReason.PEER_LOST, mixed.failure(), mixed::toString);
                assertFalse(mixed.retryLater(), () -> "one of its links never comes back: " + mixed);
            }
            final ScriptedLink dying = new ScriptedLink();
            final int d = receiver.addPeer(dying);
            receiver.doWork();
            dying.failLink("test: the peer died in its handshake"); // failed, and not yet polled: still HANDSHAKE
            assertEquals(Peer.State.HANDSHAKE, receiver.peer(d).state());
            final IncomingTransfer died = receiver.start(REQ + 3, 8, 0, d);
            assertFalse(died.retryLater(), () -> "its link failed, whatever the peer's state says: " + died);
            receiver.tearDownPeer(p);
            final IncomingTransfer late = receiver.start(REQ + 2, 8, 0, p);
            assertEquals(FailureReason.PEER_LOST, late.failure(), late::toString);
            assertFalse(late.retryLater(), () -> "this link never comes back: " + late);
            receiver.close();
        }
    }

    @Test
    void aSenderAbortForAFailedWriteSaysTheRequestCanBeReceivedLater() {
        final IncomingTransfer written = startOne(8);
        a.inject(new Message.Abort(written.transferId(), written.generation(), Message.Abort.WRITE_FAILED, "write of page 0 failed"));
        rx.doWork();
        assertEquals(FailureReason.SENDER_ABORTED, written.failure(), written::toString);
        assertTrue(written.retryLater(), () -> "the link's fault, not the request's: " + written);
        final IncomingTransfer other = rx.start(REQ + 1, 8, 0, pa);
        a.inject(new Message.Abort(other.transferId(), other.generation(), Message.Abort.SENDER_FAILED, "could not compute the checksums"));
        rx.doWork();
        assertEquals(FailureReason.SENDER_ABORTED, other.failure(), other::toString);
        assertFalse(other.retryLater(), () -> "the same cause again: " + other);
    }

    @Test
    void tearDownPeerTakesAnyLivePeerDownNamingTheApplication() {
        rx.tearDownPeer(pa); // UP
        assertEquals(Peer.State.FAILED, rx.peer(pa).state());
        assertEquals("torn down by the application (tearDownPeer)", rx.peer(pa).failure());
        try (KvPool other = Kv.pool(16)) { // a peer still in its handshake, nothing watching it
            final TransferReceiver receiver = TransferReceiver.builder(other, Kv.identity()).heartbeat(Heartbeat.OFF)
                .clock(new ManualClock()).build();
            final int p = receiver.addPeer(new ScriptedLink());
            receiver.doWork();
            assertEquals(Peer.State.HANDSHAKE, receiver.peer(p).state());
            receiver.tearDownPeer(p);
            receiver.doWork();
            assertEquals(Peer.State.FAILED, receiver.peer(p).state(), receiver.peer(p)::toString);
            assertEquals(0, receiver.polledPeers(), "a torn-down peer is polled no more");
            receiver.close();
        }
    }

    @Test
    void aChecksumThatFailsOnThisSideEndsTheTransferAndKeepsTheLinkUp() {
        final boolean[] broken = {false}, mapped = {false};
        setUp(x -> x.checksums(new PageChecksums() {
            @Override
            public boolean supports(io.kvpool.storage.PageStorage storage) {
                return true;
            }

            @Override
            public void compute(KvPool pool, long[] handles, int from, int to, long requestId, int tokenCount, int[] out) {
                if (mapped[0]) {
                    throw new InternalError("a fault occurred in an unsafe memory access operation");
                }
                if (broken[0]) {
                    throw new IllegalStateException("checksum kernel failed");
                }
                PageChecksums.HOST.compute(pool, handles, from, to, requestId, tokenCount, out);
            }
        }));
        final IncomingTransfer t = startOne(10);
        final IncomingTransfer other = rx.start(REQ + 1, 10, 0, pa); // in flight on the same link
        broken[0] = true;
        a.inject(completion(t, 0, 10, 0, deliver(pool, a, 0, 0, 10)));
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state(), () -> t + ": every write was confirmed over");
        assertEquals(FailureReason.ABORTED, t.failure());
        assertTrue(t.message().contains("could not verify the received pages") && t.message().contains("checksum kernel failed"),
            t::message);
        assertTrue(rx.peer(pa).isUp(), () -> "a fault of this side took the sender's link down: " + rx.peer(pa));
        assertEquals(IncomingTransfer.State.RECEIVING, other.state(), () -> other + ": not collateral damage");
        assertEquals(3, pool.snapshot().receiving(), "the failed transfer's pages went back; the other's are held");
        assertEquals(0, pool.snapshot().draining() + pool.snapshot().quarantined() + pool.snapshot().owned());
        // a fault in mapped memory (a peer truncated a shared pool file) is reported as an InternalError: the same
        mapped[0] = true;
        a.inject(completion(other, 0, 10, 0, deliver(pool, a, 1, 0, 10)));
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, other.state(), other::toString);
        assertTrue(other.message().contains("a fault occurred"), other::message);
        assertTrue(rx.peer(pa).isUp(), () -> rx.peer(pa).toString());
    }

    @Test
    void aSendersAbortOfAnEndedTransferIsNotCountedAsAnIgnoredAck() {
        final IncomingTransfer t = startOne(10);
        a.inject(completion(t, 0, 10, 0, deliver(pool, a, 0, 0, 10)));
        rx.doWork();
        assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
        t.sequence().close();
        final ReceiverMetrics m = rx.metrics();
        final long[] before = {m.ackLate(), m.ackStaleGeneration(), m.ackBeforeRegistration(), m.ackWrongPeer()};
        a.inject(new Message.Abort(t.transferId(), t.generation(), Message.Abort.SENDER_FAILED, "late")); // the slot is free again
        a.inject(new Message.Abort(t.transferId(), t.generation() + 5, Message.Abort.SENDER_FAILED, "never seen"));
        rx.doWork();
        assertArrayEquals(before, new long[] {m.ackLate(), m.ackStaleGeneration(), m.ackBeforeRegistration(), m.ackWrongPeer()},
            "an ABORT is not an acknowledgement");
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 3, 0)); // the control: an ack is counted
        rx.doWork();
        assertEquals(before[0] + 1, m.ackLate());
        assertTrue(rx.peer(pa).isUp());
    }

    @Test
    void aValidCompletionCommitsAndThePagesBecomeTheCallers() {
        final IncomingTransfer t = startOne(10);
        final Message.Descriptor d = a.sent(Message.Descriptor.class).getFirst();
        assertEquals(10, d.expectedTokens());
        assertEquals(3, d.pageHandles().length);
        assertEquals(List.of(SlotState.RECEIVING, SlotState.RECEIVING, SlotState.RECEIVING), states(t, d));
        a.inject(completion(t, 0, 10, 0, deliver(pool, a, 0, 0, 10)));
        rx.doWork();
        assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
        assertEquals(List.of(SlotState.OWNED, SlotState.OWNED, SlotState.OWNED), states(t, d));
        assertTrue(a.registrations.getFirst().closed);
        try (var seq = t.sequence()) {
            assertEquals(Kv.Finding.OK, Kv.check(seq, REQ, 10));
        }
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void admissionRejectsBeforeAnyHandoff() {
        final var before = pool.snapshot();
        final IncomingTransfer t = rx.start(REQ, 32 * 4 + 1, 0, pa);
        assertEquals(IncomingTransfer.State.REJECTED, t.state());
        assertEquals(FailureReason.REJECTED, t.failure());
        assertEquals(io.kvpool.Admission.Decision.REJECTED_CONTEXT_TOO_LONG, t.admissionDecision());
        assertTrue(t.message().contains("129"), t.message());
        assertTrue(a.sent(Message.Descriptor.class).isEmpty(), "no descriptor may leave for a rejected request");
        assertEquals(before.free(), pool.snapshot().free());
    }

    @Test
    void aPlaceholderCompletionNeverCommits() {
        final IncomingTransfer t = startOne(10);
        final int[] cs = deliver(pool, a, 0, 0, 1); // the one-token stub: page 0, one token
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 1, 0, new int[] {cs[0]}, 1, 1, 0));
        rx.doWork();
        assertEquals(FailureReason.LENGTH_MISMATCH, t.failure(), t::toString);
        assertTrue(t.message().contains("1 tokens, expected 10"), t.message());
        // the completion proved the sender's writes are over: drained at once, pages FREE, never decoded
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(ReceiverMetrics.Outcome.DRAINED, t.outcome());
        assertThrows(IllegalStateException.class, t::sequence);
        assertTrue(pool.verifyAccounting().balanced());
        assertEquals(0, pool.snapshot().owned());
    }

    @Test
    void aChecksumMismatchFailsNamingThePage() {
        final IncomingTransfer t = startOne(10);
        final int[] cs = deliver(pool, a, 0, 0, 10);
        final int slot1 = a.registrations.getFirst().slots[1];
        final MemorySegment p1 = pool.storage().hostPage(slot1);
        p1.set(java.lang.foreign.ValueLayout.JAVA_BYTE, 17, (byte) (p1.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 17) ^ 1));
        a.inject(completion(t, 0, 10, 0, cs));
        rx.doWork();
        assertEquals(FailureReason.CHECKSUM_MISMATCH, t.failure(), t::toString);
        assertTrue(t.message().startsWith("page 1 of 3"), t.message());
    }

    @Test
    void aPageStillHoldingTheCanaryFails() {
        final IncomingTransfer t = startOne(10);
        final int[] cs = deliver(pool, a, 0, 0, 10);
        pool.storage().fill(a.registrations.getFirst().slots[2], io.kvpool.storage.FillMode.CANARY); // page 2 never landed
        a.inject(completion(t, 0, 10, 0, cs));
        rx.doWork();
        assertEquals(FailureReason.CANARY, t.failure(), t::toString);
        assertTrue(t.message().contains("token 8 of 10"), t.message());
    }

    @Test
    void completionsWithoutChecksumsOrWithFailedWritesAreRefused() {
        IncomingTransfer t = startOne(10);
        deliver(pool, a, 0, 0, 10);
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 10, 0, null, 3, 3, 0));
        rx.doWork();
        assertEquals(FailureReason.BAD_COMPLETION, t.failure());
        t = startOne(10);
        final int[] cs = deliver(pool, a, 1, 0, 10);
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 10, 0, cs, 3, 2, 1));
        rx.doWork();
        assertEquals(FailureReason.BAD_COMPLETION, t.failure());
        assertTrue(t.message().contains("1 failed of 3"), t.message());
    }

    @Test
    void aTimeoutNamesTheSendersWhoseCompletionDidNotCome() {
        final IncomingTransfer t = rx.start(REQ, 16, 0, pa, pb);
        a.inject(completion(t, 0, 16, 0, deliver(pool, a, 0, 0, 16)));
        rx.doWork();
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(FailureReason.TIMEOUT, t.failure(), t::toString);
        assertTrue(t.message().contains("sender 1 (peer " + pb + ") of 2") && t.message().contains("100 ms"), t::message);
    }

    @Test
    void aMissingChecksumFailureNamesTheSenderThatSentNone() {
        final IncomingTransfer t = rx.start(REQ, 16, 0, pa, pb);
        a.inject(completion(t, 0, 16, 0, deliver(pool, a, 0, 0, 16)));
        deliver(pool, b, 0, 2, 16);
        b.inject(new Message.Completion(t.transferId(), t.generation(), 1, 16, 2, null, 2, 2, 0));
        rx.doWork();
        assertEquals(FailureReason.BAD_COMPLETION, t.failure(), t::toString);
        assertTrue(t.message().contains("sender 1 sent no checksums for its 2 pages"), t::message);
    }

    @Test
    void aSenderThatCoveredAnotherShareThanItsOwnIsNeverCommitted() {
        // checksums off (they are keyed by position and would catch it too): only the share check sees rank 1 write pages
        // 0 and 1's KV into its share, pages 2 and 3, and say so in its completion's first page
        setUp(x -> x.checksums(false));
        final IncomingTransfer t = rx.start(REQ, 16, 0, pa, pb);
        deliver(pool, a, 0, 0, 16);
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 16, 0, null, 2, 2, 0));
        deliver(pool, b, 0, 0, 16); // rank 1 writes as if its share began at page 0
        b.inject(new Message.Completion(t.transferId(), t.generation(), 1, 16, 0, null, 2, 2, 0));
        rx.doWork();
        assertNotEquals(IncomingTransfer.State.COMMITTED, t.state(), () -> "committed, and decode reads "
            + io.kvpool.transfer.testkit.Kv.check(t.sequence(), REQ, 16) + " KV at tokens 8 to 15: " + t);
        assertEquals(FailureReason.BAD_COMPLETION, t.failure(), t::toString);
        assertTrue(t.message().contains("sender 1 covered pages from 0, its share is [2, 4)"), t::message);
    }

    @Test
    void anAckBeforeRegistrationIsIgnoredAndCounted() {
        a.inject(new Message.Drained(0, 1, 0, 0, 0, 0)); // slot 0 was never registered
        rx.doWork();
        assertEquals(1, rx.metrics().ackBeforeRegistration());
        final IncomingTransfer t = startOne(10);
        a.inject(new Message.Drained(t.transferId(), t.generation() + 1, 0, 0, 0, 0)); // a generation not registered yet
        rx.doWork();
        assertEquals(2, rx.metrics().ackBeforeRegistration());
        assertEquals(IncomingTransfer.State.RECEIVING, t.state());
        rx.abort(t, "test");
        rx.doWork();
        assertEquals(IncomingTransfer.State.DRAINING, t.state(), "an early ack must not have counted");
    }

    @Test
    void aRepeatedDrainedForEveryRankOfALinkIsCountedAsADuplicate() {
        // DRAINED with rank −1 ("nothing of mine in flight") confirms every rank the link holds; its repeat confirms
        // none and is counted, as every ignored acknowledgement is
        final IncomingTransfer t = rx.start(REQ, 10, 0, pa, pb);
        rx.abort(t, "router abort");
        a.inject(new Message.Drained(t.transferId(), t.generation(), -1, 0, 0, 0));
        rx.doWork();
        assertEquals(0, rx.metrics().ackDuplicate());
        a.inject(new Message.Drained(t.transferId(), t.generation(), -1, 0, 0, 0));
        rx.doWork();
        assertEquals(1, rx.metrics().ackDuplicate());
        assertEquals(IncomingTransfer.State.DRAINING, t.state(), "rank 1 has not confirmed");
    }

    @Test
    void theSameSenderAckingTwiceCountsOnce() {
        final IncomingTransfer t = rx.start(REQ, 10, 0, pa, pb);
        assertEquals(IncomingTransfer.State.RECEIVING, t.state());
        rx.abort(t, "router abort");
        assertEquals(IncomingTransfer.State.DRAINING, t.state());
        assertEquals(1, a.sent(Message.Abort.class).size());
        assertEquals(1, b.sent(Message.Abort.class).size());
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 2, 2, 0));
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 2, 2, 0));
        rx.doWork();
        assertEquals(1, rx.metrics().ackDuplicate());
        assertEquals(IncomingTransfer.State.DRAINING, t.state(), "rank 1 has not confirmed: two acks from rank 0 are not two senders");
        final Message.Descriptor d = a.sent(Message.Descriptor.class).getFirst();
        assertTrue(states(t, d).stream().allMatch(s -> s == SlotState.DRAINING), () -> states(t, d).toString());
        b.inject(new Message.Drained(t.transferId(), t.generation(), 1, 1, 1, 0));
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(ReceiverMetrics.Outcome.DRAINED, t.outcome());
        assertEquals(1, rx.metrics().deferredRelease(ReceiverMetrics.Outcome.DRAINED));
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void anAckFromAnotherLinkOrWithBadCountsIsIgnored() {
        final IncomingTransfer t = rx.start(REQ, 10, 0, pa, pb);
        rx.abort(t, "x");
        b.inject(new Message.Drained(t.transferId(), t.generation(), 0, 0, 0, 0)); // rank 0 is a's
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 5, 3, 1)); // 3 + 1 ≠ 5
        rx.doWork();
        assertEquals(1, rx.metrics().ackWrongPeer());
        assertEquals(1, rx.metrics().ackInconsistent());
        assertEquals(IncomingTransfer.State.DRAINING, t.state());
    }

    @Test
    void aStaleGenerationAckNeverReleasesTheSlotsNextTenant() {
        setUp(x -> x.maxTransfers(1));
        final IncomingTransfer first = startOne(10);
        rx.abort(first, "x");
        a.inject(new Message.Drained(first.transferId(), first.generation(), 0, 0, 0, 0));
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, first.state());
        final IncomingTransfer second = startOne(10);
        assertEquals(first.transferId(), second.transferId(), "one slot: reused");
        assertEquals(first.generation() + 1, second.generation());
        rx.abort(second, "y");
        // the first tenant's ack, duplicated or delayed, arrives now
        a.inject(new Message.Drained(first.transferId(), first.generation(), 0, 0, 0, 0));
        a.inject(new Message.Completion(first.transferId(), first.generation(), 0, 10, 0, new int[3], 3, 3, 0));
        rx.doWork();
        assertEquals(2, rx.metrics().ackStaleGeneration());
        assertEquals(IncomingTransfer.State.DRAINING, second.state(), "a previous generation's ack released the next tenant");
    }

    @Test
    void aFailedTransferHoldsItsPagesUntilDrained() {
        final IncomingTransfer t = startOne(10);
        final Message.Descriptor d = a.sent(Message.Descriptor.class).getFirst();
        rx.abort(t, "x");
        clock.advanceMillis(50);
        rx.doWork();
        assertEquals(IncomingTransfer.State.DRAINING, t.state());
        assertEquals(3, rx.metrics().heldPages());
        assertTrue(states(t, d).stream().allMatch(s -> s == SlotState.DRAINING));
        assertEquals(29, pool.snapshot().free(), "held pages are not free");
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 3, 0));
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(0, rx.metrics().heldPages());
        assertEquals(32, pool.snapshot().free());
        assertEquals(50_000_000L, rx.metrics().holdNanosMax());
    }

    @Test
    void withoutTheDrainWaitAFailedTransfersPagesAreFreedWhileWritesMayBeInFlight() {
        setUp(x -> x.unsafeDisable(TransferSafeguard.DRAIN_WAIT));
        final IncomingTransfer t = startOne(10);
        rx.abort(t, "x");
        assertEquals(IncomingTransfer.State.RELEASED, t.state(), "the switch must remove the wait, or the hunter's control proves nothing");
        assertEquals(32, pool.snapshot().free());
    }

    @Test
    void aTimeoutQuarantinesAndOnlyTheTransportsProofReleases() {
        final IncomingTransfer t = startOne(10);
        final Message.Descriptor d = a.sent(Message.Descriptor.class).getFirst();
        assertEquals(1, rx.transfersUnderWay());
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(FailureReason.TIMEOUT, t.failure());
        assertEquals(IncomingTransfer.State.DRAINING, t.state());
        assertEquals(1, a.sent(Message.Abort.class).size(), "the sender is told to stop");
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(1, rx.activeTransfers());
        assertEquals(0, rx.transfersUnderWay(), "a quarantine is not under way: it holds no transfer slot");
        assertEquals(1, rx.metrics().deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
        assertTrue(states(t, d).stream().allMatch(s -> s == SlotState.QUARANTINED));
        assertTrue(a.tearDowns > 0, "a peer that did not drain in time is torn down");
        // the transport cannot prove it yet (e.g. the peer process still exists): an hour changes nothing
        for (int i = 0; i < 60; i++) {
            clock.advanceMillis(60_000);
            rx.doWork();
        }
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 3, 0)); // too late to count
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(3, rx.metrics().quarantinedPages());
        assertEquals(29, pool.snapshot().free());
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(1, rx.metrics().quarantineReleases());
        assertEquals(0, rx.metrics().quarantinedPages());
        assertEquals(32, pool.snapshot().free());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void aRevocableRegistrationEndsTheQuarantineWithoutTearingThePeerDown() {
        setUp(x -> x.tearDownOnTimeout(false));
        a.revocable = true;
        final IncomingTransfer t = startOne(10);
        clock.advanceMillis(100);
        rx.doWork();
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(ReceiverMetrics.Outcome.TIMEOUT, t.outcome());
        assertEquals(0, a.tearDowns);
        assertTrue(rx.peer(pa).isUp());
    }

    @Test
    void withoutQuarantineATimeoutFreesThePagesOnTheTimerAlone() {
        setUp(x -> x.unsafeDisable(TransferSafeguard.QUARANTINE_ON_TIMEOUT));
        final IncomingTransfer t = startOne(10);
        clock.advanceMillis(100);
        rx.doWork();
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(32, pool.snapshot().free());
    }

    @Test
    void aLostSenderQuarantinesAtOnceUntilTheTeardownIsProven() {
        final IncomingTransfer t = startOne(10);
        a.failLink("connection reset");
        rx.doWork();
        assertEquals(FailureReason.PEER_LOST, t.failure());
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome());
        assertEquals(1, rx.metrics().deferredRelease(ReceiverMetrics.Outcome.ERROR));
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void quarantinesWaitingForAPeersTeardownAskTheTransportAtMostEvery10ms() {
        final IncomingTransfer t = startOne(10);
        final IncomingTransfer u = rx.start(REQ + 1, 10, 0, pa);
        a.failLink("connection reset"); // both quarantined behind one peer whose process lives on
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(IncomingTransfer.State.QUARANTINED, u.state());
        final int before = a.tearDowns;
        for (int i = 0; i < 10_000; i++) { // 10 ms of a busy duty cycle, one cycle a microsecond
            clock.now += 1_000;
            rx.doWork();
        }
        // a shared-memory proof reads every thread of the peer process from /proc: not once per cycle and transfer
        assertTrue(a.tearDowns - before <= 2, (a.tearDowns - before) + " teardown questions in 10 ms for one peer");
        a.tearDownProves = true;
        clock.advanceMillis(10);
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(IncomingTransfer.State.RELEASED, u.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void quarantinesWaitingForALiveSenderDoNotTakeTheSlotsOfNewTransfers() {
        setUp(x -> x.maxTransfers(1));
        final IncomingTransfer stuck = startOne(10);
        a.failLink("connection reset"); // over shared memory: proven only once the sender process exits
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, stuck.state());
        clock.advanceMillis(3_600_000); // an hour later the sender process still lives
        rx.doWork();
        final IncomingTransfer next = rx.start(REQ + 1, 10, 0, pb);
        assertEquals(IncomingTransfer.State.RECEIVING, next.state(), "a quarantine held the only slot: " + next);
        assertTrue(next.transferId() != stuck.transferId() || next.generation() != stuck.generation());
        final IncomingTransfer third = rx.start(REQ + 2, 10, 0, pb); // the limit still holds for transfers under way
        assertEquals(FailureReason.REJECTED, third.failure(), third::toString);
        assertTrue(third.message().contains("all 1 transfer slots are busy"), third::message);
        assertTrue(third.retryLater(), third::toString);
        a.tearDownProves = true;
        clock.advanceMillis(10);
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, stuck.state());
        rx.abort(next, "done");
        b.inject(new Message.Drained(next.transferId(), next.generation(), 0, 0, 0, 0));
        rx.doWork();
        assertEquals(0, rx.activeTransfers());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void aSenderThatStopsOnItsOwnFailsTheTransferAndItsDrainedCounts() {
        final IncomingTransfer t = startOne(10);
        a.inject(new Message.Abort(t.transferId(), t.generation(), Message.Abort.SENDER_FAILED, "flush failed"));
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 3, 0));
        rx.doWork();
        assertEquals(FailureReason.SENDER_ABORTED, t.failure());
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void aDrainedWithUnprovenWritesIsNoProofAndQuarantines() {
        // one write failed: a failed one-sided write may still land (docs/dependencies.md, "UCX from Java"); only the transport can prove it won't
        final IncomingTransfer t = startOne(10);
        a.inject(new Message.Abort(t.transferId(), t.generation(), Message.Abort.SENDER_FAILED, "write failed"));
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 2, 1));
        rx.doWork();
        assertEquals(FailureReason.SENDER_ABORTED, t.failure());
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome());
        assertEquals(29, pool.snapshot().free());
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void anUnprovenDrainedFromTheSuspectOfAQuarantineIsCountedLate() {
        setUp(x -> x.tearDownOnTimeout(false)); // the suspect's link stays up, so it can send again
        final IncomingTransfer t = startOne(10);
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 2, 1)); // rank 0: a write unproven
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        final long late = rx.metrics().ackLate();
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 2, 1, 1)); // again, from the suspect
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(late + 1, rx.metrics().ackLate(), "every ignored acknowledgement is counted: " + rx.metrics());
    }

    @Test
    void aProvenDrainedFromTheSuspectOfAQuarantineIsNoProofEither() {
        // the suspect said a write may still land; a later DRAINED claiming every write delivered cannot take that back:
        // only the transport's proof (a revocation, a proven teardown) frees the pages that write may land in
        setUp(x -> x.tearDownOnTimeout(false)); // the suspect's link stays up, so it can send again
        final IncomingTransfer t = startOne(10);
        final Message.Descriptor d = a.sent(Message.Descriptor.class).getFirst();
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 2, 1)); // rank 0: a write unproven
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        final long late = rx.metrics().ackLate();
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 3, 0)); // the suspect now claims all delivered
        rx.doWork();
        assertEquals(List.of(SlotState.QUARANTINED, SlotState.QUARANTINED, SlotState.QUARANTINED), states(t, d),
            () -> "the suspect's DRAINED freed the pages its unproven write may still land in: " + t);
        assertEquals(29, pool.snapshot().free(), "none of the three pages may reach another tenant");
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(late + 1, rx.metrics().ackLate(), "the suspect's DRAINED is counted late: " + rx.metrics());
        a.tearDownProves = true;
        assertTrue(rx.tearDownPeer(pa));
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(WriteProof.LINK_TORN_DOWN, t.writeProof(0), "the transport's proof, not the sender's word, released them");
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void metricsCountAnAbortedTransferAndTheDrainedThatReleasedItsPages() {
        final IncomingTransfer t = startOne(10);
        rx.abort(t, "x");
        assertEquals(3, rx.metrics().heldPages(), "10 tokens are 3 pages, held DRAINING");
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 0, 0, 0));
        rx.doWork();
        final ReceiverMetrics m = rx.metrics();
        assertEquals(1, m.started());
        assertEquals(0, m.committed());
        assertEquals(1, m.failures(FailureReason.ABORTED));
        assertEquals(0, m.failures(FailureReason.TIMEOUT));
        assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.DRAINED));
        assertEquals(0, m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
        assertEquals(0, m.heldPages(), "the drained pages are free again");
        assertEquals(1, m.holdsEnded());
        assertTrue(m.toString().contains("deferredRelease={DRAINED=1, TIMEOUT=0, ERROR=0}"), m::toString);
    }

    @Test
    void aSlotWhoseGenerationWouldWrapIsReplacedAndTransfersGoOn() {
        // one slot, three generations from the last: a wrapped generation would read as older than the sender's
        // record of that slot (a duplicate descriptor) and the transfer would time out
        try (SimPair p = new SimPair(new SimPair.Setup(Kv.pool(16), Kv.pool(16)).receiver(pool -> {
            final TransferReceiver.Builder b = TransferReceiver.builder(pool, Kv.identity()).maxTransfers(1);
            b.firstGenerationForTests = Integer.MAX_VALUE - 3;
            return b;
        }))) {
            for (long req = 1; req <= 6; req++) {
                final IncomingTransfer t = OneRequest.offerAndStart(p.sender, p.prefill, p.receiver, p.rp, req, 8);
                assertTrue(t.generation() > 0, t::toString);
                assertEquals(IncomingTransfer.State.COMMITTED, OneRequest.finish(t, () -> p.run(1), 2_000, req, 8), t::toString);
            }
            assertEquals(0, p.sender.metrics().duplicateDescriptors());
            assertEquals(16, p.decode.metrics().free(), "every page came back");
        }
    }

    @Test
    void aSenderThatClosesMidTransferFailsItAsPeerLostAndItsPagesDrainFree() {
        // a prefill process stopping under way is a lost peer (a retry can go elsewhere), not a failed send
        try (SimPair p = new SimPair(new SimPair.Setup(Kv.pool(16), Kv.pool(16)))) {
            final io.kvpool.Sequence src = p.prefill.admit(64, 0).sequence();
            src.append(64);
            Kv.write(src, 1);
            final OutgoingTransfer out = p.sender.offer(1, src);
            src.close();
            final IncomingTransfer t = p.receiver.start(1, 64, 0, p.rp);
            for (int i = 0; i < 200 && out.state() != OutgoingTransfer.State.WRITING && out.state() != OutgoingTransfer.State.FLUSHING; i++) {
                p.run(1);
            }
            assertTrue(out.state() == OutgoingTransfer.State.WRITING || out.state() == OutgoingTransfer.State.FLUSHING, out::toString);
            p.sender.close();
            for (int i = 0; i < 2_000 && (t.state() == IncomingTransfer.State.RECEIVING || t.state() == IncomingTransfer.State.DRAINING); i++) {
                p.run(1);
            }
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertTrue(t.message().contains("closing"), t.message());
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(16, p.decode.metrics().free(), "drained and freed, not quarantined");
            assertEquals(0, p.receiver.metrics().quarantinedPages());
        }
    }
}
