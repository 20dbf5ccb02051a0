package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import jcuda.driver.CUstream;
import jcuda.driver.CUstream_flags;
import jcuda.driver.JCudaDriver;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The stream forms ({@code submit*}) and both offload engines on the device: batches on two streams at once
 * leave exactly what the host (or the bytes written) say, a batch can be polled, awaited and closed twice,
 * and {@link OffloadEngine#MEMCPY_BATCH} round-trips through pinned memory like {@link OffloadEngine#KERNEL}.
 * Skips without a GPU (with the reason); fails under {@code -Dkvpool.gpu.required=true}.
 */
class DeviceBatchGpuTest {

    @BeforeEach
    void gpu() {
        GpuAssume.gpu();
    }

    /** A new stream of the current (primary) context, ordered with the legacy default stream. */
    static CUstream stream() {
        final CUstream s = new CUstream();
        CudaException.check(JCudaDriver.cuStreamCreate(s, CUstream_flags.CU_STREAM_DEFAULT), "cuStreamCreate");
        return s;
    }

    /** Polls until done (bounded), so {@link DeviceBatch#isDone()} is exercised, not only await. */
    static void poll(DeviceBatch b) throws InterruptedException {
        for (int i = 0; i < 10_000 && !b.isDone(); i++) {
            Thread.sleep(1);
        }
        assertTrue(b.isDone(), "batch not done after ~10 s of polling");
    }

    @Test
    void fillsOnTwoStreamsLeaveWhatTheHostFillLeaves() throws InterruptedException {
        final SplittableRandom r = new SplittableRandom(31);
        for (KvLayout l : DevicePageStorageGpuTest.LAYOUTS) {
            final int pages = 16;
            try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
                 HostPageStorage host = HostPageStorage.allocate(l, pages)) {
                for (int p = 0; p < pages; p++) {
                    DevicePageStorageGpuTest.random(host.hostPage(p), r);
                    dev.writePage(p, host.hostPage(p));
                }
                final int[] canary = {3, 9, 0, 14};
                final int[] zero = {1, 15, 7};
                final int[] none = {2, 4};
                final CUstream s1 = stream();
                final CUstream s2 = stream();
                try (DeviceBatch a = dev.submitFill(canary, 0, canary.length, FillMode.CANARY, s1);
                     DeviceBatch b = dev.submitFill(zero, 0, zero.length, FillMode.ZERO, s2);
                     DeviceBatch c = dev.submitFill(none, 0, none.length, FillMode.NONE, s1)) {
                    poll(a);
                    b.await();
                    c.await();
                } finally {
                    JCudaDriver.cuStreamDestroy(s1);
                    JCudaDriver.cuStreamDestroy(s2);
                }
                for (int p : canary) {
                    host.fill(p, FillMode.CANARY);
                }
                for (int p : zero) {
                    host.fill(p, FillMode.ZERO);
                }
                for (int p = 0; p < pages; p++) {
                    assertEquals(-1, host.hostPage(p).mismatch(DevicePageStorageGpuTest.read(dev, p, arena)), l + " page " + p);
                }
            }
        }
    }

    @Test
    void offloadsAndRestoresOnTwoStreamsWithBothEngines() throws InterruptedException {
        final SplittableRandom r = new SplittableRandom(37);
        for (OffloadEngine engine : OffloadEngine.values()) {
            for (KvLayout l : DevicePageStorageGpuTest.LAYOUTS) {
                final String what = engine + " " + l;
                final int pages = 16;
                try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
                     PinnedPageBuffer pinned = new PinnedPageBuffer(dev, 8)) {
                    final MemorySegment[] want = DevicePageStorageGpuTest.writeRandomPages(dev, r, arena);
                    final int[] outA = {3, 7, 1, 12};
                    final int[] outB = {0, 9, 14, 5};
                    final int[] inA = {2, 4, 6, 8};
                    final int[] inB = {10, 11, 13, 15};
                    final CUstream s1 = stream();
                    final CUstream s2 = stream();
                    try {
                        try (DeviceBatch a = dev.submitOffload(outA, 0, 4, pinned, 0, engine, s1);
                             DeviceBatch b = dev.submitOffload(outB, 0, 4, pinned, 4, engine, s2)) {
                            poll(a);
                            b.await();
                        }
                        for (int i = 0; i < 4; i++) {
                            assertEquals(-1, want[outA[i]].mismatch(pinned.page(i)), what + ": offloaded page " + outA[i]);
                            assertEquals(-1, want[outB[i]].mismatch(pinned.page(4 + i)), what + ": offloaded page " + outB[i]);
                        }
                        try (DeviceBatch a = dev.submitRestore(pinned, 0, inA, 0, 4, engine, s1);
                             DeviceBatch b = dev.submitRestore(pinned, 4, inB, 0, 4, engine, s2)) {
                            a.await();
                            poll(b);
                        }
                    } finally {
                        JCudaDriver.cuStreamDestroy(s1);
                        JCudaDriver.cuStreamDestroy(s2);
                    }
                    for (int i = 0; i < 4; i++) {
                        want[inA[i]] = want[outA[i]];
                        want[inB[i]] = want[outB[i]];
                    }
                    for (int p = 0; p < pages; p++) {
                        assertEquals(-1, want[p].mismatch(DevicePageStorageGpuTest.read(dev, p, arena)), what + ": page " + p);
                    }
                }
            }
        }
    }

    @Test
    void synchronousOffloadAndRestoreRoundTripWithEitherEngine() {
        final SplittableRandom r = new SplittableRandom(41);
        for (OffloadEngine engine : OffloadEngine.values()) {
            for (KvLayout l : DevicePageStorageGpuTest.LAYOUTS) {
                final int pages = 12;
                try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
                     PinnedPageBuffer pinned = new PinnedPageBuffer(dev, 5)) {
                    final MemorySegment[] want = DevicePageStorageGpuTest.writeRandomPages(dev, r, arena);
                    final int[] out = {7, 2, 11, 4};
                    dev.offload(out, 0, 4, pinned, 1, engine);
                    for (int i = 0; i < 4; i++) {
                        assertEquals(-1, want[out[i]].mismatch(pinned.page(1 + i)), engine + " " + l + ": offloaded page " + out[i]);
                    }
                    final int[] back = {0, 1, 9, 10};
                    dev.restore(pinned, 1, back, 0, 4, engine);
                    dev.fill(3, FillMode.CANARY); // the storage's other (legacy-stream) calls interleave with the engine's stream
                    for (int i = 0; i < 4; i++) {
                        assertEquals(-1, want[out[i]].mismatch(DevicePageStorageGpuTest.read(dev, back[i], arena)), engine + " " + l + ": restored " + back[i]);
                    }
                    for (int p : new int[] {5, 6, 8}) {
                        assertEquals(-1, want[p].mismatch(DevicePageStorageGpuTest.read(dev, p, arena)), engine + " " + l + ": untouched page " + p);
                    }
                    assertEquals(0, dev.firstCanaryToken(3, 0, l.tokensPerPage()));
                }
            }
        }
    }

    @Test
    void memcpyBatchRefusesTheLegacyStreamAndTheKernelTakesIt() {
        final KvLayout l = DevicePageStorageGpuTest.LAYOUTS[0];
        try (DevicePageStorage dev = DevicePageStorage.allocate(l, 4); PinnedPageBuffer pinned = new PinnedPageBuffer(dev, 2)) {
            final int[] pages = {0, 1};
            for (CUstream legacy : new CUstream[] {null, JCudaDriver.CU_STREAM_LEGACY}) {
                final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> dev.submitOffload(pages, 0, 2, pinned, 0, OffloadEngine.MEMCPY_BATCH, legacy));
                assertTrue(e.getMessage().contains("legacy"), e.getMessage());
            }
            try (DeviceBatch b = dev.submitOffload(pages, 0, 2, pinned, 0, OffloadEngine.KERNEL, null)) {
                b.await();
            }
        }
    }

    @Test
    void aPinnedBufferClosedUnderItsBatchesWaitsForThemAndItsPagesThrowAfter() throws InterruptedException {
        final KvLayout l = DevicePageStorageGpuTest.LAYOUTS[0];
        try (DevicePageStorage dev = DevicePageStorage.allocate(l, 8)) {
            final int[] pages = {0, 1, 2, 3, 4, 5, 6, 7};
            final CUstream s = stream();
            final PinnedPageBuffer pinned = new PinnedPageBuffer(dev, 8);
            final java.lang.foreign.MemorySegment stale = pinned.page(0);
            final DeviceBatch b = dev.submitOffload(pages, 0, 8, pinned, 0, OffloadEngine.KERNEL, s);
            pinned.close(); // with the offload perhaps still running: the free waits for the device
            b.await();      // no CUDA error: nothing ran against freed memory
            b.close();
            assertThrows(IllegalStateException.class, () -> stale.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0),
                "a page of a closed buffer throws, it does not fault");
            assertThrows(IllegalStateException.class, () -> dev.submitOffload(pages, 0, 8, pinned, 0, OffloadEngine.KERNEL, s));
            dev.fill(0, io.kvpool.storage.FillMode.CANARY); // the context is sound
            assertEquals(0, dev.firstCanaryToken(0, 0, l.tokensPerPage()));
            CudaException.check(JCudaDriver.cuStreamDestroy(s), "cuStreamDestroy");
        }
    }

    @Test
    void aPinnedBufferClosedWhileAnotherThreadSubmitsGivesOnlyClosedRefusals() throws Exception {
        final KvLayout l = DevicePageStorageGpuTest.LAYOUTS[0];
        try (DevicePageStorage dev = DevicePageStorage.allocate(l, 8)) {
            final int[] pages = {0, 1, 2, 3};
            final CUstream s = stream(); // made here: this thread has the context current
            for (int round = 0; round < 20; round++) {
                final int r = round;
                final PinnedPageBuffer pinned = new PinnedPageBuffer(dev, 4);
                final java.util.concurrent.atomic.AtomicReference<Throwable> wrong = new java.util.concurrent.atomic.AtomicReference<>();
                final Thread submitter = Thread.ofPlatform().start(() -> {
                    try {
                        while (true) {
                            try (DeviceBatch b = dev.submitOffload(pages, 0, 4, pinned, 0, OffloadEngine.KERNEL, s)) {
                                b.await();
                            } catch (IllegalStateException closed) {
                                return; // the refusal of a closed buffer: the only failure allowed
                            }
                        }
                    } catch (Throwable t) {
                        wrong.set(t);
                    }
                });
                Thread.sleep(r % 5);
                pinned.close();
                submitter.join(10_000);
                assertFalse(submitter.isAlive(), "the submitter did not see the close");
                assertNull(wrong.get(), () -> "round " + r + ": " + wrong.get());
            }
            CudaException.check(JCudaDriver.cuStreamDestroy(s), "cuStreamDestroy");
            dev.fill(0, io.kvpool.storage.FillMode.CANARY); // the context is sound after all of it
            assertEquals(0, dev.firstCanaryToken(0, 0, l.tokensPerPage()));
        }
    }

    @Test
    void aBatchIsPolledAwaitedAndClosedTwice() {
        final KvLayout l = DevicePageStorageGpuTest.LAYOUTS[0];
        try (DevicePageStorage dev = DevicePageStorage.allocate(l, 4)) {
            final DeviceBatch empty = dev.submitCopy(new int[0], 0, new int[0], 0, 0, null);
            empty.await();
            assertTrue(empty.isDone());
            empty.close();
            empty.close();
            assertTrue(empty.isDone(), "a closed batch is done");
            final DeviceBatch fill = dev.submitFill(new int[] {1, 2}, 0, 2, FillMode.CANARY, null);
            fill.close(); // waits first
            fill.close();
            assertEquals(0, dev.firstCanaryToken(2, 0, l.tokensPerPage()));
        }
    }
}
