package io.kvpool.cuda.ipc;

import io.kvpool.transfer.wire.WireFormat;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/** The region key's format: round trips, the documented byte layout, and every malformed field refused by name. */
class RegionKeyTest {

    static byte[] handle(int n) {
        final byte[] h = new byte[n];
        new SplittableRandom(n).nextBytes(h);
        return h;
    }

    @Test
    void roundTripsAndHasTheDocumentedLayout() {
        final RegionKey k = new RegionKey(handle(96), 7, new int[] {5, 0, 31, 2});
        final byte[] b = k.encode();
        assertEquals(16 + 96 + 16, b.length);
        final ByteBuffer bb = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals("CIPK", new String(b, 0, 4, java.nio.charset.StandardCharsets.US_ASCII));
        assertEquals(1, bb.getShort(4));
        assertEquals(96, bb.getShort(6));
        assertEquals(7, bb.getInt(8));
        assertEquals(4, bb.getInt(12));
        assertEquals(31, bb.getInt(16 + 96 + 8));
        assertEquals(k, RegionKey.decode(b));
        final SplittableRandom r = new SplittableRandom(3);
        for (int i = 0; i < 200; i++) {
            final int[] slots = r.ints(r.nextInt(0, 300), 0, Integer.MAX_VALUE).toArray();
            final RegionKey x = new RegionKey(handle(r.nextInt(1, RegionKey.MAX_HANDLE_BYTES + 1)), r.nextInt(), slots);
            assertEquals(x, RegionKey.decode(x.encode()));
        }
    }

    @Test
    void theLargestKeyFitsTheWireLimit() {
        assertEquals(WireFormat.MAX_ARRAY, RegionKey.MAX_SLOTS, "every descriptor's page list fits one key");
        final byte[] b = new RegionKey(handle(RegionKey.MAX_HANDLE_BYTES), 1, new int[RegionKey.MAX_SLOTS]).encode();
        assertTrue(b.length <= WireFormat.MAX_KEY_BYTES, b.length + " > " + WireFormat.MAX_KEY_BYTES);
        assertThrows(IllegalArgumentException.class, () -> new RegionKey(handle(96), 1, new int[RegionKey.MAX_SLOTS + 1]));
        assertThrows(IllegalArgumentException.class, () -> new RegionKey(new byte[0], 1, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> new RegionKey(new byte[RegionKey.MAX_HANDLE_BYTES + 1], 1, new int[0]));
    }

    static String refusal(byte[] b) {
        return assertThrows(IllegalArgumentException.class, () -> RegionKey.decode(b)).getMessage();
    }

    @Test
    void everyMalformedFieldIsRefusedNamingIt() {
        final byte[] good = new RegionKey(handle(96), 3, new int[] {1, 2}).encode();
        assertTrue(refusal(new byte[15]).contains("15 bytes is shorter than the 16-byte"));
        byte[] b = good.clone();
        b[0] ^= 1;
        assertTrue(refusal(b).contains("magic"));
        b = good.clone();
        b[4] = 2;
        assertTrue(refusal(b).contains("version 2"));
        b = good.clone();
        b[6] = 0;
        b[7] = 0;
        assertTrue(refusal(b).contains("0-byte handle"));
        b = good.clone();
        b[12] = -1;
        b[13] = -1;
        b[14] = -1;
        b[15] = -1;
        assertTrue(refusal(b).contains("lists -1 slots"));
        assertTrue(refusal(java.util.Arrays.copyOf(good, good.length - 1)).contains("a 96-byte handle and 2 slots make " + good.length));
        assertTrue(refusal(java.util.Arrays.copyOf(good, good.length + 4)).contains("of " + (good.length + 4) + " bytes"));
        b = good.clone();
        b[good.length - 1] = (byte) 0x80;
        assertTrue(refusal(b).contains("lists slot -2147483646 at index 1"), refusal(b));
    }
}
