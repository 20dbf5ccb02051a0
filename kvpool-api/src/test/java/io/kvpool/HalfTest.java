package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/** bfloat16 against an independent decoder and a nearest-value oracle; FP16 against the JDK; the bulk forms against the scalar ones. */
class HalfTest {

    /** The value a bf16 pattern denotes, decoded from its fields (not by shifting bits into a float). */
    static double decodeBf16(int h) {
        final int sign = (h >>> 15) & 1;
        final int exp = (h >>> 7) & 0xff;
        final int frac = h & 0x7f;
        final double magnitude;
        if (exp == 0xff) {
            magnitude = frac == 0 ? Double.POSITIVE_INFINITY : Double.NaN;
        } else if (exp == 0) {
            magnitude = Math.scalb((double) frac, -126 - 7); // subnormal: 0.frac × 2^-126
        } else {
            magnitude = Math.scalb((double) (128 + frac), exp - 127 - 7); // 1.frac × 2^(exp - 127)
        }
        return sign == 1 ? -magnitude : magnitude;
    }

    /**
     * The bf16 nearest to a finite float by distance, ties to the even pattern; the pattern past the largest
     * finite bf16 (infinity) counts as 2^128, as IEEE-754's overflow rule has it.
     */
    static int nearestBf16(float f) {
        final int bits = Float.floatToRawIntBits(f);
        final int lo = bits >>> 16;              // toward zero
        final int hi = lo + 1;                   // next in magnitude (same sign)
        final double vlo = Math.abs(decodeBf16(lo));
        final double vhi = (hi & 0x7fff) == 0x7f80 ? Math.scalb(1.0, 128) : Math.abs(decodeBf16(hi));
        final double a = Math.abs((double) f);
        final double dlo = a - vlo;
        final double dhi = vhi - a;
        if (dlo < dhi) {
            return lo;
        }
        if (dhi < dlo) {
            return hi;
        }
        return (lo & 1) == 0 ? lo : hi;
    }

    @Test
    void everyBf16PatternSurvivesARoundTripThroughFloat() {
        for (int h = 0; h < 0x10000; h++) {
            assertEquals(h, Half.floatToBf16(Half.bf16ToFloat((short) h)) & 0xffff, "pattern 0x" + Integer.toHexString(h));
        }
    }

    @Test
    void bf16ToFloatIsTheValueItsFieldsDenote() {
        for (int h = 0; h < 0x10000; h++) {
            final float f = Half.bf16ToFloat((short) h);
            final double want = decodeBf16(h);
            if (Double.isNaN(want)) {
                assertTrue(Float.isNaN(f), "pattern 0x" + Integer.toHexString(h));
            } else {
                assertEquals(want, f, 0.0, "pattern 0x" + Integer.toHexString(h));
                assertEquals((h >>> 15) == 1, (Float.floatToRawIntBits(f) >>> 31) == 1, "sign of 0x" + Integer.toHexString(h) + " (zeros too)");
            }
        }
    }

    @Test
    void floatToBf16RoundsHalfwayCasesToEvenAndTheRestToNearest() {
        // every pair of neighbouring finite bf16 values: the float exactly halfway, and one float ulp either side
        for (int h = 0; h < 0x10000; h++) {
            if ((h & 0x7fff) >= 0x7f80) {
                continue; // infinity or NaN: no finite upper neighbour
            }
            final int mid = (h << 16) | 0x8000;
            final int even = (h & 1) == 0 ? h : h + 1;
            assertEquals(even, Half.floatToBf16(Float.intBitsToFloat(mid)) & 0xffff, "tie above 0x" + Integer.toHexString(h));
            assertEquals(nearestBf16(Float.intBitsToFloat(mid)), even, "the oracle agrees on the tie above 0x" + Integer.toHexString(h));
            assertEquals(h, Half.floatToBf16(Float.intBitsToFloat(mid - 1)) & 0xffff, "just below the tie above 0x" + Integer.toHexString(h));
            assertEquals(h + 1, Half.floatToBf16(Float.intBitsToFloat(mid + 1)) & 0xffff, "just above the tie above 0x" + Integer.toHexString(h));
        }
    }

    @Test
    void floatToBf16IsTheNearestValueForRandomFloats() {
        final SplittableRandom r = new SplittableRandom(20261201);
        for (int i = 0; i < 2_000_000; i++) {
            final float f = Float.intBitsToFloat(r.nextInt());
            if (Float.isNaN(f)) {
                continue;
            }
            assertEquals(nearestBf16(f), Half.floatToBf16(f) & 0xffff, "float 0x" + Integer.toHexString(Float.floatToRawIntBits(f)));
        }
    }

    @Test
    void floatsPastTheLargestBf16ByHalfAUnitOverflowToInfinity() {
        final float largest = Half.bf16ToFloat((short) 0x7f7f);
        final float halfUnitAbove = Float.intBitsToFloat(Float.floatToRawIntBits(largest) | 0x8000); // a tie: the odd largest rounds up
        for (float f : new float[] {Float.MAX_VALUE, halfUnitAbove, Float.POSITIVE_INFINITY}) {
            assertEquals(Float.POSITIVE_INFINITY, Half.bf16ToFloat(Half.floatToBf16(f)), "float " + f);
            assertEquals(Float.NEGATIVE_INFINITY, Half.bf16ToFloat(Half.floatToBf16(-f)), "float " + -f);
        }
        final float below = Float.intBitsToFloat(Float.floatToRawIntBits(halfUnitAbove) - 1);
        assertEquals(largest, Half.bf16ToFloat(Half.floatToBf16(below)));
        assertEquals(-largest, Half.bf16ToFloat(Half.floatToBf16(-below)));
    }

