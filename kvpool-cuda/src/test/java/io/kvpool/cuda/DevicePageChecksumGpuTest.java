package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.transfer.KvChecksum;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import jcuda.driver.CUstream;
import jcuda.driver.JCudaDriver;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The checksum kernel on the device against {@link KvChecksum} on the host, on random pages: every layout of
 * {@link DevicePageStorageGpuTest} and of {@link KernelEmulationTest} (odd vectors and tokens per
 * page) and a 2 MiB page (256 threads, 8 KiB chunks each), partial last pages, keys of two requests, the
 * synchronous and the stream form, and {@link DeviceChecksums} on a pool. Skips without a GPU (with the reason);
 * fails under {@code -Dkvpool.gpu.required=true}.
 */
class DevicePageChecksumGpuTest {

    static final KvLayout TWO_MIB = new KvLayout(32, 8, 128, DType.BF16, 16);

    @BeforeEach
    void gpu() {
        GpuAssume.gpu();
    }

    static List<KvLayout> layouts() {
        final List<KvLayout> all = new ArrayList<>(Arrays.asList(DevicePageStorageGpuTest.LAYOUTS));
        all.addAll(Arrays.asList(KernelEmulationTest.LAYOUTS));
        all.add(TWO_MIB);
        return all;
    }

    /** Random pages written to the device; {@code host[p]} holds page p's bytes in host layout. */
    static MemorySegment[] randomPages(DevicePageStorage dev, Arena arena, SplittableRandom r) {
        final MemorySegment[] host = new MemorySegment[dev.pageCount()];
        for (int p = 0; p < host.length; p++) {
            host[p] = arena.allocate(dev.layout().bytesPerPage(), 16);
            DevicePageStorageGpuTest.random(host[p], r);
            dev.writePage(p, host[p]);
        }
        return host;
    }

    /** Request A (4 pages, the last holding one token) then request B (2 full pages, reversed), over shuffled slots. */
    record Batch(int[] slots, ChecksumKeys keys, long[] ids, int[] pageIndex, int[] tokens) {
        static Batch of(KvLayout l, int pages, SplittableRandom r) {
            final int tpp = l.tokensPerPage();
            final int[] perm = new int[pages];
            for (int i = 0; i < pages; i++) {
                perm[i] = i;
            }
            for (int i = pages - 1; i > 0; i--) {
                final int j = r.nextInt(i + 1);
                final int t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            final long a = r.nextLong();
            final long[] ids = {a, a, a, a, -3, -3};
            final int[] pageIndex = {0, 1, 2, 3, 1, 0};
            final int[] tokens = {3 * tpp + 1, 3 * tpp + 1, 3 * tpp + 1, 3 * tpp + 1, 2 * tpp, 2 * tpp};
            final ChecksumKeys keys = new ChecksumKeys(l, 6);
            for (int i = 0; i < 6; i++) {
                keys.add(ids[i], pageIndex[i], tokens[i]);
            }
            return new Batch(Arrays.copyOf(perm, 6), keys, ids, pageIndex, tokens);
        }

        int[] expected(KvLayout l, MemorySegment[] host) {
            final int[] want = new int[slots.length];
            for (int i = 0; i < want.length; i++) {
                want[i] = KvChecksum.of(l, host[slots[i]], ids[i], pageIndex[i], tokens[i]);
            }
            return want;
        }
    }

