package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Regressions for what a read-only review of the protocol found (each test failed before its fix, with
 * the buggy behaviour named in its comment).
 */
class ProtocolReviewRegressionTest {
    static final long REQ = 11;

    static long[] offer(KvPool pool, TransferSender tx, long req, int tokens) {
        final Sequence s = pool.admit(tokens, 0).sequence();
        s.append(tokens);
        Kv.write(s, req);
        final long[] h = new long[s.pageCount()];
        for (int i = 0; i < h.length; i++) {
            h[i] = s.pageHandle(i);
        }
        tx.offer(req, s);
        s.close();
        return h;
    }

    static List<SlotState> states(KvPool pool, long[] h) {
        return Arrays.stream(h).mapToObj(x -> pool.stateOfSlot(PageHandle.slot(x))).toList();
    }

    static TransferSender sender(KvPool pool, ManualClock clock) {
        return TransferSender.builder(pool, Kv.identity()).clock(clock).maxPagesInFlight(4).drainDeadline(Duration.ofMillis(100)).build();
    }

    /** @return a link whose peer says HELLO with {@link Kv#identity()} */
    static ScriptedLink hello() {
        return new ScriptedLink().hello(Kv.identity());
    }

    /** A sender ({@link #sender}, a manual clock that no test here advances) with {@code link} added and its handshake done. */
    static TransferSender senderOn(KvPool pool, ScriptedLink link) {
        final TransferSender tx = sender(pool, new ManualClock());
        tx.addPeer(link);
        tx.doWork();
        return tx;
    }

    /** A receiver on {@code clock} whose completion and drain timeouts are both 30 s. */
    static TransferReceiver slowReceiver(KvPool pool, ManualClock clock) {
        return TransferReceiver.builder(pool, Kv.identity()).clock(clock)
            .completionTimeout(Duration.ofSeconds(30)).drainTimeout(Duration.ofSeconds(30)).build();
    }

    /** Adds each link as a peer of {@code rx}, runs the handshakes and starts request {@link #REQ} (8 tokens), link i as rank i. */
    static IncomingTransfer startOn(TransferReceiver rx, ScriptedLink... ranks) {
        final int[] peers = new int[ranks.length];
        for (int i = 0; i < ranks.length; i++) {
            peers[i] = rx.addPeer(ranks[i]);
        }
        rx.doWork();
        return rx.start(REQ, 8, 0, peers);
    }

    @Test
    void aDescriptorDuplicatedAfterTheEndChangesNothing() {
        // was: the late copy overwrote the record with "nothing posted" (a later ABORT got DRAINED(0, 0, 0)
        // though a write was unproven), and a re-offer of the request started writing into the old region
        final KvPool pool = Kv.pool(32);
        final ScriptedLink link = hello();
        final TransferSender tx = senderOn(pool, link);
        offer(pool, tx, REQ, 8);
        final Message.Descriptor d = new Message.Descriptor(REQ, 3, 9, 8, Kv.LAYOUT.fingerprint(), 1, 0, new long[2], new byte[1]);
        link.inject(d);
        tx.doWork();
        link.completeWrite(link.postedTokens.get(0), PeerLink.FAILED);
        link.completeWrite(link.postedTokens.get(1), PeerLink.OK);
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        final Message.Drained truth = new Message.Drained(3, 9, 0, 2, 1, 1);
        assertEquals(truth, link.sent(Message.Drained.class).getLast());
        link.inject(d); // the same descriptor again, late
        link.inject(new Message.Abort(3, 9, Message.Abort.RECEIVER_FAILED, "timeout"));
        tx.doWork();
        assertEquals(truth, link.sent(Message.Drained.class).getLast(), "an ABORT after the end must get the truth");
        assertEquals(1, tx.duplicateDescriptors());
        final int posted = link.postedTokens.size();
        offer(pool, tx, REQ, 8); // the application retries the request
        tx.doWork();
        assertEquals(posted, link.postedTokens.size(), "a retry must wait for a new descriptor, not reuse an ended one");
    }

