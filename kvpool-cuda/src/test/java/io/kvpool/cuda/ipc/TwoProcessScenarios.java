package io.kvpool.cuda.ipc;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import io.kvpool.transfer.testkit.ChildProcessDecode;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.testkit.PrefillChild;
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

    /** The decode process's side of one scenario, with the child it spawned (the harness shared with shm and UCX). */
    final class Decode extends ChildProcessDecode {
        final CudaIpcListener listener;
        final Path sock = dir.resolve("sock");

        Decode(String childEnvironment, String scenario, int requests, Duration completionTimeout, Duration drainTimeout)
            throws Exception {
            super(TwoProcessScenarios.this.dir, decodePool(128), p -> TransferReceiver.builder(p, IpcPrefillMain.identity(layout(),
                "production")).checksums(false).completionTimeout(completionTimeout).drainTimeout(drainTimeout).build(),
                TwoProcessScenarios.WAIT_MS);
            listener = CudaIpcTransport.listen(sock, IpcPrefillMain.engines(engine()), decodeUnsafe);
            final IpcEngine exporter = IpcPrefillMain.engines(engine()).get();
            // for the child's "drop"; never ended: the pool's memory stays until this JVM ends, as nothing proves the child unmapped it
            Files.write(dir.resolve("handle"), exporter.export(pool.storage()).handle());
            exporter.close();
            final List<String> jvmArgs = new ArrayList<>(childJvmArgs());
            jvmArgs.add("-Xmx96m");
            child = spawn(jvmArgs, IpcPrefillMain.class, sock.toString(), engine(), childEnvironment, scenario,
                Integer.toString(requests), dir.resolve("handle").toString());
        }

        @Override
        public Peer connect() {
            return handshake(acceptChild(listener::accept, listener::lastRejection, CudaIpcLink::peerPid));
        }

        @Override
        protected void closeTransport() {
            listener.close();
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
                final IncomingTransfer t = d.receiver.start(id, PrefillChild.tokens(id), 4, d.peer);
                assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
                ts.add(t);
                pages += (int) layout().pagesFor(PrefillChild.tokens(id));
            }
            d.drive(() -> ts.stream().allMatch(IncomingTransfer::isTerminal), "every transfer to end");
            for (IncomingTransfer t : ts) {
                assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
                final int tokens = PrefillChild.tokens(t.requestId());
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
            final int tokens = PrefillChild.tokens(1), pages = (int) layout().pagesFor(tokens);
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
            final int pages = (int) layout().pagesFor(PrefillChild.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
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
            final int pages = (int) layout().pagesFor(PrefillChild.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
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
            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
            assertEquals(0, d.pool.snapshot().inUse(), "no page was allocated");
            final String result = d.finish();
            assertTrue(result.startsWith("RESULT peer=REFUSED completed=0 drained=0 posted=0 "), result);
        }
    }
}
