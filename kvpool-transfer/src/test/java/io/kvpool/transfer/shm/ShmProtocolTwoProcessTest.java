package io.kvpool.transfer.shm;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.ChildProcessDecode;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.testkit.PrefillChild;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TwoProcessProtocolScenarios;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The transfer protocol across two processes over shared memory ({@link TwoProcessProtocolScenarios}, plus a lost
 * link to a live sender): this JVM is the decode side (a {@link KvPool} on a {@link MappedPageStorage}, a
 * {@link TransferReceiver}, a {@link ShmListener}); a child JVM ({@link ShmPrefillMain}) is the prefill side (its own
 * host pool and a {@link io.kvpool.transfer.TransferSender}). Real clocks; every wait is bounded and says what it
 * waited for.
 */
class ShmProtocolTwoProcessTest extends TwoProcessProtocolScenarios<ShmProtocolTwoProcessTest.Decode> {

    private static final int DECODE_PAGES = 256;

    /** The decode process's side of one scenario, with the child it spawned. */
    final class Decode extends ChildProcessDecode {
        final ShmListener listener;

        Decode(String childEnvironment, String scenario, int requests, Duration completionTimeout, Duration drainTimeout)
            throws Exception {
            super(ShmProtocolTwoProcessTest.this.dir, KvPool.builder(Kv.LAYOUT).pages(DECODE_PAGES).maxContextTokens(DECODE_PAGES * 4L)
                .storage((l, n) -> MappedPageStorage.create(ShmProtocolTwoProcessTest.this.dir.resolve("pool"), l, n)).build(),
                completionTimeout, drainTimeout);
            listener = ShmTransport.listen(dir.resolve("sock"), (MappedPageStorage) pool.storage());
            child = spawn(List.of(), ShmPrefillMain.class, dir.resolve("sock").toString(), dir.resolve("pool").toString(),
                childEnvironment, scenario, Integer.toString(requests));
        }

        @Override
        public Peer connect() {
            return handshake(acceptChild(listener::accept, listener::lastRejection, ShmLink::peerPid));
        }

        @Override
        protected void closeTransport() {
            listener.close();
        }
    }

    @Override
    protected Decode decode(String childEnvironment, String scenario, int requests, Duration completionTimeout,
                            Duration drainTimeout) throws Exception {
        return new Decode(childEnvironment, scenario, requests, completionTimeout, drainTimeout);
    }

    @Test
    void lostLinkToALiveSenderKeepsItsPagesQuarantinedUntilTheProcessIsGone() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(5), Duration.ofMillis(100))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            final int pages = (int) Kv.LAYOUT.pagesFor(PrefillChild.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            d.ctl("drop"); // the child closes its socket but lives on, mapping the pool file
            d.drive(() -> t.state() != IncomingTransfer.State.RECEIVING, "the lost link to fail the transfer");
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome(), t::toString);
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(pages, m.quarantinedPages());
            assertEquals(pages, d.pool.snapshot().quarantined(), () -> d.pool.snapshot().toString());
            assertEquals(pages, d.pool.snapshot().quarantineEvents());

            d.idleFor(300); // three drain timeouts: a live process's pages are never freed on a timer
            assertTrue(d.child.isAlive(), () -> "the child must still live: " + d.childLog());
            assertTrue(d.childLog().contains("DROPPED"), d::childLog);
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            assertEquals(pages, d.pool.snapshot().quarantined(), () -> d.pool.snapshot().toString());
            assertFalse(d.receiver.tearDownPeer(d.peer), "the peer lives: its teardown cannot be proven");
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            assertEquals(0, m.quarantineReleases());

            d.child.destroyForcibly();
            assertTrue(d.child.waitFor(WAIT_MS, TimeUnit.MILLISECONDS));
            d.drive(t::isTerminal, "the quarantine to end once the child is gone");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome(), t::toString);
            assertTrue(d.receiver.tearDownPeer(d.peer), "the peer is gone: teardown proven");
            assertEquals(1, m.quarantineReleases());
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(0, m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
            assertEquals(0, m.quarantinedPages());
            assertEquals(0, m.heldPages());
            d.assertPoolClean();
        }
    }
}
