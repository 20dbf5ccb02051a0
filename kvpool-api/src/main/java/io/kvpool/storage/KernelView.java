package io.kvpool.storage;

import io.kvpool.DType;
import io.kvpool.KvLayout;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * Everything an attention kernel needs to read (or write) one layer's K or V in every page of a storage:
 * a base address and three strides. The same for host storage ({@link HostPageStorage}, and the mapped
 * file storage that delegates to it) and device storage ({@code DevicePageStorage}); only the strides'
 * values differ. A Java kernel reads through {@link #hostSegment()}; a CUDA kernel gets
 * {@link #baseAddress()} and the strides as parameters.
 *
 * <h2>Addressing</h2>
 * <pre>
 *  address(p)                = baseAddress + p · pageStride               the page's block of this layer and K/V
 *  address(p, t, h)          = address(p) + t · tokenStride + h · headStride
 *  element e of that head    at address(p, t, h) + e · dtype.bytes()      e &lt; headDim, contiguous
 *
 *  one block (tokensPerPage · tokenStride bytes, contiguous):
 *  +---------------------------+---------------------------+-----+-----------------------------+
 *  | token 0                   | token 1                   | ... | token T-1                   |
 *  | [head 0][head 1]..[H-1]   | [head 0][head 1]..[H-1]   |     | [head 0][head 1]..[H-1]     |
 *  +---------------------------+---------------------------+-----+-----------------------------+
 *   tokenStride = kvHeads · headDim · dtype.bytes()   headStride = headDim · dtype.bytes()
 * </pre>
 *
 * <h2>What the strides are per storage</h2>
 * <pre>
 *  +--------------------+------------------------------------+-------------------------------------------+
 *  | storage            | pageStride                         | baseAddress of (layer l, kv k)            |
 *  +--------------------+------------------------------------+-------------------------------------------+
 *  | HostPageStorage    | bytesPerPage (whole pages)         | segment + (2l + k) · T · tokenStride      |
 *  | MappedPageStorage  | bytesPerPage (whole pages)         | mapping + 4096 + (2l + k) · T · tokenStride|
 *  | DevicePageStorage  | T · tokenStride (one plane's page) | arena + (2l + k) · planeBytes             |
 *  +--------------------+------------------------------------+-------------------------------------------+
 * </pre>
 *
 * <h2>Byte order</h2>
 * Elements are little-endian ({@link #byteOrder()}): the order of every host kvpool runs on (x86-64,
 * aarch64) and of CUDA devices. kvpool's own copies ({@code io.kvpool.KvCopy}) write and read them so.
 *
 * <p>A view is a value: it stays correct for the life of its storage and may be used on any thread. It
 * does not keep the storage open: after the storage is closed the addresses dangle and the host segment
 * refuses access ({@link IllegalStateException}). Reading a page is safe only while the caller holds a
 * reference to it (a {@code Sequence} or a handle).
 *
 * @param layer         the layer this view addresses
 * @param kv            0 for K, 1 for V
 * @param baseAddress   native address (host or device) of page 0's block of this layer and K/V
 * @param pageStride    bytes from one page's block to the next page's
 * @param tokenStride   bytes from one token's vector to the next token's, within a block
 * @param headStride    bytes from one head to the next, within a token's vector
 * @param dtype         element type; one element is {@code dtype.bytes()} bytes, little-endian
 * @param pageCount     pages the view covers (slots {@code 0 .. pageCount - 1})
 * @param tokensPerPage tokens in one block
 * @param kvHeads       heads in one token's vector
 * @param headDim       elements in one head
 * @param hostSegment   for a host-accessible storage, a segment that starts at {@code baseAddress} and
 *                      covers every page's block ({@link #hostSpan()} bytes); {@link MemorySegment#NULL}
 *                      for device storage
 */
public record KernelView(int layer, int kv, long baseAddress, long pageStride, long tokenStride, long headStride, DType dtype,
                         int pageCount, int tokensPerPage, int kvHeads, int headDim, MemorySegment hostSegment) {

    private static final ValueLayout FLOAT_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout SHORT_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /**
     * Checks the view is consistent: positive sizes, a block that fits in a page stride, and a host segment
     * (if any) that starts at the base address and covers every block.
     *
     * @throws IllegalArgumentException naming the inconsistent field and its value
     * @throws NullPointerException     if {@code dtype} or {@code hostSegment} is null
     */
    public KernelView {
        Objects.requireNonNull(dtype, "dtype");
        Objects.requireNonNull(hostSegment, "hostSegment (MemorySegment.NULL for a device view)");
        if (kv < 0 || kv > 1 || layer < 0) {
            throw new IllegalArgumentException("layer must be ≥ 0 and kv 0 or 1, were " + layer + " and " + kv);
        }
        if (pageCount < 1 || tokensPerPage < 1 || kvHeads < 1 || headDim < 1) {
            throw new IllegalArgumentException("pageCount, tokensPerPage, kvHeads and headDim must be ≥ 1, were " + pageCount + ", "
                + tokensPerPage + ", " + kvHeads + ", " + headDim);
        }
        final long packedHead = (long) headDim * dtype.bytes();
        final long packedToken = exactOrMax(packedHead, kvHeads); // a product past a long: no stride equals it
        if (headStride != packedHead || tokenStride != packedToken) {
            throw new IllegalArgumentException("heads and tokens are packed: headStride must be " + packedHead
                + " and tokenStride " + (packedToken == Long.MAX_VALUE ? "more than " + Long.MAX_VALUE : Long.toString(packedToken))
                + ", were " + headStride + " and " + tokenStride);
        }
        final long block = exactOrMax(tokenStride, tokensPerPage);
        if (block == Long.MAX_VALUE || pageStride < block) {
            throw new IllegalArgumentException("pageStride of " + pageStride + " bytes is smaller than a block of " + tokensPerPage
                + " tokens × " + tokenStride + " bytes");
        }
        if (hostSegment.byteSize() != 0) {
            final long span = sumOrMax(exactOrMax(pageCount - 1L, pageStride), block); // MAX_VALUE: no segment covers it
            if (hostSegment.address() != baseAddress || hostSegment.byteSize() < span) {
                throw new IllegalArgumentException("host segment at 0x" + Long.toHexString(hostSegment.address()) + " of "
                    + hostSegment.byteSize() + " bytes must start at the base address 0x" + Long.toHexString(baseAddress)
                    + " and cover " + span + " bytes");
            }
        }
    }

    /** @return {@code a + b}, or {@link Long#MAX_VALUE} if it does not fit in a long (both non-negative) */
    private static long sumOrMax(long a, long b) {
        final long sum = a + b;
        return sum < 0 ? Long.MAX_VALUE : sum;
    }

    /** @return {@code a × b}, or {@link Long#MAX_VALUE} if it does not fit in a long (both non-negative) */
    private static long exactOrMax(long a, long b) {
        try {
            return Math.multiplyExact(a, b);
        } catch (ArithmeticException overflow) {
            return Long.MAX_VALUE;
        }
    }

    /**
     * Builds the view of one layer and K/V of a storage whose blocks are {@code pageStride} bytes apart,
     * taking the token and head strides from the layout.
     *
     * @param layout      the pages' layout
     * @param pageCount   pages in the storage
     * @param layer       layer index
     * @param kv          0 for K, 1 for V
     * @param baseAddress native address of page 0's block of that layer and K/V
     * @param pageStride  bytes between two pages' blocks
     * @param hostSegment a segment over the blocks starting at {@code baseAddress}, or {@link MemorySegment#NULL}
     * @return the view
     * @throws IndexOutOfBoundsException if {@code layer} or {@code kv} is out of range for the layout
     * @throws IllegalArgumentException  if the stride or segment is inconsistent (see the constructor)
     */
    public static KernelView of(KvLayout layout, int pageCount, int layer, int kv, long baseAddress, long pageStride,
                                MemorySegment hostSegment) {
        Objects.checkIndex(layer, layout.layers());
        Objects.checkIndex(kv, 2);
        final long headStride = (long) layout.headDim() * layout.dtype().bytes();
        return new KernelView(layer, kv, baseAddress, pageStride, layout.bytesPerTokenVector(), headStride, layout.dtype(), pageCount,
            layout.tokensPerPage(), layout.kvHeads(), layout.headDim(), hostSegment);
    }

    /**
     * The byte order of every element in the blocks (see the class comment).
     *
     * @return {@link ByteOrder#LITTLE_ENDIAN}
     */
    public ByteOrder byteOrder() {
        return ByteOrder.LITTLE_ENDIAN;
    }

    /**
     * The layout to read one element with, for a Java kernel.
     *
     * @return the layout of one element for a Java kernel reading {@link #hostSegment()}: unaligned,
     *         little-endian {@code float} for FP32, {@code short} bits for FP16 and BF16, a byte for FP8
     */
    public ValueLayout elementLayout() {
        return switch (dtype) {
            case FP32 -> FLOAT_LE;
            case FP16, BF16 -> SHORT_LE;
            case FP8 -> ValueLayout.JAVA_BYTE;
        };
    }

    /**
     * The size of one page's block of this layer and K/V.
     *
     * @return {@code tokensPerPage × tokenStride} bytes
     */
    public long blockBytes() {
        return tokensPerPage * tokenStride;
    }

    /**
     * The bytes a host segment must cover.
     *
     * @return bytes from the base address to the end of the last page's block
     */
    public long hostSpan() {
        return (pageCount - 1L) * pageStride + blockBytes();
    }

    /**
     * Whether Java can read the blocks.
     *
     * @return whether {@link #hostSegment()} gives Java access to the blocks (false for device storage)
     */
    public boolean hostAccessible() {
        return hostSegment.byteSize() != 0;
    }

    /**
     * The address of one page's block.
     *
     * @param page slot index
     * @return the native address of that page's block: {@code baseAddress + page × pageStride}; equals the
     *         storage's {@link PageStorage#address(int, int, int) address(page, layer, kv)}
     * @throws IndexOutOfBoundsException if {@code page} is not in {@code [0, pageCount)}
     */
    public long address(int page) {
        return baseAddress + Objects.checkIndex(page, pageCount) * pageStride;
    }

    /**
     * The address of one head of one token.
     *
     * @param page  slot index
     * @param token token within the page
     * @param head  KV head
     * @return the native address of that head's first element
     * @throws IndexOutOfBoundsException if an index is out of range
     */
    public long address(int page, int token, int head) {
        return baseAddress + offset(page, token, head);
    }

    /**
     * The offset of one head of one token, for a Java kernel.
     *
     * @param page  slot index
     * @param token token within the page
     * @param head  KV head
     * @return the byte offset of that head's first element in {@link #hostSegment()} (and from the base address)
     * @throws IndexOutOfBoundsException if an index is out of range
     */
    public long offset(int page, int token, int head) {
        Objects.checkIndex(page, pageCount);
        Objects.checkIndex(token, tokensPerPage);
        Objects.checkIndex(head, kvHeads);
        return page * pageStride + token * tokenStride + head * headStride;
    }
}
