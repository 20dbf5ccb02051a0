package io.kvpool.transfer;

import io.kvpool.PageHandle;
import io.kvpool.SlotState;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.Test;

import java.util.Set;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A suspect write (its outcome unknown) on a link that cannot revoke one registration: the link is retired — no new
 * transfer on it, the ones in flight finish, then it is torn down and that teardown, as before, is the only proof
 * that frees the suspect's quarantined pages. Driven step by step through {@link ScriptedLink}s.
 */
class LinkRetirementTest extends TwoSenderReceiverFixture {

    static final long REQ = ReceiverRulesTest.REQ;
    static final long SUSPECT_REQ = 99;

    IncomingTransfer startOne(int tokens) {
        final IncomingTransfer t = rx.start(REQ, tokens, 0, pa);
        assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
        return t;
    }

    /** The suspect: a transfer whose sender reports one write unproven. */
    IncomingTransfer suspect() {
        final IncomingTransfer s = rx.start(SUSPECT_REQ, 10, 0, pa);
        assertEquals(IncomingTransfer.State.RECEIVING, s.state(), s::toString);
        a.inject(new Message.Abort(s.transferId(), s.generation(), Message.Abort.SENDER_FAILED, "write failed"));
        a.inject(new Message.Drained(s.transferId(), s.generation(), 0, 3, 2, 1));
        return s;
    }

    SlotState[] slots(IncomingTransfer t) {
        final Message.Descriptor d = a.sent(Message.Descriptor.class).stream()
            .filter(x -> x.transferId() == t.transferId() && x.generation() == t.generation()).findFirst().orElseThrow();
        return java.util.Arrays.stream(d.pageHandles()).mapToObj(h -> pool.stateOfSlot(PageHandle.slot(h))).toArray(SlotState[]::new);
    }

    void complete(IncomingTransfer t, int registration) {
        final int[] cs = ReceiverRulesTest.deliver(pool, a, registration, 0, 10);
        a.inject(new Message.Completion(t.transferId(), t.generation(), 0, 10, 0, cs, cs.length, cs.length, 0));
    }

    @Test
    void aSuspectWriteRetiresItsLinkAndTheOtherTransferInFlightOnItCommits() {
        final IncomingTransfer inFlight = startOne(10);              // registration 0
        final IncomingTransfer s = suspect();                        // registration 1
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, s.state(), s::toString);
        assertEquals(Peer.State.RETIRING, rx.peer(pa).state());
        assertFalse(rx.peer(pa).isUp(), "a retiring link takes no new transfer");
        assertEquals(0, a.tearDowns, "not torn down while a transfer is in flight on it");
        assertEquals(IncomingTransfer.State.RECEIVING, inFlight.state(), inFlight::toString);
        assertEquals(1, rx.metrics().linksRetired());
        assertTrue(a.sent(Message.Cancel.class).stream().anyMatch(c -> c.requestId() == Message.Cancel.LINK
            && c.reason() == Message.Cancel.RETIRING), "the sender is told to open a fresh link");
        final long requestCancels = java.util.stream.Stream.of(a, b).flatMap(l -> l.sent(Message.Cancel.class).stream())
            .filter(c -> c.requestId() != Message.Cancel.LINK).count();
        assertEquals(requestCancels, rx.metrics().cancelsSent(), "the link's notice is counted as a retirement, not as a request's CANCEL");

        final int descriptors = a.sent(Message.Descriptor.class).size();
        final IncomingTransfer refused = rx.start(100, 5, 0, pa);
        assertEquals(IncomingTransfer.State.REJECTED, refused.state());
        assertEquals(FailureReason.PEER_LOST, refused.failure());
        assertEquals(descriptors, a.sent(Message.Descriptor.class).size(), "no descriptor on a retiring link");
        final IncomingTransfer elsewhere = rx.start(101, 5, 0, pb);
        assertEquals(IncomingTransfer.State.RECEIVING, elsewhere.state(), "a fresh link takes new work");

