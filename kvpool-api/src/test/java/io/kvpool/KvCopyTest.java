package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.KernelView;
import io.kvpool.storage.PageStorage;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.nio.ByteOrder;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/** Bulk token-run copies into and out of sequences: the layout on both sides, and every safety rule. */
class KvCopyTest {

    /** FP16, 2 layers × 2 heads × 4 dim, 4 tokens/page: 16-byte vectors, 256-byte pages. */
    static final KvLayout FP16 = TestPools.SMALL;
    static final KvLayout FP32 = new KvLayout(2, 2, 4, DType.FP32, 4);
    static final KvLayout BF16 = new KvLayout(3, 1, 8, DType.BF16, 4);

    static KvPool pool(KvLayout layout, int pages) {
        return KvPool.builder(layout).pages(pages).maxContextTokens((long) pages * layout.tokensPerPage()).build();
    }

    static MemorySegment random(Arena arena, long bytes, SplittableRandom r) {
        final MemorySegment s = arena.allocate(bytes, 8);
        for (long o = 0; o < bytes; o++) {
            s.set(ValueLayout.JAVA_BYTE, o, (byte) r.nextInt());
        }
        return s;
    }

    /** @return a heap copy of a page's bytes now */
    static MemorySegment snapshot(Sequence s, int page) {
        final MemorySegment p = s.page(page);
        final MemorySegment copy = MemorySegment.ofArray(new byte[(int) p.byteSize()]);
        copy.copyFrom(p);
        return copy;
    }

    /** Asserts token {@code t}'s vector of (layer, kv) in the sequence's page equals {@code vec} bytes of {@code src} at {@code at}. */
    static void assertVector(Sequence s, int l, int kv, int t, MemorySegment src, long at, String what) {
        final KvLayout layout = s.pool().layout();
        final long vec = layout.bytesPerTokenVector();
        final long off = layout.offset(l, kv, t % layout.tokensPerPage());
        final MemorySegment page = s.page(t / layout.tokensPerPage());
        assertEquals(-1, MemorySegment.mismatch(page, off, off + vec, src, at, at + vec), what + ": token " + t + " layer " + l + " kv " + kv);
    }

    @Test
    void copyInPutsEachVectorWhereKvLayoutSaysAndCopyOutReadsItBack() {
        final SplittableRandom r = new SplittableRandom(42);
        try (KvPool pool = pool(FP16, 16); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(23, 0).sequence();
            s.append(23); // 6 pages, the last one partial
            final long vec = FP16.bytesPerTokenVector();
            final int planes = 2 * FP16.layers();
            for (int round = 0; round < 200; round++) {
                final int from = r.nextInt(23);
                final int n = r.nextInt(23 - from + 1);
                final MemorySegment src = random(arena, 8 + n * FP16.bytesPerToken(), r);
                copy.copyIn(s, from, n, src, 8);
                for (int i = 0; i < n; i++) {
                    for (int l = 0; l < FP16.layers(); l++) {
                        for (int kv = 0; kv < 2; kv++) {
                            assertVector(s, l, kv, from + i, src, 8 + ((2L * l + kv) * n + i) * vec, "round " + round);
                        }
                    }
                }
                final MemorySegment back = arena.allocate(3 + n * FP16.bytesPerToken());
                copy.copyOut(s, from, n, back, 3);
                assertEquals(-1, MemorySegment.mismatch(src, 8, 8 + n * vec * planes, back, 3, 3 + n * vec * planes));
            }
            s.close();
        }
    }

    @Test
    void aWholePageIsTheAllLayersRunOfItsTokens() {
        try (KvPool pool = pool(FP16, 4); Arena arena = Arena.ofConfined()) {
            final Sequence s = pool.admit(8, 0).sequence();
            s.append(8);
            final MemorySegment src = random(arena, 4 * FP16.bytesPerToken(), new SplittableRandom(1));
            KvCopy.of(pool).copyIn(s, 4, 4, src, 0);
            assertEquals(-1, MemorySegment.mismatch(src, 0, src.byteSize(), s.page(1), 0, FP16.bytesPerPage()));
            s.close();
        }
    }

