package io.kvpool.cuda.ipc;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The whole transfer protocol ({@link TransferSender} → {@link TransferReceiver}) over {@link CudaIpcLink}s
 * in one JVM: host pools, a host-memory engine per side ({@link FakeIpcEngine}) whose "device" runs the
 * copies when this test steps it, SimLinks for the control frames, a virtual clock. What the GPU cannot
 * show cheaply: device errors, a stalled device past the drain deadline, and that a decode pool written
 * by a failed prefill stays quarantined until the prefill process is gone.
 */
class CudaIpcSimTransferTest {

    static final PeerIdentity ID = PeerIdentity.of(CudaIpcLinkTest.LAYOUT, "test-model@r1", "test", "build-1");

    static final class Rig implements AutoCloseable {
        final SimNetwork net;
        final SplittableRandom random;
        final KvPool prefill = KvPool.builder(CudaIpcLinkTest.LAYOUT).pages(256).maxContextTokens(1024).build();
        final KvPool decode = KvPool.builder(CudaIpcLinkTest.LAYOUT).pages(128).maxContextTokens(512).build();
        final FakeIpcEngine txEngine = new FakeIpcEngine();
        final FakeIpcEngine rxEngine = new FakeIpcEngine();
        final CudaIpcLink tx;
        final CudaIpcLink rx;
        final TransferSender sender;
        final TransferReceiver receiver;
        final int peer;
        /** Whether the prefill "process" is gone: the receiver's teardown proof. */
        boolean prefillGone;
        /** Probability that the device runs one queued copy per step (1: at once). */
        double deviceSpeed = 1;

        Rig(long seed, boolean checksums) {
            this(seed, checksums, Duration.ofMillis(10));
        }

        Rig(long seed, boolean checksums, Duration receiverDrainTimeout) {
            net = new SimNetwork(seed, SimFaults.NONE);
            random = new SplittableRandom(seed);
            final SimLink[] l = net.connect("prefill", "decode", false);
            tx = new CudaIpcLink(l[0], () -> txEngine, () -> true, Set.of());
            rx = new CudaIpcLink(l[1], () -> rxEngine, () -> prefillGone, Set.of());
            sender = TransferSender.builder(prefill, ID).clock(net.clock()).maxPagesInFlight(8).checksums(checksums)
                .drainDeadline(Duration.ofMillis(5)).descriptorTimeout(Duration.ofMillis(15)).build(); // after a lost link, offers wait for nothing
            receiver = TransferReceiver.builder(decode, ID).clock(net.clock()).checksums(checksums)
                .completionTimeout(Duration.ofMillis(20)).drainTimeout(receiverDrainTimeout).build();
            sender.addPeer(tx);
            peer = receiver.addPeer(rx);
            run(10);
            assertTrue(receiver.peer(peer).isUp(), () -> receiver.peer(peer).toString());
        }

        /** Runs both engines, the device and the network for {@code steps} steps of 10 µs. */
        void run(int steps) {
            for (int i = 0; i < steps; i++) {
                sender.doWork();
                receiver.doWork();
                if (deviceSpeed > 0 && random.nextDouble() < deviceSpeed) {
                    txEngine.runNext();
                }
                net.advance(10_000);
            }
        }

        Sequence offer(long requestId, int tokens) {
            final Sequence s = prefill.admit(tokens, 0).sequence();
            s.append(tokens);
            IpcKv.write(s, requestId);
            sender.offer(requestId, s);
            s.close(); // the sender holds its own references
            return s;
        }

        void assertClean(KvPool pool) {
            final PoolSnapshot s = pool.verifyAccounting();
            assertTrue(s.balanced(), s::toString);
            assertEquals(0, s.inUse(), s::toString);
        }

        @Override
        public void close() {
            sender.close();
            receiver.close();
            for (int i = 0; i < 100 && sender.activeTransfers() > 0; i++) {
                txEngine.runAll();
                sender.doWork();
            }
            prefill.close();
            decode.close();
        }
    }

    @Test
    void transfersCommitWithEveryByteInPlaceOneLaunchPerBatch() {
        for (boolean checksums : new boolean[] {true, false}) {
            try (Rig rig = new Rig(1, checksums)) {
                rig.deviceSpeed = 0.5;
                final List<IncomingTransfer> ts = new ArrayList<>();
                int pages = 0;
                for (long req = 1; req <= 20; req++) {
                    final int tokens = 1 + (int) (req * 7 % 29);
                    pages += (tokens + 3) / 4;
                    rig.offer(req, tokens);
                    ts.add(rig.receiver.start(req, tokens, 0, rig.peer));
                }
                rig.run(2000);
                for (IncomingTransfer t : ts) {
                    assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
                    try (Sequence got = t.sequence()) {
                        assertEquals(-1, IpcKv.firstWrongPage(got, t.requestId()), t::toString);
                    }
                }
                assertEquals(pages, rig.tx.writesPosted());
                assertEquals(rig.tx.batchesLaunched(), rig.txEngine.submits, "one launch per batch");
                assertTrue(rig.txEngine.submits < pages, rig.txEngine.submits + " launches for " + pages + " pages");
                assertEquals(1, rig.txEngine.opens, "the decode arena was opened once for all 20 transfers");
                assertEquals(0, rig.tx.pendingBatches());
                assertEquals(20, rig.receiver.metrics().committed());
                assertEquals(0, rig.sender.activeTransfers());
                rig.assertClean(rig.prefill);
                rig.assertClean(rig.decode);
            }
        }
    }

