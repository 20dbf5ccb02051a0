package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.KernelView;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The device kernel view's arithmetic, without a GPU: {@link DevicePageStorage#kernelView} is
 * {@link DeviceLayout#kernelView} at its arena's address, and {@link DevicePageStorage#address} is that
 * address plus {@link DeviceLayout#offset}; so base + slot × pageStride must equal it for every slot,
 * layer and K/V. {@link DeviceKernelViewGpuTest} checks the storage itself and the bytes on a GPU.
 */
class DeviceKernelViewTest {

    static final KvLayout[] LAYOUTS = {
        new KvLayout(2, 1, 4, DType.FP32, 4),
        new KvLayout(5, 3, 8, DType.BF16, 2),
        new KvLayout(3, 8, 128, DType.FP16, 16),
        new KvLayout(1, 8, 128, DType.FP8, 16),
    };

    @Test
    void everySlotsAddressIsTheBasePlusSlotTimesThePageStride() {
        final long arena = 0x7f00_0000_0000L; // any device address: the view is arithmetic
        for (KvLayout layout : LAYOUTS) {
            final DeviceLayout d = DeviceLayout.of(layout, 9);
            for (int l = 0; l < layout.layers(); l++) {
                for (int kv = 0; kv < 2; kv++) {
                    final KernelView v = d.kernelView(arena, l, kv);
                    assertEquals(d.pageStride(), v.pageStride());
                    assertEquals(layout.tokensPerPage() * layout.bytesPerTokenVector(), v.blockBytes(), "a device block is a whole plane page");
                    for (int p = 0; p < d.pages(); p++) {
                        final String where = layout + " page " + p + " layer " + l + " kv " + kv;
                        assertEquals(arena + d.offset(p, l, kv), v.baseAddress() + p * v.pageStride(), where);
                        assertEquals(arena + d.offset(p, l, kv), v.address(p), where);
                    }
                }
            }
        }
    }

    @Test
    void tokensAndHeadsFollowTheNhdLayoutWithinAPlanesPage() {
        final KvLayout layout = new KvLayout(2, 4, 16, DType.BF16, 8);
        final DeviceLayout d = DeviceLayout.of(layout, 3);
        final KernelView v = d.kernelView(0, 1, 0);
        // a page's plane chunk is its host block (DeviceLayout.hostOffset): token t, head h at the same offset in both
        for (int t = 0; t < layout.tokensPerPage(); t++) {
            for (int h = 0; h < layout.kvHeads(); h++) {
                final long inHostBlock = layout.offset(1, 0, t) - layout.offset(1, 0, 0) + (long) h * layout.headDim() * 2;
                assertEquals(d.offset(2, 1, 0) + inHostBlock, v.address(2, t, h));
            }
        }
    }

    @Test
    void aDeviceViewHasNoHostSegment() {
        final KernelView v = DeviceLayout.of(LAYOUTS[0], 2).kernelView(1 << 20, 0, 0);
        assertFalse(v.hostAccessible());
        assertEquals(MemorySegment.NULL, v.hostSegment());
        assertThrows(IndexOutOfBoundsException.class, () -> DeviceLayout.of(LAYOUTS[0], 2).kernelView(0, 2, 0));
    }
}