    @Test
    void copyLayerInWritesOneLayersKOrVAndNothingElse() {
        final SplittableRandom r = new SplittableRandom(3);
        try (KvPool pool = pool(FP16, 8); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(14, 0).sequence();
            s.append(14);
            final long vec = FP16.bytesPerTokenVector();
            final MemorySegment all = random(arena, 14 * FP16.bytesPerToken(), r);
            copy.copyIn(s, 0, 14, all, 0);
            final MemorySegment one = random(arena, 7 * vec, r);
            copy.copyLayerIn(s, 1, 0, 3, 7, one, 0);
            for (int t = 0; t < 14; t++) {
                for (int l = 0; l < FP16.layers(); l++) {
                    for (int kv = 0; kv < 2; kv++) {
                        if (l == 1 && kv == 0 && t >= 3 && t < 10) {
                            assertVector(s, l, kv, t, one, (t - 3) * vec, "the layer written");
                        } else {
                            assertVector(s, l, kv, t, all, ((2L * l + kv) * 14 + t) * vec, "untouched");
                        }
                    }
                }
            }
            final MemorySegment back = arena.allocate(7 * vec);
            copy.copyLayerOut(s, 1, 0, 3, 7, back, 0);
            assertEquals(-1, back.mismatch(one));
            final MemorySegment v = arena.allocate(2 * vec);
            copy.copyLayerOut(s, 0, 1, 12, 2, v, 0);
            assertVector(s, 0, 1, 12, v, 0, "copyLayerOut of another layer");
            assertVector(s, 0, 1, 13, v, vec, "copyLayerOut of another layer");
            s.close();
        }
    }

