package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.sim.SimFaults;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.*;

/** End-to-end transfers over the simulated network: the happy paths and the late-write cases. */
class SimTransferTest {

    static final class Rig extends SimPair {
        /** The sender's peer id at the receiver. */
        final int peer;

        Rig(long seed, SimFaults faults, boolean revocable, int prefillPages, int decodePages,
            java.util.function.UnaryOperator<TransferReceiver.Builder> rb) {
            super(new Setup(Kv.pool(prefillPages), Kv.pool(decodePages)).seed(seed).faults(faults, revocable)
                .sender(p -> TransferSender.builder(p, Kv.identity()).maxPagesInFlight(8).drainDeadline(Duration.ofMillis(50)))
                .receiver(p -> rb.apply(TransferReceiver.builder(p, Kv.identity()).completionTimeout(Duration.ofMillis(20))
                    .drainTimeout(Duration.ofMillis(20))))
                .settle(10, true));
            peer = rp;
        }

        Sequence prefillRequest(long requestId, int tokens) {
            final Sequence s = prefill.admit(tokens, 0).sequence();
            s.append(tokens);
            Kv.write(s, requestId);
            return s;
        }
    }

    @Test
    void transfersCommitWithEveryByteInPlace() {
        try (Rig rig = new Rig(1, SimFaults.NONE, true, 64, 64, b -> b)) {
            for (long req = 1; req <= 20; req++) {
                final int tokens = 1 + (int) (req * 7 % 29);
                final Sequence src = rig.prefillRequest(req, tokens);
                rig.sender.offer(req, src);
                src.close(); // the sender holds its own references
                final IncomingTransfer t = rig.receiver.start(req, tokens, 4, rig.peer);
                rig.run(200);
                assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
                try (Sequence got = t.sequence()) {
                    assertEquals(tokens, got.tokenCount());
                    assertEquals(Kv.Finding.OK, Kv.check(got, req, tokens));
                    for (int i = 0; i < got.pageCount(); i++) {
                        assertEquals(SlotState.OWNED, rig.decode.state(got.pageHandle(i)));
                    }
                }
            }
            rig.run(10);
            assertEquals(0, rig.sender.activeTransfers());
            assertTrue(rig.prefill.verifyAccounting().balanced(), rig.prefill.snapshot()::toString);
            assertTrue(rig.decode.verifyAccounting().balanced(), rig.decode.snapshot()::toString);
            assertEquals(20, rig.receiver.metrics().committed());
        }
    }

    @Test
    void aSecondStartOfAnIdBeingReceivedIsRefusedAndTheFirstCommits() {
        // a descriptor finds its offer by request id alone: two transfers of one id could take each other's offer, and
        // a CANCEL of the second would end the first
        try (Rig rig = new Rig(4, SimFaults.NONE, true, 64, 64, b -> b)) {
            final IncomingTransfer first = rig.receiver.start(5, 20, 0, rig.peer); // before prefill offers it
            rig.run(5);
            final IncomingTransfer second = rig.receiver.start(5, 20, 0, rig.peer);
            assertEquals(IncomingTransfer.State.REJECTED, second.state(), second::toString);
            assertTrue(second.message().contains("already receiving"), second::message);
            final Sequence src = rig.prefillRequest(5, 20);
            rig.sender.offer(5, src);
            src.close();
            rig.run(200);
            assertEquals(IncomingTransfer.State.COMMITTED, first.state(), first::toString);
            assertEquals(0, rig.sender.metrics().cancelled() + rig.sender.metrics().cancelsIgnored(), "no CANCEL was sent");
            try (Sequence got = first.sequence()) {
                assertEquals(Kv.Finding.OK, Kv.check(got, 5, 20));
            }
        }
    }

    /** Free pages of the decode pool that hold bytes other than the canary: a write landed after release. */
    static int freePagesWithData(KvPool pool) {
        int n = 0;
        for (int slot = 0; slot < pool.capacity(); slot++) {
            if (pool.stateOfSlot(slot) == SlotState.FREE
                && pool.storage().firstCanaryToken(slot, 0, Kv.LAYOUT.tokensPerPage()) < 0) {
                n++;
            }
        }
        return n;
    }

    static int lateWrites(boolean quarantine) {
        return lateWrites(quarantine, false);
    }

