package io.kvpool.cuda.ipc;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.opentest4j.AssertionFailedError;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The CUDA IPC link's state machine on the CPU: a host-memory engine ({@link FakeIpcEngine}) whose
 * "device" runs a batch's copy only when the test says so, SimLinks for the control frames. The
 * {@link Harness} checks the {@link PeerLink} rules at every event (an OK write's bytes are in place and its
 * source is then scribbled over; an ok flush proves every earlier write; nothing reported CANCELED lands;
 * every posted write reports exactly once). Each safety test runs once as is and once with the
 * {@link CudaIpcLink.Unsafe} switch that breaks its rule, and must then fail.
 */
class CudaIpcLinkTest {

    /** 2 layers, 1 head × 8 × FP32, 4 tokens per page: 128-byte planes, 512-byte pages. */
    static final KvLayout LAYOUT = new KvLayout(2, 1, 8, DType.FP32, 4);

    final List<AutoCloseable> toClose = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (int i = toClose.size() - 1; i >= 0; i--) { // links before the pools they copy
            toClose.get(i).close();
        }
    }

    /** Prefill end (tx) and decode end (rx) of one link, with their fake devices and pools. */
    final class Pair {
        final SimNetwork net = new SimNetwork(7, SimFaults.NONE);
        final SimLink[] control = net.connect("prefill", "decode", false);
        final FakeIpcEngine txEngine = new FakeIpcEngine();
        final FakeIpcEngine rxEngine = new FakeIpcEngine();
        volatile boolean prefillGone;
        /** Checks only when a test asks ({@link ExportReaper#checkNow()}). */
        final ExportReaper reaper = new ExportReaper(java.time.Duration.ofSeconds(1), false);
        final CudaIpcLink tx;
        final CudaIpcLink rx;
        final HostPageStorage src = HostPageStorage.allocate(LAYOUT, 32);
        final HostPageStorage dst = HostPageStorage.allocate(LAYOUT, 32);
        final Harness h = new Harness(this);
        final Recorder rxEvents = new Recorder();

        Pair(Set<CudaIpcLink.Unsafe> unsafe) {
            this(unsafe, java.util.function.UnaryOperator.identity());
        }

        /** @param txControl wraps prefill's end of the control channel (a test that makes it misbehave) */
        Pair(Set<CudaIpcLink.Unsafe> unsafe, java.util.function.UnaryOperator<PeerLink> txControl) {
            tx = new CudaIpcLink(txControl.apply(control[0]), () -> txEngine, () -> true, unsafe);
            rx = new CudaIpcLink(control[1], () -> rxEngine, () -> prefillGone, unsafe);
            rx.reaper = reaper;
            toClose.add(src);
            toClose.add(dst);
            for (int p = 0; p < src.pageCount(); p++) {
                final MemorySegment page = src.hostPage(p);
                for (long o = 0; o < page.byteSize(); o += 8) {
                    page.set(ValueLayout.JAVA_LONG, o, 0x5EED_0000_0000_0000L | (long) p << 32 | o);
                }
            }
        }

        /** Registers {@code slots} of the decode pool on rx and attaches them on tx. */
        RemoteRegion region(int... slots) {
            final Registration reg = rx.register(dst, slots);
            return tx.attach(reg.key(), slots.length);
        }

        /** Delivers frames and polls both ends. */
        int pump() {
            net.advance(1_000_000);
            return tx.poll(h, 1000) + rx.poll(rxEvents, 1000);
        }
    }

    /** Records events of a link. */
    static class Recorder implements LinkListener {
        final List<Message> frames = new ArrayList<>();
        final List<String> failures = new ArrayList<>();

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            frames.add(WireCodec.decode(frame));
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            fail("unexpected write event on " + link);
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            fail("unexpected flush event on " + link);
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            failures.add(reason);
        }
    }

    /** The sender's listener, checking the PeerLink rules at every event. */
    static class Harness extends Recorder {
        final Pair p;
        final Map<Long, byte[]> expected = new LinkedHashMap<>();
        final Map<Long, Integer> dstSlot = new HashMap<>();
        final Map<Long, Integer> srcSlot = new HashMap<>();
        final Map<Long, List<Integer>> statuses = new HashMap<>();
        final Map<Long, List<Long>> flushCovers = new HashMap<>();
        final Map<Long, Boolean> flushes = new LinkedHashMap<>();

        Harness(Pair p) {
            this.p = p;
        }

        /** Posts one batch: region pages {@code regionPages[i]} ← source pages {@code srcPages[i]}, tokens from {@code first}. */
        void post(RemoteRegion region, int[] regionSlots, int[] regionPages, int[] srcPages, long first) {
            for (int i = 0; i < srcPages.length; i++) {
                expected.put(first + i, bytes(p.src.hostPage(srcPages[i])));
                dstSlot.put(first + i, regionSlots[regionPages[i]]);
                srcSlot.put(first + i, srcPages[i]);
            }
            p.tx.putBatch(region, regionPages, p.src, srcPages, 0, srcPages.length, first);
        }

        void flush(long token) {
            flushCovers.put(token, new ArrayList<>(expected.keySet()));
            p.tx.flush(token);
        }

        boolean landed(long token) {
            return java.util.Arrays.equals(expected.get(token), bytes(p.dst.hostPage(dstSlot.get(token))));
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            assertSame(p.tx, link);
            statuses.computeIfAbsent(token, t -> new ArrayList<>()).add(status);
            if (status == PeerLink.OK) {
                assertTrue(landed(token), "write " + token + " reported OK before its bytes were in the peer's page");
                p.src.hostPage(srcSlot.get(token)).fill((byte) 0xEE); // OK: the source may be reused now
            }
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            assertSame(p.tx, link);
            assertNull(flushes.put(token, ok), "flush " + token + " answered twice");
            if (ok) {
                for (long t : flushCovers.get(token)) {
                    assertTrue(landed(t), "flush " + token + " claimed delivery, but write " + t + " has not landed");
                }
            }
        }

        /** Once the device is idle: every posted write reported exactly once, and nothing reported CANCELED landed. */
        void finalChecks() {
            for (long t : expected.keySet()) {
                final List<Integer> s = statuses.get(t);
                assertNotNull(s, "write " + t + " never reported a terminal state");
                assertEquals(1, s.size(), "write " + t + " reported " + s);
                if (s.get(0) == PeerLink.CANCELED) {
                    assertFalse(landed(t), "write " + t + " was reported CANCELED and then landed");
                }
            }
        }
    }

    static byte[] bytes(MemorySegment page) {
        return page.asSlice(0, LAYOUT.bytesPerPage()).toArray(ValueLayout.JAVA_BYTE);
    }

    Pair pair(CudaIpcLink.Unsafe... unsafe) {
        final Pair p = new Pair(unsafe.length == 0 ? Set.of() : EnumSet.of(unsafe[0], unsafe));
        toClose.add(p.tx);
        toClose.add(p.rx);
        return p;
    }

    // ---- safety rules, each shown able to fail ----

    void checkWritesReportOkOnlyOnceTheirCopyRan(CudaIpcLink.Unsafe... unsafe) {
        final Pair p = pair(unsafe);
        final int[] slots = {10, 3, 7, 21};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1}, new int[] {5, 6}, 100);
        p.h.post(r, slots, new int[] {2, 3}, new int[] {7, 8}, 200);
        assertEquals(2, p.txEngine.submits, "one launch per batch");
        p.pump();
        assertTrue(p.h.statuses.isEmpty(), "nothing ran on the device yet: " + p.h.statuses);
        p.txEngine.runNext();
        p.pump();
        assertEquals(Set.of(100L, 101L), p.h.statuses.keySet());
        p.txEngine.runNext();
        p.pump();
        assertEquals(Set.of(100L, 101L, 200L, 201L), p.h.statuses.keySet());
        p.h.finalChecks();
        for (long t : p.h.expected.keySet()) {
            assertEquals(List.of(PeerLink.OK), p.h.statuses.get(t));
        }
    }

    @Test
    void writesReportOkOnlyOnceTheirCopyRan() {
        checkWritesReportOkOnlyOnceTheirCopyRan();
    }

    @Test
    void writesReportedAtLaunchAreCaught() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            () -> checkWritesReportOkOnlyOnceTheirCopyRan(CudaIpcLink.Unsafe.WRITE_DONE_AT_LAUNCH));
        assertTrue(e.getMessage().contains("reported OK before its bytes were in the peer's page"), e.getMessage());
    }

    void checkFlushProvesEveryEarlierWrite(CudaIpcLink.Unsafe... unsafe) {
        final Pair p = pair(unsafe);
        final int[] slots = {4, 5, 6, 7, 8, 9};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1, 2}, new int[] {0, 1, 2}, 10);
        p.h.post(r, slots, new int[] {3, 4, 5}, new int[] {3, 4, 5}, 20);
        p.h.flush(99);
        p.pump();
        assertTrue(p.h.flushes.isEmpty(), "nothing ran yet: no answer");
        p.txEngine.runNext();
        p.pump();
        assertTrue(p.h.flushes.isEmpty(), "one batch of two ran: still no answer");
        p.txEngine.runNext();
        p.pump();
        assertEquals(Map.of(99L, true), p.h.flushes);
        p.h.flush(100); // nothing new posted: answered on the next poll
        p.pump();
        assertEquals(true, p.h.flushes.get(100L));
        p.h.finalChecks();
    }

    @Test
    void flushProvesEveryEarlierWrite() {
        checkFlushProvesEveryEarlierWrite();
    }

    @Test
    void aFlushAnsweredEarlyIsCaught() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            () -> checkFlushProvesEveryEarlierWrite(CudaIpcLink.Unsafe.FLUSH_EARLY));
        assertTrue(e.getMessage().contains("claimed delivery"), e.getMessage());
    }

    void checkCancelRecallsNothingAndWritesReportWhatHappened(CudaIpcLink.Unsafe... unsafe) {
        final Pair p = pair(unsafe);
        final int[] slots = {1, 2, 3};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1, 2}, new int[] {9, 10, 11}, 0);
        p.tx.cancelWrites();
        assertEquals(1, p.tx.cancelRequests());
        p.pump();
        p.txEngine.runAll(); // enqueued work runs: it cannot be recalled
        p.pump();
        p.h.finalChecks();
        for (long t = 0; t < 3; t++) {
            assertEquals(List.of(PeerLink.OK), p.h.statuses.get(t), "write " + t);
        }
    }

    @Test
    void cancelRecallsNothingAndWritesReportWhatHappened() {
        checkCancelRecallsNothingAndWritesReportWhatHappened();
    }

    @Test
    void aCancelThatClaimsEnqueuedWritesDidNotLandIsCaught() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            () -> checkCancelRecallsNothingAndWritesReportWhatHappened(CudaIpcLink.Unsafe.CANCEL_CLAIMS_NOT_LANDED));
        assertTrue(e.getMessage().contains("reported CANCELED and then landed"), e.getMessage());
    }

    void checkTearDownIsProvenOnlyOnceThePeerIsGone(CudaIpcLink.Unsafe... unsafe) {
        final Pair p = pair(unsafe);
        p.region(1, 2);
        p.region(3);
        assertEquals(1, p.rxEngine.openExports, "one export per storage, whatever the registrations");
        assertFalse(p.rx.tearDown(), "the prefill process lives and holds the handle: no proof");
        assertFalse(p.rx.isUp());
        assertThrows(LinkFailedException.class, () -> p.rx.register(p.dst, new int[] {3}));
        assertFalse(p.rx.tearDown(), "asked again: still alive");
        assertEquals(1, p.rxEngine.openExports, "unproven: the export keeps the storage's memory past its close");
        p.prefillGone = true;
        assertTrue(p.rx.tearDown(), "the prefill process is gone");
        assertEquals(0, p.rxEngine.openExports, "proven: the export ended, so a closed storage may free its memory");
        assertTrue(p.rx.tearDown(), "idempotent");
        assertEquals(0, p.rxEngine.openExports);
        assertTrue(p.tx.tearDown(), "the prefill side exported nothing: nothing to protect");
    }

    @Test
    void tearDownIsProvenOnlyOnceThePeerIsGone() {
        checkTearDownIsProvenOnlyOnceThePeerIsGone();
    }

    @Test
    void aTearDownClaimedWithoutProofIsCaught() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            () -> checkTearDownIsProvenOnlyOnceThePeerIsGone(CudaIpcLink.Unsafe.TEARDOWN_WITHOUT_PROOF));
        assertTrue(e.getMessage().contains("no proof"), e.getMessage());
    }

    @Test
    void aLinkClosedAfterItsPeerExitedEndsItsExports() {
        final Pair p = pair();
        p.region(1, 2);
        p.prefillGone = true; // a clean shutdown: the prefill process exited first
        p.rx.close();
        assertEquals(0, p.rxEngine.openExports, "the peer is gone: the pool may free its memory at its close");
    }

    @Test
    void aLinkClosedWhileItsPeerLivesEndsItsExportsOnceThePeerIsGone() {
        final Pair p = pair();
        p.region(1, 2);
        p.rx.close();
        assertEquals(1, p.rxEngine.openExports, "the peer may still map the memory");
        assertEquals(1, p.reaper.checkNow(), "the peer lives: still waiting");
        assertEquals(1, p.rxEngine.openExports);
        p.prefillGone = true;
        assertEquals(0, p.reaper.checkNow(), "the peer is gone: nothing waits");
        assertEquals(0, p.rxEngine.openExports, "a closed pool may free its memory now");
        assertTrue(p.rx.tearDown(), "and a later tearDown() is proven, ending nothing twice");
        assertEquals(0, p.rxEngine.openExports);
    }

    @Test
    void theReapersThreadEndsTheExportsWithinAPeriodAndStopsWhenNoneWait() throws InterruptedException {
        final ExportReaper reaper = new ExportReaper(java.time.Duration.ofMillis(20), true);
        final FakeIpcEngine engine = new FakeIpcEngine();
        final HostPageStorage storage = HostPageStorage.allocate(LAYOUT, 4);
        toClose.add(storage);
        final java.util.concurrent.atomic.AtomicBoolean gone = new java.util.concurrent.atomic.AtomicBoolean();
        final java.util.concurrent.atomic.AtomicBoolean broken = new java.util.concurrent.atomic.AtomicBoolean(true);
        reaper.watch(() -> { // a proof that fails with an Error until it is mended: the thread must live on for the others
            if (broken.get()) {
                throw new StackOverflowError("test");
            }
            return true;
        }, List.of(), "broken link");
        reaper.watch(gone::get, List.of(engine.export(storage)), "test link");
        Thread.sleep(100); // five periods with the peer alive
        assertEquals(1, engine.openExports);
        assertEquals(2, reaper.waiting());
        gone.set(true);
        final long until = System.nanoTime() + 5_000_000_000L;
        while ((engine.openExports != 0 || reaper.waiting() != 1) && System.nanoTime() < until) {
            Thread.sleep(5);
        }
        assertEquals(0, engine.openExports, "ended on the reaper's thread, past a proof that threw an Error");
        assertEquals(1, reaper.waiting());
        broken.set(false);
        while ((reaper.waiting() != 0 || reaper.running()) && System.nanoTime() < until) {
            Thread.sleep(5);
        }
        assertEquals(0, reaper.waiting());
        assertFalse(reaper.running(), "no thread while nothing waits");
        engine.close();
    }

    @Test
    void aLinkClosedWhileItsPeerLivesKeepsItsExportsUntilATearDownProvesIt() {
        final Pair p = pair();
        p.region(1, 2);
        p.rx.close();
        assertEquals(1, p.rxEngine.openExports, "the peer may still map the memory");
        assertFalse(p.rx.tearDown());
        p.prefillGone = true;
        assertTrue(p.rx.tearDown(), "a tearDown() after close still proves it");
        assertEquals(0, p.rxEngine.openExports);
    }

    @Test
    void aLinkThatNeverRegisteredProvesItsTearDownAtOnce() {
        final Pair p = pair();
        assertTrue(p.rx.tearDown(), "no handle ever left through this link");
    }

    void checkCloseWaitsForTheDeviceAndReportsEveryWrite(CudaIpcLink.Unsafe... unsafe) {
        final Pair p = pair(unsafe);
        final int[] slots = {0, 1, 2, 3};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1}, new int[] {0, 1}, 0);
        p.h.post(r, slots, new int[] {2, 3}, new int[] {2, 3}, 2);
        p.h.flush(7);
        p.tx.close(); // as the transfer engine does when a peer fails
        assertTrue(p.txEngine.closed, "the engine is closed (arenas unmapped)");
        assertEquals(0, p.txEngine.queued(), "the engine drained before it unmapped");
        assertEquals(0, p.txEngine.openMappings());
        for (int i = 0; i < 3; i++) {
            p.tx.poll(p.h, 1000); // a closed link still owes its writes' terminal states
        }
        p.h.finalChecks();
        assertEquals(true, p.h.flushes.get(7L), "the flush posted before close is answered too");
        assertThrows(LinkFailedException.class, () -> p.tx.flush(8));
    }

    @Test
    void closeWaitsForTheDeviceAndReportsEveryWrite() {
        checkCloseWaitsForTheDeviceAndReportsEveryWrite();
    }

    @Test
    void aControlChannelWhoseCloseThrowsStillHasTheDeviceDrainedAndEveryWriteReported() {
        final Pair p = new Pair(Set.of(), c -> new io.kvpool.transfer.spi.ForwardingPeerLink(c) {
            @Override
            public void close() {
                super.close();
                throw new IllegalStateException("socket close failed");
            }
        });
        toClose.add(p.tx);
        toClose.add(p.rx);
        final int[] slots = {0, 1};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1}, new int[] {0, 1}, 0);
        p.h.flush(3);
        final IllegalStateException e = assertThrows(IllegalStateException.class, p.tx::close, "the failure is not hidden");
        assertTrue(e.getMessage().contains("socket close failed"), e.getMessage());
        assertTrue(p.txEngine.closed, "the engine is closed all the same");
        assertEquals(0, p.txEngine.queued(), "after the device drained");
        for (int i = 0; i < 3; i++) {
            p.tx.poll(p.h, 1000);
        }
        p.h.finalChecks();
        assertEquals(true, p.h.flushes.get(3L), "the flush posted before close is answered too");
        p.tx.close(); // idempotent: the failure was thrown once
    }

    @Test
    void aCloseThatForgetsPendingWritesIsCaught() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            () -> checkCloseWaitsForTheDeviceAndReportsEveryWrite(CudaIpcLink.Unsafe.CLOSE_FORGETS_PENDING));
        assertTrue(e.getMessage().contains("never reported a terminal state"), e.getMessage());
    }

    // ---- failure injection ----

    @Test
    void aRefusedLaunchPostsNothingAndTakesTheLinkDownOnce() {
        final Pair p = pair();
        final int[] slots = {0, 1};
        final RemoteRegion r = p.region(slots);
        p.txEngine.refuseNextSubmit = true;
        final LinkFailedException e = assertThrows(LinkFailedException.class,
            () -> p.tx.putBatch(r, new int[] {0, 1}, p.src, new int[] {0, 1}, 0, 2, 40));
        assertTrue(e.getMessage().contains("not launched") && e.getMessage().contains("LAUNCH_OUT_OF_RESOURCES (701)"), e.getMessage());
        assertEquals(0, p.tx.writesPosted());
        assertFalse(p.tx.isUp());
        p.pump();
        p.pump();
        assertEquals(1, p.h.failures.size(), p.h.failures::toString);
        assertTrue(p.h.failures.get(0).contains("refused"), p.h.failures.get(0));
        assertTrue(p.h.statuses.isEmpty(), "nothing was posted, nothing reports");
        assertThrows(LinkFailedException.class, () -> p.tx.flush(1));
        assertEquals(1, p.rxEvents.failures.size(), "the peer learns it: the control channel closed");
    }

    @Test
    void aBatchLaunchedWithoutAMarkerReportsFailedOnlyOnceADrainProvedItsCopyEnded() {
        final Pair p = pair();
        final int[] slots = {0, 1, 2};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0}, new int[] {0}, 1);
        p.txEngine.noMarkerNextSubmit = true;
        p.h.post(r, slots, new int[] {1, 2}, new int[] {1, 2}, 2); // returns normally: the writes are posted
        assertEquals(3, p.tx.writesPosted());
        assertFalse(p.tx.isUp());
        p.pump();
        assertTrue(p.h.statuses.isEmpty(), "FIFO: the first batch has not run, so nothing reports yet");
        p.txEngine.runNext();
        p.pump();
        assertEquals(List.of(PeerLink.OK), p.h.statuses.get(1L));
        assertEquals(1, p.txEngine.queued(), "the untracked copy is still queued on the device, reading source pages 1 and 2");
        assertNull(p.h.statuses.get(2L), "a terminal state would let the sender reuse source page 1 while the copy may read it");
        assertNull(p.h.statuses.get(3L), "nor source page 2");
        p.tx.close(); // what the transfer engine does on the failed link
        assertEquals(0, p.txEngine.queued(), "close drained the stream before unmapping");
        p.pump();
        assertEquals(List.of(PeerLink.FAILED), p.h.statuses.get(2L), "may have landed: FAILED, never CANCELED");
        assertEquals(List.of(PeerLink.FAILED), p.h.statuses.get(3L));
        assertTrue(p.h.landed(2) && p.h.landed(3), "and the untracked copy did land: FAILED was the honest answer");
        p.h.finalChecks();
        assertEquals(1, p.h.failures.size());
        assertTrue(p.h.failures.get(0).contains("cannot be tracked"), p.h.failures.get(0));
    }

    @Test
    void anEventErrorFailsItsWritesAndTheFlushAndTakesTheLinkDown() {
        for (boolean lands : new boolean[] {false, true}) {
            final Pair p = pair();
            final int[] slots = {0, 1, 2, 3};
            final RemoteRegion r = p.region(slots);
            p.h.post(r, slots, new int[] {0}, new int[] {0}, 0);
            p.txEngine.failNextBatch = FakeIpcEngine.ILLEGAL_ADDRESS;
            p.txEngine.failedBatchLands = lands;
            p.h.post(r, slots, new int[] {1, 2}, new int[] {1, 2}, 1);
            p.h.flush(5);
            p.txEngine.runAll();
            p.pump();
            assertEquals(List.of(PeerLink.OK), p.h.statuses.get(0L));
            assertEquals(List.of(PeerLink.FAILED), p.h.statuses.get(1L));
            assertEquals(List.of(PeerLink.FAILED), p.h.statuses.get(2L));
            assertEquals(false, p.h.flushes.get(5L), "a flush over a failed batch proves nothing");
            assertEquals(lands, p.h.landed(1), "the failed copy " + (lands ? "landed" : "did not land") + ": either is possible");
            assertFalse(p.tx.isUp());
            p.pump();
            assertEquals(1, p.h.failures.size(), p.h.failures::toString);
            assertTrue(p.h.failures.get(0).contains("CUDA_ERROR_ILLEGAL_ADDRESS (700)"), p.h.failures.get(0));
            assertTrue(p.h.failures.get(0).contains("tokens 1..2"), p.h.failures.get(0));
            p.h.finalChecks();
        }
    }

    @Test
    void aLostPeerFailsTheLinkOnceAndPostedWritesStillReport() {
        final Pair p = pair();
        final int[] slots = {0, 1};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1}, new int[] {0, 1}, 0);
        p.net.crash(p.control[1]); // the decode process dies
        p.pump();
        assertEquals(1, p.h.failures.size(), p.h.failures::toString);
        assertTrue(p.h.failures.get(0).startsWith("cuda-ipc:sim:prefill→decode: control channel: "), p.h.failures.get(0));
        assertFalse(p.tx.isUp());
        assertThrows(LinkFailedException.class, () -> p.tx.putBatch(r, new int[] {0}, p.src, new int[] {2}, 0, 1, 9));
        assertThrows(LinkFailedException.class, () -> p.tx.flush(1));
        assertThrows(LinkFailedException.class, () -> p.tx.send(WireCodec.encode(new Message.Refuse("x"))));
        p.tx.close(); // what the transfer engine does on a failed link: the copies still finish and report
        p.pump();
        p.pump();
        p.h.finalChecks();
        assertEquals(1, p.h.failures.size(), "reported once");
    }

    @Test
    void aFailedOpenPostsNothingAndLeavesTheLinkUp() {
        final Pair p = pair();
        final RemoteRegion r = p.region(0, 1);
        p.txEngine.failOpen = true;
        assertThrows(IllegalStateException.class, () -> p.tx.putBatch(r, new int[] {0}, p.src, new int[] {0}, 0, 1, 0));
        assertEquals(0, p.txEngine.submits);
        assertTrue(p.tx.isUp());
        p.txEngine.failOpen = false;
        p.h.post(r, new int[] {0, 1}, new int[] {1}, new int[] {3}, 1);
        p.txEngine.runAll();
        p.pump();
        p.h.finalChecks();
    }

    // ---- what a batch is checked for before anything is posted ----

    @Test
    void everyBadBatchIsRefusedBeforeAnythingIsPosted() {
        final Pair p = pair();
        final int[] slots = {30, 31};
        final RemoteRegion r = p.region(slots);
        final Pair other = pair();
        final RemoteRegion foreign = other.region(0, 1);
        assertThrows(IllegalArgumentException.class, () -> p.tx.putBatch(foreign, new int[] {0}, p.src, new int[] {0}, 0, 1, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> p.tx.putBatch(r, new int[] {2}, p.src, new int[] {0}, 0, 1, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> p.tx.putBatch(r, new int[] {0}, p.src, new int[] {32}, 0, 1, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> p.tx.putBatch(r, new int[] {0, 1}, p.src, new int[] {0}, 0, 2, 0));
        final IllegalArgumentException dup = assertThrows(IllegalArgumentException.class,
            () -> p.tx.putBatch(r, new int[] {1, 1}, p.src, new int[] {0, 1}, 0, 2, 0));
        assertTrue(dup.getMessage().contains("slot 31 is a destination twice"), dup.getMessage());
        assertThrows(IllegalArgumentException.class, () -> p.tx.putBatch(r, new int[0], p.src, new int[0], 0, -1, 0));
        try (HostPageStorage otherLayout = HostPageStorage.allocate(new KvLayout(2, 1, 8, DType.FP16, 4), 4)) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> p.tx.putBatch(r, new int[] {0}, otherLayout, new int[] {0}, 0, 1, 0));
            assertTrue(e.getMessage().contains(Long.toHexString(LAYOUT.fingerprint())), e.getMessage());
        }
        // a key whose slot lies beyond the peer's arena: caught once the arena (32 pages) is known
        final RemoteRegion beyond = p.tx.attach(new RegionKey(p.rxEngine.handleOf(p.dst), 9, new int[] {32}).encode(), 1);
        final IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class,
            () -> p.tx.putBatch(beyond, new int[] {0}, p.src, new int[] {0}, 0, 1, 0));
        assertTrue(e.getMessage().contains("slot 32; the peer's arena has 32 pages"), e.getMessage());
        p.tx.putBatch(r, new int[0], p.src, new int[0], 0, 0, 0); // empty: nothing to launch
        assertEquals(0, p.txEngine.submits, "nothing was launched");
        assertEquals(0, p.tx.writesPosted());
        assertTrue(p.tx.isUp(), "caller errors do not take the link down");
    }

    @Test
    void attachRefusesKeysThatAreNotCudaIpcKeysOrListAnotherPageCount() {
        final Pair p = pair();
        final byte[] key = p.rx.register(p.dst, new int[] {1, 2, 3}).key();
        final LinkFailedException count = assertThrows(LinkFailedException.class, () -> p.tx.attach(key, 2));
        assertTrue(count.getMessage().contains("lists 3 pages, the descriptor 2"), count.getMessage());
        final byte[] bad = key.clone();
        bad[0] ^= 1;
        assertThrows(LinkFailedException.class, () -> p.tx.attach(bad, 3));
        assertThrows(LinkFailedException.class, () -> p.tx.attach(new byte[3], 0));
        assertEquals(3, p.tx.attach(key, 3).pages());
    }

    @Test
    void registerRefusesRepeatedOrOutOfRangeSlotsAndRevokeIsNeverClaimed() {
        final Pair p = pair();
        assertThrows(IllegalArgumentException.class, () -> p.rx.register(p.dst, new int[] {1, 1}));
        assertThrows(IndexOutOfBoundsException.class, () -> p.rx.register(p.dst, new int[] {32}));
        assertThrows(IndexOutOfBoundsException.class, () -> p.rx.register(p.dst, new int[] {-1}));
        final Registration reg = p.rx.register(p.dst, new int[] {0, 5});
        assertFalse(reg.revoke(), "an exporter cannot revoke a mapping another process opened");
        reg.close();
        reg.close();
        assertEquals(0, p.rxEngine.submits, "register launches nothing");
        assertEquals(0, p.rxEngine.opens, "nor opens anything");
    }

    @Test
    void oneLaunchPerBatchAndOneOpenPerHandle() {
        final Pair p = pair();
        p.txEngine.autoRun = true;
        final int[] a = {0, 1, 2, 3, 4, 5, 6, 7};
        final int[] b = {8, 9, 10, 11, 12, 13, 14, 15, 16};
        final RemoteRegion ra = p.region(a);
        final RemoteRegion rb = p.region(b);
        p.h.post(ra, a, new int[] {0, 1, 2, 3, 4, 5, 6, 7}, new int[] {0, 1, 2, 3, 4, 5, 6, 7}, 0);
        p.h.post(rb, b, new int[] {0, 1, 2, 3, 4, 5, 6, 7}, new int[] {8, 9, 10, 11, 12, 13, 14, 15}, 8);
        p.h.post(rb, b, new int[] {8}, new int[] {16}, 16);
        assertEquals(3, p.txEngine.submits, "three batches, three launches, 17 pages");
        assertEquals(3, p.tx.batchesLaunched());
        assertEquals(17, p.tx.writesPosted());
        assertEquals(1, p.txEngine.opens, "both regions name the same arena: opened once");
        p.pump();
        p.h.finalChecks();
        assertEquals(0, p.tx.pendingBatches());
    }

    @Test
    void pollRespectsItsLimitAndDeliversWritesInPostOrder() {
        final Pair p = pair();
        final int[] slots = {0, 1, 2, 3, 4};
        final RemoteRegion r = p.region(slots);
        p.h.post(r, slots, new int[] {0, 1, 2}, new int[] {0, 1, 2}, 0);
        p.h.post(r, slots, new int[] {3, 4}, new int[] {3, 4}, 3);
        p.txEngine.runAll();
        final List<Long> order = new ArrayList<>();
        final Harness inOrder = new Harness(p) {
            @Override
            public void onWriteDone(PeerLink link, long token, int status) {
                order.add(token);
            }
        };
        assertEquals(2, p.tx.poll(inOrder, 2));
        assertEquals(List.of(0L, 1L), order);
        assertEquals(3, p.tx.poll(inOrder, 100));
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L), order);
        assertEquals(0, p.tx.poll(inOrder, 100));
    }

    @Test
    void framesFlowThroughInOrderBothWays() {
        final Pair p = pair();
        for (int i = 0; i < 20; i++) {
            p.tx.send(WireCodec.encode(new Message.Refuse("to decode " + i)));
            p.rx.send(WireCodec.encode(new Message.Refuse("to prefill " + i)));
        }
        p.pump();
        assertEquals(20, p.rxEvents.frames.size());
        assertEquals(20, p.h.frames.size());
        for (int i = 0; i < 20; i++) {
            assertEquals(new Message.Refuse("to decode " + i), p.rxEvents.frames.get(i));
            assertEquals(new Message.Refuse("to prefill " + i), p.h.frames.get(i));
        }
        assertTrue(p.tx.describe().startsWith("cuda-ipc:sim:"), p.tx.describe());
    }

    @Test
    void closeIsIdempotentAndEveryCallButPollTearDownAndCloseThrowsAfterIt() {
        final Pair p = pair();
        final RemoteRegion r = p.region(0);
        p.tx.close();
        p.tx.close();
        assertFalse(p.tx.isUp());
        assertThrows(LinkFailedException.class, () -> p.tx.send(WireCodec.encode(new Message.Refuse("x"))));
        assertThrows(LinkFailedException.class, () -> p.tx.attach(new byte[16], 0));
        assertThrows(LinkFailedException.class, () -> p.tx.putBatch(r, new int[] {0}, p.src, new int[] {0}, 0, 1, 0));
        assertThrows(LinkFailedException.class, () -> p.tx.flush(0));
        assertThrows(LinkFailedException.class, () -> p.tx.register(p.src, new int[] {0}));
        p.tx.cancelWrites();
        assertEquals(0, p.tx.poll(p.h, 10));
        assertTrue(p.tx.tearDown());
        assertTrue(p.tx.toString().startsWith("cuda-ipc:"), p.tx.toString());
        assertTrue(pair(CudaIpcLink.Unsafe.FLUSH_EARLY).tx.toString().contains("UNSAFE[FLUSH_EARLY]"));
    }
}
