package io.kvpool.cuda.ipc;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.Peer;
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
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The transfer protocol across two JVMs over the CUDA IPC transport: this JVM is the decode side (a pool,
 * a {@link TransferReceiver} with checksums off, a {@link CudaIpcListener}); a child JVM
 * ({@link IpcPrefillMain}) is the prefill side. Real sockets, real pids, real clocks; every wait is bounded
 * and says what it waited for. Subclasses choose the engine: {@link CudaIpcTwoProcessTest} the host-memory
 * one over a pool file (runs everywhere), {@link CudaIpcTwoProcessGpuTest} CUDA (the GPU machine).
 */
abstract class TwoProcessScenarios {

    static final long WAIT_MS = 20_000;

    @TempDir
    Path dir;

    /** Test-only rule breakers for the decode side's links (normally none). */
    Set<CudaIpcLink.Unsafe> decodeUnsafe = Set.of();

    /** @return {@code "fake"} or {@code "cuda"} ({@link IpcPrefillMain}'s engine argument) */
    abstract String engine();

    /** @return the decode pool, {@code pages} pages of {@link #layout()} */
    abstract KvPool decodePool(int pages);

    /** @return extra JVM arguments of the child */
    abstract List<String> childJvmArgs();

    KvLayout layout() {
        return IpcPrefillMain.layout(engine());
    }

    /** The decode process's side of one scenario, with the child it spawned. */
    final class Decode implements AutoCloseable {
        final KvPool pool;
        final TransferReceiver receiver;
        final CudaIpcListener listener;
        final Path sock = dir.resolve("sock");
        final Path log = dir.resolve("child.log");
        final Process child;
        int peer = -1;

        Decode(String childEnvironment, String scenario, int requests, Duration completionTimeout, Duration drainTimeout)
            throws Exception {
            pool = decodePool(128);
            receiver = TransferReceiver.builder(pool, IpcPrefillMain.identity(layout(), "production")).checksums(false)
                .completionTimeout(completionTimeout).drainTimeout(drainTimeout).build();
            listener = CudaIpcTransport.listen(sock, IpcPrefillMain.engines(engine()), decodeUnsafe);
            final IpcEngine exporter = IpcPrefillMain.engines(engine()).get();
            Files.write(dir.resolve("handle"), exporter.export(pool.storage())); // for the child's "drop"
            exporter.close();
            final List<String> cmd = new ArrayList<>();
            cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
            cmd.addAll(childJvmArgs());
            cmd.addAll(List.of("-Xmx96m", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                IpcPrefillMain.class.getName(), sock.toString(), engine(), childEnvironment, scenario, Integer.toString(requests),
                dir.resolve("handle").toString()));
            child = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        }

