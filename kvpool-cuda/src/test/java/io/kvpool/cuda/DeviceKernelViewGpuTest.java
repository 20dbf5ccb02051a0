package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.storage.KernelView;
import jcuda.Pointer;
import jcuda.driver.JCudaDriver;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link DevicePageStorage#kernelView} on a device: base + slot × pageStride is {@link DevicePageStorage#address} for
 * every slot, layer and K/V, and the bytes a kernel would read at {@code address(slot, token, head)} are the host
 * page's bytes at {@link KvLayout#offset}. Skips without a GPU.
 */
class DeviceKernelViewGpuTest {

    @BeforeEach
    void gpu() {
        GpuAssume.gpu();
    }

    @Test
    void theViewAddressesTheArenaAsTheStorageDoes() {
        for (KvLayout layout : DevicePageStorageGpuTest.LAYOUTS) {
            try (DevicePageStorage d = DevicePageStorage.allocate(layout, 5); Arena arena = Arena.ofConfined()) {
                final MemorySegment[] pages = DevicePageStorageGpuTest.writeRandomPages(d, new SplittableRandom(layout.hashCode()), arena);
                final long arenaBase = d.address(0, 0, 0);
                final long headBytes = (long) layout.headDim() * layout.dtype().bytes();
                final byte[] got = new byte[(int) headBytes];
                for (int l = 0; l < layout.layers(); l++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final KernelView v = d.kernelView(l, kv);
                        for (int p = 0; p < d.pageCount(); p++) {
                            assertEquals(d.address(p, l, kv), v.baseAddress() + p * v.pageStride(), layout + " page " + p + " layer " + l + " kv " + kv);
                            final int t = p % layout.tokensPerPage();
                            final int h = (p + l) % layout.kvHeads();
                            final long at = v.address(p, t, h) - arenaBase;
                            d.makeCurrent();
                            CudaException.check(JCudaDriver.cuMemcpyDtoH(Pointer.to(got), d.arenaPointer().withByteOffset(at), headBytes), "cuMemcpyDtoH");
                            final long off = layout.offset(l, kv, t) + h * headBytes;
                            for (int b = 0; b < headBytes; b++) {
                                assertEquals(pages[p].get(ValueLayout.JAVA_BYTE, off + b), got[b], layout + " page " + p + " byte " + b);
                            }
                        }
                    }
                }
            }
        }
    }
}