        complete(inFlight, 0);
        rx.doWork();
        assertEquals(IncomingTransfer.State.COMMITTED, inFlight.state(), inFlight::toString);
        assertTrue(a.tearDowns > 0, "idle now: torn down");
        assertEquals(Peer.State.FAILED, rx.peer(pa).state());
        assertEquals(IncomingTransfer.State.QUARANTINED, s.state(), "the teardown is not proven yet");
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, s.state());
        assertEquals(0, rx.metrics().failures(FailureReason.PEER_LOST) - 1, "only the refused start: no collateral PEER_LOST");
        inFlight.sequence().close();
        rx.abort(elsewhere, "done");
        b.inject(new Message.Drained(elsewhere.transferId(), elsewhere.generation(), 0, 0, 0, 0));
        rx.doWork();
        assertTrue(pool.verifyAccounting().balanced());
        assertEquals(32, pool.snapshot().free());
    }

    @Test
    void aLinkOfASenderThatCannotBeToldIsTornDownAtOnceNotRetired() {
        // a version-2 sender ignores CANCEL(link, RETIRING): retired, its link would be refused new work until the
        // teardown without the sender knowing to open another
        final ScriptedLink old = new ScriptedLink().hello(Kv.identity().withVersions(1, 2));
        final int po = rx.addPeer(old);
        rx.doWork();
        assertEquals(2, rx.peer(po).protocolVersion());
        final IncomingTransfer inFlight = rx.start(REQ, 10, 0, po);
        final IncomingTransfer s = rx.start(SUSPECT_REQ, 10, 0, po);
        old.inject(new Message.Abort(s.transferId(), s.generation(), Message.Abort.SENDER_FAILED, "write failed"));
        old.inject(new Message.Drained(s.transferId(), s.generation(), 0, 3, 2, 1));
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, s.state(), s::toString);
        assertTrue(old.tearDowns > 0, "torn down at once");
        assertEquals(0, rx.malformedFrames(), () -> "the sender's frames are its version's: " + rx.peer(po).failure());
        assertEquals(0, rx.metrics().linksRetired());
        assertEquals(FailureReason.PEER_LOST, inFlight.failure(), inFlight::toString);
        assertTrue(rx.peer(pa).isUp(), "the other links are untouched");
    }

    @Test
    void tornDownAtOnceTheOtherTransferInFlightOnTheLinkFailsPeerLost() {
        // what retirement replaces (and the first test's contrast: the same steps fail the transfer in flight)
        setUp(x -> x.retireSuspectLinks(false));
        final IncomingTransfer inFlight = startOne(10);
        final IncomingTransfer s = suspect();
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, s.state());
        assertTrue(a.tearDowns > 0);
        assertEquals(FailureReason.PEER_LOST, inFlight.failure(), inFlight::toString);
        assertEquals(0, rx.metrics().linksRetired());
    }

    @Test
    void theSuspectsPagesStayQuarantinedWhileTheRetiredLinkCanStillWrite() {
        final IncomingTransfer inFlight = startOne(10);
        final IncomingTransfer s = suspect();
        rx.doWork();
        for (int i = 0; i < 9; i++) { // 90 ms: the transfer in flight has not timed out, the link is still up
            clock.advanceMillis(10);
            rx.doWork();
            assertEquals(IncomingTransfer.State.QUARANTINED, s.state());
            assertTrue(java.util.Arrays.stream(slots(s)).allMatch(x -> x == SlotState.QUARANTINED), () -> java.util.Arrays.toString(slots(s)));
        }
        complete(inFlight, 0);
        rx.doWork();
        for (int i = 0; i < 60; i++) { // torn down but not proven: an hour changes nothing
            clock.advanceMillis(60_000);
            rx.doWork();
        }
        assertEquals(IncomingTransfer.State.QUARANTINED, s.state());
        assertEquals(29 - 3, pool.snapshot().free(), "3 pages committed, 3 quarantined");
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, s.state());
        inFlight.sequence().close();
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void withoutQuarantineTheSuspectsPagesAreFreedWhileTheRetiredLinkCanStillWrite() {
        // the previous test's control: with the safeguard off, the same steps free the pages at once
        setUp(x -> x.unsafeDisable(TransferSafeguard.QUARANTINE_ON_TIMEOUT));
        startOne(10);
        final IncomingTransfer s = suspect();
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, s.state());
        assertEquals(Peer.State.UP, rx.peer(pa).state(), "nothing waits for a teardown: the link was not even retired");
    }

    @Test
    void aRetiringLinkIsTornDownOnceItsLastTransferTimedOutAndDrainedOrQuarantined() {
        final IncomingTransfer stuck = startOne(10);
        final IncomingTransfer s = suspect();
        rx.doWork();
        assertEquals(Peer.State.RETIRING, rx.peer(pa).state());
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(FailureReason.TIMEOUT, stuck.failure());
        assertEquals(Peer.State.RETIRING, rx.peer(pa).state(), "DRAINING: its sender may still prove its writes ended");
        clock.advanceMillis(100);
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, stuck.state());
        assertEquals(Peer.State.FAILED, rx.peer(pa).state(), "nothing in flight: torn down");
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, stuck.state());
        assertEquals(IncomingTransfer.State.RELEASED, s.state());
        assertTrue(pool.verifyAccounting().balanced());
    }

    @Test
    void aRetiringLinkThatFailsEndsItsTransfersAsAnyLostLinkDoes() {
        final IncomingTransfer inFlight = startOne(10);
        suspect();
        rx.doWork();
        a.failLink("connection reset");
        rx.doWork();
        assertEquals(FailureReason.PEER_LOST, inFlight.failure());
        assertEquals(Peer.State.FAILED, rx.peer(pa).state());
        a.tearDownProves = true;
        clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
        rx.doWork();
        assertEquals(0, rx.activeTransfers());
        assertTrue(pool.verifyAccounting().balanced());
    }

    /**
     * A retiring link is still watched: its peer falling silent (a partition) fails it within the heartbeat's idle
     * time plus its timeout, long before the transfer still in flight on it would time out, and its teardown is
     * still the proof that frees the quarantined pages. With the heartbeat off the same silence leaves it RETIRING.
     */
    @Test
    void aRetiringLinkWhosePeerFallsSilentIsFailedByTheHeartbeat() {
        for (Heartbeat beat : new Heartbeat[] {HeartbeatTest.FAST, Heartbeat.OFF}) {
            setUp(b -> b.heartbeat(beat).completionTimeout(java.time.Duration.ofSeconds(10)));
            final IncomingTransfer inFlight = startOne(10);
            final IncomingTransfer s = suspect();
            rx.doWork();
            assertEquals(Peer.State.RETIRING, rx.peer(pa).state());
            long waited = 0;
            while (rx.peer(pa).state() == Peer.State.RETIRING && waited < 2_000) {
                clock.advanceMillis(10);
                waited += 10;
                rx.doWork();
            }
            if (beat == Heartbeat.OFF) {
                assertEquals(Peer.State.RETIRING, rx.peer(pa).state(), "without the heartbeat only the transfer's timeout ends it");
                assertEquals(IncomingTransfer.State.RECEIVING, inFlight.state(), inFlight::toString);
                assertTrue(a.sent(Message.Ping.class).isEmpty());
                continue;
            }
            assertEquals(Peer.State.FAILED, rx.peer(pa).state());
            assertTrue(rx.peer(pa).failure().startsWith("heartbeat:"), rx.peer(pa).failure());
            assertTrue(waited <= 100 + 300 + 20, "failed after " + waited + " ms, idle 100 ms + timeout 300 ms");
            assertFalse(a.sent(Message.Ping.class).isEmpty(), "the retiring link was pinged first");
            assertEquals(FailureReason.PEER_LOST, inFlight.failure(), inFlight::toString);
            assertEquals(IncomingTransfer.State.QUARANTINED, s.state(), "held until the teardown proves no write can land");
            a.tearDownProves = true;
            clock.advanceMillis(10); // the receiver asks the transport again at most every 10 ms
            rx.doWork();
            assertEquals(0, rx.activeTransfers());
            assertTrue(pool.verifyAccounting().balanced());
        }
    }

    @Test
    void aRevocableRegistrationNeedsNoRetirement() {
        a.revocable = true;
        final IncomingTransfer inFlight = startOne(10);
        final IncomingTransfer s = suspect();
        rx.doWork();
        assertEquals(IncomingTransfer.State.RELEASED, s.state());
        assertEquals(Peer.State.UP, rx.peer(pa).state());
        assertEquals(IncomingTransfer.State.RECEIVING, inFlight.state());
        assertEquals(0, rx.metrics().linksRetired());
    }

    @Test
    void aPeerMovesOnlyAlongItsDiagram() {
        final Set<String> allowed = Set.of("HANDSHAKE>UP", "HANDSHAKE>REFUSED", "HANDSHAKE>FAILED", "UP>RETIRING", "UP>FAILED",
            "UP>REFUSED", "RETIRING>FAILED", "RETIRING>REFUSED");
        for (Peer.State from : Peer.State.values()) {
            for (Peer.State to : Peer.State.values()) {
                final Peer p = new Peer(0, new ScriptedLink());
                p.state = from;
                if (allowed.contains(from + ">" + to)) {
                    p.moveTo(to);
                    assertEquals(to, p.state());
                } else {
                    assertThrows(IllegalStateException.class, () -> p.moveTo(to), from + " → " + to);
                    assertEquals(from, p.state());
                }
            }
        }
    }
}
