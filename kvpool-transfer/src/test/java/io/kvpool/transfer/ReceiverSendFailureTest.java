package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.transfer.spi.LinkFailedException;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A transport may learn that its link is down only when it sends (the SPI allows {@code send} to throw
 * {@link LinkFailedException} while {@code isUp()} still said true). When that happens to the ABORT a
 * failing transfer sends, the engine takes the peer down re-entrantly ({@code onPeerDown} quarantines the
 * transfer); the failing path must then not quarantine it a second time.
 */
class ReceiverSendFailureTest {

    /** A {@link ScriptedLink} whose next sends throw, as if the transport just found the link dead. */
    static final class DiesOnSend extends ForwardingLink {
        final ScriptedLink s;
        boolean dieOnSend;

        DiesOnSend(ScriptedLink s) {
            super(s);
            this.s = s;
        }

        @Override
        public void send(byte[] frame) {
            if (dieOnSend) {
                s.up = false;
                throw new LinkFailedException("connection reset (found while sending)");
            }
            s.send(frame);
        }
    }

    @ParameterizedTest(name = "teardown proven at once: {0}")
    @ValueSource(booleans = {false, true})
    void abortWhoseSendFindsTheLinkDeadQuarantinesOnce(boolean teardownProvenAtOnce) {
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).build();
            final ScriptedLink s = new ScriptedLink().hello(Kv.identity());
            s.tearDownProves = teardownProvenAtOnce;
            final DiesOnSend link = new DiesOnSend(s);
            final int peer = rx.addPeer(link);
            rx.doWork();
            assertTrue(rx.peer(peer).isUp(), () -> rx.peer(peer).toString());
            final IncomingTransfer t = rx.start(1, 8, 0, peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            link.dieOnSend = true;
            assertTrue(rx.abort(t, "test")); // the ABORT's send fails: the peer goes down inside fail()
            assertEquals(Peer.State.FAILED, rx.peer(peer).state());
            assertEquals(FailureReason.ABORTED, t.failure());
            assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome(), t::toString);
            final ReceiverMetrics m = rx.metrics();
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.ERROR), "one deferred release, counted once");
            assertEquals(2, pool.snapshot().quarantineEvents(), "each of the 2 pages entered QUARANTINED once");
            if (!teardownProvenAtOnce) {
                assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
                assertEquals(2, m.quarantinedPages());
                assertEquals(2, m.heldPages());
                assertEquals(2, pool.snapshot().quarantined());
                rx.doWork();
                assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), "nothing proved the peer gone yet");
                s.tearDownProves = true;
                final long end = System.nanoTime() + 5_000_000_000L; // the receiver asks again at most every 10 ms
                while (t.state() == IncomingTransfer.State.QUARANTINED && System.nanoTime() < end) {
                    rx.doWork();
                }
            }
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(1, m.quarantineReleases());
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(0, m.quarantinedPages());
            assertEquals(0, m.heldPages());
            assertEquals(0, rx.activeTransfers());
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(0, snap.inUse(), snap::toString);
            rx.close();
        }
    }
}