    @Test
    void floatArraysCopyLittleEndianElementsIntoAnFp32Pool() {
        final SplittableRandom r = new SplittableRandom(5);
        try (KvPool pool = pool(FP32, 8)) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(11, 0).sequence();
            s.append(11);
            final int elems = FP32.kvHeads() * FP32.headDim();
            final int n = 9;
            final float[] src = new float[2 + n * elems * 2 * FP32.layers()];
            for (int i = 0; i < src.length; i++) {
                src[i] = (float) r.nextGaussian();
            }
            copy.copyIn(s, 1, n, src, 2);
            final ValueLayout.OfFloat le = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < n; i++) {
                final int t = 1 + i;
                for (int l = 0; l < FP32.layers(); l++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final MemorySegment page = s.page(t / 4);
                        for (int e = 0; e < elems; e++) {
                            assertEquals(src[2 + ((2 * l + kv) * n + i) * elems + e], page.get(le, FP32.offset(l, kv, t % 4) + 4L * e));
                        }
                    }
                }
            }
            final float[] back = new float[n * elems * 2 * FP32.layers()];
            copy.copyOut(s, 1, n, back, 0);
            assertArrayEquals(java.util.Arrays.copyOfRange(src, 2, src.length), back);
            final float[] layer = new float[3 * elems];
            copy.copyLayerIn(s, 1, 1, 8, 3, layer, 0); // zeros into layer 1 V, tokens 8..10
            final float[] layerBack = new float[1 + 3 * elems];
            layerBack[0] = 7f;
            copy.copyLayerOut(s, 1, 1, 8, 3, layerBack, 1);
            assertEquals(7f, layerBack[0]);
            for (int i = 1; i < layerBack.length; i++) {
                assertEquals(0f, layerBack[i]);
            }
            s.close();
        }
    }

    @Test
    void shortArraysCopyFp16AndBf16Patterns() {
        for (KvLayout layout : new KvLayout[] {FP16, BF16}) {
            final SplittableRandom r = new SplittableRandom(9);
            try (KvPool pool = pool(layout, 8)) {
                final KvCopy copy = KvCopy.of(pool);
                final Sequence s = pool.admit(10, 0).sequence();
                s.append(10);
                final int elems = layout.kvHeads() * layout.headDim();
                final short[] src = new short[10 * elems * 2 * layout.layers()];
                for (int i = 0; i < src.length; i++) {
                    src[i] = (short) r.nextInt();
                }
                copy.copyIn(s, 0, 10, src, 0);
                final ValueLayout.OfShort le = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
                final int l = layout.layers() - 1;
                for (int t = 0; t < 10; t++) {
                    for (int e = 0; e < elems; e++) {
                        assertEquals(src[((2 * l + 1) * 10 + t) * elems + e], s.page(t / 4).get(le, layout.offset(l, 1, t % 4) + 2L * e), layout + " token " + t);
                    }
                }
                final short[] one = new short[4 * elems];
                copy.copyLayerOut(s, l, 1, 6, 4, one, 0);
                assertArrayEquals(java.util.Arrays.copyOfRange(src, ((2 * l + 1) * 10 + 6) * elems, ((2 * l + 1) * 10 + 10) * elems), one);
                copy.copyLayerIn(s, 0, 0, 0, 4, one, 0);
                final short[] again = new short[4 * elems];
                copy.copyLayerOut(s, 0, 0, 0, 4, again, 0);
                assertArrayEquals(one, again);
                final short[] everything = new short[src.length];
                copy.copyOut(s, 0, 10, everything, 0);
                System.arraycopy(one, 0, src, 0, one.length); // layer 0 K, tokens 0..3 were overwritten
                assertArrayEquals(src, everything);
                s.close();
            }
        }
    }

    // ---- rules ----

    @Test
    void copyInRefusesTokensPastTheSequenceEnd() {
        try (KvPool pool = pool(FP16, 4); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(5, 3).sequence();
            s.append(5); // page 1 holds token 4; its room for tokens 5..7 is not the sequence's yet
            final MemorySegment before = snapshot(s, 1);
            final MemorySegment src = arena.allocate(4 * FP16.bytesPerToken());
            final IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class, () -> copy.copyIn(s, 5, 1, src, 0));
            assertTrue(e.getMessage().contains("[5, 6)") && e.getMessage().contains("[0, 5)") && e.getMessage().contains("append"), e.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyIn(s, 4, 2, src, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyLayerIn(s, 0, 0, 3, 3, src, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyIn(s, -1, 1, src, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyIn(s, 0, -1, src, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyOut(s, 5, 1, src, 0));
            assertEquals(-1, snapshot(s, 1).mismatch(before), "nothing was written into the page, not even token 4");
            s.append(1);
            copy.copyIn(s, 5, 1, src, 0); // appended: now it is the sequence's token
            s.close();
        }
    }

    @Test
    void copyInRefusesASharedPage() {
        try (KvPool pool = pool(FP16, 8); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence parent = pool.admit(6, 4).sequence();
            parent.append(6);
            final MemorySegment kv = random(arena, 10 * FP16.bytesPerToken(), new SplittableRandom(2));
            copy.copyIn(parent, 0, 6, kv, 0);
            final Sequence child = parent.fork(); // both pages shared, the second partial
            final MemorySegment page0 = snapshot(child, 0);
            final MemorySegment page1 = snapshot(child, 1);
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> copy.copyIn(parent, 0, 6, kv, 0));
            final int slot0 = parent.pageIndex(0);
            assertTrue(e.getMessage().contains("page 0 (slot " + slot0 + ")") && e.getMessage().contains("refcount 2")
                && e.getMessage().contains("append"), e.getMessage());
            assertThrows(IllegalStateException.class, () -> copy.copyLayerIn(parent, 1, 1, 5, 1, kv, 0), "the shared partial page");
            assertThrows(IllegalStateException.class, () -> copy.copyIn(child, 2, 2, kv, 0), "the child's side too");
            assertEquals(-1, snapshot(child, 0).mismatch(page0), "the child's KV is unchanged");
            assertEquals(-1, snapshot(child, 1).mismatch(page1), "the child's KV is unchanged");
            // appending copies the shared partial page: the appended token is writable, and the other side keeps its bytes
            child.append(1);
            copy.copyIn(child, 6, 1, kv, 0);
            copy.copyLayerIn(parent, 0, 0, 5, 1, kv, FP16.bytesPerTokenVector() * 3); // the parent now holds page 1 alone
            assertEquals(-1, snapshot(child, 0).mismatch(page0));
            assertVector(child, 0, 0, 5, page1, FP16.offset(0, 0, 1), "the child's copy of token 5");
            assertThrows(IllegalStateException.class, () -> copy.copyIn(child, 0, 1, kv, 0), "page 0 is still shared");
            final MemorySegment out = arena.allocate(6 * FP16.bytesPerToken());
            copy.copyOut(child, 0, 6, out, 0); // reading shared pages is fine
            child.close();
            parent.close();
        }
    }

    @Test
    void copyInRefusesAPublishedPage() {
        try (KvPool pool = pool(FP16, 8); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(10, 0).sequence();
            s.append(10);
            final MemorySegment kv = random(arena, 10 * FP16.bytesPerToken(), new SplittableRandom(4));
            copy.copyIn(s, 0, 10, kv, 0);
            s.publish(new int[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 77); // pages 0 and 1 published, only this sequence holds them
            final MemorySegment page1 = snapshot(s, 1);
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> copy.copyIn(s, 7, 2, kv, 0));
            assertTrue(e.getMessage().contains("page 1 (slot " + s.pageIndex(1) + ")") && e.getMessage().contains("published prefix"),
                e.getMessage());
            assertEquals(-1, snapshot(s, 1).mismatch(page1), "token 8 (page 2, unpublished) was not written either: all or nothing");
            copy.copyIn(s, 8, 2, kv, 0); // page 2 is partial and unpublished
            s.close();
        }
    }

    @Test
    void aStaleHandleIsRefusedAsThePoolRefusesIt() {
        try (KvPool pool = pool(FP16, 4); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(8, 0).sequence();
            s.append(8);
            final int slot = s.pageIndex(1);
            pool.release(s.pageHandle(1)); // a stray release: the page is free again behind the sequence's back
            final MemorySegment src = random(arena, 8 * FP16.bytesPerToken(), new SplittableRandom(6));
            final StaleHandleException e = assertThrows(StaleHandleException.class, () -> copy.copyIn(s, 0, 8, src, 0));
            assertEquals(StaleHandleException.Refusal.STALE, e.refusal());
            assertEquals(s.pageHandle(1), e.handle());
            assertTrue(e.getMessage().contains("page 1") && e.getMessage().contains("stale"), e.getMessage());
            assertThrows(StaleHandleException.class, () -> copy.copyLayerOut(s, 0, 0, 4, 1, src, 0));
            assertThrows(StaleHandleException.class, () -> pool.page(s.pageHandle(1)), "the pool refuses it the same way");
            assertEquals(0, pool.storage().firstCanaryToken(slot, 0, FP16.tokensPerPage()), "the free page still holds its canary");
            assertThrows(StaleHandleException.class, s::close, "the sequence's own release of the page is refused too");
        }
    }

    @Test
    void theArrayTypeMustMatchTheElementType() {
        try (KvPool fp16 = pool(FP16, 4); KvPool fp32 = pool(FP32, 4); KvPool fp8 = pool(new KvLayout(1, 2, 8, DType.FP8, 4), 4)) {
            final Sequence a = fp16.admit(4, 0).sequence();
            a.append(4);
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KvCopy.of(fp16).copyIn(a, 0, 4, new float[1024], 0));
            assertTrue(e.getMessage().contains("float[]") && e.getMessage().contains("FP16"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> KvCopy.of(fp16).copyLayerOut(a, 0, 0, 0, 1, new float[64], 0));
            final Sequence b = fp32.admit(4, 0).sequence();
            b.append(4);
            final IllegalArgumentException f = assertThrows(IllegalArgumentException.class,
                () -> KvCopy.of(fp32).copyLayerIn(b, 0, 0, 0, 4, new short[1024], 0));
            assertTrue(f.getMessage().contains("short[]") && f.getMessage().contains("FP32"), f.getMessage());
            final Sequence c = fp8.admit(4, 0).sequence();
            c.append(4);
            final IllegalArgumentException g = assertThrows(IllegalArgumentException.class,
                () -> KvCopy.of(fp8).copyOut(c, 0, 4, new short[1024], 0));
            assertTrue(g.getMessage().contains("short[]") && g.getMessage().contains("FP8"), g.getMessage());
            a.close();
            b.close();
            c.close();
        }
    }

    /** Host storage that claims to be device storage, or that has no kernel views. */
    record Disguised(HostPageStorage d, boolean host) implements PageStorage {
        public KvLayout layout() { return d.layout(); }
        public int pageCount() { return d.pageCount(); }
        public boolean isHostAccessible() { return host; }
        public MemorySegment hostPage(int page) { return d.hostPage(page); }
        public long address(int page, int layer, int kv) { return d.address(page, layer, kv); }
        public void fill(int page, FillMode mode) { d.fill(page, mode); }
        public int firstCanaryToken(int page, int from, int to) { return d.firstCanaryToken(page, from, to); }
        public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) { d.copyPages(src, srcOff, dst, dstOff, count); }
        public void close() { d.close(); }
    }

    @Test
    void storagesJavaCannotAddressAreRefused() {
        try (KvPool device = KvPool.builder(FP16).pages(4).maxContextTokens(16).storage((l, n) -> new Disguised(HostPageStorage.allocate(l, n), false)).build();
             KvPool noViews = KvPool.builder(FP16).pages(4).maxContextTokens(16).storage((l, n) -> new Disguised(HostPageStorage.allocate(l, n), true)).build()) {
            final UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class, () -> KvCopy.of(device));
            assertTrue(e.getMessage().contains("host-accessible") && e.getMessage().contains("Disguised"), e.getMessage());
            final UnsupportedOperationException f = assertThrows(UnsupportedOperationException.class, () -> KvCopy.of(noViews));
            assertTrue(f.getMessage().contains("kernel view"), f.getMessage());
        }
    }

    @Test
    void aRunThatDoesNotFitTheCallersSideIsRefusedBeforeAnythingIsWritten() {
        try (KvPool pool = pool(FP16, 4); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence s = pool.admit(8, 0).sequence();
            s.append(8);
            final MemorySegment before = snapshot(s, 0);
            final MemorySegment small = random(arena, 8 * FP16.bytesPerToken() - 1, new SplittableRandom(8));
            final IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class, () -> copy.copyIn(s, 0, 8, small, 0));
            assertTrue(e.getMessage().contains(String.valueOf(small.byteSize())), e.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyIn(s, 0, 4, small, small.byteSize() - 4 * FP16.bytesPerToken() + 1));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyLayerIn(s, 0, 0, 0, 8, small, -1));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyLayerIn(s, 0, 0, 0, 8, new short[8 * 8 - 1], 0));
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyLayerIn(s, 2, 0, 0, 1, small, 0), "layer 2 of 2");
            assertThrows(IndexOutOfBoundsException.class, () -> copy.copyLayerIn(s, 0, 2, 0, 1, small, 0), "kv 2");
            assertEquals(-1, snapshot(s, 0).mismatch(before));
            s.close();
        }
    }

    @Test
    void aSequenceOfAnotherPoolOrAClosedOneIsRefused() {
        try (KvPool pool = pool(FP16, 4); KvPool other = pool(FP16, 4); Arena arena = Arena.ofConfined()) {
            final KvCopy copy = KvCopy.of(pool);
            final Sequence foreign = other.admit(4, 0).sequence();
            foreign.append(4);
            final MemorySegment src = arena.allocate(4 * FP16.bytesPerToken());
            assertThrows(IllegalArgumentException.class, () -> copy.copyIn(foreign, 0, 4, src, 0));
            final Sequence s = pool.admit(4, 0).sequence();
            s.append(4);
            s.close();
            assertThrows(IllegalStateException.class, () -> copy.copyOut(s, 0, 0, src, 0));
            foreign.close();
        }
    }

    @Test
    void copiesAllocateNothing() {
        final com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        try (KvPool fp16 = pool(FP16, 64); KvPool fp32 = pool(FP32, 64); Arena arena = Arena.ofConfined()) {
            final KvCopy c16 = KvCopy.of(fp16);
            final KvCopy c32 = KvCopy.of(fp32);
            final Sequence a = fp16.admit(100, 0).sequence();
            a.append(100);
            final Sequence b = fp32.admit(100, 0).sequence();
            b.append(100);
            final MemorySegment seg = arena.allocate(100 * FP32.bytesPerToken());
            final short[] shorts = new short[100 * 8 * 4];
            final float[] floats = new float[100 * 8 * 4];
            final Runnable round = () -> {
                c16.copyIn(a, 3, 90, seg, 0);
                c16.copyOut(a, 1, 97, seg, 0);
                c16.copyLayerIn(a, 1, 1, 5, 50, seg, 16);
                c16.copyLayerOut(a, 0, 0, 0, 100, seg, 0);
                c16.copyIn(a, 2, 30, shorts, 0);
                c16.copyOut(a, 2, 30, shorts, 0);
                c16.copyLayerIn(a, 0, 1, 7, 13, shorts, 8);
                c16.copyLayerOut(a, 0, 1, 7, 13, shorts, 8);
                c32.copyIn(b, 10, 80, floats, 0);
                c32.copyOut(b, 10, 80, floats, 0);
                c32.copyLayerIn(b, 1, 0, 0, 99, floats, 4);
                c32.copyLayerOut(b, 1, 0, 0, 99, floats, 4);
            };
            for (int i = 0; i < 20_000; i++) {
                round.run();
            }
            final int rounds = 2_000;
            threads.getCurrentThreadAllocatedBytes();
            final long before = threads.getCurrentThreadAllocatedBytes();
            for (int i = 0; i < rounds; i++) {
                round.run();
            }
            final long allocated = threads.getCurrentThreadAllocatedBytes() - before;
            assertTrue(allocated < rounds, allocated + " bytes allocated by " + rounds * 12 + " copies: one object per call would be "
                + rounds * 12 * 16 + " at least");
            a.close();
            b.close();
        }
    }

    @Test
    void anEmptyCopyOnAClosedPoolThrowsAsAnyCopyDoes() {
        final KvPool pool = TestPools.pool(8);
        final KvCopy copy = KvCopy.of(pool);
        final Sequence s = pool.admit(4, 0).sequence();
        s.append(4);
        pool.close();
        final short[] buf = new short[0];
        assertThrows(IllegalStateException.class, () -> copy.copyIn(s, 0, 0, buf, 0), "copyIn of 0 tokens, pool closed");
        assertThrows(IllegalStateException.class, () -> copy.copyOut(s, 0, 0, buf, 0), "copyOut of 0 tokens, pool closed");
    }
}
