package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/** The arena arithmetic (no GPU needed). */
class DeviceLayoutTest {

    @Test
    void planesFollowEachOtherAndPagesFollowWithinAPlane() {
        final KvLayout l = new KvLayout(3, 2, 64, DType.BF16, 16); // 2·64·2 = 256 B vectors, 4 KiB page planes
        final DeviceLayout d = DeviceLayout.of(l, 10);
        assertEquals(6, d.planes());
        assertEquals(4096, d.pageStride());
        assertEquals(40_960, d.planeBytes());
        assertEquals(6 * 40_960L, d.arenaBytes());
        assertEquals(0, d.offset(0, 0, 0));
        assertEquals(4096, d.offset(1, 0, 0));
        assertEquals(40_960, d.offset(0, 0, 1));
        assertEquals(2 * 40_960 + 9 * 4096, d.offset(9, 1, 0));
        assertEquals(5 * 40_960 + 3 * 4096, d.offset(3, 2, 1));
    }

    @Test
    void aPagesPlanesInOrderAreItsHostLayout() {
        for (KvLayout l : new KvLayout[] {new KvLayout(2, 1, 4, DType.FP32, 4), new KvLayout(5, 3, 8, DType.FP16, 2),
            new KvLayout(1, 8, 128, DType.FP8, 16)}) {
            final DeviceLayout d = DeviceLayout.of(l, 3);
            for (int layer = 0; layer < l.layers(); layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    assertEquals(l.offset(layer, kv, 0), d.hostOffset(d.plane(layer, kv)), l + " layer " + layer + " kv " + kv);
                }
            }
            assertEquals(l.bytesPerPage(), d.planes() * d.pageStride());
        }
    }

    @Test
    void layoutsTheKernelsCannotMoveSixteenBytesAtATimeAreRefused() {
        final KvLayout odd = new KvLayout(2, 1, 3, DType.FP16, 1); // 6-byte planes
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> DeviceLayout.of(odd, 4));
        assertTrue(e.getMessage().contains("6 bytes"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> DeviceLayout.of(new KvLayout(1, 1, 8, DType.FP32, 4), 0));
    }

    @Test
    void outOfRangeCoordinatesAreRefused() {
        final DeviceLayout d = DeviceLayout.of(new KvLayout(2, 1, 4, DType.FP32, 4), 3);
        assertThrows(IndexOutOfBoundsException.class, () -> d.offset(3, 0, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> d.offset(0, 2, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> d.offset(0, 0, 2));
    }

    @Test
    void withoutADeviceTheProbeSaysWhy() {
        // on a machine without a GPU (CI) the probe must give a reason; with one, none
        assertEquals(Cuda.available(), Cuda.unavailableReason() == null);
        if (!Cuda.available()) {
            assertFalse(Cuda.unavailableReason().isBlank());
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> DevicePageStorage.allocate(new KvLayout(1, 1, 8, DType.FP32, 4), 4));
            assertTrue(e.getMessage().contains(Cuda.unavailableReason()), e.getMessage());
        }
    }

    @Test
    void sizingByFreeMemoryLeavesRoomForTheStoragesOwnBuffersEvenAtTheWholeShare() {
        final long bytesPerPage = new KvLayout(1, 4, 64, DType.FP16, 16).bytesPerPage(); // 16 KiB
        for (long free : new long[] {141L << 30, 1L << 30, (64L << 20) + 3 * bytesPerPage}) {
            for (double fraction : new double[] {1.0, 0.9, 0.5}) {
                final long pages = DevicePageStorage.pagesFor(free, fraction, bytesPerPage);
                final long arena = pages * bytesPerPage;
                final long scratch = 24 * pages + 64; // what the constructor allocates beside the arena
                final long batch = 24 * pages;        // one submit* batch of every page
                assertTrue(arena + scratch + batch + (32L << 20) <= (long) (free * fraction),
                    free + " × " + fraction + " → " + pages + " pages leave no room for the module and buffers");
                assertTrue(pages >= (long) (free * fraction * 0.99 - (64L << 20)) / bytesPerPage,
                    free + " × " + fraction + " → only " + pages + " pages");
            }
        }
        assertEquals(0, DevicePageStorage.pagesFor(32L << 20, 1.0, bytesPerPage), "less than the reserve: no page");
    }
}