    @Test
    void deviceChecksumsEqualKvChecksumForEveryLayout() {
        final SplittableRandom r = new SplittableRandom(19);
        for (KvLayout l : layouts()) {
            final int pages = l.equals(TWO_MIB) ? 7 : 12;
            try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, pages)) {
                final MemorySegment[] host = randomPages(dev, arena, r);
                final Batch b = Batch.of(l, pages, r);
                final int[] want = b.expected(l, host);
                assertArrayEquals(want, dev.checksums(b.slots(), 0, b.keys()), l.toString());

                // the comparison can fail: a byte of a valid token of page 1 changed on the device changes only its value
                final long at = l.offset(l.layers() - 1, 1, 0) + 3;
                host[b.slots()[1]].set(ValueLayout.JAVA_BYTE, at, (byte) (host[b.slots()[1]].get(ValueLayout.JAVA_BYTE, at) ^ 0x40));
                dev.writePage(b.slots()[1], host[b.slots()[1]]);
                final int[] after = dev.checksums(b.slots(), 0, b.keys());
                assertNotEquals(want[1], after[1], l + ": a flipped byte went unnoticed");
                assertArrayEquals(b.expected(l, host), after, l + " after the flip");
            }
        }
    }

    @Test
    void theDeviceGivesKvChecksumTestsGoldenValue() {
        final KvLayout l = KernelEmulationTest.LAYOUTS[0]; // KvChecksumTest's layout
        try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, 3)) {
            final MemorySegment page = arena.allocate(l.bytesPerPage(), 16);
            for (int i = 0; i < l.bytesPerPage(); i++) {
                page.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 37 + 11));
            }
            dev.writePage(2, page);
            final int[] got = dev.checksums(new int[] {2}, 0, new ChecksumKeys(l, 1).add(0x0102_0304_0506_0708L, 1, 7));
            assertEquals(0x1470AE3C, got[0], () -> "0x" + Integer.toHexString(got[0]));
        }
    }

    @Test
    void checksumBatchesOnTwoStreamsGiveTheSameValues() {
        final SplittableRandom r = new SplittableRandom(23);
        final KvLayout l = DevicePageStorageGpuTest.LAYOUTS[4];
        try (Arena arena = Arena.ofConfined(); DevicePageStorage dev = DevicePageStorage.allocate(l, 24)) {
            final MemorySegment[] host = randomPages(dev, arena, r);
            final Batch x = Batch.of(l, 24, r);
            final Batch y = Batch.of(l, 24, r);
            final CUstream s1 = DeviceBatchGpuTest.stream();
            final CUstream s2 = DeviceBatchGpuTest.stream();
            try (ChecksumBatch bx = dev.submitChecksums(x.slots(), 0, x.keys(), s1); ChecksumBatch by = dev.submitChecksums(y.slots(), 0, y.keys(), s2);
                 ChecksumBatch empty = dev.submitChecksums(new int[0], 0, new ChecksumKeys(l, 0), null)) {
                assertArrayEquals(x.expected(l, host), bx.await());
                assertArrayEquals(y.expected(l, host), by.await());
                assertTrue(bx.isDone() && by.isDone());
                assertEquals(0, empty.await().length);
                bx.close();
                assertArrayEquals(x.expected(l, host), bx.await(), "values read before close stay readable");
            } finally {
                JCudaDriver.cuStreamDestroy(s1);
                JCudaDriver.cuStreamDestroy(s2);
            }
        }
    }

    @Test
    void deviceChecksumsPlugIntoAPoolAndTheTransferBuilders() {
        final SplittableRandom r = new SplittableRandom(29);
        final KvLayout l = DevicePageStorageGpuTest.LAYOUTS[4];
        final PeerIdentity id = PeerIdentity.of(l, "test-model@r1", "gpu", "build-1");
        try (Arena arena = Arena.ofConfined();
             KvPool pool = KvPool.builder(l).pages(64).maxContextTokens(64 * 16).storage(DevicePageStorage::allocate).build()) {
            final DevicePageStorage dev = (DevicePageStorage) pool.storage();
            final long[] handles;
            final int[] want;
            try (Sequence seq = pool.admit(37, 0).sequence()) {
                seq.append(37); // 3 pages, the last holding 5 tokens
                handles = new long[seq.pageCount()];
                want = new int[handles.length];
                for (int i = 0; i < handles.length; i++) {
                    handles[i] = seq.pageHandle(i);
                    final MemorySegment page = arena.allocate(l.bytesPerPage(), 16);
                    DevicePageStorageGpuTest.random(page, r);
                    dev.writePage(PageHandle.slot(handles[i]), page);
                    want[i] = KvChecksum.of(l, page, 99, i, 37);
                }
                final int[] all = new int[handles.length];
                DeviceChecksums.INSTANCE.compute(pool, handles, 0, handles.length, 99, 37, all);
                assertArrayEquals(want, all);
                final int[] tail = new int[handles.length - 1];
                DeviceChecksums.INSTANCE.compute(pool, handles, 1, handles.length, 99, 37, tail);
                assertArrayEquals(Arrays.copyOfRange(want, 1, want.length), tail, "a sender's later run of pages");
            }
            // the pages are free now: their handles are stale, and nothing is checksummed
            final IllegalStateException stale = assertThrows(IllegalStateException.class,
                () -> DeviceChecksums.INSTANCE.compute(pool, handles, 0, handles.length, 99, 37, new int[handles.length]));
            assertTrue(stale.getMessage().contains("stale"), stale.getMessage());

            assertThrows(IllegalArgumentException.class, () -> TransferReceiver.builder(pool, id).build(), "HOST cannot read device pages");
            assertTrue(DeviceChecksums.INSTANCE.supports(dev));
            TransferReceiver.builder(pool, id).checksums(DeviceChecksums.INSTANCE).build().close();
            TransferSender.builder(pool, id).checksums(DeviceChecksums.INSTANCE).build().close();
        }
    }
}
