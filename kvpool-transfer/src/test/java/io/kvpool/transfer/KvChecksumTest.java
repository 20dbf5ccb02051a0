package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32C;

import static org.junit.jupiter.api.Assertions.*;

/** The position-keyed page checksum, against its definition in {@link KvChecksum}'s Javadoc. */
class KvChecksumTest {

    static final int TPP = Kv.LAYOUT.tokensPerPage(); // 4
    static final int VEC = (int) Kv.LAYOUT.bytesPerTokenVector(); // 16
    static final int PAGE = (int) Kv.LAYOUT.bytesPerPage(); // 256

    static Sequence request(KvPool pool, long requestId, int tokens) {
        final Sequence s = pool.admit(tokens, 0).sequence();
        s.append(tokens);
        Kv.write(s, requestId);
        return s;
    }

    /** A standalone copy of a page, to mutate without touching a pool. */
    static MemorySegment copy(Arena arena, MemorySegment page) {
        final MemorySegment c = arena.allocate(PAGE);
        c.copyFrom(page.asSlice(0, PAGE));
        return c;
    }

    @Test
    void theValueDoesNotDependOnTheSlot() {
        try (KvPool a = Kv.pool(16); KvPool b = Kv.pool(16); Sequence filler = request(b, 99, 4 * 5);
             Sequence inA = request(a, 7, 13); Sequence inB = request(b, 7, 13); Sequence inA2 = request(a, 7, 13)) {
            assertEquals(4, inA.pageCount());
            for (int p = 0; p < inA.pageCount(); p++) {
                final int slotA = PageHandle.slot(inA.pageHandle(p));
                assertNotEquals(slotA, PageHandle.slot(inB.pageHandle(p)), "the test needs different slots");
                assertNotEquals(slotA, PageHandle.slot(inA2.pageHandle(p)), "the test needs different slots");
                final int ca = KvChecksum.of(Kv.LAYOUT, inA.page(p), 7, p, 13);
                assertEquals(ca, KvChecksum.of(Kv.LAYOUT, inB.page(p), 7, p, 13), "page " + p + " across pools");
                assertEquals(ca, KvChecksum.of(Kv.LAYOUT, inA2.page(p), 7, p, 13), "page " + p + " across slots of one pool");
            }
        }
    }

    @Test
    void theValueDependsOnRequestPagePositionAndTokenCount() {
        try (KvPool pool = Kv.pool(16); Sequence s = request(pool, 7, 10)) { // pages of 4, 4, 2 tokens
            final MemorySegment p0 = s.page(0);
            final int base = KvChecksum.of(Kv.LAYOUT, p0, 7, 0, 10);
            assertNotEquals(base, KvChecksum.of(Kv.LAYOUT, p0, 8, 0, 10), "request id");
            assertNotEquals(base, KvChecksum.of(Kv.LAYOUT, p0, -7, 0, 10), "request id sign");
            assertNotEquals(base, KvChecksum.of(Kv.LAYOUT, p0, 7L | 1L << 40, 0, 10), "request id high bits");
            assertNotEquals(base, KvChecksum.of(Kv.LAYOUT, p0, 7, 1, 10), "the same bytes at another logical page");
            // the last page: one token more or less changes the value
            final MemorySegment last = s.page(2);
            final int c = KvChecksum.of(Kv.LAYOUT, last, 7, 2, 10);
            assertNotEquals(c, KvChecksum.of(Kv.LAYOUT, last, 7, 2, 9), "9 tokens instead of 10");
            assertNotEquals(c, KvChecksum.of(Kv.LAYOUT, last, 7, 2, 11), "11 tokens instead of 10");
            assertNotEquals(c, KvChecksum.of(Kv.LAYOUT, last, 7, 2, 12), "a full page instead of a partial one");
        }
    }

