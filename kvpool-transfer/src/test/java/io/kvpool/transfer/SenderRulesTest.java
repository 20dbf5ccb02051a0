package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/** Each rule of the sender's side, driven step by step: the test is the receiver and the transport. */
class SenderRulesTest {

    static final long REQ = 11;
    ManualClock clock;
    KvPool pool;
    TransferSender tx;
    ScriptedLink link;
    long[] sourceHandles;

    @BeforeEach
    void setUp() {
        clock = new ManualClock();
        pool = Kv.pool(32);
        tx = TransferSender.builder(pool, Kv.identity()).clock(clock).maxPagesInFlight(2)
            .drainDeadline(Duration.ofMillis(100)).build();
        link = new ScriptedLink().hello(Kv.identity());
        tx.addPeer(link);
        tx.doWork();
    }

    @AfterEach
    void tearDown() {
        tx.close();
        pool.close();
    }

    /** Prefill: a sequence of {@code tokens} tokens of KV, offered, then closed by its owner. */
    OutgoingTransfer offer(int tokens) {
        final Sequence s = pool.admit(tokens, 0).sequence();
        s.append(tokens);
        Kv.write(s, REQ);
        sourceHandles = new long[s.pageCount()];
        for (int i = 0; i < sourceHandles.length; i++) {
            sourceHandles[i] = s.pageHandle(i);
        }
        final OutgoingTransfer t = tx.offer(REQ, s);
        s.close(); // the sender's references keep the pages
        return t;
    }

    Message.Descriptor descriptor(int tokens) {
        final int pages = (int) Kv.LAYOUT.pagesFor(tokens);
        return new Message.Descriptor(REQ, 3, 9, tokens, Kv.LAYOUT.fingerprint(), 1, 0, new long[pages], new byte[1]);
    }

    List<SlotState> sourceStates() {
        return java.util.Arrays.stream(sourceHandles).mapToObj(h -> pool.stateOfSlot(PageHandle.slot(h))).toList();
    }

