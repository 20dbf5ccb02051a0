package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.HashSet;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.*;

class LayoutAndHandleTest {

    @Test
    void derivedSizes() {
        final KvLayout l = new KvLayout(32, 8, 128, DType.BF16, 16);
        assertEquals(8 * 128 * 2, l.bytesPerTokenVector());
        assertEquals(8L * 128 * 2 * 2 * 32, l.bytesPerToken());
        assertEquals(8L * 128 * 2 * 2 * 32 * 16, l.bytesPerPage());
        assertEquals(3, l.pagesFor(33));
        assertEquals(2, l.pagesFor(32));
        assertEquals(0, l.pagesFor(0));
        assertThrows(IllegalArgumentException.class, () -> l.pagesFor(-1));
    }

    @Test
    void hostOffsetsFollowTheDrawnLayout() {
        final KvLayout l = new KvLayout(3, 2, 4, DType.FP32, 5);
        final long vec = 2 * 4 * 4;
        assertEquals(0, l.offset(0, 0, 0));
        assertEquals(vec, l.offset(0, 0, 1));
        assertEquals(5 * vec, l.offset(0, 1, 0));
        assertEquals((2 * 2 + 1) * 5 * vec + 4 * vec, l.offset(2, 1, 4));
        assertEquals(l.bytesPerPage(), l.offset(2, 1, 4) + vec);
        assertThrows(IndexOutOfBoundsException.class, () -> l.offset(3, 0, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> l.offset(0, 2, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> l.offset(0, 0, 5));
    }

    @Test
    void badShapesAreRefusedWithTheField() {
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new KvLayout(0, 1, 1, DType.FP8, 1)).getMessage().contains("layers"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new KvLayout(1, -3, 1, DType.FP8, 1)).getMessage().contains("kvHeads must be ≥ 1, was -3"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new KvLayout(1, 1, 0, DType.FP8, 1)).getMessage().contains("headDim"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new KvLayout(1, 1, 1, DType.FP8, 0)).getMessage().contains("tokensPerPage"));
        assertThrows(IllegalArgumentException.class, () -> new KvLayout(1, 1, 1, null, 1));
        final IllegalArgumentException overflow = assertThrows(IllegalArgumentException.class,
            () -> new KvLayout(Integer.MAX_VALUE, Integer.MAX_VALUE, Integer.MAX_VALUE, DType.FP32, Integer.MAX_VALUE));
        assertTrue(overflow.getMessage().contains("overflows"), overflow.getMessage());
        final IllegalArgumentException huge = assertThrows(IllegalArgumentException.class,
            () -> new KvLayout(1024, 64, 256, DType.FP32, 1024));
        assertTrue(huge.getMessage().contains("exceeds the maximum"), huge.getMessage());
    }

    @Test
    void fingerprintIsStableAndSensitiveToEveryField() {
        final KvLayout base = new KvLayout(32, 8, 128, DType.FP16, 16);
        // the documented algorithm, recomputed here by hand
        long h = 0xcbf29ce484222325L;
        for (byte b : "kvpool-layout/v1:32:8:128:FP16:16".getBytes(java.nio.charset.StandardCharsets.UTF_8)) {
            h ^= (b & 0xff);
            h *= 0x100000001b3L;
        }
        assertEquals(h, base.fingerprint());
        assertEquals(base.fingerprint(), new KvLayout(32, 8, 128, DType.FP16, 16).fingerprint());
        final Set<Long> prints = new HashSet<>();
        prints.add(base.fingerprint());
        prints.add(new KvLayout(31, 8, 128, DType.FP16, 16).fingerprint());
        prints.add(new KvLayout(32, 4, 128, DType.FP16, 16).fingerprint());
        prints.add(new KvLayout(32, 8, 64, DType.FP16, 16).fingerprint());
        prints.add(new KvLayout(32, 8, 128, DType.BF16, 16).fingerprint());
        prints.add(new KvLayout(32, 8, 128, DType.FP16, 32).fingerprint());
        assertEquals(6, prints.size(), "FP16 and BF16 have equal widths but must not fingerprint equal");
    }

    @Test
    void handleBitLayout() {
        final long h = PageHandle.of(PageHandle.MAX_SLOT, PageHandle.MAX_GENERATION);
        assertTrue(h > 0);
        assertEquals(PageHandle.MAX_SLOT, PageHandle.slot(h));
        assertEquals(PageHandle.MAX_GENERATION, PageHandle.generation(h));
        assertEquals((3L << 24) | 12, PageHandle.of(12, 3));
        assertFalse(PageHandle.isHandle(PageHandle.NONE));
        assertFalse(PageHandle.isHandle(5)); // generation 0
        assertFalse(PageHandle.isHandle(PageHandle.STALE));
        assertThrows(IllegalArgumentException.class, () -> PageHandle.of(-1, 1));
        assertThrows(IllegalArgumentException.class, () -> PageHandle.of(PageHandle.MAX_SLOT + 1, 1));
        assertThrows(IllegalArgumentException.class, () -> PageHandle.of(0, 0));
        assertThrows(IllegalArgumentException.class, () -> PageHandle.of(0, PageHandle.MAX_GENERATION + 1));
        assertEquals("page[slot=12, gen=3]", PageHandle.toString(PageHandle.of(12, 3)));
        assertEquals("STALE", PageHandle.toString(PageHandle.STALE));
    }
}