        /** Accepts the child's link, adds it and runs the handshake until it is decided. */
        Peer connect() {
            final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
            CudaIpcLink link;
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

        /** Runs the receiver's duty cycle until {@code done}, failing after {@link #WAIT_MS} with {@code what}. */
        void drive(BooleanSupplier done, String what) {
            final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
            while (!done.getAsBoolean()) {
                assertTrue(System.nanoTime() < deadline, () -> "timed out after " + WAIT_MS + " ms waiting for " + what + "; "
                    + receiver + ", pool " + pool.snapshot() + "; child " + (child.isAlive() ? "alive" : "exited " + child.exitValue())
                    + ": " + childLog());
                if (receiver.doWork() == 0) {
                    LockSupport.parkNanos(200_000);
                }
            }
        }

        /** Runs the duty cycle for {@code ms} (to show that nothing changes meanwhile). */
        void idleFor(long ms) {
            final long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
            while (System.nanoTime() < end) {
                if (receiver.doWork() == 0) {
                    LockSupport.parkNanos(200_000);
                }
            }
        }

        void awaitCtl(String name) {
            drive(() -> Files.exists(dir.resolve(name)), "the child's control file '" + name + "'");
        }

        void ctl(String name) throws Exception {
            Files.createFile(dir.resolve(name));
        }

        String childLog() {
            try {
                return Files.readString(log);
            } catch (Exception e) {
                return "(no log: " + e + ")";
            }
        }

        /** Closes the receiver (the child sees its link fail, finishes and exits) and returns the child's RESULT line. */
        String finish() throws Exception {
            receiver.close();
            assertTrue(child.waitFor(WAIT_MS, TimeUnit.MILLISECONDS), () -> "child did not exit within " + WAIT_MS + " ms: " + childLog());
            final String out = childLog();
            assertEquals(0, child.exitValue(), () -> "the child's own pool is not clean: " + out);
            return out.lines().filter(l -> l.startsWith("RESULT ")).findFirst().orElseGet(() -> fail("no RESULT line from the child: " + out));
        }

        void assertPoolClean() {
            final PoolSnapshot s = pool.verifyAccounting();
            assertTrue(s.balanced(), s::toString);
            assertEquals(0, s.inUse(), () -> "pages still in use: " + s);
            assertEquals(pool.capacity(), s.free(), s::toString);
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
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void transfersCommitAcrossProcessesWithEveryByteInPlace() throws Exception {
        final int n = 12;
        try (Decode d = new Decode("production", "serve", n, Duration.ofSeconds(10), Duration.ofSeconds(10))) {
            assertEquals(Peer.State.UP, d.connect().state());
            final List<IncomingTransfer> ts = new ArrayList<>();
            int pages = 0;
            for (long id = 1; id <= n; id++) { // all at once: concurrent transfers on one link
                final IncomingTransfer t = d.receiver.start(id, IpcPrefillMain.tokens(id), 4, d.peer);
                assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
                ts.add(t);
                pages += (int) layout().pagesFor(IpcPrefillMain.tokens(id));
            }
            d.drive(() -> ts.stream().allMatch(IncomingTransfer::isTerminal), "every transfer to end");
            for (IncomingTransfer t : ts) {
                assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
                final int tokens = IpcPrefillMain.tokens(t.requestId());
                try (Sequence got = t.sequence()) {
                    assertEquals(tokens, got.tokenCount());
                    assertEquals(-1, IpcKv.firstWrongPage(got, t.requestId()), () -> t + ": a page holds other bytes than the sender's");
                    for (int i = 0; i < got.pageCount(); i++) {
                        assertEquals(SlotState.OWNED, d.pool.state(got.pageHandle(i)));
                    }
                }
            }
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(n, m.committed());
            for (FailureReason r : FailureReason.values()) {
                assertEquals(0, m.failures(r), r::toString);
            }
            d.assertPoolClean();
            final String result = d.finish();
            assertTrue(result.contains(" completed=" + n + " drained=0 posted=" + pages + " failed=0 active=0 inUse=0 balanced=true"),
                result);
            final long launches = Long.parseLong(result.replaceAll(".* launches=(\\d+).*", "$1"));
            assertTrue(launches >= 1 && launches < pages, "batched: " + launches + " launches for " + pages + " pages: " + result);
        }
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void receiverAbortMidTransferHoldsThePagesUntilTheSendersDrained() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(10), Duration.ofSeconds(10))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen"); // the child stopped polling: the descriptor will sit unread in its socket
            final int tokens = IpcPrefillMain.tokens(1), pages = (int) layout().pagesFor(tokens);
            final IncomingTransfer t = d.receiver.start(1, tokens, 4, d.peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
            assertTrue(d.receiver.abort(t, "test"));
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            d.idleFor(150); // the sender has not confirmed: nothing frees the pages on a timer
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            assertEquals(pages, d.pool.snapshot().draining(), () -> d.pool.snapshot().toString());

            d.ctl("go"); // the child reads DESCRIPTOR (and writes every page) and then ABORT, and drains
            d.drive(t::isTerminal, "the aborted transfer to be released");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.DRAINED, t.outcome(), t::toString);
            assertEquals(0, d.receiver.metrics().quarantineReleases());
            d.assertPoolClean();
            final String result = d.finish();
            assertTrue(result.contains(" completed=0 drained=1 posted=" + pages + " failed=0 active=0 inUse=0 balanced=true"), result);
        }
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void killedSenderIsReleasedOnlyThroughQuarantineOnceItIsGone() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(10), Duration.ofSeconds(10))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            final int pages = (int) layout().pagesFor(IpcPrefillMain.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, IpcPrefillMain.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            d.child.destroyForcibly();
            d.drive(t::isTerminal, "the transfer of the killed sender to end");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome(), t::toString);
            assertEquals(1, d.receiver.metrics().quarantineReleases(), "released from quarantine, once the teardown was proven");
            assertTrue(d.child.waitFor(WAIT_MS, TimeUnit.MILLISECONDS)); // (it may have been a zombie, which is gone enough)
            assertTrue(d.receiver.tearDownPeer(d.peer));
            assertEquals(pages, d.pool.snapshot().quarantineEvents(), "every page of the transfer went through QUARANTINED");
            d.assertPoolClean();
        }
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void lostLinkToALiveImporterKeepsItsPagesQuarantinedUntilTheProcessIsGone() throws Exception {
        try (Decode d = new Decode("production", "gate", 1, Duration.ofSeconds(10), Duration.ofMillis(100))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            final int pages = (int) layout().pagesFor(IpcPrefillMain.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, IpcPrefillMain.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            d.ctl("drop"); // the child opens the decode arena itself, closes its link, and lives on
            d.drive(() -> t.state() != IncomingTransfer.State.RECEIVING, "the lost link to fail the transfer");
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertEquals(pages, d.pool.snapshot().quarantined(), () -> d.pool.snapshot().toString());

            d.awaitCtl("dropped");
            d.idleFor(300); // three drain timeouts: a live importer's pages are never freed on a timer
            assertTrue(d.child.isAlive(), () -> "the child must still live: " + d.childLog());
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            assertFalse(d.receiver.tearDownPeer(d.peer), "the importer lives, holding a mapping: its teardown cannot be proven");
            assertEquals(0, d.receiver.metrics().quarantineReleases());

            d.child.destroyForcibly();
            assertTrue(d.child.waitFor(WAIT_MS, TimeUnit.MILLISECONDS));
            d.drive(t::isTerminal, "the quarantine to end once the child is gone");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertTrue(d.receiver.tearDownPeer(d.peer), "the importer is gone: teardown proven");
            assertEquals(1, d.receiver.metrics().quarantineReleases());
            d.assertPoolClean();
        }
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void identityMismatchRefusesBothSidesAndStartsNothing() throws Exception {
        try (Decode d = new Decode("staging", "serve", 1, Duration.ofSeconds(10), Duration.ofSeconds(10))) {
            final Peer p = d.connect();
            assertEquals(Peer.State.REFUSED, p.state(), p::toString);
            assertTrue(p.failure().contains("environment: local=production remote=staging"), p.failure());
            final IncomingTransfer t = d.receiver.start(1, IpcPrefillMain.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
            assertEquals(0, d.pool.snapshot().inUse(), "no page was allocated");
            final String result = d.finish();
            assertTrue(result.startsWith("RESULT peer=REFUSED completed=0 drained=0 posted=0 "), result);
        }
    }
}
