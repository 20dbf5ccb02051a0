package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link HostPageStorage} on more than one page: every operation must touch exactly the page it names (page
 * {@code p} at {@code p × bytesPerPage}), never page 0 or a neighbour.
 */
class HostPageStorageTest {

    private static final KvLayout L = TestPools.SMALL;
    private static final long PAGE = L.bytesPerPage();
    private static final int TPP = L.tokensPerPage();

    /** @return the one value every byte of the page holds, or -1 if they differ */
    private static int uniformByte(MemorySegment page) {
        final byte first = page.get(ValueLayout.JAVA_BYTE, 0);
        for (long o = 1; o < page.byteSize(); o++) {
            if (page.get(ValueLayout.JAVA_BYTE, o) != first) {
                return -1;
            }
        }
        return first & 0xFF;
    }

    private static void assertCanary(MemorySegment page) {
        for (long o = 0; o < page.byteSize(); o++) {
            assertEquals((byte) (PageStorage.CANARY >>> (8 * (o & 7))), page.get(ValueLayout.JAVA_BYTE, o), "canary byte at " + o);
        }
    }

    @Test
    void fillTailWritesTheFillPastATokenInEveryPlaneAndNothingBefore() {
        // 3 layers, 5-byte vectors (the canary's phase crosses vector edges), 4 tokens a page; the tail from token 1
        final KvLayout l = new KvLayout(3, 1, 5, DType.FP8, 4);
        try (HostPageStorage s = HostPageStorage.allocate(l, 3); HostPageStorage canary = HostPageStorage.allocate(l, 1)) {
            canary.fill(0, FillMode.CANARY); // the pattern fill gives every byte
            for (FillMode mode : new FillMode[] {FillMode.CANARY, FillMode.ZERO, FillMode.NONE}) {
                s.hostPage(1).fill((byte) 0x5A);
                s.fillTail(1, 1, mode);
                final MemorySegment p = s.hostPage(1);
                for (int layer = 0; layer < l.layers(); layer++) {
                    for (int kv = 0; kv < 2; kv++) {
                        for (int t = 0; t < l.tokensPerPage(); t++) {
                            for (long o = l.offset(layer, kv, t); o < l.offset(layer, kv, t) + l.bytesPerTokenVector(); o++) {
                                final byte expected = t < 1 || mode == FillMode.NONE ? 0x5A
                                    : mode == FillMode.ZERO ? 0 : canary.hostPage(0).get(ValueLayout.JAVA_BYTE, o);
                                assertEquals(expected, p.get(ValueLayout.JAVA_BYTE, o), mode + ": layer " + layer + " kv " + kv
                                    + " token " + t + " byte " + o);
                            }
                        }
                    }
                }
            }
            s.fillTail(1, l.tokensPerPage(), FillMode.CANARY); // no tail: nothing to do
            assertThrows(IndexOutOfBoundsException.class, () -> s.fillTail(1, l.tokensPerPage() + 1, FillMode.CANARY));
            assertThrows(IndexOutOfBoundsException.class, () -> s.fillTail(3, 0, FillMode.CANARY));
        }
    }

    @Test
    void everyPageStartsAsCanaryAndEachFillTouchesOnlyItsPage() {
        try (HostPageStorage s = HostPageStorage.allocate(L, 4)) {
            assertEquals(4, s.pageCount());
            assertEquals(L, s.layout());
            assertTrue(s.isHostAccessible());
            assertEquals(4 * PAGE, s.segment().byteSize());
            for (int p = 0; p < 4; p++) {
                assertCanary(s.hostPage(p));
                assertEquals(0, s.firstCanaryToken(p, 0, TPP));
            }
            s.segment().fill((byte) 0x5A); // every page written by a tenant
            s.fill(2, FillMode.ZERO);
            assertEquals(0x5A, uniformByte(s.hostPage(0)), "zeroing page 2 must not touch page 0");
            assertEquals(0x5A, uniformByte(s.hostPage(1)));
            assertEquals(0, uniformByte(s.hostPage(2)), "page 2 still holds its previous tenant's bytes");
            assertEquals(0x5A, uniformByte(s.hostPage(3)));
            s.fill(3, FillMode.CANARY);
            assertCanary(s.hostPage(3));
            assertEquals(0x5A, uniformByte(s.hostPage(0)), "the canary fill of page 3 must not touch page 0");
            assertEquals(0, uniformByte(s.hostPage(2)));
            s.fill(1, FillMode.NONE);
            assertEquals(0x5A, uniformByte(s.hostPage(1)));
            assertThrows(IndexOutOfBoundsException.class, () -> s.fill(4, FillMode.ZERO));
            assertThrows(IndexOutOfBoundsException.class, () -> s.fill(-1, FillMode.ZERO));
        }
    }