    @Test
    void everyByteOfEveryValidTokenInEveryLayerCounts() {
        try (KvPool pool = Kv.pool(16); Sequence s = request(pool, 7, 7); Arena arena = Arena.ofConfined()) {
            for (int pageIndex = 0; pageIndex < 2; pageIndex++) {
                final int valid = pageIndex == 0 ? 4 : 3;
                final MemorySegment page = copy(arena, s.page(pageIndex));
                final int base = KvChecksum.of(Kv.LAYOUT, page, 7, pageIndex, 7);
                for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
                    for (int kv = 0; kv < 2; kv++) {
                        for (int token = 0; token < valid; token++) {
                            for (int b = 0; b < VEC; b++) {
                                final long off = Kv.LAYOUT.offset(layer, kv, token) + b;
                                final byte old = page.get(ValueLayout.JAVA_BYTE, off);
                                page.set(ValueLayout.JAVA_BYTE, off, (byte) (old ^ 0x01));
                                final int changed = KvChecksum.of(Kv.LAYOUT, page, 7, pageIndex, 7);
                                page.set(ValueLayout.JAVA_BYTE, off, old);
                                final String where = "page " + pageIndex + " layer " + layer + " kv " + kv + " token " + token + " byte " + b;
                                assertNotEquals(base, changed, where);
                            }
                        }
                    }
                }
                assertEquals(base, KvChecksum.of(Kv.LAYOUT, page, 7, pageIndex, 7), "restored");
            }
        }
    }

    @Test
    void theLastPagesInvalidTailIsNotCovered() {
        try (KvPool pool = Kv.pool(16); Sequence s = request(pool, 7, 6); Arena arena = Arena.ofConfined()) { // last page: 2 of 4
            final MemorySegment page = copy(arena, s.page(1));
            final int base = KvChecksum.of(Kv.LAYOUT, page, 7, 1, 6);
            int flipped = 0;
            for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    for (int token = 2; token < TPP; token++) {
                        final long off = Kv.LAYOUT.offset(layer, kv, token);
                        for (int b = 0; b < VEC; b++) {
                            page.set(ValueLayout.JAVA_BYTE, off + b, (byte) (0xA5 ^ b ^ token));
                            flipped++;
                        }
                    }
                }
            }
            assertEquals(2 * 2 * 2 * VEC, flipped);
            assertEquals(base, KvChecksum.of(Kv.LAYOUT, page, 7, 1, 6), "bytes of the invalid tail tokens changed the value");
        }
    }

    @Test
    void theValueIsTheDocumentedCrc32cByteForByte() {
        // the standard CRC-32C check value: the JDK's CRC32C is the Castagnoli CRC a GPU kernel must match
        final CRC32C check = new CRC32C();
        check.update("123456789".getBytes(StandardCharsets.US_ASCII));
        assertEquals(0xE3069283L, check.getValue());

        // a tiny page: 2 layers, K and V, 4 tokens of 16 bytes; byte i holds (i * 37 + 11) & 0xFF
        final byte[] page = new byte[PAGE];
        for (int i = 0; i < PAGE; i++) {
            page[i] = (byte) (i * 37 + 11);
        }
        final long requestId = 0x0102_0304_0506_0708L;
        final int pageIndex = 1;
        final int tokenCount = 7; // t0 = 4, n = 3
        // the documented bytes, built by hand: r i64 LE, t0 i32 LE, n i32 LE, then per layer, per K/V, n vectors
        final byte[] expectedInput = new byte[16 + 2 * 2 * 3 * VEC];
        int w = 0;
        for (int i = 0; i < 8; i++) {
            expectedInput[w++] = (byte) (requestId >>> (8 * i));
        }
        expectedInput[w++] = 4; expectedInput[w++] = 0; expectedInput[w++] = 0; expectedInput[w++] = 0;
        expectedInput[w++] = 3; expectedInput[w++] = 0; expectedInput[w++] = 0; expectedInput[w++] = 0;
        for (int layer = 0; layer < 2; layer++) {
            for (int kv = 0; kv < 2; kv++) {
                final int start = (2 * layer + kv) * TPP * VEC; // token 0 of that layer's K or V block
                for (int i = 0; i < 3 * VEC; i++) {
                    expectedInput[w++] = page[start + i];
                }
            }
        }
        assertEquals(expectedInput.length, w);
        final CRC32C crc = new CRC32C();
        crc.update(expectedInput);
        final int expected = (int) crc.getValue();

        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment seg = arena.allocate(PAGE);
            MemorySegment.copy(page, 0, seg, ValueLayout.JAVA_BYTE, 0, PAGE);
            assertEquals(expected, KvChecksum.of(Kv.LAYOUT, seg, requestId, pageIndex, tokenCount));
            // the golden value itself, for a kernel's test to copy
            assertEquals(GOLDEN, expected, () -> "golden value is 0x" + Integer.toHexString(expected));
        }
    }

    /** KvChecksum.of for the page of {@link #theValueIsTheDocumentedCrc32cByteForByte}. */
    static final int GOLDEN = 0x1470AE3C;

    @Test
    void pagesOutsideTheRequestAreRefused() {
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment page = arena.allocate(PAGE);
            assertThrows(IllegalArgumentException.class, () -> KvChecksum.of(Kv.LAYOUT, page, 1, -1, 8));
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> KvChecksum.of(Kv.LAYOUT, page, 1, 2, 8));
            assertTrue(e.getMessage().contains("page 2") && e.getMessage().contains("8-token"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> KvChecksum.of(Kv.LAYOUT, page, 1, 0, 0));
            assertDoesNotThrow(() -> KvChecksum.of(Kv.LAYOUT, page, 1, 1, 5));
        }
    }
}
