package io.kvpool.transfer;

import io.kvpool.Admission;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Decode rejects or aborts, and says so (CANCEL): prefill releases the request's pages at once instead of
 * pinning them until its descriptor timeout (60 s), so a small prefill pool keeps serving while decode rejects.
 */
class CancelUnderPoolPressureTest {

    static final int PAGES_PER_REQUEST = 4;
    static final int TOKENS = PAGES_PER_REQUEST * Kv.LAYOUT.tokensPerPage();

    /** Prefill with room for 3 requests; decode too small for any, so every request is rejected. */
    static final class Rig extends SimPair {
        Rig(PeerIdentity decodeIdentity) {
            super(5, Kv.pool(3 * PAGES_PER_REQUEST), Kv.pool(PAGES_PER_REQUEST - 1), decodeIdentity);
        }

        /** Prefill computes a request and offers it; decode rejects it. @return whether prefill had room */
        boolean offerRejected(long req) {
            final Admission a = prefill.admit(TOKENS, 0);
            if (!a.admitted()) {
                return false;
            }
            final Sequence src = a.sequence();
            src.append(TOKENS);
            Kv.write(src, req);
            sender.offer(req, src);
            src.close();
            final IncomingTransfer t = receiver.start(req, TOKENS, 0, rp);
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
            run(20);
            return true;
        }
    }

    @Test
    void prefillsPoolDoesNotRunDryWhileDecodeRejects() {
        try (Rig rig = new Rig(Kv.identity())) {
            final long start = rig.net.now();
            for (long req = 1; req <= 100; req++) { // 100 requests through a pool that holds 3
                assertTrue(rig.offerRejected(req), "prefill's pool ran dry at request " + req + ": " + rig.prefill.snapshot());
                assertEquals(0, rig.sender.activeTransfers(), "request " + req + " still pinned at prefill");
            }
            assertEquals(100, rig.sender.metrics().cancelled());
            assertEquals(0, rig.prefill.snapshot().owned(), rig.prefill.snapshot()::toString);
            assertTrue(rig.prefill.verifyAccounting().balanced());
            assertTrue(rig.net.now() - start < Duration.ofSeconds(1).toNanos(), "released long before any timeout");
        }
    }

    @Test
    void controlWithoutCancelAVersion1LinkPinsUntilTheTimeout() {
        // the same decode on a link of version 1 (which has no CANCEL), as before this change: the pool runs dry
        try (Rig rig = new Rig(Kv.identity().withVersions(1, 1))) {
            assertEquals(1, rig.receiver.peer(rig.rp).protocolVersion());
            long req = 1;
            while (rig.offerRejected(req)) {
                req++;
                assertTrue(req < 100, "the control must run dry");
            }
            assertEquals(4, req, "3 requests fill the pool, the 4th finds no room");
            assertEquals(3, rig.sender.activeTransfers());
            assertEquals(0, rig.sender.metrics().cancelled());
        }
    }

    /** Prefill computes a request and offers it. */
    private static void offer(Rig rig, long req) {
        final Sequence src = rig.prefill.admit(TOKENS, 0).sequence();
        src.append(TOKENS);
        Kv.write(src, req);
        rig.sender.offer(req, src);
        src.close();
    }

    @Test
    void aRequestDeclinedWithoutATransferFreesItsOfferAtOnceOrWhenItComes() {
        try (Rig rig = new Rig(Kv.identity())) {
            final long start = rig.net.now();
            offer(rig, 1);
            assertEquals(1, rig.receiver.decline(1, "decode's own policy: not taken", rig.rp));
            rig.run(20);
            assertEquals(0, rig.sender.activeTransfers(), "the waiting offer ended");
            assertEquals(1, rig.receiver.decline(2, "refused before prefill offered it", rig.rp));
            rig.run(20);
            offer(rig, 2); // the offer comes after the CANCEL: ended at once
            rig.run(20);
            assertEquals(0, rig.sender.activeTransfers(), "the late offer ended");
            assertEquals(2, rig.sender.metrics().cancelled());
            assertEquals(0, rig.prefill.snapshot().owned(), rig.prefill.snapshot()::toString);
            assertTrue(rig.net.now() - start < Duration.ofSeconds(1).toNanos(), "released long before any timeout");
            assertThrows(IllegalArgumentException.class, () -> rig.receiver.decline(3, "x", 99));
        }
    }