    /** @param revocable whether the link can revoke one registration (else like UCX over tcp) */
    static int lateWrites(boolean quarantine, boolean revocable) {
        // every write of a frozen sender lands 60–80 ms after it was posted, long after the receiver's
        // 20 ms completion and 20 ms drain deadlines
        final SimFaults frozen = SimFaults.NONE.withStragglers(1.0, 60_000_000, 80_000_000);
        try (Rig rig = new Rig(3, frozen, revocable, 64, 64,
            b -> quarantine ? b : b.unsafeDisable(TransferSafeguard.QUARANTINE_ON_TIMEOUT))) {
            final Sequence src = rig.prefillRequest(1, 16);
            rig.sender.offer(1, src);
            src.close();
            final IncomingTransfer t = rig.receiver.start(1, 16, 0, rig.peer);
            rig.run(4_500); // 45 ms: timed out, drain deadline passed
            assertEquals(FailureReason.TIMEOUT, t.failure(), t::toString);
            if (quarantine) {
                assertEquals(ReceiverMetrics.Outcome.TIMEOUT, t.outcome());
                assertEquals(1, rig.receiver.metrics().quarantineReleases(), "released only after the link was torn down");
            }
            rig.net.drainAll(); // let every late write land (or be dropped)
            rig.run(10);
            assertEquals(IncomingTransfer.State.RELEASED, t.state());
            assertTrue(rig.decode.verifyAccounting().balanced());
            // what let the pages go, per transfer and counted: a proof, or NONE only with the safeguard off
            final WriteProof proof = !quarantine ? WriteProof.NONE : revocable ? WriteProof.REVOKED : WriteProof.LINK_TORN_DOWN;
            assertEquals(proof, t.writeProof(0));
            for (WriteProof p : WriteProof.values()) {
                assertEquals(p == proof ? 1 : 0, rig.receiver.metrics().releasedRanks(p), p + ": " + rig.receiver.metrics());
            }
            if (quarantine && !revocable) {
                assertEquals(4, rig.net.droppedWrites(), "the torn-down link's late writes must be dropped");
            }
            return freePagesWithData(rig.decode);
        }
    }

    @Test
    void closingAnEngineTakesItsPeersDown() {
        // else a closed engine went on exporting its links as UP (peerBuilds, the peers' states)
        try (Rig rig = new Rig(1, SimFaults.NONE, true, 64, 64, b -> b)) {
            assertEquals(java.util.Map.of("build-1", 1), rig.receiver.peerBuilds());
            rig.receiver.close();
            rig.sender.close();
            for (TransferEndpoint e : new TransferEndpoint[] {rig.receiver, rig.sender}) {
                final Peer p = e.peer(0);
                assertEquals(Peer.State.FAILED, p.state(), p::toString);
                assertTrue(p.failure().contains("closed"), p::failure);
                assertTrue(e.peerBuilds().isEmpty(), () -> e + ": " + e.peerBuilds());
            }
            rig.receiver.close(); // idempotent, as before
            rig.sender.close();
        }
    }

    @Test
    void aLinkWhoseWritesWereForceCancelledFailsAtItsOwnEndToo() {
        // a transport that cancels by force-closing its endpoint takes the link down, and says so at both ends, as UCX
        // does: else the sender kept a dead peer UP, polled, counted in peerBuilds, and offered work on it
        try (Rig rig = new Rig(1, SimFaults.NONE, true, 64, 64, b -> b)) {
            rig.senderLink.cancelWrites();
            rig.run(50);
            assertEquals(Peer.State.FAILED, rig.sender.peer(rig.sp).state(), () -> rig.sender.peer(rig.sp).toString());
            assertEquals(Peer.State.FAILED, rig.receiver.peer(rig.rp).state(), () -> rig.receiver.peer(rig.rp).toString());
            assertEquals(0, rig.sender.polledPeers());
            assertTrue(rig.sender.peerBuilds().isEmpty(), () -> rig.sender.peerBuilds().toString());
        }
    }

    @Test
    void aLateWriteAfterTheReceiverGaveUpLandsOnlyWhereNothingCanReadIt() {
        assertEquals(0, lateWrites(true), "a late write landed in a page that was released");
    }

    @Test
    void aLateWriteToARevokedRegistrationLandsNowhereAndTheRevocationIsTheProof() {
        assertEquals(0, lateWrites(true, true), "a late write landed in a page that was released");
    }

    @Test
    void aSendersDrainedAcknowledgementIsWhatFreesAnAbortedTransfersPages() {
        try (Rig rig = new Rig(4, SimFaults.NONE, false, 64, 64, b -> b)) {
            final IncomingTransfer t = rig.receiver.start(1, 16, 0, rig.peer);
            rig.receiver.abort(t, "test"); // before the sender offered anything: its DRAINED proves nothing is in flight
            assertNull(t.writeProof(0), "held until the sender answers");
            rig.run(50);
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(WriteProof.SENDER, t.writeProof(0));
            assertEquals(1, rig.receiver.metrics().releasedRanks(WriteProof.SENDER), () -> rig.receiver.metrics().toString());
            assertEquals(0, rig.receiver.metrics().releasedRanks(WriteProof.NONE));
            assertThrows(IndexOutOfBoundsException.class, () -> t.writeProof(1));
        }
    }

    @Test
    void withoutQuarantineTheSameLateWritesLandInReleasedPages() {
        // the control: the simulated network really delivers late writes into the pool's memory
        assertEquals(4, lateWrites(false));
    }
}
