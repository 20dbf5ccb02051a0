package io.kvpool.storage;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

import static org.junit.jupiter.api.Assertions.*;

/** Kernel views of host storage: base + slot × stride is the storage's address, and the strides reach KvLayout's bytes. */
class KernelViewTest {

    /** Every dtype; heads of at least 4 bytes (the byte test writes an int per head). */
    static final KvLayout[] LAYOUTS = {
        new KvLayout(3, 2, 4, DType.FP16, 4),
        new KvLayout(2, 3, 8, DType.FP32, 5),
        new KvLayout(4, 1, 16, DType.BF16, 1),
        new KvLayout(2, 2, 8, DType.FP8, 3),
    };
    static final int PAGES = 7;
    private static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    @Test
    void everySlotsAddressIsTheBasePlusSlotTimesThePageStride() {
        for (KvLayout layout : LAYOUTS) {
            try (HostPageStorage s = HostPageStorage.allocate(layout, PAGES)) {
                for (int l = 0; l < layout.layers(); l++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final KernelView v = s.kernelView(l, kv);
                        for (int slot = 0; slot < PAGES; slot++) {
                            final String where = layout + " slot " + slot + " layer " + l + " kv " + kv;
                            assertEquals(s.address(slot, l, kv), v.baseAddress() + slot * v.pageStride(), where);
                            assertEquals(s.address(slot, l, kv), v.address(slot), where);
                        }
                    }
                }
            }
        }
    }

    @Test
    void theStridesReachTheBytesKvLayoutPlacesInAPage() {
        for (KvLayout layout : LAYOUTS) {
            final long headBytes = (long) layout.headDim() * layout.dtype().bytes();
            try (HostPageStorage s = HostPageStorage.allocate(layout, PAGES)) {
                // one distinct code per (slot, layer, kv, token, head), written through the views
                for (int l = 0; l < layout.layers(); l++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final KernelView v = s.kernelView(l, kv);
                        for (int slot = 0; slot < PAGES; slot++) {
                            for (int t = 0; t < layout.tokensPerPage(); t++) {
                                for (int h = 0; h < layout.kvHeads(); h++) {
                                    v.hostSegment().set(INT_LE, v.offset(slot, t, h), code(layout, slot, l, kv, t, h));
                                }
                            }
                        }
                    }
                }
                // read back where KvLayout says each head is, through the pages
                for (int slot = 0; slot < PAGES; slot++) {
                    final MemorySegment page = s.hostPage(slot);
                    for (int l = 0; l < layout.layers(); l++) {
                        for (int kv = 0; kv < 2; kv++) {
                            final KernelView v = s.kernelView(l, kv);
                            for (int t = 0; t < layout.tokensPerPage(); t++) {
                                for (int h = 0; h < layout.kvHeads(); h++) {
                                    final long off = layout.offset(l, kv, t) + h * headBytes;
                                    assertEquals(code(layout, slot, l, kv, t, h), page.get(INT_LE, off), layout + " " + slot + "/" + l + "/" + kv + "/" + t + "/" + h);
                                    assertEquals(page.address() + off, v.address(slot, t, h));
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    private static int code(KvLayout layout, int slot, int l, int kv, int t, int h) {
        return ((((slot * layout.layers() + l) * 2 + kv) * layout.tokensPerPage() + t) * layout.kvHeads() + h) + 1;
    }

    @Test
    void theViewDescribesTheLayout() {
        for (KvLayout layout : LAYOUTS) {
            try (HostPageStorage s = HostPageStorage.allocate(layout, PAGES)) {
                final KernelView v = s.kernelView(layout.layers() - 1, 1);
                assertEquals(layout.bytesPerPage(), v.pageStride());
                assertEquals(layout.bytesPerTokenVector(), v.tokenStride());
                assertEquals((long) layout.headDim() * layout.dtype().bytes(), v.headStride());
                assertEquals(layout.dtype(), v.dtype());
                assertEquals(layout.tokensPerPage(), v.tokensPerPage());
                assertEquals(layout.kvHeads(), v.kvHeads());
                assertEquals(layout.headDim(), v.headDim());
                assertEquals(PAGES, v.pageCount());
                assertEquals(ByteOrder.LITTLE_ENDIAN, v.byteOrder());
                assertEquals(layout.dtype().bytes(), v.elementLayout().byteSize());
                assertEquals(ByteOrder.LITTLE_ENDIAN, v.elementLayout().order());
                assertTrue(v.hostAccessible());
                assertEquals(v.baseAddress(), v.hostSegment().address());
                assertEquals(v.hostSpan(), v.hostSegment().byteSize());
                // the last block ends where the storage's last page's block ends
                assertEquals(s.address(PAGES - 1, layout.layers() - 1, 1) + v.blockBytes(), v.baseAddress() + v.hostSpan());
            }
        }
    }

    @Test
    void aStorageWithoutAUniformStrideSaysSo() {
        final PageStorage noView = new PageStorage() {
            @Override public KvLayout layout() { return LAYOUTS[0]; }
            @Override public int pageCount() { return 1; }
            @Override public boolean isHostAccessible() { return false; }
            @Override public MemorySegment hostPage(int page) { throw new UnsupportedOperationException(); }
            @Override public long address(int page, int layer, int kv) { return 0; }
            @Override public void fill(int page, FillMode mode) { }
            @Override public int firstCanaryToken(int page, int fromToken, int toToken) { return -1; }
            @Override public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) { }
            @Override public void close() { }
        };
        final UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class, () -> noView.kernelView(0, 0));
        assertTrue(e.getMessage().contains(noView.getClass().getName()) && e.getMessage().contains("uniform stride"), e.getMessage());
    }

    @Test
    void outOfRangeCoordinatesAreRefused() {
        final KvLayout layout = LAYOUTS[0];
        try (HostPageStorage s = HostPageStorage.allocate(layout, PAGES)) {
            assertThrows(IndexOutOfBoundsException.class, () -> s.kernelView(layout.layers(), 0));
            assertThrows(IndexOutOfBoundsException.class, () -> s.kernelView(-1, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> s.kernelView(0, 2));
            final KernelView v = s.kernelView(0, 0);
            assertThrows(IndexOutOfBoundsException.class, () -> v.address(PAGES));
            assertThrows(IndexOutOfBoundsException.class, () -> v.address(-1));
            assertThrows(IndexOutOfBoundsException.class, () -> v.offset(0, layout.tokensPerPage(), 0));
            assertThrows(IndexOutOfBoundsException.class, () -> v.offset(0, 0, layout.kvHeads()));
        }
    }

    @Test
    void aClosedStorageRefusesAViewAndAnOldViewsSegmentDies() {
        final HostPageStorage s = HostPageStorage.allocate(LAYOUTS[0], PAGES);
        final KernelView v = s.kernelView(1, 1);
        s.close();
        assertThrows(IllegalStateException.class, () -> s.kernelView(0, 0));
        assertThrows(IllegalStateException.class, () -> v.hostSegment().get(ValueLayout.JAVA_BYTE, 0));
    }

    @Test
    void anInconsistentViewIsRefused() {
        final KvLayout layout = LAYOUTS[0];
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment seg = arena.allocate(layout.bytesPerPage() * 2);
            final long block = layout.tokensPerPage() * layout.bytesPerTokenVector();
            // fine: two pages of whole-page stride
            KernelView.of(layout, 2, 0, 0, seg.address(), layout.bytesPerPage(), seg);
            // a segment that does not start at the base address
            assertThrows(IllegalArgumentException.class, () -> KernelView.of(layout, 2, 0, 0, seg.address() + 16, layout.bytesPerPage(), seg));
            // a segment too short for the last block
            assertThrows(IllegalArgumentException.class,
                () -> KernelView.of(layout, 2, 0, 0, seg.address(), layout.bytesPerPage(), seg.asSlice(0, layout.bytesPerPage() + block - 1)));
            // a page stride smaller than one block
            assertThrows(IllegalArgumentException.class, () -> KernelView.of(layout, 2, 0, 0, seg.address(), block - 1, MemorySegment.NULL));
            // a device view (no segment) is not host-accessible
            assertFalse(KernelView.of(layout, 2, 0, 0, 1L << 40, block, MemorySegment.NULL).hostAccessible());
        }
    }

    @Test
    void aHostSegmentIsRefusedWhenTheSpanItMustCoverOverflows() {
        // FP32, 1 head × 4 dim: 16-byte tokens, 4 tokens a page; three pages 2^62 bytes apart span more than a long holds
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment seg = arena.allocate(64);
            assertThrows(IllegalArgumentException.class, () -> new KernelView(0, 0, seg.address(), 1L << 62, 16, 16,
                DType.FP32, 3, 4, 1, 4, seg), "a 64-byte host segment cannot cover 3 pages 2^62 bytes apart");
        }
    }

    @Test
    void aHostSegmentIsRefusedWhenTheBlockItMustCoverOverflows() {
        // FP32, 2^30 heads x 2^30 dims: 2^62-byte tokens, 4 a page: the block (4 x 2^62) wraps to 0, and a 64-byte segment
        // would be taken for a page whose second token lies 2^62 bytes past the base
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment seg = arena.allocate(64);
            assertThrows(IllegalArgumentException.class, () -> new KernelView(0, 0, seg.address(), 64, 1L << 62, 1L << 32,
                DType.FP32, 1, 4, 1 << 30, 1 << 30, seg), "a 64-byte host segment cannot cover a block of 4 x 2^62 bytes");
        }
    }
}