    @Test
    void everyNanStaysANanWithItsSignAndTopPayload() {
        for (int sign = 0; sign < 2; sign++) {
            for (int payload = 1; payload < (1 << 23); payload++) { // every float NaN
                final int bits = (sign << 31) | 0x7f80_0000 | payload;
                final int h = Half.floatToBf16(Float.intBitsToFloat(bits)) & 0xffff;
                if (!Float.isNaN(Half.bf16ToFloat((short) h)) || (h >>> 15) != sign) {
                    fail("NaN 0x" + Integer.toHexString(bits) + " became 0x" + Integer.toHexString(h));
                }
                if ((payload >>> 16) != 0 && (h & 0x7f) != (payload >>> 16)) {
                    fail("NaN 0x" + Integer.toHexString(bits) + " lost its top payload: 0x" + Integer.toHexString(h));
                }
            }
        }
    }

    @Test
    void fp16IsTheJdksConversion() {
        for (int h = 0; h < 0x10000; h++) {
            final float f = Float.float16ToFloat((short) h);
            assertEquals(Float.floatToRawIntBits(f), Float.floatToRawIntBits(Half.fp16ToFloat((short) h)));
            assertEquals(Float.floatToFloat16(f), Half.floatToFp16(f));
        }
        final SplittableRandom r = new SplittableRandom(7);
        for (int i = 0; i < 100_000; i++) {
            final float f = Float.intBitsToFloat(r.nextInt());
            assertEquals(Float.floatToFloat16(f), Half.floatToFp16(f));
        }
    }

    @Test
    void bulkConversionsMatchTheScalarOnesElementForElement() {
        final SplittableRandom r = new SplittableRandom(11);
        final int n = 1000;
        final float[] floats = new float[n + 3];
        for (int i = 0; i < floats.length; i++) {
            floats[i] = Float.intBitsToFloat(r.nextInt());
        }
        final short[] bf = new short[n + 5];
        final short[] fp = new short[n + 5];
        Half.floatToBf16(floats, 3, bf, 5, n);
        Half.floatToFp16(floats, 3, fp, 5, n);
        final float[] backBf = new float[n + 1];
        final float[] backFp = new float[n + 1];
        Half.bf16ToFloat(bf, 5, backBf, 1, n);
        Half.fp16ToFloat(fp, 5, backFp, 1, n);
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment sbf = arena.allocate(2L * n + 6);
            final MemorySegment sfp = arena.allocate(2L * n + 6);
            Half.floatToBf16(floats, 3, sbf, 6, n);
            Half.floatToFp16(floats, 3, sfp, 6, n);
            final float[] segBf = new float[n];
            final float[] segFp = new float[n];
            Half.bf16ToFloat(sbf, 6, segBf, 0, n);
            Half.fp16ToFloat(sfp, 6, segFp, 0, n);
            for (int i = 0; i < n; i++) {
                final float f = floats[3 + i];
                assertEquals(Half.floatToBf16(f), bf[5 + i]);
                assertEquals(Half.floatToFp16(f), fp[5 + i]);
                assertEquals(Float.floatToRawIntBits(Half.bf16ToFloat(bf[5 + i])), Float.floatToRawIntBits(backBf[1 + i]));
                assertEquals(Float.floatToRawIntBits(Half.fp16ToFloat(fp[5 + i])), Float.floatToRawIntBits(backFp[1 + i]));
                // segments hold each element as two little-endian bytes
                assertEquals((byte) bf[5 + i], sbf.get(ValueLayout.JAVA_BYTE, 6 + 2L * i));
                assertEquals((byte) (bf[5 + i] >> 8), sbf.get(ValueLayout.JAVA_BYTE, 7 + 2L * i));
                assertEquals((byte) fp[5 + i], sfp.get(ValueLayout.JAVA_BYTE, 6 + 2L * i));
                assertEquals((byte) (fp[5 + i] >> 8), sfp.get(ValueLayout.JAVA_BYTE, 7 + 2L * i));
                assertEquals(Float.floatToRawIntBits(backBf[1 + i]), Float.floatToRawIntBits(segBf[i]));
                assertEquals(Float.floatToRawIntBits(backFp[1 + i]), Float.floatToRawIntBits(segFp[i]));
            }
        }
    }

    @Test
    void aBulkConversionOutOfBoundsConvertsNothing() {
        final float[] floats = {1f, 2f, 3f};
        final short[] dst = new short[2];
        assertThrows(IndexOutOfBoundsException.class, () -> Half.floatToBf16(floats, 0, dst, 0, 3));
        assertArrayEquals(new short[2], dst);
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment seg = arena.allocate(4);
            assertThrows(IndexOutOfBoundsException.class, () -> Half.floatToFp16(floats, 0, seg, 0, 3));
            assertEquals(0, seg.get(ValueLayout.JAVA_INT_UNALIGNED, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> Half.bf16ToFloat(seg, 2, new float[2], 0, 2));
        }
    }
}