    @Test
    void aZeroFillPoolHandsOutAFreedPageZeroedAndLeavesTheOthersAlone() {
        try (KvPool pool = TestPools.builder(4).fillMode(FillMode.ZERO).build()) {
            final long[] h = new long[4];
            for (int i = 0; i < 4; i++) {
                h[i] = pool.tryAllocate();
                pool.page(h[i]).fill((byte) (0x10 + i));
            }
            final long last = h[3];
            assertTrue(PageHandle.slot(last) > 0);
            assertTrue(pool.release(last));
            assertEquals(0, uniformByte(pool.storage().hostPage(PageHandle.slot(last))), "the freed page keeps the last tenant's bytes");
            for (int i = 0; i < 3; i++) {
                assertEquals(0x10 + i, uniformByte(pool.page(h[i])), "a page in use was overwritten by another page's fill");
            }
            final long next = pool.tryAllocate();
            assertEquals(PageHandle.slot(last), PageHandle.slot(next));
            assertEquals(0, uniformByte(pool.page(next)));
            pool.release(next);
            for (int i = 0; i < 3; i++) {
                pool.release(h[i]);
            }
        }
    }

    @Test
    void pagesAndAddressesAreAtPageTimesBytesPerPage() {
        try (HostPageStorage s = HostPageStorage.allocate(L, 3)) {
            for (int p = 0; p < 3; p++) {
                s.segment().set(ValueLayout.JAVA_BYTE, p * PAGE + 1, (byte) (p + 1));
            }
            for (int p = 0; p < 3; p++) {
                final MemorySegment page = s.hostPage(p);
                assertEquals(PAGE, page.byteSize());
                assertEquals(p + 1, page.get(ValueLayout.JAVA_BYTE, 1));
                assertEquals(s.segment().address() + p * PAGE, page.address());
                assertEquals(s.segment().address() + p * PAGE + L.offset(1, 1, 0), s.address(p, 1, 1));
            }
            assertEquals(0, s.segment().address() % HostPageStorage.ALIGNMENT);
            assertThrows(IndexOutOfBoundsException.class, () -> s.hostPage(3));
            assertThrows(IndexOutOfBoundsException.class, () -> s.address(3, 0, 0));
        }
    }

    @Test
    void theCanaryCheckLooksAtTheNamedPageAndEveryVectorOfAToken() {
        try (HostPageStorage s = HostPageStorage.allocate(L, 3)) {
            final long vec = L.bytesPerTokenVector();
            // page 2: tokens 0 and 1 written in every layer, K and V; token 2 in all but layer 1's V
            for (int t = 0; t < 3; t++) {
                for (int l = 0; l < L.layers(); l++) {
                    for (int kv = 0; kv < 2; kv++) {
                        if (t < 2 || l != 1 || kv != 1) {
                            s.hostPage(2).asSlice(L.offset(l, kv, t), vec).fill((byte) 7);
                        }
                    }
                }
            }
            assertEquals(2, s.firstCanaryToken(2, 0, TPP), "token 2 misses one vector");
            assertEquals(2, s.firstCanaryToken(2, 1, TPP));
            assertEquals(-1, s.firstCanaryToken(2, 0, 2));
            assertEquals(0, s.firstCanaryToken(0, 0, TPP), "page 0 was never written");
            assertEquals(1, s.firstCanaryToken(1, 1, 2));
            assertEquals(-1, s.firstCanaryToken(1, 1, 1), "an empty range holds no canary");
            assertThrows(IndexOutOfBoundsException.class, () -> s.firstCanaryToken(0, 0, TPP + 1));
            assertThrows(IndexOutOfBoundsException.class, () -> s.firstCanaryToken(3, 0, 1));
        }
    }

    @Test
    void copyPagesCopiesWholePagesBetweenTheNamedSlotsOnly() {
        try (HostPageStorage s = HostPageStorage.allocate(L, 4)) {
            for (int p = 0; p < 4; p++) {
                s.hostPage(p).fill((byte) (0x20 + p));
            }
            s.copyPages(new int[] {9, 1, 3}, 1, new int[] {2, 0, 9}, 0, 2); // 1 → 2, 3 → 0
            assertEquals(0x23, uniformByte(s.hostPage(0)));
            assertEquals(0x21, uniformByte(s.hostPage(1)));
            assertEquals(0x21, uniformByte(s.hostPage(2)));
            assertEquals(0x23, uniformByte(s.hostPage(3)));
            s.copyPages(new int[] {1}, 0, new int[] {1}, 0, 1); // onto itself: nothing changes
            assertEquals(0x21, uniformByte(s.hostPage(1)));
            assertThrows(IndexOutOfBoundsException.class, () -> s.copyPages(new int[] {4}, 0, new int[] {0}, 0, 1));
            assertThrows(IndexOutOfBoundsException.class, () -> s.copyPages(new int[] {0}, 0, new int[] {0}, 0, 2));
            assertEquals(0x23, uniformByte(s.hostPage(0)), "a refused copy changed nothing");
        }
    }

