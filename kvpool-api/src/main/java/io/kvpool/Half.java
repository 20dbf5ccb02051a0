package io.kvpool;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * Conversions between {@code float} and the two 16-bit element types of {@link DType}: IEEE-754 binary16
 * ({@link DType#FP16}, through the JDK's {@link Float#floatToFloat16} and {@link Float#float16ToFloat}) and
 * bfloat16 ({@link DType#BF16}, which the JDK lacks). A 16-bit element is held as its bit pattern in a
 * {@code short}, and in memory as two little-endian bytes, as pages hold it ({@link KvCopy}).
 *
 * <h2>bfloat16</h2>
 * <pre>
 *   bit  15   14 .............. 7   6 ............ 0
 *       +----+---------------------+----------------+
 *       |sign| exponent (8 bits)   | fraction (7)   |    = the upper half of a float's bits
 *       +----+---------------------+----------------+
 * </pre>
 * bf16 → float is exact (the bits shifted up by 16). float → bf16 rounds to nearest, ties to even (a
 * float halfway between two bf16 values goes to the one with an even last bit), so values beyond the
 * largest bf16 (about 3.39 × 10<sup>38</sup>) by half a unit or more become infinity. A NaN stays a NaN
 * with its sign and the top 7 bits of its payload; if those 7 bits are all zero (a payload only in the
 * low bits), bit 6 is set, so it does not turn into infinity. Every bf16 pattern survives bf16 → float →
 * bf16 unchanged, NaNs included.
 *
 * <p>All methods are static, allocation-free and safe on any thread. The bulk forms check the whole range
 * before converting anything ({@link IndexOutOfBoundsException} otherwise).
 */
public final class Half {

    private static final ValueLayout.OfShort SHORT_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private Half() {
    }

    /**
     * Converts a float to bfloat16.
     *
     * @param f a float
     * @return its bfloat16 bit pattern, rounded to nearest with ties to even; NaN stays NaN (see the class comment)
     */
    public static short floatToBf16(float f) {
        final int bits = Float.floatToRawIntBits(f);
        if ((bits & 0x7fff_ffff) > 0x7f80_0000) { // NaN: keep sign and top payload, never become infinity
            final int h = bits >>> 16;
            return (short) ((h & 0x7f) == 0 ? h | 0x40 : h);
        }
        // add just under half a bf16 unit, plus one if the kept last bit is odd: a carry rounds up (into the
        // exponent, and to infinity past the largest finite value), exactly half rounds to the even neighbour
        return (short) ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16);
    }

    /**
     * Converts bfloat16 to a float.
     *
     * @param bits a bfloat16 bit pattern
     * @return the float it denotes (exact)
     */
    public static float bf16ToFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xffff) << 16);
    }

    /**
     * Converts a float to binary16.
     *
     * @param f a float
     * @return its binary16 bit pattern, rounded to nearest with ties to even ({@link Float#floatToFloat16})
     */
    public static short floatToFp16(float f) {
        return Float.floatToFloat16(f);
    }

    /**
     * Converts binary16 to a float.
     *
     * @param bits a binary16 bit pattern
     * @return the float it denotes (exact; {@link Float#float16ToFloat})
     */
    public static float fp16ToFloat(short bits) {
        return Float.float16ToFloat(bits);
    }

    // ---- arrays ----

    /**
     * Converts {@code count} floats to bfloat16 patterns, as {@link #floatToBf16(float)}.
     *
     * @param src      the floats
     * @param srcIndex first float
     * @param dst      receives the patterns
     * @param dstIndex where the first pattern goes
     * @param count    elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void floatToBf16(float[] src, int srcIndex, short[] dst, int dstIndex, int count) {
        Objects.checkFromIndexSize(srcIndex, count, src.length);
        Objects.checkFromIndexSize(dstIndex, count, dst.length);
        for (int i = 0; i < count; i++) {
            dst[dstIndex + i] = floatToBf16(src[srcIndex + i]);
        }
    }

    /**
     * Converts {@code count} bfloat16 patterns to floats, as {@link #bf16ToFloat(short)}.
     *
     * @param src      the patterns
     * @param srcIndex first pattern
     * @param dst      receives the floats
     * @param dstIndex where the first float goes
     * @param count    elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void bf16ToFloat(short[] src, int srcIndex, float[] dst, int dstIndex, int count) {
        Objects.checkFromIndexSize(srcIndex, count, src.length);
        Objects.checkFromIndexSize(dstIndex, count, dst.length);
        for (int i = 0; i < count; i++) {
            dst[dstIndex + i] = bf16ToFloat(src[srcIndex + i]);
        }
    }

    /**
     * Converts {@code count} floats to binary16 patterns, as {@link #floatToFp16(float)}.
     *
     * @param src      the floats
     * @param srcIndex first float
     * @param dst      receives the patterns
     * @param dstIndex where the first pattern goes
     * @param count    elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void floatToFp16(float[] src, int srcIndex, short[] dst, int dstIndex, int count) {
        Objects.checkFromIndexSize(srcIndex, count, src.length);
        Objects.checkFromIndexSize(dstIndex, count, dst.length);
        for (int i = 0; i < count; i++) {
            dst[dstIndex + i] = Float.floatToFloat16(src[srcIndex + i]);
        }
    }

    /**
     * Converts {@code count} binary16 patterns to floats, as {@link #fp16ToFloat(short)}.
     *
     * @param src      the patterns
     * @param srcIndex first pattern
     * @param dst      receives the floats
     * @param dstIndex where the first float goes
     * @param count    elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void fp16ToFloat(short[] src, int srcIndex, float[] dst, int dstIndex, int count) {
        Objects.checkFromIndexSize(srcIndex, count, src.length);
        Objects.checkFromIndexSize(dstIndex, count, dst.length);
        for (int i = 0; i < count; i++) {
            dst[dstIndex + i] = Float.float16ToFloat(src[srcIndex + i]);
        }
    }

    // ---- segments (two little-endian bytes per element) ----

    /**
     * Converts {@code count} floats to bfloat16 and writes them little-endian into {@code dst}.
     *
     * @param src       the floats
     * @param srcIndex  first float
     * @param dst       receives {@code 2 × count} bytes
     * @param dstOffset byte offset of the first element in {@code dst}
     * @param count     elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void floatToBf16(float[] src, int srcIndex, MemorySegment dst, long dstOffset, int count) {
        Objects.checkFromIndexSize(srcIndex, count, src.length);
        Objects.checkFromIndexSize(dstOffset, 2L * count, dst.byteSize());
        for (int i = 0; i < count; i++) {
            dst.set(SHORT_LE, dstOffset + 2L * i, floatToBf16(src[srcIndex + i]));
        }
    }

    /**
     * Reads {@code count} little-endian bfloat16 elements from {@code src} and converts them to floats.
     *
     * @param src       holds {@code 2 × count} bytes from {@code srcOffset}
     * @param srcOffset byte offset of the first element in {@code src}
     * @param dst       receives the floats
     * @param dstIndex  where the first float goes
     * @param count     elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void bf16ToFloat(MemorySegment src, long srcOffset, float[] dst, int dstIndex, int count) {
        Objects.checkFromIndexSize(srcOffset, 2L * count, src.byteSize());
        Objects.checkFromIndexSize(dstIndex, count, dst.length);
        for (int i = 0; i < count; i++) {
            dst[dstIndex + i] = bf16ToFloat(src.get(SHORT_LE, srcOffset + 2L * i));
        }
    }

    /**
     * Converts {@code count} floats to binary16 and writes them little-endian into {@code dst}.
     *
     * @param src       the floats
     * @param srcIndex  first float
     * @param dst       receives {@code 2 × count} bytes
     * @param dstOffset byte offset of the first element in {@code dst}
     * @param count     elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void floatToFp16(float[] src, int srcIndex, MemorySegment dst, long dstOffset, int count) {
        Objects.checkFromIndexSize(srcIndex, count, src.length);
        Objects.checkFromIndexSize(dstOffset, 2L * count, dst.byteSize());
        for (int i = 0; i < count; i++) {
            dst.set(SHORT_LE, dstOffset + 2L * i, Float.floatToFloat16(src[srcIndex + i]));
        }
    }

    /**
     * Reads {@code count} little-endian binary16 elements from {@code src} and converts them to floats.
     *
     * @param src       holds {@code 2 × count} bytes from {@code srcOffset}
     * @param srcOffset byte offset of the first element in {@code src}
     * @param dst       receives the floats
     * @param dstIndex  where the first float goes
     * @param count     elements, ≥ 0
     * @throws IndexOutOfBoundsException if a range is out of bounds (nothing converted)
     */
    public static void fp16ToFloat(MemorySegment src, long srcOffset, float[] dst, int dstIndex, int count) {
        Objects.checkFromIndexSize(srcOffset, 2L * count, src.byteSize());
        Objects.checkFromIndexSize(dstIndex, count, dst.length);
        for (int i = 0; i < count; i++) {
            dst[dstIndex + i] = Float.float16ToFloat(src.get(SHORT_LE, srcOffset + 2L * i));
        }
    }
}