    @Test
    void aStalledDeviceIsNotCancelledAwayTheDrainWaitsForItsCopies() {
        try (Rig rig = new Rig(2, false, Duration.ofMillis(100))) {
            rig.deviceSpeed = 0; // the device runs nothing until the test says so
            rig.offer(1, 24);
            final IncomingTransfer t = rig.receiver.start(1, 24, 0, rig.peer);
            rig.run(20);
            assertTrue(rig.tx.pendingBatches() > 0);
            assertTrue(rig.receiver.abort(t, "test abort"));
            rig.run(2000); // 20 ms: past the sender's 5 ms drain deadline, it force-cancels
            assertTrue(rig.tx.cancelRequests() >= 1, "the sender asked to cancel");
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), "enqueued copies were not cancelled away: " + t);
            assertEquals(6, rig.decode.snapshot().draining(), () -> rig.decode.snapshot().toString());
            rig.deviceSpeed = 1; // the device catches up: the copies land, OK, flush, proven DRAINED
            rig.run(200);
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.DRAINED, t.outcome(), t::toString);
            assertEquals(0, rig.receiver.metrics().quarantineReleases());
            rig.assertClean(rig.decode);
        }
    }

    @Test
    void aDeviceErrorQuarantinesTheDecodePagesUntilThePrefillProcessIsGone() {
        try (Rig rig = new Rig(3, false)) {
            rig.txEngine.failNextBatch = FakeIpcEngine.ILLEGAL_ADDRESS;
            rig.txEngine.failedBatchLands = true;
            rig.offer(1, 32);
            final IncomingTransfer t = rig.receiver.start(1, 32, 0, rig.peer);
            rig.run(200);
            assertFalse(rig.tx.isUp(), "a device error takes the prefill link down");
            assertTrue(rig.tx.failureReason().contains("CUDA_ERROR_ILLEGAL_ADDRESS (700)"), rig.tx.failureReason());
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            final int pages = 8;
            assertEquals(pages, rig.decode.snapshot().quarantined(), () -> rig.decode.snapshot().toString());
            rig.run(3000); // 30 ms, three drain timeouts: a live prefill's pages are never freed on a timer
            assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
            assertFalse(rig.receiver.tearDownPeer(rig.peer), "the prefill process lives: no proof");
            rig.prefillGone = true;
            rig.run(1_010); // the receiver asks for the proof again at most every 10 ms
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(1, rig.receiver.metrics().quarantineReleases());
            assertTrue(rig.receiver.tearDownPeer(rig.peer));
            rig.assertClean(rig.decode);
            assertEquals(0, rig.sender.activeTransfers(), "every posted write reached a terminal state");
            rig.assertClean(rig.prefill);
        }
    }

    /**
     * Random device speeds, event errors and receiver aborts over many seeds. Invariants: every transfer
     * ends; a committed one holds exactly its request's bytes; pages are freed from quarantine only once
     * the prefill process is gone; both pools balance and end clean.
     */
    @Test
    void randomDeviceFaultsAndAbortsKeepEveryInvariant() {
        int committed = 0, quarantined = 0, drained = 0;
        for (long seed = 1; seed <= 40; seed++) {
            try (Rig rig = new Rig(seed, seed % 2 == 0)) {
                final SplittableRandom r = new SplittableRandom(seed * 31);
                rig.deviceSpeed = 0.1 + 0.9 * r.nextDouble();
                final List<IncomingTransfer> ts = new ArrayList<>();
                for (long req = 1; req <= 8; req++) {
                    if (r.nextDouble() < 0.08) {
                        rig.txEngine.failNextBatch = FakeIpcEngine.ILLEGAL_ADDRESS;
                        rig.txEngine.failedBatchLands = r.nextBoolean();
                    }
                    final int tokens = 1 + r.nextInt(40);
                    rig.offer(req, tokens);
                    ts.add(rig.receiver.start(req, tokens, 0, rig.peer));
                    rig.run(r.nextInt(0, 30));
                    if (r.nextDouble() < 0.15) {
                        rig.receiver.abort(ts.get(ts.size() - 1), "random abort");
                    }
                }
                rig.run(3000);
                final long releasesWhileAlive = rig.receiver.metrics().quarantineReleases();
                assertEquals(0, releasesWhileAlive, "seed " + seed + ": freed from quarantine while the prefill lives");
                rig.prefillGone = true;
                rig.run(1_100); // the receiver asks for the proof again at most every 10 ms
                for (IncomingTransfer t : ts) {
                    assertTrue(t.isTerminal(), () -> "seed " + rig.random + ": " + t);
                    if (t.state() == IncomingTransfer.State.COMMITTED) {
                        committed++;
                        try (Sequence got = t.sequence()) {
                            assertEquals(-1, IpcKv.firstWrongPage(got, t.requestId()), t::toString);
                        }
                    } else if (t.outcome() == ReceiverMetrics.Outcome.DRAINED) {
                        drained++;
                    }
                }
                quarantined += (int) rig.receiver.metrics().quarantineReleases();
                rig.assertClean(rig.decode);
                assertEquals(0, rig.sender.activeTransfers(), "seed " + seed + ": " + rig.sender.openTransfers());
                rig.assertClean(rig.prefill);
            }
        }
        assertTrue(committed > 100, "committed " + committed);
        assertTrue(quarantined > 0, "some seeds must exercise the quarantine: " + quarantined);
        assertTrue(drained > 0, "some seeds must exercise a proven drain: " + drained);
    }
}
