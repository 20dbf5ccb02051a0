package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.transfer.KvChecksum;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.SplittableRandom;
import java.util.zip.CRC32C;

import static org.junit.jupiter.api.Assertions.*;

/** The kernel's keys are exactly the 16 bytes {@link KvChecksum} hashes first, and refuse what it refuses. */
class ChecksumKeysTest {

    @Test
    void aKeyFollowedByThePagesValidTokensPlaneByPlaneIsKvChecksumsInput() {
        final SplittableRandom r = new SplittableRandom(3);
        for (KvLayout l : KernelEmulationTest.LAYOUTS) {
            final int tpp = l.tokensPerPage();
            try (Arena a = Arena.ofConfined()) {
                final MemorySegment page = a.allocate(l.bytesPerPage());
                for (long o = 0; o < page.byteSize(); o++) {
                    page.set(ValueLayout.JAVA_BYTE, o, (byte) r.nextInt());
                }
                for (int tokens : new int[] {1, tpp, tpp + 1, 3 * tpp - 1}) {
                    for (int p = 0; (long) p * tpp < tokens; p++) {
                        final long id = r.nextLong();
                        final ChecksumKeys k = new ChecksumKeys(l, 1).add(id, p, tokens);
                        assertEquals(id, k.requestId(0));
                        assertEquals(p * tpp, k.firstToken(0));
                        final int v = k.validTokens(0);
                        assertEquals(Math.min(tpp, tokens - p * tpp), v);
                        final CRC32C crc = new CRC32C();
                        crc.update(k.buffer());
                        for (int q = 0; q < 2 * l.layers(); q++) { // the kernel's order: planes in host order, v tokens each
                            crc.update(page.asSlice(q * tpp * l.bytesPerTokenVector(), v * l.bytesPerTokenVector()).asByteBuffer());
                        }
                        assertEquals(KvChecksum.of(l, page, id, p, tokens), (int) crc.getValue(), l + " page " + p + " of " + tokens);
                    }
                }
            }
        }
    }

    @Test
    void keysAreRefusedWhereKvChecksumRefusesThem() {
        final KvLayout l = KernelEmulationTest.LAYOUTS[0];
        try (Arena a = Arena.ofConfined()) {
            final MemorySegment page = a.allocate(l.bytesPerPage());
            for (int p = -1; p < 4; p++) {
                for (int tokens = 0; tokens < 14; tokens++) {
                    final int pp = p;
                    final int tt = tokens;
                    final Throwable host = catching(() -> KvChecksum.of(l, page, 1, pp, tt));
                    final Throwable keys = catching(() -> new ChecksumKeys(l, 1).add(1, pp, tt));
                    assertEquals(host == null, keys == null, "page " + p + " of " + tokens);
                    if (host != null) {
                        assertEquals(host.getMessage(), keys.getMessage());
                    }
                }
            }
        }
    }

    private static Throwable catching(Runnable r) {
        try {
            r.run();
            return null;
        } catch (IllegalArgumentException e) {
            return e;
        }
    }

    @Test
    void capacityIsEnforcedAndClearReuses() {
        final KvLayout l = KernelEmulationTest.LAYOUTS[0];
        final ChecksumKeys k = ChecksumKeys.ofRequest(l, 5, 0, 2, 8);
        assertEquals(2, k.size());
        assertThrows(IllegalStateException.class, () -> k.add(5, 0, 8));
        final ByteBuffer b = k.buffer();
        assertEquals(32, b.remaining());
        k.clear();
        assertEquals(0, k.size());
        k.add(6, 1, 5);
        assertEquals(6, k.requestId(0));
        assertEquals(1, k.validTokens(0));
        assertThrows(IndexOutOfBoundsException.class, () -> k.requestId(1));
        assertEquals(0, new ChecksumKeys(l, 0).buffer().remaining());
    }
}