    @Test
    void aCompletionWhoseSendFailsEndsTheTransferOnce() {
        // was: the failed send took the peer down re-entrantly, which finished the transfer; then the flush
        // handler finished it again: the link's user count dropped to 0 while another transfer still owed a
        // terminal state, so that link was never polled again and its source page stayed OWNED forever
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferSender tx = sender(pool, clock);
        final FlakyLink link = new FlakyLink().inject(new Message.Hello(Kv.identity()));
        final int pid = tx.addPeer(link);
        tx.doWork();
        final long[] src1 = offer(pool, tx, 1, 4);
        final long[] src2 = offer(pool, tx, 2, 4);
        final OutgoingTransfer t2 = tx.openTransfers().stream().filter(t -> t.requestId() == 2).findFirst().orElseThrow();
        link.inject(new Message.Descriptor(1, 0, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[] {0}));
        link.inject(new Message.Descriptor(2, 1, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[] {1}));
        tx.doWork();
        link.completeWrite(link.postedTokens.get(0), PeerLink.OK);
        tx.doWork();
        link.failSend = m -> m instanceof Message.Completion;
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(1, tx.completedTransfers());
        assertEquals(List.of(SlotState.FREE), states(pool, src1));
        assertEquals(1, tx.peer(pid).users, "transfer 2 still owes its write's terminal state");
        link.completeWrite(link.postedTokens.get(1), PeerLink.CANCELED);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.DRAINED, t2.state());
        assertEquals(List.of(SlotState.FREE), states(pool, src2));
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void closingASenderWithAFlushPendingReleasesItsSources() {
        // was: close() stopped all work, so a transfer waiting for its flush's answer kept its sources forever
        final KvPool pool = Kv.pool(32);
        final ScriptedLink link = hello();
        final TransferSender tx = senderOn(pool, link);
        final long[] src = offer(pool, tx, REQ, 4);
        link.inject(new Message.Descriptor(REQ, 0, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[1]));
        tx.doWork();
        link.completeWrite(link.postedTokens.getFirst(), PeerLink.OK);
        tx.doWork();
        final OutgoingTransfer t = tx.openTransfers().getFirst();
        assertEquals(OutgoingTransfer.State.FLUSHING, t.state());
        tx.close();
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), "a closed link proves nothing: unproven, and over");
        assertEquals(List.of(SlotState.FREE), states(pool, src));
        assertEquals(0, tx.activeTransfers());
    }

    @Test
    void aQuarantineDoesNotTearDownAHealthyCoSender() {
        // was: rank 0's unproven DRAINED tore down rank 1's healthy link at once, and rank 1's proof was ignored
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = slowReceiver(pool, clock);
        final ScriptedLink a = hello();
        final ScriptedLink b = hello();
        final int pa = rx.addPeer(a);
        final int pb = rx.addPeer(b);
        rx.doWork();
        final IncomingTransfer t = rx.start(REQ, 8, 0, pa, pb);
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 1, 0, 1)); // rank 0: one unproven write
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(0, b.tearDowns, "rank 1 did nothing wrong");
        assertTrue(rx.peer(pb).isUp());
        assertTrue(a.tearDowns > 0, "rank 0 caused it: its link is torn down to prove it");
        b.inject(new Message.Drained(t.transferId(), t.generation(), 1, 1, 1, 0)); // rank 1 proves its writes ended
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), "rank 0's teardown is not proven yet");
        a.tearDownProves = true;
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(0, b.tearDowns);
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void aHealthyCoSenderThatNeverProvesBecomesASuspectAtTheDrainDeadline() {
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = slowReceiver(pool, clock);
        final ScriptedLink a = hello();
        final ScriptedLink b = hello();
        a.tearDownProves = true;
        b.tearDownProves = true;
        final IncomingTransfer t = startOn(rx, a, b);
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 1, 0, 1));
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(0, b.tearDowns);
        clock.advanceMillis(30_000);
        rx.doWork();
        assertTrue(b.tearDowns > 0);
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
    }

    @Test
    void aValidDrainedCountsEvenWhenAnotherRanksLinkIsDown() {
        // was: failing the transfer quarantined it (rank 1 down) before rank 0's proof was recorded, and
        // rank 0 was torn down to prove what it had just proven
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(clock).build();
        final ScriptedLink a = hello();
        final ScriptedLink b = hello();
        final IncomingTransfer t = startOn(rx, a, b);
        b.up = false; // its failure not polled yet
        a.inject(new Message.Drained(t.transferId(), t.generation(), 0, 0, 0, 0));
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state());
        assertEquals(0, a.tearDowns, "rank 0 proved its writes ended");
        b.tearDownProves = true;
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(0, a.tearDowns);
    }

    @Test
    void negativeRanksAndCountsAreIgnoredNotThrown() {
        // was: ArrayIndexOutOfBoundsException out of doWork(), skipping the rest of the duty cycle
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(clock).build();
        final ScriptedLink a = hello();
        final IncomingTransfer t = startOn(rx, a);
        a.inject(new Message.Completion(t.transferId(), t.generation(), -1, 8, 0, new int[2], 2, 2, 0));
        a.inject(new Message.Drained(t.transferId(), t.generation(), -2, 0, 0, 0));
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 8, 0, new int[2], -5, -5, 0));
        assertDoesNotThrow(rx::doWork);
        assertEquals(3, rx.metrics().ackInconsistent());
        assertEquals(IncomingTransfer.State.RECEIVING, t.state());
    }

    @Test
    void theUnverifiedSequenceIsNotReachableBeforeCommit() {
        // was: IncomingTransfer.admission().sequence() handed out the RECEIVING pages
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
        final ScriptedLink a = hello();
        final IncomingTransfer t = startOn(rx, a);
        assertEquals(io.kvpool.Admission.Decision.ADMITTED, t.admissionDecision());
        assertThrows(IllegalStateException.class, t::sequence);
        for (var m : IncomingTransfer.class.getMethods()) {
            assertNotEquals(io.kvpool.Admission.class, m.getReturnType(), m + " exposes the admission and its sequence");
            assertFalse(m.getReturnType() == Sequence.class && !m.getName().equals("sequence"), m + " hands out a sequence");
        }
    }

    @Test
    void aSenderClaimingEveryTokenMustHaveWrittenItsWholeShare() {
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(clock).checksums(false).build();
        final ScriptedLink a = hello();
        final IncomingTransfer t = startOn(rx, a);
        ReceiverRulesTest.deliver(pool, a, 0, 0, 8);
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 8, 0, null, 1, 1, 0)); // 1 of 2 pages
        rx.doWork();
        assertEquals(FailureReason.BAD_COMPLETION, t.failure(), t::toString);
        assertTrue(t.message().contains("wrote 1 of its 2 pages"), t.message());
    }

    @Test
    void aPeerCannotBeTwoRanksOfOneTransfer() {
        final KvPool pool = Kv.pool(32);
        final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
        final ScriptedLink a = hello();
        final int pa = rx.addPeer(a);
        rx.doWork();
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> rx.start(REQ, 8, 0, pa, pa));
        assertTrue(e.getMessage().contains("sender 0 and 1"), e.getMessage());
    }

    @Test
    void aBadDescriptorThatCopiesARunningTransfersSlotIsIgnoredNotRefused() {
        // was (second review): validation ran before the duplicate check, so a corrupted copy was refused
        // with DRAINED(nothing posted) for the running generation
        final KvPool pool = Kv.pool(32);
        final ScriptedLink link = hello();
        final TransferSender tx = senderOn(pool, link);
        offer(pool, tx, REQ, 8);
        link.inject(new Message.Descriptor(REQ, 3, 9, 8, Kv.LAYOUT.fingerprint(), 1, 0, new long[2], new byte[1]));
        tx.doWork();
        link.inject(new Message.Descriptor(REQ, 3, 9, 8, 0xBAD, 1, 0, new long[2], new byte[1]));
        tx.doWork();
        assertTrue(link.sent(Message.Drained.class).isEmpty(), () -> link.sent.toString());
        assertTrue(link.sent(Message.Abort.class).isEmpty());
        assertEquals(OutgoingTransfer.State.WRITING, tx.openTransfers().getFirst().state());
    }

    @Test
    void bothEnginesRefuseChecksumsOnStorageTheHostCannotRead() {
        // was (second review): the sender accepted it and threw out of doWork() at its first flush
        final KvPool pool = KvPool.builder(Kv.LAYOUT).pages(8).maxContextTokens(32)
            .storage((l, n) -> new DeviceLikeStorage(io.kvpool.storage.HostPageStorage.allocate(l, n))).build();
        final IllegalArgumentException s = assertThrows(IllegalArgumentException.class,
            () -> TransferSender.builder(pool, Kv.identity()).build());
        assertTrue(s.getMessage().contains("checksums(false)"), s.getMessage());
        assertThrows(IllegalArgumentException.class, () -> TransferReceiver.builder(pool, Kv.identity()).build());
        TransferSender.builder(pool, Kv.identity()).checksums(false).build().close();
        pool.close();
    }

    /** Host storage that says it is not host-accessible, as device storage will. */
    record DeviceLikeStorage(io.kvpool.storage.PageStorage inner) implements io.kvpool.storage.PageStorage {
        @Override
        public io.kvpool.KvLayout layout() {
            return inner.layout();
        }

        @Override
        public int pageCount() {
            return inner.pageCount();
        }

        @Override
        public boolean isHostAccessible() {
            return false;
        }

        @Override
        public java.lang.foreign.MemorySegment hostPage(int page) {
            throw new UnsupportedOperationException("device memory");
        }

        @Override
        public long address(int page, int layer, int kv) {
            return inner.address(page, layer, kv);
        }

        @Override
        public void fill(int page, io.kvpool.storage.FillMode mode) {
            inner.fill(page, mode);
        }

        @Override
        public int firstCanaryToken(int page, int fromToken, int toToken) {
            return inner.firstCanaryToken(page, fromToken, toToken);
        }

        @Override
        public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
            inner.copyPages(src, srcOff, dst, dstOff, count);
        }

        @Override
        public void close() {
            inner.close();
        }
    }
}
