package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Device storage against host storage on the same bytes: every kernel must leave exactly what the host
 * implementation leaves. Skips without a GPU (with the reason); fails under {@code -Dkvpool.gpu.required=true}.
 */
class DevicePageStorageGpuTest {

    /** All dtypes, small and odd page sizes (every plane a multiple of 16 bytes). */
    static final KvLayout[] LAYOUTS = {
        new KvLayout(2, 1, 4, DType.FP32, 4),      // 64 B planes
        new KvLayout(3, 2, 8, DType.FP16, 1),      // 32 B planes, one token per page
        new KvLayout(5, 3, 8, DType.BF16, 2),      // 96 B planes: not a power of two
        new KvLayout(1, 8, 128, DType.FP8, 16),    // 16 KiB planes
        new KvLayout(4, 8, 128, DType.BF16, 16),   // 32 KiB planes, 256 KiB pages
    };

    @BeforeEach
    void gpu() {
        GpuAssume.gpu();
    }

    static void random(MemorySegment s, SplittableRandom r) {
        for (long o = 0; o < s.byteSize(); o += 8) {
            s.set(ValueLayout.JAVA_LONG_UNALIGNED, o, r.nextLong());
        }
    }

    /** Writes random bytes into every page of {@code d}: @return each page as written (host layout), index = page */
    static MemorySegment[] writeRandomPages(DevicePageStorage d, SplittableRandom r, Arena arena) {
        final MemorySegment[] want = new MemorySegment[d.pageCount()];
        for (int p = 0; p < want.length; p++) {
            want[p] = arena.allocate(d.layout().bytesPerPage(), 16);
            random(want[p], r);
            d.writePage(p, want[p]);
        }
        return want;
    }

    static MemorySegment read(DevicePageStorage d, int page, Arena arena) {
        final MemorySegment m = arena.allocate(d.layout().bytesPerPage(), 16);
        d.readPage(page, m);
        return m;
    }

