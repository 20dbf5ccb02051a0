package io.kvpool.transfer.shm;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.KernelView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.*;

/** The mapped storage's kernel views: whole pages apart after the header, in both the owner's and a mapper's view. */
@Timeout(20)
class MappedKernelViewTest {

    static final KvLayout LAYOUT = new KvLayout(3, 2, 8, DType.BF16, 4); // 32 B vectors, 768 B pages
    static final int PAGES = 6;
    private static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    @TempDir
    Path dir;

    @Test
    void everySlotsAddressIsTheBasePlusSlotTimesThePageStride() {
        try (MappedPageStorage s = MappedPageStorage.create(dir.resolve("pool"), LAYOUT, PAGES)) {
            for (int l = 0; l < LAYOUT.layers(); l++) {
                for (int kv = 0; kv < 2; kv++) {
                    final KernelView v = s.kernelView(l, kv);
                    assertEquals(LAYOUT.bytesPerPage(), v.pageStride());
                    assertEquals(s.segment().address() + LAYOUT.offset(l, kv, 0), v.baseAddress(), "the header is not part of the view");
                    for (int slot = 0; slot < PAGES; slot++) {
                        assertEquals(s.address(slot, l, kv), v.baseAddress() + slot * v.pageStride(), "slot " + slot + " layer " + l + " kv " + kv);
                        assertEquals(s.address(slot, l, kv), v.address(slot));
                    }
                }
            }
        }
    }

    @Test
    void aMappersViewSeesWhatTheOwnersViewWrote() {
        final Path f = dir.resolve("pool");
        try (MappedPageStorage owner = MappedPageStorage.create(f, LAYOUT, PAGES); MappedPageStorage mapper = MappedPageStorage.map(f, LAYOUT)) {
            final KernelView w = owner.kernelView(2, 1);
            final KernelView r = mapper.kernelView(2, 1);
            for (int slot = 0; slot < PAGES; slot++) {
                for (int t = 0; t < LAYOUT.tokensPerPage(); t++) {
                    for (int h = 0; h < LAYOUT.kvHeads(); h++) {
                        w.hostSegment().set(INT_LE, w.offset(slot, t, h), (slot * 100 + t) * 10 + h);
                    }
                }
            }
            for (int slot = 0; slot < PAGES; slot++) {
                final MemorySegment page = mapper.hostPage(slot);
                for (int t = 0; t < LAYOUT.tokensPerPage(); t++) {
                    for (int h = 0; h < LAYOUT.kvHeads(); h++) {
                        final int want = (slot * 100 + t) * 10 + h;
                        assertEquals(want, r.hostSegment().get(INT_LE, r.offset(slot, t, h)));
                        assertEquals(want, page.get(INT_LE, LAYOUT.offset(2, 1, t) + (long) h * LAYOUT.headDim() * 2));
                    }
                }
            }
        }
    }
}
