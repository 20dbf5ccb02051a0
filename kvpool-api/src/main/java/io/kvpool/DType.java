package io.kvpool;

/**
 * Element type of the K and V vectors held in a page. Only the width matters to the pool; the values
 * themselves are opaque bytes written and read by the model.
 */
public enum DType {
    /** IEEE-754 binary32, 4 bytes. */
    FP32(4),
    /** IEEE-754 binary16, 2 bytes. */
    FP16(2),
    /** bfloat16, 2 bytes. */
    BF16(2),
    /** 8-bit float (E4M3 or E5M2; the pool does not distinguish), 1 byte. */
    FP8(1);

    private final int bytes;

    DType(int bytes) {
        this.bytes = bytes;
    }

    /** {@return the width of one element in bytes} */
    public int bytes() {
        return bytes;
    }
}
