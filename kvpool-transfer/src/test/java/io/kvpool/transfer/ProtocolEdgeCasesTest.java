package io.kvpool.transfer;

import io.kvpool.transfer.testkit.ForwardingStorage;
import io.kvpool.transfer.testkit.Kv;
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
 * Edge cases of the transfer protocol: duplicated and malformed descriptors, a completion whose send fails, a sender
 * closed with a flush pending, co-senders that are healthy, silent or holding none of their share, negative ranks and
 * counts, a peer claiming two ranks, handler exceptions, checksums on storage the host cannot read. Each test's comment
 * names the behaviour it rules out.
 */
class ProtocolEdgeCasesTest {
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
        // the late copy must not overwrite the record with "nothing posted" (a later ABORT would get DRAINED(0, 0, 0)
        // though a write is unproven), nor make a re-offer of the request start writing into the old region
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
        tx.doWork();
        assertEquals(1, tx.metrics().duplicateDescriptors());
        final int posted = link.postedTokens.size();
        offer(pool, tx, REQ, 8); // the application retries the request while the late copy is there to be taken
        tx.doWork();
        assertEquals(posted, link.postedTokens.size(), "a retry must wait for a new descriptor, not reuse an ended one");
        final OutgoingTransfer retry = tx.openTransfers().getFirst();
        link.inject(new Message.Abort(3, 9, Message.Abort.RECEIVER_FAILED, "timeout"))
            .inject(new Message.Cancel(REQ, Message.Cancel.ABORTED, "timeout")); // and its echo, as a receiver sends
        tx.doWork();
        assertEquals(truth, link.sent(Message.Drained.class).getLast(), "an ABORT after the end must get the truth");
        assertEquals(OutgoingTransfer.State.WAITING, retry.state(), "the echo must not end the retry");
    }

    @Test
    void aCompletionWhoseSendFailsEndsTheTransferOnce() {
        // the failed send takes the peer down re-entrantly, which finishes the transfer; the flush handler must not
        // finish it again: the link's user count would drop to 0 while another transfer still owes a terminal
        // state, so that link would never be polled again and its source page would stay OWNED forever
        final ManualClock clock = new ManualClock();
        final KvPool pool = Kv.pool(32);
        final TransferSender tx = sender(pool, clock);
        final FlakyLink link = new FlakyLink().inject(new Message.Hello(Kv.identity())).inject(new Message.Instance(ScriptedLink.INSTANCE));
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
        assertEquals(1, tx.metrics().completed());
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
        // close() must keep working for a transfer waiting for its flush's answer: stopping all work would keep
        // its sources forever
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
        // rank 0's unproven DRAINED must not tear down rank 1's healthy link at once, nor may rank 1's proof be ignored
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
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
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
        // rank 0's proof must be recorded before failing the transfer quarantines it (rank 1 down): else
        // rank 0 is torn down to prove what it has just proven
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
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, t.state());
        assertEquals(0, a.tearDowns);
    }

    @Test
    void negativeRanksAndCountsAreIgnoredNotThrown() {
        // an ArrayIndexOutOfBoundsException out of doWork() would skip the rest of the duty cycle
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
        // IncomingTransfer.admission().sequence() must not hand out the RECEIVING pages
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
        // the duplicate check comes before validation: refusing a corrupted copy would send DRAINED(nothing posted)
        // for the running generation
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
        // a sender that accepted it would throw out of doWork() at its first flush
        final KvPool pool = KvPool.builder(Kv.LAYOUT).pages(8).maxContextTokens(32)
            .storage((l, n) -> new DeviceLikeStorage(io.kvpool.storage.HostPageStorage.allocate(l, n))).build();
        final IllegalArgumentException s = assertThrows(IllegalArgumentException.class,
            () -> TransferSender.builder(pool, Kv.identity()).build());
        assertTrue(s.getMessage().contains("checksums(false)"), s.getMessage());
        assertThrows(IllegalArgumentException.class, () -> TransferReceiver.builder(pool, Kv.identity()).build());
        TransferSender.builder(pool, Kv.identity()).checksums(false).build().close();
        pool.close();
    }

    @Test
    void aDescriptorWithNegativeTokensIsRefusedNotThrownOutOfTheDutyCycle() {
        // layout.pagesFor(-1) must not throw IllegalArgumentException out of doWork(): the cycle would skip the other
        // peers and the deadlines, and the receiver would wait out its completion timeout
        final KvPool pool = Kv.pool(32);
        final ScriptedLink bad = hello();
        final TransferSender tx = senderOn(pool, bad);
        bad.inject(new Message.Descriptor(99, 1, 1, -1, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[1]));
        assertDoesNotThrow(() -> tx.doWork());
        final List<Message.Abort> aborts = bad.sent(Message.Abort.class);
        assertEquals(1, aborts.size(), bad.sent::toString);
        assertTrue(aborts.getFirst().detail().contains("-1 tokens"), aborts.getFirst().detail());
        assertEquals(0, bad.sent(Message.Drained.class).getFirst().posted());
        assertTrue(tx.peer(0).isUp(), "a refused descriptor does not take the link down");
        tx.close();
        pool.close();
    }

    @Test
    void aHandlerThatThrowsFailsOnlyItsPeerNeverTheDutyCycle() {
        // the backstop behind every handler: an exception while acting on one peer's decoded frame fails that
        // peer (counted as malformed) and the cycle goes on to the other peers
        final RuntimeException[] toThrow = {new IllegalStateException("handler bug")};
        final int[] handled = new int[1];
        final var e = new TransferEndpoint(Kv.identity(), new ManualClock(), false, Heartbeat.OFF) {
            @Override
            int onDuty(long now) {
                return 0;
            }

            @Override
            void onMessage(Peer peer, Message m) {
                handled[0]++;
                if (peer.id() == 0) {
                    throw toThrow[0];
                }
            }

            @Override
            void onPeerDown(Peer peer) {
            }

            @Override
            public void onWriteDone(PeerLink link, long token, int status) {
            }

            @Override
            public void onFlushDone(PeerLink link, long token, boolean ok) {
            }

            @Override
            public void close() {
                closeLinks();
            }
        };
        final ScriptedLink a = hello();
        final ScriptedLink b = hello();
        e.addPeer(a);
        e.addPeer(b);
        e.doWork();
        a.inject(new Message.Drained(1, 1, 0, 0, 0, 0));
        b.inject(new Message.Drained(1, 1, 0, 0, 0, 0));
        assertDoesNotThrow(e::doWork);
        assertEquals(2, handled[0], "the second peer's frame was handled in the same cycle");
        assertEquals(Peer.State.FAILED, e.peer(0).state());
        assertTrue(e.peer(0).failure().contains("handler bug"), e.peer(0).failure());
        assertTrue(e.peer(1).isUp());
        assertEquals(1, e.malformedFrames());
        e.close();
    }

    @Test
    void aCoSenderHoldingNoneOfItsShareSaysHowManyTokensItHasAtOnce() {
        // rank 1 of 2 of a 16-token request (pages [2, 4)) holding 4 tokens (1 page) posts nothing, but must still
        // flush and send COMPLETION: else it sits in WRITING with its source pages until the receiver's timeout
        final KvPool pool = Kv.pool(32);
        final ScriptedLink link = hello();
        final TransferSender tx = senderOn(pool, link);
        offer(pool, tx, REQ, 4);
        link.inject(new Message.Descriptor(REQ, 3, 9, 16, Kv.LAYOUT.fingerprint(), 2, 1, new long[4], new byte[1]));
        tx.doWork();
        assertEquals(1, link.flushTokens.size(), "flushed at once, nothing posted");
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        final Message.Completion c = link.sent(Message.Completion.class).getFirst();
        assertEquals(4, c.tokenCount(), "the truth: the receiver's length check fails the transfer at once");
        assertEquals(0, c.posted());
        assertEquals(0, tx.activeTransfers());
        tx.close();
        pool.close();
    }

    @Test
    void theSlotRecordsOfAGoneLinkAreDropped() {
        // the map of per-slot records of a link that carried a descriptor must not be kept forever (a server that
        // reconnects would grow by one per reconnect), nor may a dead link stay in the frame lookup
        final KvPool pool = Kv.pool(32);
        final TransferSender tx = sender(pool, new ManualClock());
        for (int i = 0; i < 20; i++) {
            final ScriptedLink l = hello();
            tx.addPeer(l);
            tx.doWork();
            offer(pool, tx, 100 + i, 4);
            l.inject(new Message.Descriptor(100 + i, i, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[1]));
            tx.doWork();
            l.completeWrite(l.postedTokens.getFirst(), PeerLink.OK);
            tx.doWork();
            l.completeFlush(l.flushTokens.getFirst(), true);
            tx.doWork();
            assertEquals(1, l.sent(Message.Completion.class).size());
            assertEquals(1, tx.slotRecordLinks());
            l.failLink("reconnect " + i);
            tx.doWork();
            assertEquals(0, tx.slotRecordLinks(), "the records of gone link " + i + " are still held");
            assertNull(tx.peerOf(l), "gone link " + i + " is still looked up for its frames");
        }
        tx.close();
        pool.close();
    }

    @Test
    void aLinkThatDiedWithWritesInFlightKeepsItsRecordsUntilTheyEnded() {
        // the other side of the rule above: records and lookup stay while the dead link still owes terminal states
        final KvPool pool = Kv.pool(32);
        final ScriptedLink l = hello();
        final TransferSender tx = senderOn(pool, l);
        offer(pool, tx, REQ, 4);
        l.inject(new Message.Descriptor(REQ, 0, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[1]));
        tx.doWork();
        l.failLink("mid-transfer");
        tx.doWork();
        assertEquals(1, tx.slotRecordLinks());
        assertSame(tx.peer(0), tx.peerOf(l));
        l.completeWrite(l.postedTokens.getFirst(), PeerLink.CANCELED);
        tx.doWork();
        tx.doWork();
        assertEquals(0, tx.activeTransfers());
        assertEquals(0, tx.slotRecordLinks());
        tx.close();
        pool.close();
    }

    @Test
    void startCountsOnlyTransfersThatGetAnOutcome() {
        // started must not be counted before the argument checks, or a start() that throws is counted too
        final KvPool pool = Kv.pool(8);
        try (TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build()) {
            assertThrows(IllegalArgumentException.class, () -> rx.start(REQ, 4, 0, 7));
            assertThrows(IllegalArgumentException.class, () -> rx.start(REQ, 4, 0));
            assertThrows(IllegalArgumentException.class, () -> rx.start(REQ, 0, 0, 0));
            assertEquals(0, rx.metrics().started());
            final int peer = rx.addPeer(hello());
            rx.doWork();
            assertEquals(IncomingTransfer.State.RECEIVING, rx.start(REQ, 4, 0, peer).state());
            assertEquals(1, rx.metrics().started());
        } finally {
            pool.close();
        }
    }

    @Test
    void aRequestTooLongForOneDescriptorIsRejectedBeforeAnythingIsHeld() {
        // it must not be admitted, appended, pinned, registered and put in a slot first: encoding the descriptor would
        // then throw out of start(), with no IncomingTransfer to abort and every page pinned until the completion timeout
        final int pages = io.kvpool.transfer.wire.WireFormat.MAX_ARRAY + 1;
        final KvPool pool = Kv.pool(pages + 4);
        try (TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).checksums(false).build()) {
            final int peer = rx.addPeer(hello());
            rx.doWork();
            final int tokens = pages * Kv.LAYOUT.tokensPerPage();
            final IncomingTransfer t = rx.start(REQ, tokens, 0, peer);
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t.toString());
            assertEquals(FailureReason.REJECTED, t.failure());
            assertFalse(t.retryLater(), "no wait makes it fit one descriptor");
            assertTrue(t.message().contains(tokens + " tokens needs " + pages + " pages")
                && t.message().contains("at most " + io.kvpool.transfer.wire.WireFormat.MAX_ARRAY), t.message());
            assertEquals(0, rx.activeTransfers());
            assertEquals(pool.capacity(), pool.snapshot().free(), "nothing held");
            assertEquals(0, pool.snapshot().reserved(), "nothing reserved");
            final IncomingTransfer fits = rx.start(REQ + 1, pages * Kv.LAYOUT.tokensPerPage() - Kv.LAYOUT.tokensPerPage(), 0, peer);
            assertEquals(IncomingTransfer.State.RECEIVING, fits.state(), fits.toString());
        } finally {
            pool.close();
        }
    }

    @Test
    void theSimTransportRefusesABadSourcePageBeforePostingAnyOfTheBatch() {
        // sources must be checked first too, not only destinations: a bad source index would throw mid-batch after
        // the writes before it were posted — while a sender counts a thrown batch as never posted (PeerLink's
        // contract), so it could say DRAINED(0 posted) with those writes still to land
        final io.kvpool.transfer.sim.SimNetwork net = new io.kvpool.transfer.sim.SimNetwork(1, io.kvpool.transfer.sim.SimFaults.NONE);
        final io.kvpool.transfer.sim.SimLink[] ends = net.connect("prefill", "decode", false);
        final KvPool src = Kv.pool(8);
        final KvPool dst = Kv.pool(8);
        try {
            final var reg = ends[1].register(dst.storage(), new int[] {0, 1});
            final var region = ends[0].attach(reg.key(), 2);
            final IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class,
                () -> ends[0].putBatch(region, new int[] {0, 1}, src.storage(), new int[] {0, 13}, 0, 2, 0));
            assertTrue(e.getMessage().contains("source page 13 of 8"), e.getMessage());
            assertEquals(0, ends[0].pendingWrites(), "a refused batch left a write posted");
        } finally {
            src.close();
            dst.close();
        }
    }

    /** Host storage that says it is not host-accessible, as device storage will. */
    static final class DeviceLikeStorage extends ForwardingStorage {
        DeviceLikeStorage(io.kvpool.storage.PageStorage inner) {
            super(inner);
        }

        @Override
        public boolean isHostAccessible() {
            return false;
        }

        @Override
        public java.lang.foreign.MemorySegment hostPage(int page) {
            throw new UnsupportedOperationException("device memory");
        }
    }
}