    @Test
    void aFlushThatThrowsEndsTheTransferDrainedWithNothingProven() {
        final OutgoingTransfer t = offer(8); // 2 pages: one batch
        link.inject(descriptor(8));
        tx.doWork();
        link.flushFails = new IllegalStateException("flush refused");
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork(); // the writes end OK; the flush that follows throws
        // no answer will come for a flush that threw: the transfer does not wait for one
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        final Message.Drained d = link.sent(Message.Drained.class).getFirst();
        assertEquals(2, d.posted());
        assertEquals(0, d.succeeded(), "nothing was proven delivered");
        assertEquals(2, d.failed());
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.FREE), "source pages released: " + sourceStates());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void withTheSourceHoldOffTheChecksumsDescribeThePagesAsTheyWereWhenReleased() {
        tx.close();
        tx = TransferSender.builder(pool, Kv.identity()).clock(clock).maxPagesInFlight(2).drainDeadline(Duration.ofMillis(100))
            .unsafeDisable(TransferSafeguard.SOURCE_HOLD).build();
        link = new ScriptedLink().hello(Kv.identity());
        tx.addPeer(link);
        tx.doWork();
        final OutgoingTransfer t = offer(8); // 2 pages, one batch; the owner closed its sequence
        final int[] expected = new int[2];
        for (int i = 0; i < 2; i++) {
            expected[i] = KvChecksum.of(Kv.LAYOUT, pool.page(sourceHandles[i]), REQ, i, 8);
        }
        link.inject(descriptor(8));
        tx.doWork(); // posted, so released at once: the unsafe part
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.FREE), "released at the post: " + sourceStates());
        final Sequence next = pool.admit(8, 0).sequence(); // the pages' next tenant, while the writes are in flight
        next.append(8);
        Kv.write(next, REQ + 1);
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.COMPLETED, t.state(), t::toString);
        assertArrayEquals(expected, link.sent(Message.Completion.class).getFirst().checksums(),
            "the request's KV as posted, so a receiver that checksums catches what the transport read later");
        next.close();
    }

    @Test
    void aChecksumThatFailsOnThisSideAbortsTheTransferAtOnce() {
        tx.close();
        tx = TransferSender.builder(pool, Kv.identity()).clock(clock).maxPagesInFlight(2).drainDeadline(Duration.ofMillis(100))
            .checksums(new PageChecksums() {
                @Override
                public boolean supports(io.kvpool.storage.PageStorage storage) {
                    return true;
                }

                @Override
                public void compute(KvPool pool, long[] handles, int from, int to, long requestId, int tokenCount, int[] out) {
                    throw new InternalError("checksum kernel failed: a fault occurred in an unsafe memory access operation");
                }
            }).build();
        link = new ScriptedLink().hello(Kv.identity());
        tx.addPeer(link);
        tx.doWork();
        final OutgoingTransfer t = offer(8); // 2 pages: one batch
        link.inject(descriptor(8));
        tx.doWork();
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork(); // the checksums throw: the duty cycle goes on, the transfer ends
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        assertTrue(t.failure().contains("could not compute the checksums") && t.failure().contains("checksum kernel failed"), t::failure);
        assertTrue(link.sent(Message.Completion.class).isEmpty(), "no completion without its checksums");
        assertEquals(Message.Abort.SENDER_FAILED, link.sent(Message.Abort.class).getFirst().reason());
        final Message.Drained d = link.sent(Message.Drained.class).getFirst();
        assertEquals(2, d.succeeded(), "the flush proved both writes");
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.FREE), "source pages released: " + sourceStates());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void writesGoInBoundedBatchesThenAFlushThenTheCompletion() {
        final OutgoingTransfer t = offer(20); // 5 pages
        link.inject(descriptor(20));
        tx.doWork();
        assertEquals(OutgoingTransfer.State.WRITING, t.state());
        assertEquals(2, link.postedTokens.size(), "at most 2 pages in flight");
        for (int round = 0; round < 10 && link.flushTokens.isEmpty(); round++) {
            final int done = link.postedTokens.size();
            for (long tok : link.postedTokens.subList(done - Math.min(2, done - (int) t.succeeded()), done)) {
                link.completeWrite(tok, PeerLink.OK);
            }
            tx.doWork();
            assertTrue(tx.pagesInFlight() <= 2, "in flight " + tx.pagesInFlight());
        }
        assertEquals(5, link.postedTokens.size());
        assertEquals(OutgoingTransfer.State.FLUSHING, t.state());
        assertTrue(link.sent(Message.Completion.class).isEmpty(), "no completion before the flush proves delivery");
        final int expected4 = KvChecksum.of(Kv.LAYOUT, pool.storage().hostPage(PageHandle.slot(sourceHandles[4])), REQ, 4, 20);
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.COMPLETED, t.state());
        assertNull(t.failureReason(), "a completed offer has no failure reason");
        assertNull(t.failure());
        final Message.Completion c = link.sent(Message.Completion.class).getFirst();
        assertEquals(20, c.tokenCount());
        assertEquals(5, c.checksums().length);
        assertEquals(5, c.posted());
        assertEquals(5, c.succeeded());
        assertEquals(expected4, c.checksums()[4]);
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.FREE), "source pages released after completion");
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void aRetiredLinkFinishesTheTransferInFlightOnItAndTakesNoNewWork() {
        final OutgoingTransfer t = offer(8); // 2 pages
        link.inject(descriptor(8));
        tx.doWork();
        assertEquals(OutgoingTransfer.State.WRITING, t.state());
        link.inject(new Message.Cancel(Message.Cancel.LINK, Message.Cancel.RETIRING, "retired"));
        tx.doWork();
        final Peer p = tx.peer(0);
        assertEquals(Peer.State.RETIRING, p.state());
        assertFalse(p.isUp(), "the owner sees it takes no new work and opens a fresh link");
        assertEquals(1, tx.metrics().linksRetired());
        assertEquals(0, tx.metrics().cancelsIgnored());
        link.inject(new Message.Cancel(Message.Cancel.LINK, Message.Cancel.RETIRING, "retired again"));
        tx.doWork();
        assertEquals(1, tx.metrics().linksRetired(), "retired once");
        assertEquals(1, tx.metrics().cancelsIgnored(), "a CANCEL that ended nothing is still counted");
        for (long tok : link.postedTokens) {
            link.completeWrite(tok, PeerLink.OK);
        }
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.COMPLETED, t.state(), "the transfer in flight finished on the retiring link");
        assertEquals(1, link.sent(Message.Completion.class).size());
        link.failLink("torn down by the receiver");
        tx.doWork();
        assertEquals(Peer.State.FAILED, p.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    /**
     * A server that reconnects adds a peer per link. Links that died owing nothing must leave the duty cycle
     * (it would otherwise slow with every reconnect), but a link that died with writes in flight must still
     * be polled until each write's terminal state arrived: only then may the sources be freed.
     */
    @Test
    void deadLinksLeaveTheDutyCycleButALinkOwingWritesIsPolledUntilTheyEnd() {
        for (int i = 0; i < 50; i++) {
            final ScriptedLink dead = new ScriptedLink().hello(Kv.identity());
            tx.addPeer(dead);
            tx.doWork();
            dead.failLink("reconnect " + i);
        }
        tx.doWork();
        assertEquals(1, tx.polledPeers(), "only the live link is still polled");

        final OutgoingTransfer t = offer(8); // 2 pages, both posted at once
        link.inject(descriptor(8));
        tx.doWork();
        assertEquals(2, link.postedTokens.size());
        link.failLink("connection reset");
        link.completeWrite(link.postedTokens.get(0), PeerLink.FAILED); // queued behind the failure
        tx.doWork();
        assertEquals(1, tx.polledPeers(), "a down link that owes terminal states is still polled");
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.OWNED), "sources still read by the transport");
        link.completeWrite(link.postedTokens.get(1), PeerLink.CANCELED);
        tx.doWork();
        tx.doWork();
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        assertEquals(0, tx.polledPeers(), "once its writes ended, the dead link leaves the cycle");
        assertTrue(pool.verifyAccounting().balanced());
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.FREE));
    }

    @Test
    void oneFailedWriteDoesNotDrainWhileOthersAreInFlight() {
        final OutgoingTransfer t = offer(8); // 2 pages, both posted at once
        link.inject(descriptor(8));
        tx.doWork();
        assertEquals(2, link.postedTokens.size());
        link.completeWrite(link.postedTokens.get(0), PeerLink.FAILED);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.FAILING, t.state());
        assertEquals(1, link.sent(Message.Abort.class).size(), "the receiver is told at once");
        assertTrue(link.sent(Message.Drained.class).isEmpty(), "DRAINED while a write is still in flight");
        assertTrue(sourceStates().stream().allMatch(s -> s == SlotState.OWNED), "sources still read by the transport");
        clock.advanceMillis(50);
        tx.doWork();
        assertTrue(link.sent(Message.Drained.class).isEmpty());
        link.completeWrite(link.postedTokens.get(1), PeerLink.OK);
        tx.doWork();
        assertTrue(link.sent(Message.Drained.class).isEmpty(), "the OK write is not proven delivered before a flush");
        assertEquals(1, link.flushTokens.size());
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        final List<Message.Drained> d = link.sent(Message.Drained.class);
        assertEquals(1, d.size());
        assertEquals(new Message.Drained(3, 9, 0, 2, 1, 1), d.getFirst(), "1 proven, 1 failed (it may still land)");
        assertEquals(OutgoingTransfer.State.DRAINED, t.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void anAbortStopsNewWritesFirstThenDrains() {
        final OutgoingTransfer t = offer(20);
        link.inject(descriptor(20));
        tx.doWork();
        assertEquals(2, link.postedTokens.size());
        link.inject(new Message.Abort(3, 9, Message.Abort.REQUESTED, "router"));
        link.completeWrite(link.postedTokens.get(0), PeerLink.OK);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.FAILING, t.state());
        assertEquals(2, link.postedTokens.size(), "a write was posted after the abort");
        assertTrue(link.sent(Message.Abort.class).isEmpty(), "the receiver asked; no ABORT back");
        link.completeWrite(link.postedTokens.get(1), PeerLink.CANCELED);
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), false); // the flush cannot prove the OK write either
        tx.doWork();
        assertEquals(new Message.Drained(3, 9, 0, 2, 0, 2), link.sent(Message.Drained.class).getFirst());
    }

    @Test
    void aFailedFlushFailsTheTransfer() {
        final OutgoingTransfer t = offer(4);
        link.inject(descriptor(4));
        tx.doWork();
        link.completeWrite(link.postedTokens.getFirst(), PeerLink.OK);
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), false);
        tx.doWork();
        assertTrue(link.sent(Message.Completion.class).isEmpty());
        assertEquals(OutgoingTransfer.State.DRAINED, t.state());
        assertEquals(FailureReason.SENDER_ABORTED, t.failureReason(), t::failure);
        assertEquals(new Message.Drained(3, 9, 0, 1, 0, 1), link.sent(Message.Drained.class).getFirst(),
            "an unproven write is reported as such");
        assertEquals(1, link.flushTokens.size(), "a failed flush is not retried");
    }

    @Test
    void aFailedWriteIsAbortedAsTheLinksFault() {
        final OutgoingTransfer t = offer(8);
        link.inject(descriptor(8));
        tx.doWork();
        link.completeWrite(link.postedTokens.getFirst(), PeerLink.FAILED);
        link.postedTokens.stream().skip(1).forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        assertEquals(FailureReason.SENDER_ABORTED, t.failureReason(), t::toString);
        assertEquals(Message.Abort.WRITE_FAILED, link.sent(Message.Abort.class).getFirst().reason());
    }

    @Test
    void aFlushThatDoesNotProveDeliveryIsAbortedAsTheLinksFault() {
        final OutgoingTransfer t = offer(8);
        link.inject(descriptor(8));
        tx.doWork();
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), false);
        tx.doWork();
        assertEquals(FailureReason.SENDER_ABORTED, t.failureReason(), t::toString);
        assertEquals(Message.Abort.WRITE_FAILED, link.sent(Message.Abort.class).getFirst().reason());
    }

    @Test
    void aSourcePoolClosedMidTransferFailsItAndTheSenderGoesOn() {
        final OutgoingTransfer t = offer(16); // 4 pages: two batches of two
        link.inject(descriptor(16));
        tx.doWork();
        assertEquals(2, link.postedTokens.size());
        pool.close(); // under the running sender: its references do not keep the storage
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork(); // the next batch would read the closed pool: the transfer fails instead, and flushes what it wrote
        assertEquals(2, link.postedTokens.size(), "nothing more is read from a closed pool");
        final Message.Abort abort = link.sent(Message.Abort.class).getFirst();
        assertEquals(Message.Abort.SENDER_FAILED, abort.reason());
        assertTrue(abort.detail().contains("source pool was closed with 2 pages still to write"), abort.detail());
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        assertEquals(new Message.Drained(3, 9, 0, 2, 2, 0), link.sent(Message.Drained.class).getFirst());
        assertEquals(0, tx.activeTransfers());
    }

    @Test
    void aSourcePoolClosedBeforeTheFlushAnswerStillEndsTheTransfer() {
        final OutgoingTransfer t = offer(8); // 2 pages: one batch
        link.inject(descriptor(8));
        tx.doWork();
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        assertEquals(1, link.flushTokens.size());
        pool.close();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork(); // what the transport read may have been freed: the transfer fails, its writes proven delivered
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        assertEquals(Message.Abort.SENDER_FAILED, link.sent(Message.Abort.class).getFirst().reason());
        assertTrue(link.sent(Message.Completion.class).isEmpty(), "no COMPLETION: the receiver must not commit it");
        assertEquals(new Message.Drained(3, 9, 0, 2, 2, 0), link.sent(Message.Drained.class).getFirst());
        assertEquals(0, tx.activeTransfers(), "the transfer left the sender although its pool could not take the pages back");
        tx.doWork(); // and the duty cycle goes on
    }

    @Test
    void aSourcePoolClosedBeforeTheFlushAnswerFailsTheTransferWithoutChecksumsToo() {
        final ScriptedLink plain = new ScriptedLink().hello(Kv.identity());
        final TransferSender noChecksums = TransferSender.builder(pool, Kv.identity()).clock(clock).checksums(false)
            .maxPagesInFlight(2).build();
        noChecksums.addPeer(plain);
        noChecksums.doWork();
        final Sequence s = pool.admit(8, 0).sequence();
        s.append(8);
        final OutgoingTransfer t = noChecksums.offer(REQ, s);
        s.close();
        plain.inject(descriptor(8));
        noChecksums.doWork();
        plain.postedTokens.forEach(tok -> plain.completeWrite(tok, PeerLink.OK));
        noChecksums.doWork();
        pool.close();
        plain.completeFlush(plain.flushTokens.getFirst(), true);
        noChecksums.doWork();
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        assertTrue(plain.sent(Message.Completion.class).isEmpty(), "no COMPLETION for bytes read from a closed pool");
        assertEquals(Message.Abort.SENDER_FAILED, plain.sent(Message.Abort.class).getFirst().reason());
        assertEquals(0, noChecksums.activeTransfers());
        noChecksums.close();
    }

    @Test
    void aDescriptorForAnOfferAbortedBeforeItCameIsRefusedAtOnce() {
        final OutgoingTransfer t = offer(8);
        assertTrue(tx.abort(t, "client gone"));
        assertEquals(OutgoingTransfer.State.DRAINED, t.state(), t::toString);
        assertEquals(0, tx.activeTransfers());
        assertTrue(link.sent(Message.Abort.class).isEmpty(), "no descriptor yet: nobody to tell");
        link.inject(descriptor(8));
        tx.doWork(); // the receiver holds pages for it: it hears now, not at its completion timeout
        final Message.Abort abort = link.sent(Message.Abort.class).getFirst();
        assertEquals(3, abort.transferId());
        assertEquals(9, abort.generation());
        assertEquals(Message.Abort.REQUESTED, abort.reason());
        assertTrue(abort.detail().contains("client gone"), abort.detail());
        assertEquals(new Message.Drained(3, 9, 0, 0, 0, 0), link.sent(Message.Drained.class).getFirst());
        assertTrue(link.postedTokens.isEmpty());
        assertEquals(List.of(SlotState.FREE, SlotState.FREE), sourceStates(), "the source pages went back at the abort");
    }

    @Test
    void anOfferAbortedThenOfferedAgainTakesTheNextDescriptor() {
        tx.abort(offer(8), "retried");
        final OutgoingTransfer again = offer(8);
        link.inject(descriptor(8));
        tx.doWork();
        assertEquals(OutgoingTransfer.State.WRITING, again.state(), again::toString);
        assertEquals(2, link.postedTokens.size());
        assertTrue(link.sent(Message.Abort.class).isEmpty(), link.sent::toString);
    }

    @Test
    void aCancelEndsAnAbortedOffersMarkSoARetrysDescriptorWaitsForItsOffer() {
        tx.abort(offer(8), "client gone");
        link.inject(new Message.Cancel(REQ, Message.Cancel.REJECTED, "slots busy")); // the receiver's attempt 1 is over
        tx.doWork();
        link.inject(descriptor(8)); // attempt 2, before prefill offers the request again
        tx.doWork();
        assertTrue(link.sent(Message.Abort.class).isEmpty(), "a retry's descriptor is not refused for attempt 1's abort");
        final OutgoingTransfer again = offer(8);
        assertEquals(OutgoingTransfer.State.WRITING, again.state(), again::toString);
        assertEquals(2, link.postedTokens.size());
    }

    @Test
    void anEchoOfAnEarlierAttemptsAbortKeepsARetrysAbortedMark() {
        final OutgoingTransfer first = offer(8); // attempt 1: descriptor (3, 9), written and completed
        link.inject(descriptor(8));
        tx.doWork();
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.COMPLETED, first.state(), first::toString);
        tx.doWork();
        // decode fails attempt 1 (ABORT, then its CANCEL) while the router offers a retry, whose client then leaves
        assertTrue(tx.abort(offer(8), "client gone"), "the retry, still waiting, is aborted");
        link.sent.clear();
        link.inject(new Message.Abort(3, 9, Message.Abort.REQUESTED, "checksum"));
        link.inject(new Message.Cancel(REQ, Message.Cancel.ABORTED, "attempt 1 failed")); // attempt 1's echo
        tx.doWork();
        link.inject(new Message.Descriptor(REQ, 4, 1, 8, Kv.LAYOUT.fingerprint(), 1, 0, new long[(int) Kv.LAYOUT.pagesFor(8)],
            new byte[1])); // decode's retry
        tx.doWork();
        // the retry was aborted here: its descriptor is refused at once, so decode frees its pages now, not in 30 s
        assertTrue(link.sent(Message.Abort.class).stream().anyMatch(a -> a.transferId() == 4 && a.generation() == 1),
            link.sent::toString);
        assertTrue(link.sent(Message.Drained.class).contains(new Message.Drained(4, 1, 0, 0, 0, 0)), link.sent::toString);
    }

    @Test
    void anAbortedOffersRefusalEndsWithTheDescriptorTimeout() {
        tx.abort(offer(8), "client gone");
        clock.advanceMillis(60_000); // the builder's descriptor timeout
        tx.doWork();
        link.inject(descriptor(8));
        tx.doWork();
        assertTrue(link.sent(Message.Abort.class).isEmpty(), "too late to be that offer's: it waits for an offer, as any early one");
        final OutgoingTransfer later = offer(8);
        assertEquals(OutgoingTransfer.State.WRITING, later.state(), later::toString);
    }

    @Test
    void aDrainDeadlineForceCancelsButStillWaitsForTerminalStates() {
        final OutgoingTransfer t = offer(8);
        link.inject(descriptor(8));
        tx.doWork();
        tx.abort(t, "test");
        clock.advanceMillis(99);
        tx.doWork();
        assertEquals(0, link.cancels);
        clock.advanceMillis(1);
        tx.doWork();
        tx.doWork();
        assertEquals(1, link.cancels, "force-cancel once at the deadline");
        assertTrue(link.sent(Message.Drained.class).isEmpty(), "cancel requested is not cancel done");
        link.completeWrite(link.postedTokens.get(0), PeerLink.CANCELED);
        link.completeWrite(link.postedTokens.get(1), PeerLink.CANCELED);
        tx.doWork();
        assertEquals(new Message.Drained(3, 9, 0, 2, 0, 2), link.sent(Message.Drained.class).getFirst());
        assertEquals(1, tx.metrics().forcedCancels());
    }

    @Test
    void senderMetricsCountPostedAndFailedWritesTheDrainedSentAndTheCompletion() {
        final SenderMetrics m = tx.metrics();
        final OutgoingTransfer failed = offer(8); // 2 pages, both posted at once
        link.inject(descriptor(8));
        tx.doWork();
        assertEquals(2, m.writesPosted());
        link.completeWrite(link.postedTokens.get(0), PeerLink.FAILED);
        link.completeWrite(link.postedTokens.get(1), PeerLink.CANCELED);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.DRAINED, failed.state(), failed::toString);
        assertEquals(2, m.writesFailed());
        assertEquals(1, m.drainedSent());
        assertEquals(0, m.completed());

        final OutgoingTransfer done = offer(4); // 1 page; the next generation of the receiver's slot
        link.inject(new Message.Descriptor(REQ, 3, 10, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[1]));
        tx.doWork();
        link.completeWrite(link.postedTokens.get(2), PeerLink.OK);
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.COMPLETED, done.state(), done::toString);
        assertEquals(3, m.writesPosted());
        assertEquals(2, m.writesFailed(), "an OK write is not a failed one");
        assertEquals(1, m.drainedSent());
        assertEquals(1, m.completed());
        assertSame(m, tx.metrics(), "one metrics object for the sender's life");
        assertEquals(0, m.forcedCancels());
        assertEquals(0, m.duplicateDescriptors());
    }

    @Test
    void aDuplicatedDescriptorIsIgnoredNotRefused() {
        // found by the leak hunter: refusing the duplicate sent DRAINED(nothing posted) for the running
        // transfer, and the receiver freed pages its writes were still landing in
        final OutgoingTransfer t = offer(20);
        link.inject(descriptor(20));
        tx.doWork();
        link.inject(descriptor(20));
        tx.doWork();
        assertEquals(OutgoingTransfer.State.WRITING, t.state());
        assertTrue(link.sent(Message.Drained.class).isEmpty(), () -> link.sent.toString());
        assertTrue(link.sent(Message.Abort.class).isEmpty());
        assertEquals(1, tx.metrics().duplicateDescriptors());
    }

    @Test
    void aDuplicatedEarlyDescriptorIsIgnoredToo() {
        link.inject(descriptor(4));
        link.inject(descriptor(4));
        tx.doWork();
        offer(4);
        assertTrue(link.sent(Message.Drained.class).isEmpty(), () -> link.sent.toString());
        assertEquals(1, link.postedTokens.size());
    }

    @Test
    void anAbortAfterTheEndRepeatsTheTruthNotNothingInFlight() {
        // found by the leak hunter's reasoning: a DRAINED with unproven writes may be lost; an ABORT for the
        // finished transfer must not be answered "nothing posted"
        final OutgoingTransfer t = offer(8);
        link.inject(descriptor(8));
        tx.doWork();
        link.completeWrite(link.postedTokens.get(0), PeerLink.FAILED);
        link.completeWrite(link.postedTokens.get(1), PeerLink.OK);
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(OutgoingTransfer.State.DRAINED, t.state());
        link.sent.clear();
        link.inject(new Message.Abort(3, 9, Message.Abort.REQUESTED, "router"));
        tx.doWork();
        assertEquals(List.of(new Message.Drained(3, 9, 0, 2, 1, 1)), link.sent(Message.Drained.class));
    }

    @Test
    void aDescriptorMayArriveBeforeTheOffer() {
        link.inject(descriptor(4));
        tx.doWork();
        assertTrue(link.postedTokens.isEmpty());
        offer(4);
        assertEquals(1, link.postedTokens.size());
    }

    @Test
    void anAbortForATransferNeverStartedHereIsAnsweredDrainedWithNothingPosted() {
        link.inject(new Message.Abort(5, 2, Message.Abort.REQUESTED, "descriptor lost"));
        tx.doWork();
        assertEquals(new Message.Drained(5, 2, -1, 0, 0, 0), link.sent(Message.Drained.class).getFirst());
    }

    @Test
    void aDescriptorForAnotherLayoutIsRefused() {
        final OutgoingTransfer t = offer(4);
        link.inject(new Message.Descriptor(REQ, 3, 9, 4, 0xBAD, 1, 0, new long[1], new byte[1]));
        tx.doWork();
        assertEquals(OutgoingTransfer.State.WAITING, t.state());
        assertTrue(link.postedTokens.isEmpty());
        assertTrue(link.sent(Message.Abort.class).getFirst().detail().contains("0xbad"));
        assertEquals(new Message.Drained(3, 9, 0, 0, 0, 0), link.sent(Message.Drained.class).getFirst());
    }

    @Test
    void aShortSenderWritesWhatItHasAndSaysSo() {
        // the receiver expects 20 tokens; this prefill holds 5 (the incident's stub would hold 1)
        offer(5);
        link.inject(descriptor(20));
        tx.doWork();
        assertEquals(2, link.postedTokens.size(), "5 tokens are 2 pages, not 5");
        link.postedTokens.forEach(tok -> link.completeWrite(tok, PeerLink.OK));
        tx.doWork();
        link.completeFlush(link.flushTokens.getFirst(), true);
        tx.doWork();
        assertEquals(5, link.sent(Message.Completion.class).getFirst().tokenCount(), "the receiver's length check needs the truth");
    }

    /**
     * A link that posts a batch and then throws an Error (ShmLink's memory fault reported as putBatch returns): the
     * batch counts as posted, so the queued completions match, the transfer fails and drains, and the source pages
     * come back. Counted as not posted, the completions outnumbered the posts (the receiver saw BAD_COMPLETION) and a
     * failing transfer never drained.
     */
    @Test
    void aBatchThatThrowsAfterPostingCountsAsPostedAndTheTransferDrains() {
        final boolean[] thrown = {false};
        try (SimPair rig = new SimPair(new SimPair.Setup(Kv.pool(64), Kv.pool(64)).faults(io.kvpool.transfer.sim.SimFaults.NONE, false)
            .sender(p -> TransferSender.builder(p, Kv.identity()).maxPagesInFlight(4).drainDeadline(Duration.ofMillis(50)))
            .receiver(p -> TransferReceiver.builder(p, Kv.identity()).completionTimeout(Duration.ofMillis(20))
                .drainTimeout(Duration.ofMillis(20)))
            .links(l -> new ForwardingLink(l) {
                @Override
                public void putBatch(io.kvpool.transfer.spi.RemoteRegion r, int[] dst, io.kvpool.storage.PageStorage s,
                                     int[] src, int off, int n, long token) {
                    in.putBatch(r, dst, s, src, off, n, token);
                    if (!thrown[0]) {
                        thrown[0] = true;
                        throw new InternalError("a fault occurred in an unsafe memory access operation");
                    }
                }
            }, l -> l))) {
            final Sequence src = rig.prefill.admit(40, 0).sequence();
            src.append(40);
            Kv.write(src, 9);
            final OutgoingTransfer out = rig.sender.offer(9, src);
            src.close();
            final IncomingTransfer in = rig.receiver.start(9, 40, 0, rig.rp);
            int escaped = 0;
            for (int i = 0; i < 2_000 && (rig.sender.activeTransfers() > 0 || !in.isTerminal()); i++) {
                try {
                    rig.sender.doWork();
                } catch (InternalError e) { // as a duty loop that survives errors would: the accounting is what counts
                    escaped++;
                }
                rig.receiver.doWork();
                rig.net.advance(10_000);
            }
            assertTrue(thrown[0]);
            assertEquals(OutgoingTransfer.State.DRAINED, out.state(), out.toString());
            assertEquals(0, rig.sender.activeTransfers());
            assertNotEquals(IncomingTransfer.State.COMMITTED, in.state(), in.toString());
            assertTrue(in.isTerminal(), in.toString());
            assertEquals(rig.prefill.capacity(), rig.prefill.snapshot().free(), "the source pages came back");
            assertEquals(rig.decode.capacity(), rig.decode.snapshot().free(), "the decode pages came back");
            assertEquals(0, escaped, "the error became the transfer's failure");
        }
    }

    /** {@link #offer} of another request. */
    OutgoingTransfer offerAs(long req, int tokens) {
        try (Sequence s = pool.admit(tokens, 0).sequence()) {
            s.append(tokens);
            Kv.write(s, req);
            return tx.offer(req, s);
        }
    }

    @Test
    void everyEndOfAnOfferNamesItsReasonTyped() {
        // the receiver refused the request before it was offered (prefill still computing), and after
        link.inject(new Message.Cancel(21, Message.Cancel.REJECTED, "decode full"));
        tx.doWork();
        final OutgoingTransfer refusedEarly = offerAs(21, 4);
        final OutgoingTransfer refused = offerAs(22, 4);
        link.inject(new Message.Cancel(22, Message.Cancel.REJECTED, "decode full"));
        final OutgoingTransfer cancelled = offerAs(23, 4);
        link.inject(new Message.Cancel(23, Message.Cancel.ABORTED, "client left"));
        tx.doWork();
        final OutgoingTransfer abortedHere = offerAs(24, 4);
        tx.abort(abortedHere, "router");

        final OutgoingTransfer abortedThere = offer(20); // writing when the receiver aborts it
        link.inject(descriptor(20));
        tx.doWork();
        link.inject(new Message.Abort(3, 9, Message.Abort.REQUESTED, "router"));
        tx.doWork();

        final OutgoingTransfer timedOut = offerAs(25, 4);
        clock.advanceMillis(Duration.ofMinutes(10).toMillis());
        final OutgoingTransfer atClose = offerAs(26, 4);
        tx.doWork();
        tx.close();

        final java.util.Map<OutgoingTransfer, FailureReason> expected = new java.util.LinkedHashMap<>();
        expected.put(refusedEarly, FailureReason.REJECTED);
        expected.put(refused, FailureReason.REJECTED);
        expected.put(cancelled, FailureReason.ABORTED);
        expected.put(abortedHere, FailureReason.SENDER_ABORTED);
        expected.put(abortedThere, FailureReason.ABORTED);
        expected.put(timedOut, FailureReason.TIMEOUT);
        expected.put(atClose, FailureReason.PEER_LOST);
        expected.forEach((t, reason) -> {
            assertNotNull(t.failure(), t::toString);
            assertEquals(reason, t.failureReason(), t + ": " + t.failure());
        });
    }
}