    @Test
    void writeReadCopyAndFillLeaveWhatTheHostStorageLeaves() {
        final SplittableRandom r = new SplittableRandom(7);
        for (KvLayout l : LAYOUTS) {
            final int pages = 24;
            try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
                 HostPageStorage host = HostPageStorage.allocate(l, pages)) {
                for (int p = 0; p < pages; p++) {
                    random(host.hostPage(p), r);
                    dev.writePage(p, host.hostPage(p));
                }
                final int[] src = {0, 5, 7, 11, 2};
                final int[] dst = {20, 21, 3, 12, 23};
                host.copyPages(src, 0, dst, 0, src.length);
                dev.copyPages(src, 0, dst, 0, src.length);
                host.fill(9, FillMode.CANARY);
                dev.fill(9, FillMode.CANARY);
                host.fill(10, FillMode.ZERO);
                dev.fill(10, FillMode.ZERO);
                final int tail = l.tokensPerPage() / 2 + 1; // the tail of a partial page, past a received token
                host.fillTail(13, tail, FillMode.CANARY);
                dev.fillTail(13, tail, FillMode.CANARY);
                host.fillTail(14, 1, FillMode.ZERO);
                dev.fillTail(14, 1, FillMode.ZERO);
                for (int p = 0; p < pages; p++) {
                    assertEquals(-1, MemorySegment.mismatch(host.hostPage(p), 0, l.bytesPerPage(), read(dev, p, arena), 0, l.bytesPerPage()),
                        l + " page " + p);
                }
            }
        }
    }

    @Test
    void aTailFillOnAPoolWhosePlanesPass2GiBLeavesWhatTheHostLeaves() {
        // one layer of 1 × 64 FP16 × 16 tokens: 2 KiB a plane a page, so 2^20 + 1 pages make each plane 2 GiB + 2 KiB
        // (4.3 GB in all), past the largest pitch cuMemcpy2D takes (2^31 − 1): the tail goes plane by plane there
        final KvLayout l = new KvLayout(1, 1, 64, DType.FP16, 16);
        final int pages = (1 << 20) + 1;
        final SplittableRandom r = new SplittableRandom(11);
        try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
             HostPageStorage host = HostPageStorage.allocate(l, 2)) {
            assertTrue(dev.deviceLayout().planeBytes() > Integer.MAX_VALUE, () -> "planes of " + dev.deviceLayout().planeBytes() + " bytes");
            final int last = pages - 1, before = pages - 2;
            random(host.hostPage(0), r);
            random(host.hostPage(1), r);
            dev.writePage(before, host.hostPage(0));
            dev.writePage(last, host.hostPage(1));
            host.fillTail(1, 3, FillMode.CANARY);
            dev.fillTail(last, 3, FillMode.CANARY);
            assertEquals(-1, MemorySegment.mismatch(host.hostPage(1), 0, l.bytesPerPage(), read(dev, last, arena), 0, l.bytesPerPage()),
                "the last page: its first 3 tokens kept, the rest of every plane the canary");
            assertEquals(-1, MemorySegment.mismatch(host.hostPage(0), 0, l.bytesPerPage(), read(dev, before, arena), 0, l.bytesPerPage()),
                "the page before it untouched");
        }
    }

    @Test
    void theCanaryCheckFindsWhatTheHostFinds() {
        final SplittableRandom r = new SplittableRandom(11);
        for (KvLayout l : LAYOUTS) {
            final int pages = 16;
            try (DevicePageStorage dev = DevicePageStorage.allocate(l, pages); HostPageStorage host = HostPageStorage.allocate(l, pages)) {
                for (int p = 0; p < pages; p++) {
                    host.fill(p, FillMode.CANARY);
                    // overwrite a random subset of token vectors, so the first canary token varies per page
                    final MemorySegment page = host.hostPage(p);
                    for (int t = 0; t < l.tokensPerPage(); t++) {
                        for (int layer = 0; layer < l.layers(); layer++) {
                            for (int kv = 0; kv < 2; kv++) {
                                if (r.nextInt(4) != 0) {
                                    random(page.asSlice(l.offset(layer, kv, t), l.bytesPerTokenVector()), r);
                                }
                            }
                        }
                    }
                    dev.writePage(p, page);
                    for (int from = 0; from < l.tokensPerPage(); from += Math.max(1, l.tokensPerPage() / 3)) {
                        assertEquals(host.firstCanaryToken(p, from, l.tokensPerPage()), dev.firstCanaryToken(p, from, l.tokensPerPage()),
                            l + " page " + p + " from " + from);
                    }
                    assertEquals(-1, dev.firstCanaryToken(p, 0, 0));
                }
            }
        }
    }

    @Test
    void addressesFollowTheDeviceLayout() {
        final KvLayout l = LAYOUTS[4];
        try (DevicePageStorage dev = DevicePageStorage.allocate(l, 8)) {
            final DeviceLayout d = dev.deviceLayout();
            final long base = dev.address(0, 0, 0);
            assertEquals(0, base % DeviceLayout.ALIGNMENT);
            assertEquals(base + d.offset(5, 3, 1), dev.address(5, 3, 1));
            assertFalse(dev.isHostAccessible());
            assertThrows(UnsupportedOperationException.class, () -> dev.hostPage(0));
        }
    }

    @Test
    void closeIsIdempotentAndUseAfterCloseThrows() {
        final DevicePageStorage dev = DevicePageStorage.allocate(LAYOUTS[0], 4);
        dev.close();
        dev.close();
        assertThrows(IllegalStateException.class, () -> dev.fill(0, FillMode.CANARY));
        assertThrows(IllegalStateException.class, () -> dev.address(0, 0, 0));
    }

    @Test
    void anImpossibleAllocationSaysHowMuchWasAskedAndFree() {
        final KvLayout big = new KvLayout(64, 64, 128, DType.FP32, 64); // 256 MiB pages
        final CudaException e = assertThrows(CudaException.class, () -> DevicePageStorage.allocate(big, 100_000));
        assertTrue(e.getMessage().contains("asked for") && e.getMessage().contains("free"), e.getMessage());
    }

    @Test
    void aKvPoolRunsOnDeviceStorage() {
        final KvLayout l = LAYOUTS[4];
        try (KvPool pool = KvPool.builder(l).pages(64).maxContextTokens(64 * 16).storage(DevicePageStorage::allocate).build()) {
            final PageStorage s = pool.storage();
            assertInstanceOf(DevicePageStorage.class, s);
            try (Sequence seq = pool.admit(100, 20).sequence()) {
                seq.append(100);
                for (int i = 0; i < seq.pageCount(); i++) {
                    assertEquals(0, s.firstCanaryToken(seq.pageIndex(i), 0, 1), "a fresh page holds the canary");
                }
            }
            assertTrue(pool.verifyAccounting().balanced());
        }
    }

    @Test
    void aPoolSizedFromFreeMemoryStillFailsAtStartupWhenSmallerThanTheAdvertisedContext() {
        final KvLayout l = LAYOUTS[4];
        final int pages = DevicePageStorage.pagesForFreeMemory(l, 0.001);
        assertTrue(pages > 0, "0.1 % of an H200's free memory holds some 256 KiB pages");
        final long advertised = (long) pages * l.tokensPerPage() + 1;
        final io.kvpool.PoolCapacityException e = assertThrows(io.kvpool.PoolCapacityException.class,
            () -> KvPool.builder(l).pages(pages).maxContextTokens(advertised).storage(DevicePageStorage::allocate).build());
        assertTrue(e.getMessage().contains(String.format("%,d", advertised)) || e.getMessage().contains(Long.toString(advertised)), e.getMessage());
    }

    @Test
    void offloadAndRestoreRoundTripThroughPinnedMemory() {
        final SplittableRandom r = new SplittableRandom(13);
        for (KvLayout l : LAYOUTS) {
            final int pages = 12;
            try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
                 PinnedPageBuffer pinned = new PinnedPageBuffer(dev, 4)) {
                final MemorySegment[] want = writeRandomPages(dev, r, arena);
                final int[] out = {7, 2, 11, 4};
                dev.offload(out, 0, 4, pinned, 0);
                for (int i = 0; i < 4; i++) {
                    assertEquals(-1, want[out[i]].mismatch(pinned.page(i)), l + " offloaded page " + out[i]);
                }
                final int[] back = {0, 1, 9, 10};
                dev.restore(pinned, 0, back, 0, 4);
                for (int i = 0; i < 4; i++) {
                    assertEquals(-1, want[out[i]].mismatch(read(dev, back[i], arena)), l + " restored into " + back[i]);
                }
                for (int p : new int[] {3, 5, 6, 8}) {
                    assertEquals(-1, want[p].mismatch(read(dev, p, arena)), l + " untouched page " + p);
                }
            }
        }
    }

    @Test
    void batchesOnTheirOwnStreamsCompleteWithTheSameResultAsTheHost() {
        final SplittableRandom r = new SplittableRandom(17);
        final KvLayout l = LAYOUTS[4];
        final int pages = 32;
        try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages);
             HostPageStorage host = HostPageStorage.allocate(l, pages)) {
            for (int p = 0; p < pages; p++) {
                random(host.hostPage(p), r);
                dev.writePage(p, host.hostPage(p));
            }
            final jcuda.driver.CUstream s1 = new jcuda.driver.CUstream();
            final jcuda.driver.CUstream s2 = new jcuda.driver.CUstream();
            jcuda.driver.JCudaDriver.cuStreamCreate(s1, 0);
            jcuda.driver.JCudaDriver.cuStreamCreate(s2, 0);
            final int[] a = {0, 1, 2, 3};
            final int[] b = {16, 17, 18, 19};
            final int[] c = {4, 5, 6, 7};
            final int[] d = {20, 21, 22, 23};
            try (DeviceBatch x = dev.submitCopy(a, 0, b, 0, 4, s1); DeviceBatch y = dev.submitCopy(c, 0, d, 0, 4, s2)) {
                x.await();
                y.await();
                assertTrue(x.isDone() && y.isDone());
            }
            host.copyPages(a, 0, b, 0, 4);
            host.copyPages(c, 0, d, 0, 4);
            for (int p = 0; p < pages; p++) {
                assertEquals(-1, host.hostPage(p).mismatch(read(dev, p, arena)), "page " + p);
            }
            jcuda.driver.JCudaDriver.cuStreamDestroy(s1);
            jcuda.driver.JCudaDriver.cuStreamDestroy(s2);
        }
    }
}