    @Test
    void storageOverACallersMemoryKeepsItsBytesOrCanaryFillsAndRunsOnCloseOnce() {
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment mem = arena.allocate(2 * PAGE + 3);
            mem.fill((byte) 0x44);
            final AtomicInteger closes = new AtomicInteger();
            final HostPageStorage kept = HostPageStorage.over(L, 2, mem, false, closes::incrementAndGet);
            assertEquals(0x44, uniformByte(kept.hostPage(1)), "canaryFill=false keeps the bytes");
            assertEquals(mem.address(), kept.segment().address());
            assertEquals(2 * PAGE, kept.segment().byteSize());
            kept.close();
            kept.close();
            assertEquals(1, closes.get(), "onClose runs once");
            assertThrows(IllegalStateException.class, () -> kept.hostPage(0));
            assertEquals(0x44, mem.get(ValueLayout.JAVA_BYTE, 0), "the caller's memory is not freed");
            final HostPageStorage filled = HostPageStorage.over(L, 2, mem, true, null);
            assertCanary(filled.hostPage(0));
            assertCanary(filled.hostPage(1));
            assertEquals(0x44, mem.get(ValueLayout.JAVA_BYTE, 2 * PAGE), "bytes past the pages are not touched");
            filled.close();
            assertThrows(IllegalArgumentException.class, () -> HostPageStorage.over(L, 3, mem, false, null));
        }
    }

    @Test
    void aClosedStorageRefusesEveryUse() {
        final HostPageStorage s = HostPageStorage.allocate(L, 2);
        s.close();
        assertThrows(IllegalStateException.class, () -> s.hostPage(0));
        assertThrows(IllegalStateException.class, s::segment);
        assertThrows(IllegalStateException.class, () -> s.address(0, 0, 0));
        assertThrows(IllegalStateException.class, () -> s.fill(0, FillMode.ZERO));
        assertThrows(IllegalStateException.class, () -> s.firstCanaryToken(0, 0, 1));
        assertThrows(IllegalStateException.class, () -> s.firstCanaryToken(0, 1, 1), "an empty token range too");
        assertThrows(IllegalStateException.class, () -> s.copyPages(new int[] {0}, 0, new int[] {1}, 0, 1));
        s.close();
    }

    @Test
    void aSegmentOfExactlyThePagesBytesIsEnough() {
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment exact = arena.allocate(2 * PAGE);
            final HostPageStorage s = HostPageStorage.over(L, 2, exact, true, null);
            assertCanary(s.hostPage(1));
            s.close();
            assertThrows(IllegalArgumentException.class, () -> HostPageStorage.over(L, 2, exact.asSlice(0, 2 * PAGE - 1), true, null),
                "one byte short");
        }
    }

    @Test
    void aClosedStorageOverACallersMemoryNeitherFillsNorCopiesIt() {
        // the caller's segment outlives the storage: only the storage's own check stops a write into it
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment mem = arena.allocate(2 * PAGE);
            mem.asSlice(0, PAGE).fill((byte) 0x11);
            mem.asSlice(PAGE, PAGE).fill((byte) 0x22);
            final HostPageStorage s = HostPageStorage.over(L, 2, mem, false, null);
            s.close();
            assertThrows(IllegalStateException.class, () -> s.fill(0, FillMode.ZERO));
            assertThrows(IllegalStateException.class, () -> s.copyPages(new int[] {0}, 0, new int[] {1}, 0, 1));
            assertEquals(0x11, uniformByte(mem.asSlice(0, PAGE)), "a closed storage zeroed the caller's page 0");
            assertEquals(0x22, uniformByte(mem.asSlice(PAGE, PAGE)), "a closed storage copied into the caller's page 1");
        }
    }

    @Test
    void badSizesAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> HostPageStorage.allocate(L, 0));
        final KvLayout huge = new KvLayout(32, 32, 128, DType.FP16, 512); // 256 MiB pages
        final IllegalStateException tooBig = assertThrows(IllegalStateException.class,
            () -> HostPageStorage.allocate(huge, Integer.MAX_VALUE));
        assertTrue(tooBig.getMessage().contains("cannot allocate"), tooBig.getMessage());
    }
}