    @Test
    void aDeclineSparesTheSenderOfATransferReceivingTheRequest() {
        try (SimPair pair = new SimPair(5, Kv.pool(16), Kv.pool(16), Kv.identity())) {
            final Sequence src = pair.prefill.admit(TOKENS, 0).sequence();
            src.append(TOKENS);
            Kv.write(src, 7);
            pair.sender.offer(7, src);
            src.close();
            final IncomingTransfer t = pair.receiver.start(7, TOKENS, 0, pair.rp);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state());
            assertEquals(0, pair.receiver.decline(7, "a stale refusal of the same id", pair.rp), "the request is that transfer's");
            for (int i = 0; i < 100 && t.state() == IncomingTransfer.State.RECEIVING; i++) {
                pair.run(20);
            }
            assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
            t.sequence().close();
        }
    }

    @Test
    void controlADeclineOnAVersion1LinkTellsNobodyAndTheOfferWaits() {
        try (Rig rig = new Rig(Kv.identity().withVersions(1, 1))) {
            offer(rig, 1);
            assertEquals(0, rig.receiver.decline(1, "not taken", rig.rp), "version 1 has no CANCEL");
            rig.run(20);
            assertEquals(1, rig.sender.activeTransfers(), "pinned until its descriptor timeout");
        }
    }

    @Test
    void anAbortedTransferWhoseDescriptorWasLostReleasesTheWaitingOffer() {
        try (KvPool pool = Kv.pool(16)) {
            final ManualClock clock = new ManualClock();
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(TransferSender.builder(pool, Kv.identity()).clock(clock)
                .descriptorTimeout(Duration.ofSeconds(60)), link);
            final OutgoingTransfer t = offer(pool, sender, 9);
            // the receiver's descriptor never arrived; it aborts slot 0 generation 1 and cancels request 9
            link.inject(new Message.Abort(0, 1, Message.Abort.RECEIVER_FAILED, "timeout"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "timeout"))
                .inject(new Message.Cancel(12345, Message.Cancel.REJECTED, "never offered"));
            sender.doWork();
            assertEquals(OutgoingTransfer.State.DRAINED, t.state());
            assertEquals(0, sender.activeTransfers());
            assertEquals(0, pool.snapshot().owned(), pool.snapshot()::toString);
            assertEquals(1, sender.metrics().cancelled());
            assertEquals(0, sender.metrics().cancelsIgnored(), "request 12345 may still be offered");
            clock.advanceMillis(60_001);
            sender.doWork();
            assertEquals(1, sender.metrics().cancelsIgnored(), "not offered within the descriptor timeout: dropped");
            final OutgoingTransfer offeredLate = offer(pool, sender, 12345);
            assertEquals(OutgoingTransfer.State.WAITING, offeredLate.state(), "a CANCEL that expired ends nothing");
            sender.abort(offeredLate, "test over");
            sender.doWork();
            sender.close();
        }
    }

    @Test
    void aSecondCancelBeforeTheOfferIsCountedOnce() {
        // two rejections of request 9 before prefill offered it: one ends the offer, the other ended nothing
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "decode pool full"));
            link.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "decode pool still full"));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
            assertEquals(1, sender.metrics().cancelled());
            assertEquals(1, sender.metrics().cancelsIgnored(), "every CANCEL is counted once: one ended the offer");
            sender.close();
        }
    }

    @Test
    void aCancelThatComesBeforeItsOfferEndsTheOfferWhenItComes() {
        // decode refused request 9 while prefill was still computing it: the CANCEL is there before the offer
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "decode pool full"));
            sender.doWork();
            assertEquals(0, sender.metrics().cancelled());

            final OutgoingTransfer t = offer(pool, sender, 9);
            final OutgoingTransfer u = offer(pool, sender, 10);
            assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
            assertTrue(t.failure().contains("decode pool full") && t.failure().contains("before it was offered"), t::failure);
            assertEquals(1, sender.metrics().cancelled());
            assertEquals(OutgoingTransfer.State.WAITING, u.state(), "another request's offer is not touched");
            assertEquals(TOKENS / Kv.LAYOUT.tokensPerPage(), pool.snapshot().owned(), "only request 10's pages are held: "
                + pool.snapshot());
            sender.abort(u, "test over");
            sender.doWork();
            assertEquals(0, pool.snapshot().owned(), pool.snapshot()::toString);
            sender.close();
        }
    }

    @Test
    void aDescriptorAfterACancelTakesTheRequestAgain() {
        // decode refused request 9, then admitted it after all: its newer descriptor wins over the kept CANCEL
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "decode pool full"));
            link.inject(descriptor(9, 0, 1));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.WRITING, t.state(), t::toString);
            assertEquals(1, sender.metrics().cancelsIgnored(), "the stale CANCEL is counted as ignored");
            sender.abort(t, "test over");
            sender.close();
        }
    }

    @Test
    void aCancelKeptPastTheDescriptorTimeoutDoesNotEndALaterOffer() {
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final ManualClock clock = new ManualClock();
            final TransferSender sender = linkedSender(TransferSender.builder(pool, Kv.identity()).clock(clock)
                .descriptorTimeout(Duration.ofSeconds(5)), link);
            link.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "decode pool full"));
            sender.doWork();
            clock.advanceMillis(5_000); // expired, and no duty cycle has purged it yet
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.WAITING, t.state(), t::toString);
            assertEquals(1, sender.metrics().cancelsIgnored());
            sender.abort(t, "test over");
            sender.close();
        }
    }

    @Test
    void aCancelFromAReceiverThatDidNotAskForTheRequestIsIgnored() {
        // request 9's descriptor came from one receiver; another receiver's CANCEL for that id must not end it
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink asked = new ScriptedLink(), other = new ScriptedLink();
            final TransferSender sender = linkedSender(TransferSender.builder(pool, Kv.identity()).clock(new ManualClock()), asked);
            sender.addPeer(other);
            other.hello(Kv.identity());
            sender.doWork();
            asked.inject(descriptor(9, 0, 1));
            sender.doWork();
            other.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "not mine"));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.WRITING, t.state(), t::toString);
            assertEquals(1, sender.metrics().cancelsIgnored());
            sender.abort(t, "test over");
            sender.close();
        }
    }

    @Test
    void anAbortWhileWritingReleasesOnlyOnceEveryWriteIsTerminal() {
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            final OutgoingTransfer t = writing(pool, sender, link, 9);
            assertEquals(OutgoingTransfer.State.WRITING, t.state());
            assertEquals(PAGES_PER_REQUEST, link.postedTokens.size());
            // what a receiver that gives up sends: the transfer's ABORT, then the request's CANCEL
            link.inject(new Message.Abort(0, 1, Message.Abort.REQUESTED, "decode gave up"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "decode gave up"));
            sender.doWork();
            assertEquals(1, sender.metrics().cancelsIgnored(), "the CANCEL after the ABORT ends nothing more");
            assertEquals(OutgoingTransfer.State.FAILING, t.state(), "writes in flight: the pages stay retained");
            assertEquals(PAGES_PER_REQUEST, pool.snapshot().owned());
            endWrites(sender, link, io.kvpool.transfer.spi.PeerLink.OK);
            assertEquals(OutgoingTransfer.State.DRAINED, t.state());
            assertEquals(0, pool.snapshot().owned(), "released once every write was terminal");
            sender.close();
        }
    }

    @Test
    void aCancelNeverEndsATransferUnderWay() {
        // request 9 is writing; a CANCEL of 9 without an ABORT of this transfer is another attempt's (a start of the
        // same id that decode refused): the transfer under way goes on
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            final OutgoingTransfer t = writing(pool, sender, link, 9);
            link.inject(new Message.Cancel(9, Message.Cancel.REJECTED, "request 9 is already receiving"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "an allocation fault of another start"));
            sender.doWork();
            assertEquals(OutgoingTransfer.State.WRITING, t.state(), t::toString);
            assertEquals(2, sender.metrics().cancelsIgnored());
            sender.abort(t, "test over");
            sender.close();
        }
    }

    @Test
    void theEchoOfAnAnsweredAbortDoesNotEndARetryOfTheRequest() {
        // request 9 fails at the sender (a write failed): ABORT and DRAINED go to decode, whose abort of the transfer
        // echoes ABORT and CANCEL. The application retries 9 at once: the echo must not end the retry
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            failedAtTheSender(pool, sender, link, 9);
            link.inject(new Message.Abort(0, 1, Message.Abort.RECEIVER_FAILED, "sender aborted"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "sender aborted"));
            sender.doWork();
            final OutgoingTransfer retry = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.WAITING, retry.state(), () -> "the retry waits for its descriptor: " + retry);
            link.inject(descriptor(9, 0, 2));
            sender.doWork();
            assertEquals(OutgoingTransfer.State.WRITING, retry.state(), retry::toString);
            sender.abort(retry, "test over");
            sender.close();
        }
    }

    @Test
    void theEchoOfAnAnsweredAbortDoesNotEndARetryOfferedBeforeItCame() {
        // as above, but the application retries 9 before decode's echo arrives: the retry waits for its own descriptor
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            failedAtTheSender(pool, sender, link, 9);
            final OutgoingTransfer retry = offer(pool, sender, 9);
            link.inject(new Message.Abort(0, 1, Message.Abort.RECEIVER_FAILED, "sender aborted"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "sender aborted"));
            sender.doWork();
            assertEquals(OutgoingTransfer.State.WAITING, retry.state(), () -> "the echo ended the retry: " + retry);
            assertEquals(1, sender.metrics().cancelsIgnored());
            sender.abort(retry, "test over");
            sender.close();
        }
    }

    @Test
    void theCancelAfterARefusedDescriptorsAbortEndsTheOfferWhenItComes() {
        // decode's descriptor of 9 came before prefill offered 9 and was refused (bad): decode fails that transfer with
        // ABORT and CANCEL. Nothing took that descriptor, so the CANCEL is not an echo: the offer of 9 ends at once
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(new Message.Descriptor(9, 0, 1, TOKENS, 0xBADL, 1, 0, new long[PAGES_PER_REQUEST], new byte[] {0}));
            sender.doWork();
            assertEquals(1, link.sent(Message.Abort.class).size(), "the bad descriptor was refused");
            link.inject(new Message.Abort(0, 1, Message.Abort.RECEIVER_FAILED, "sender refused"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "sender refused"));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.DRAINED, t.state(), () -> "ended at once, not after the descriptor timeout: " + t);
            assertEquals(0, pool.snapshot().owned(), "its pages released");
            sender.close();
        }
    }

    @Test
    void anAnsweredAbortOfOneRequestIsNoEchoForAnothersCancel() {
        // request 9 ended at the sender; decode's ABORT of it is answered. Right after it comes a CANCEL of request 10,
        // which decode aborted before prefill offered it: not 9's echo, so 10's offer must end when it comes
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            failedAtTheSender(pool, sender, link, 9);
            link.inject(new Message.Abort(0, 1, Message.Abort.RECEIVER_FAILED, "sender aborted"))
                .inject(new Message.Cancel(10, Message.Cancel.ABORTED, "an allocation fault of request 10"));
            sender.doWork();
            final OutgoingTransfer ten = offer(pool, sender, 10);
            assertEquals(OutgoingTransfer.State.DRAINED, ten.state(), () -> "10's CANCEL ends its offer at once: " + ten);
            sender.close();
        }
    }

    @Test
    void aDescriptorAbortedBeforeItsOfferEndsTheOfferWhenItComes() {
        // decode asked for 9 before prefill offered it, then gave up: ABORT drops the waiting descriptor, and its CANCEL
        // (no echo: no offer took that descriptor) is kept, so the offer ends at once rather than at its timeout
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(descriptor(9, 0, 1));
            sender.doWork();
            link.inject(new Message.Abort(0, 1, Message.Abort.REQUESTED, "decode gave up"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "decode gave up"));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.DRAINED, t.state(), () -> "ended at once: " + t);
            assertEquals(0, pool.snapshot().owned());
            sender.close();
        }
    }

    @Test
    void aRejectionOfAnotherStartLeavesADescriptorWaitingForItsOffer() {
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(descriptor(9, 0, 1)).inject(new Message.Cancel(9, Message.Cancel.REJECTED, "another start of 9"));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.WRITING, t.state(), () -> "the waiting descriptor took the offer: " + t);
            sender.abort(t, "test over");
            sender.close();
        }
    }

    @Test
    void aSecondStartOfAReceivingIdCancelsOnlyAtSendersNotOfTheFirst() {
        try (KvPool pool = Kv.pool(32)) {
            final TransferReceiver rx = ProtocolEdgeCasesTest.slowReceiver(pool, new ManualClock());
            final ScriptedLink a = ProtocolEdgeCasesTest.hello(), b = ProtocolEdgeCasesTest.hello();
            final IncomingTransfer first = ProtocolEdgeCasesTest.startOn(rx, a, b); // ranks 0 and 1
            assertEquals(IncomingTransfer.State.RECEIVING, first.state(), first::toString);
            final ScriptedLink c = ProtocolEdgeCasesTest.hello();
            final int pc = rx.addPeer(c);
            rx.doWork();
            final IncomingTransfer second = rx.start(ProtocolEdgeCasesTest.REQ, 8, 0, 0, pc);
            assertEquals(IncomingTransfer.State.REJECTED, second.state(), second::toString);
            assertEquals(0, a.sent(Message.Cancel.class).size(), "the first transfer's sender is not told");
            assertEquals(1, c.sent(Message.Cancel.class).size(), "a sender of the second alone is");
            // refused for another reason while the id is receiving (its own sender is down, or it never fits): those
            // refusals spare the first transfer's senders too
            c.failLink("test: a sender down");
            rx.doWork();
            final IncomingTransfer third = rx.start(ProtocolEdgeCasesTest.REQ, 8, 0, 0, pc);
            assertTrue(third.message().contains("is not up"), third::message);
            final IncomingTransfer fourth = rx.start(ProtocolEdgeCasesTest.REQ, (int) pool.maxContextTokens() + 1, 0, 1);
            assertEquals(io.kvpool.Admission.Decision.REJECTED_CONTEXT_TOO_LONG, fourth.admissionDecision(), fourth::toString);
            assertEquals(0, a.sent(Message.Cancel.class).size(), "the first transfer's sender is still not told");
            assertEquals(0, b.sent(Message.Cancel.class).size(), "nor its other sender");
            rx.abort(first, "test over");
            rx.close();
        }
    }

    @Test
    void theCancelAfterASupersededDescriptorsAbortLeavesTheNewerOneWaitingForItsOffer() {
        // decode asked for request 9 twice before prefill offered it: the newer descriptor supersedes the older (which
        // is refused), decode fails the older and echoes ABORT and CANCEL. The newer one must still find the offer
        try (KvPool pool = Kv.pool(16)) {
            final ScriptedLink link = new ScriptedLink();
            final TransferSender sender = linkedSender(pool, link);
            link.inject(descriptor(9, 0, 1))
                .inject(descriptor(9, 1, 1));
            sender.doWork();
            link.inject(new Message.Abort(0, 1, Message.Abort.RECEIVER_FAILED, "superseded"))
                .inject(new Message.Cancel(9, Message.Cancel.ABORTED, "superseded"));
            sender.doWork();
            final OutgoingTransfer t = offer(pool, sender, 9);
            assertEquals(OutgoingTransfer.State.WRITING, t.state(), () -> "the newer descriptor took the offer: " + t);
            sender.abort(t, "test over");
            sender.close();
        }
    }

    /**
     * Offers request {@code req}, takes decode's descriptor (slot 0, generation 1) and fails every write: the sender
     * sends ABORT and DRAINED, and the offer is over (DRAINED) before decode's answer comes.
     */
    private static void failedAtTheSender(KvPool pool, TransferSender sender, ScriptedLink link, long req) {
        final OutgoingTransfer t = writing(pool, sender, link, req);
        endWrites(sender, link, io.kvpool.transfer.spi.PeerLink.FAILED);
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
    }

    /** Offers request {@code req} and takes decode's descriptor of it (slot 0, generation 1): its writes are posted. */
    private static OutgoingTransfer writing(KvPool pool, TransferSender sender, ScriptedLink link, long req) {
        final OutgoingTransfer t = offer(pool, sender, req);
        link.inject(descriptor(req, 0, 1));
        sender.doWork();
        return t;
    }

    /** Ends every write posted on {@code link} with {@code status}, then proves the flush that follows, if any. */
    private static void endWrites(TransferSender sender, ScriptedLink link, int status) {
        for (long token : link.postedTokens) {
            link.completeWrite(token, status);
        }
        sender.doWork();
        if (!link.flushTokens.isEmpty()) {
            link.completeFlush(link.flushTokens.getLast(), true);
            sender.doWork();
        }
    }

    /** A receiver's descriptor of request {@code req} ({@link #TOKENS} tokens, one sender) in transfer slot {@code slot}. */
    private static Message.Descriptor descriptor(long req, int slot, int generation) {
        return new Message.Descriptor(req, slot, generation, TOKENS, Kv.LAYOUT.fingerprint(), 1, 0, new long[PAGES_PER_REQUEST],
            new byte[] {0});
    }

    /** {@link #linkedSender(TransferSender.Builder, ScriptedLink)} with the defaults and a clock no test here advances. */
    private static TransferSender linkedSender(KvPool pool, ScriptedLink link) {
        return linkedSender(TransferSender.builder(pool, Kv.identity()).clock(new ManualClock()), link);
    }

    /** A sender on a {@link ScriptedLink} whose HELLO has been answered (the receiver's side is scripted). */
    private static TransferSender linkedSender(TransferSender.Builder b, ScriptedLink link) {
        final TransferSender sender = b.build();
        sender.addPeer(link);
        link.hello(Kv.identity());
        sender.doWork();
        return sender;
    }

    /** Offers request {@code id}, {@link #TOKENS} tokens of freshly written pages; the offer holds them. */
    private static OutgoingTransfer offer(KvPool pool, TransferSender sender, long id) {
        final Sequence src = pool.admit(TOKENS, 0).sequence();
        src.append(TOKENS);
        final OutgoingTransfer t = sender.offer(id, src);
        src.close();
        return t;
    }
}
