package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
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
    static final class DiesOnSend implements PeerLink {
        final ScriptedLink s;
        boolean dieOnSend;

        DiesOnSend(ScriptedLink s) {
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

        @Override
        public String describe() {
            return s.describe();
        }

        @Override
        public boolean isUp() {
            return s.isUp();
        }

        @Override
        public int poll(LinkListener listener, int limit) {
            final PeerLink self = this; // events must name this link, the one the engine knows
            return s.poll(new LinkListener() {
                @Override
                public void onFrame(PeerLink l, java.nio.ByteBuffer frame) {
                    listener.onFrame(self, frame);
                }

                @Override
                public void onWriteDone(PeerLink l, long token, int status) {
                    listener.onWriteDone(self, token, status);
                }

                @Override
                public void onFlushDone(PeerLink l, long token, boolean ok) {
                    listener.onFlushDone(self, token, ok);
                }

                @Override
                public void onLinkFailed(PeerLink l, String reason) {
                    listener.onLinkFailed(self, reason);
                }
            }, limit);
        }

        @Override
        public Registration register(PageStorage storage, int[] slots) {
            return s.register(storage, slots);
        }

        @Override
        public boolean tearDown() {
            return s.tearDown();
        }

        @Override
        public RemoteRegion attach(byte[] regionKey, int pages) {
            return s.attach(regionKey, pages);
        }

        @Override
        public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
            s.putBatch(region, dst, source, src, off, count, firstToken);
        }

        @Override
        public void flush(long token) {
            s.flush(token);
        }

        @Override
        public void cancelWrites() {
            s.cancelWrites();
        }

        @Override
        public void close() {
            s.close();
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
