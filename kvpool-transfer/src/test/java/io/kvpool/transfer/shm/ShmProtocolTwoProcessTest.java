package io.kvpool.transfer.shm;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.ChildProcessDecode;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.Kv;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.TransferReceiver;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The transfer protocol across two processes over shared memory: this JVM is the decode side (a
 * {@link KvPool} on a {@link MappedPageStorage}, a {@link TransferReceiver}, a {@link ShmListener}); a child
 * JVM ({@link ShmPrefillMain}) is the prefill side (its own host pool and a
 * {@link io.kvpool.transfer.TransferSender}). Real clocks; every wait is bounded and says what it waited for.
 */
class ShmProtocolTwoProcessTest {

    private static final int DECODE_PAGES = 256;
    private static final long WAIT_MS = ChildProcessDecode.WAIT_MS;

    @TempDir
    Path dir;

    /** The decode process's side of one scenario, with the child it spawned. */
    final class Decode extends ChildProcessDecode {
        final Path sock;
        final ShmListener listener;
        int peer = -1;

        Decode(String childEnvironment, String scenario, int requests, Duration completionTimeout, Duration drainTimeout)
            throws Exception {
            super(ShmProtocolTwoProcessTest.this.dir, KvPool.builder(Kv.LAYOUT).pages(DECODE_PAGES).maxContextTokens(DECODE_PAGES * 4L)
                .storage((l, n) -> MappedPageStorage.create(ShmProtocolTwoProcessTest.this.dir.resolve("pool"), l, n)).build(),
                completionTimeout, drainTimeout);
            sock = dir.resolve("sock");
            listener = ShmTransport.listen(sock, (MappedPageStorage) pool.storage());
            child = spawn(List.of(), ShmPrefillMain.class, sock.toString(), dir.resolve("pool").toString(), childEnvironment,
                scenario, Integer.toString(requests));
        }

        /** Accepts the child's link, adds it and runs the handshake until it is decided. */
        Peer connect() {
            final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
            ShmLink link;
            while ((link = listener.accept()) == null) {
                assertTrue(child.isAlive(), () -> "child died before connecting: " + childLog());
                assertTrue(System.nanoTime() < deadline, () -> "child never connected; listener: " + listener.lastRejection()
                    + "; child: " + childLog());
                LockSupport.parkNanos(1_000_000);
            }
            assertEquals(child.pid(), link.peerPid());
            peer = receiver.addPeer(link);
            final Peer p = receiver.peer(peer);
            drive(() -> p.state() != Peer.State.HANDSHAKE, "the handshake to end");
            return p;
        }





        /** Closes the receiver (the child sees its link fail, finishes and exits) and returns the child's RESULT line. */
        String finish() throws Exception {
            receiver.close();
            return childResult();
        }



