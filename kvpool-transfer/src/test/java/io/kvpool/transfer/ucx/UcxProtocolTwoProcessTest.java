package io.kvpool.transfer.ucx;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.testkit.ChildProcessDecode;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.testkit.PrefillChild;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TwoProcessProtocolScenarios;
import io.kvpool.transfer.spi.ForwardingPeerLink;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
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
 * The transfer protocol across two processes over UCX on loopback — the shared scenarios
 * ({@link TwoProcessProtocolScenarios}, also run over shared memory) on the transport where writes really are
 * one-sided and may land late, plus a frozen sender. This JVM is the decode side (a {@link KvPool} on host storage, a {@link TransferReceiver}, a
 * {@link UcxTransport}); a child JVM ({@link UcxPrefillMain}) is the prefill side (its own host pool, a
 * {@link io.kvpool.transfer.TransferSender} and transport). Real clocks; every wait is bounded and says what it
 * waited for. The receiver's link is wrapped ({@link Watched}) to see the pool at the moment the receiver closes
 * or tears it down, so the order "quarantined, then torn down, then released" is asserted, not inferred. The
 * frozen-sender case also checks the fence itself: the child, thawed after the receiver tore the link down and
 * freed the pages, must not be able to write into them.
 * Skipped without UCX, failed when UCX is required ({@link UcxTestSupport#assumeUcx}).
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class UcxProtocolTwoProcessTest extends TwoProcessProtocolScenarios<UcxProtocolTwoProcessTest.Decode> {

    private static final int DECODE_PAGES = 256;

    @BeforeEach
    void requireUcx() {
        UcxTestSupport.assumeUcx();
    }

    /** What the pool and the watched transfer looked like when the receiver first closed / tore down the link. */
    record Seen(PoolSnapshot pool, IncomingTransfer.State transfer, boolean childAlive) {
    }

    /** The receiver's link, delegating to the {@link UcxLink}; notes the pool when it is closed or torn down. */
    final class Watched extends ForwardingPeerLink {
        final UcxLink link;
        final Decode d;
        Seen atClose, atTearDown;
        Boolean firstProof;

        Watched(UcxLink link, Decode d) {
            super(link);
            this.link = link;
            this.d = d;
        }

        private Seen seen() {
            return new Seen(d.pool.snapshot(), d.watched == null ? null : d.watched.state(), d.child.isAlive());
        }

        @Override
        public boolean tearDown() {
            if (atTearDown == null) {
                atTearDown = seen();
            }
            final boolean proven = link.tearDown();
            if (firstProof == null) {
                firstProof = proven;
            }
            return proven;
        }

        @Override
        public void close() {
            if (atClose == null) {
                atClose = seen();
            }
            link.close();
        }
    }

    /** The decode process's side of one scenario, with the child it spawned. */
    final class Decode extends ChildProcessDecode {
        final UcxTransport transport;
        Watched link;
        IncomingTransfer watched;

        Decode(String childEnvironment, String scenario, int requests, Duration completionTimeout, Duration drainTimeout)
            throws Exception {
            super(UcxProtocolTwoProcessTest.this.dir, KvPool.builder(Kv.LAYOUT).pages(DECODE_PAGES).maxContextTokens(DECODE_PAGES * 4L).build(),
                completionTimeout, drainTimeout);
            transport = UcxTransport.open("decode");
            try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                ss.setSoTimeout((int) WAIT_MS);
                child = spawn(List.of("--enable-native-access=ALL-UNNAMED"), UcxPrefillMain.class,
                    Integer.toString(ss.getLocalPort()), dir.toString(), childEnvironment, scenario, Integer.toString(requests));
                final Socket s;
                try {
                    s = ss.accept();
                } catch (SocketTimeoutException e) {
                    throw new AssertionError("the child never connected within " + WAIT_MS + " ms; child "
                        + (child.isAlive() ? "alive" : "exited " + child.exitValue()) + ": " + childLog(), e);
                }
                try (s) {
                    link = new Watched(transport.connect(s, "decode←prefill", Duration.ofMillis(WAIT_MS)), this);
                }
            }
        }

        /** Adds the child's link (connected in the constructor) and runs the handshake until it is decided. */
        @Override
        public Peer connect() {
            return handshake(link);
        }

        /** Freezes the whole child process (its UCX thread too) with SIGSTOP. */
        void freezeChild() throws Exception {
            final Process kill = new ProcessBuilder("kill", "-STOP", Long.toString(child.pid())).redirectErrorStream(true).start();
            assertTrue(kill.waitFor(WAIT_MS, TimeUnit.MILLISECONDS), "kill -STOP did not finish");
            final String out = new String(kill.getInputStream().readAllBytes());
            assertEquals(0, kill.exitValue(), () -> "kill -STOP " + child.pid() + " failed: " + out);
        }

        void resumeChild() throws Exception {
            final Process kill = new ProcessBuilder("kill", "-CONT", Long.toString(child.pid())).redirectErrorStream(true).start();
            assertTrue(kill.waitFor(WAIT_MS, TimeUnit.MILLISECONDS), "kill -CONT did not finish");
            assertEquals(0, kill.exitValue(), "kill -CONT " + child.pid() + " failed");
        }

        /**
         * Closes the receiver and this side's transport, as a decode process that shuts down would (the child sees its
         * link fail, finishes and exits), and returns the child's RESULT line. Closing the receiver alone force-closes
         * the endpoint, which UCX does not announce to a live peer: the child would not notice.
         */
        @Override
        public String finish() throws Exception {
            receiver.close();
            transport.close();
            return childResult();
        }

        @Override
        protected void closeTransport() {
            transport.close(); // before the pool: deregisters its storage
        }
    }

    @Override
    protected Decode decode(String childEnvironment, String scenario, int requests, Duration completionTimeout,
                            Duration drainTimeout) throws Exception {
        return new Decode(childEnvironment, scenario, requests, completionTimeout, drainTimeout);
    }

    @Override
    protected void watch(Decode d, IncomingTransfer t) {
        d.watched = t;
    }

    @Override
    protected void assertLinkUntouchedByAProvenDrain(Decode d) {
        assertNull(d.link.atTearDown, "a proven drain needs no teardown");
    }

    @Override
    protected void afterKill(Decode d) throws Exception {
        assertTrue(d.child.waitFor(WAIT_MS, TimeUnit.MILLISECONDS), "the killed child did not exit");
    }

    @Override
    protected void assertKilledSenderTornDown(Decode d, int pages) {
        assertEquals(Peer.State.FAILED, d.receiver.peer(d.peer).state());
        // the receiver asked the transport for proof while the pages were QUARANTINED, and got it
        final Seen s = d.link.atTearDown;
        assertNotNull(s, "the receiver never asked the link to tear down");
        assertEquals(IncomingTransfer.State.QUARANTINED, s.transfer());
        assertEquals(pages, s.pool().quarantined(), () -> "at tearDown: " + s.pool());
        assertEquals(Boolean.TRUE, d.link.firstProof, "UCX proves a teardown at once: the endpoint is closed");
    }

    @Test
    void frozenSenderTimesOutIntoQuarantineAndIsReleasedOnlyAfterTheReceiverTearsTheLinkDown() throws Exception {
        final Duration completion = Duration.ofMillis(300), drain = Duration.ofMillis(300);
        try (Decode d = new Decode("production", "gate", 1, completion, drain)) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            d.freezeChild(); // SIGSTOP: its UCX thread stops too; it can neither write nor answer
            final int pages = (int) Kv.LAYOUT.pagesFor(PrefillChild.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
            d.watched = t;
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            d.drive(() -> t.state() != IncomingTransfer.State.RECEIVING, "the completion timeout");
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            assertEquals(FailureReason.TIMEOUT, t.failure(), t::toString);
            assertEquals(pages, d.pool.snapshot().draining(), () -> d.pool.snapshot().toString());
            assertNull(d.link.atClose, "the link must not be closed before the drain timeout");
            assertNull(d.link.atTearDown, "the link must not be torn down before the drain timeout");

            d.drive(t::isTerminal, "the drain timeout, the quarantine and the teardown");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.TIMEOUT, t.outcome(), t::toString);
            assertEquals(FailureReason.TIMEOUT, t.failure(), t::toString);
            // the order: QUARANTINED first, then the receiver took the link down (the child still alive and frozen)
            final Seen first = d.link.atClose != null ? d.link.atClose : d.link.atTearDown;
            assertNotNull(first, "the receiver never closed or tore down the link");
            assertEquals(IncomingTransfer.State.QUARANTINED, first.transfer(), "state when the link was first taken down");
            assertEquals(pages, first.pool().quarantined(), () -> "pool when the link was first taken down: " + first.pool());
            assertEquals(0, first.pool().draining(), () -> first.pool().toString());
            assertTrue(first.childAlive(), "the release must come from the teardown, not from the child's death");
            assertNotNull(d.link.atTearDown, "the receiver never asked the link to prove its teardown");
            assertEquals(pages, d.link.atTearDown.pool().quarantined(), () -> "at tearDown: " + d.link.atTearDown.pool());
            assertEquals(Boolean.TRUE, d.link.firstProof);
            assertFalse(d.link.isUp());
            assertTrue(d.child.isAlive(), "the child is frozen, not dead");
            assertEquals(Peer.State.FAILED, d.receiver.peer(d.peer).state());
            assertTrue(d.receiver.peer(d.peer).failure().contains("torn down"), d.receiver.peer(d.peer).failure());

            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(1, m.failures(FailureReason.TIMEOUT));
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
            assertEquals(0, m.deferredRelease(ReceiverMetrics.Outcome.DRAINED) + m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(1, m.quarantineReleases());
            assertEquals(0, m.quarantinedPages());
            assertEquals(0, m.heldPages());
            assertTrue(d.receiver.tearDownPeer(d.peer));
            assertEquals(pages, d.pool.snapshot().quarantineEvents(), "every page of the transfer went through QUARANTINED");
            d.assertPoolClean();

            // the fence: thaw the child; it reads the DESCRIPTOR (and, unless it notices the teardown first, posts every
            // page into the slots we freed), then the ABORT, and drains — or its link fails. Whatever it does, nothing it
            // writes may land: every page here is FREE and must still hold the canary. (Before UcxLink closed its worker
            // on teardown, the thawed child flushed all 10 writes successfully and they landed in FREE pages.)
            d.ctl("go");
            d.resumeChild();
            final long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
            while (!d.childLog().contains("ENDED") && !d.childLog().contains("RESULT") && d.child.isAlive()) {
                assertTrue(System.nanoTime() < until, () -> "the thawed child's transfer did not end within " + WAIT_MS
                    + " ms: " + d.childLog());
                Thread.sleep(5);
            }
            Thread.sleep(50); // a write still in the sockets would have landed by now
            final String log = d.childLog() + (d.child.isAlive() ? "" : " [child exited " + d.child.exitValue() + "]");
            System.out.println("frozen sender, thawed after the teardown: " + log.replace('\n', ' '));
            for (int slot = 0; slot < DECODE_PAGES; slot++) {
                final int s = slot;
                assertEquals(-1, UcxTestSupport.firstNonCanary(d.pool.storage(), slot),
                    () -> "slot " + s + " (FREE) was written after the receiver tore the link down and released it: its first"
                        + " vector says request " + d.pool.storage().hostPage(s).get(java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED, 0)
                        + "; child: " + log);
            }
            d.assertPoolClean();
        }
    }
}