        @Override
        public void close() throws Exception {
            receiver.close();
            listener.close();
            child.destroyForcibly();
            child.waitFor(10, TimeUnit.SECONDS);
            pool.close();
        }
    }

    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS)
    void transfersCommitAcrossProcessesWithEveryByteInPlace() throws Exception {
        final int n = 12;
        try (Decode d = new Decode("production", "serve", n, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            assertEquals(Peer.State.UP, d.connect().state());
            final List<IncomingTransfer> ts = new ArrayList<>();
            for (long id = 1; id <= n; id++) { // all at once: concurrent transfers on one link
                final IncomingTransfer t = d.receiver.start(id, ShmPrefillMain.tokens(id), 4, d.peer);
                assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
                ts.add(t);
            }
            d.drive(() -> ts.stream().allMatch(IncomingTransfer::isTerminal), "every transfer to end");
            for (IncomingTransfer t : ts) {
                assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
                final int tokens = ShmPrefillMain.tokens(t.requestId());
                try (Sequence got = t.sequence()) {
                    assertEquals(tokens, got.tokenCount());
                    assertEquals(Kv.Finding.OK, Kv.check(got, t.requestId(), tokens), t::toString);
                    for (int i = 0; i < got.pageCount(); i++) {
                        assertEquals(SlotState.OWNED, d.pool.state(got.pageHandle(i)));
                    }
                }
            }
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(n, m.started());
            assertEquals(n, m.committed());
            for (FailureReason r : FailureReason.values()) {
                assertEquals(0, m.failures(r), r::toString);
            }
            assertEquals(0, m.heldPages());
            d.assertPoolClean();
            final String result = d.finish();
            assertTrue(result.contains(" completed=" + n + " drained=0 "), result);
            assertTrue(result.contains(" failed=0 active=0 inUse=0 balanced=true"), result);
        }
    }

    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS)
    void receiverAbortMidTransferHoldsThePagesUntilTheSendersDrained() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen"); // the child stopped polling: the descriptor will sit unread in its socket
            final int tokens = ShmPrefillMain.tokens(1), pages = (int) Kv.LAYOUT.pagesFor(tokens);
            final IncomingTransfer t = d.receiver.start(1, tokens, 4, d.peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
            assertEquals(pages, d.pool.snapshot().receiving());

            assertTrue(d.receiver.abort(t, "test"));
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            assertEquals(FailureReason.ABORTED, t.failure());
            d.idleFor(150); // the sender has not confirmed: nothing frees the pages on a timer
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            assertEquals(pages, d.pool.snapshot().draining(), () -> d.pool.snapshot().toString());
            assertEquals(pages, d.receiver.metrics().heldPages());

            d.ctl("go"); // the child reads DESCRIPTOR (and writes every page) and then ABORT, and drains
            d.drive(t::isTerminal, "the aborted transfer to be released");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.DRAINED, t.outcome(), t::toString);
            assertEquals(FailureReason.ABORTED, t.failure());
            assertTrue(t.message().contains("test"), t.message());
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.DRAINED));
            assertEquals(0, m.deferredRelease(ReceiverMetrics.Outcome.ERROR) + m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
            assertEquals(0, m.heldPages());
            assertEquals(0, m.committed());
            d.assertPoolClean();
            // the child wrote every page after the abort (into DRAINING pages), then confirmed DRAINED
            final String result = d.finish();
            assertTrue(result.contains(" completed=0 drained=1 posted=" + pages + " failed=0 active=0 inUse=0 balanced=true"),
                result);
        }
    }

    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS)
    void identityMismatchRefusesBothSidesAndStartsNothing() throws Exception {
        try (Decode d = new Decode("staging", "serve", 1, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            final Peer p = d.connect();
            assertEquals(Peer.State.REFUSED, p.state(), p::toString);
            assertTrue(p.failure().contains("environment: local=production remote=staging"), p.failure());
            assertEquals("staging", p.remote().environment());
            assertEquals(1, d.receiver.refusedPeers());

            final IncomingTransfer t = d.receiver.start(1, ShmPrefillMain.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure());
            assertEquals(1, d.receiver.metrics().failures(FailureReason.PEER_LOST));
            assertEquals(0, d.pool.snapshot().inUse(), "no page was allocated");
            d.assertPoolClean();

            final String result = d.finish(); // the child ended on its own refusal
            assertTrue(result.startsWith("RESULT peer=REFUSED completed=0 drained=0 posted=0 "), result);
            assertTrue(result.contains("environment: local=staging remote=production"), result);
        }
    }

    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS)
    void killedSenderFailsPeerLostAndItsPagesAreReleasedOnlyThroughQuarantine() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            final int pages = (int) Kv.LAYOUT.pagesFor(ShmPrefillMain.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, ShmPrefillMain.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            d.child.destroyForcibly();
            d.drive(t::isTerminal, "the transfer of the killed sender to end");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome(), t::toString);
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(1, m.quarantineReleases(), "released from quarantine, once the teardown was proven");
            assertEquals(0, m.quarantinedPages());
            assertEquals(0, m.heldPages());
            // The transport judged the peer gone (a zombie counts); Java reaps it on its own thread, so wait.
            assertTrue(d.child.waitFor(10, java.util.concurrent.TimeUnit.SECONDS), "the killed sender is reaped");
            assertTrue(d.receiver.tearDownPeer(d.peer));
            assertEquals(0, d.pool.snapshot().quarantined());
            assertEquals(pages, d.pool.snapshot().quarantineEvents(), "every page of the transfer went through QUARANTINED");
            d.assertPoolClean();
        }
    }

    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS)
    void lostLinkToALiveSenderKeepsItsPagesQuarantinedUntilTheProcessIsGone() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(5), Duration.ofMillis(100))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            final int pages = (int) Kv.LAYOUT.pagesFor(ShmPrefillMain.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, ShmPrefillMain.tokens(1), 4, d.peer);
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
