package io.kvpool.storage;

import io.kvpool.KvLayout;

import java.lang.foreign.MemorySegment;

/**
 * Where a pool's pages live: host memory ({@link HostPageStorage}), device memory (kvpool-cuda), or a
 * mapped file shared with another process (kvpool-transfer). The pool owns the <em>bookkeeping</em> of pages
 * (states, handles, refcounts); a storage owns only their <em>bytes</em> and never sees a handle: every
 * method takes slot indices that the pool has already validated.
 *
 * <p>Device memory cannot be a {@link MemorySegment} the JVM dereferences, so the SPI speaks in slot
 * indices and raw addresses ({@link #address}); only host-accessible storages return segments from
 * {@link #hostPage}. Page copies take index lists so a device backend can do a whole batch in one
 * kernel launch rather than one driver call per page.
 *
 * <p>Thread-safety: implementations must allow concurrent calls on <em>different</em> pages; the pool
 * never issues concurrent calls on the same page except reads.
 */
public interface PageStorage extends AutoCloseable {

    /**
     * The canary pattern, as eight bytes repeated over a page: the byte at page offset {@code o} is
     * {@code (byte) (CANARY >>> (8 * (o & 7)))} (little-endian order of this long).
     */
    long CANARY = 0x0DF0FECAEFBEADDEL; // bytes DE AD BE EF CA FE F0 0D

    /** {@return the layout of the pages} */
    KvLayout layout();

    /** {@return the number of pages (slots {@code 0 .. pageCount() - 1})} */
    int pageCount();

    /** {@return whether {@link #hostPage} gives access to the bytes from Java} */
    boolean isHostAccessible();

    /**
     * Gives Java access to one page's bytes, where {@link #isHostAccessible()} says there is any.
     *
     * @param page slot index
     * @return a segment over the page's bytes, laid out as {@link KvLayout} describes for host pages
     * @throws UnsupportedOperationException if the storage is not host-accessible
     */
    MemorySegment hostPage(int page);

    /**
     * Locates one layer's K or V of a page in native memory, for code outside Java (kernels, copy engines).
     *
     * @param page  slot index
     * @param layer layer index
     * @param kv    0 for K, 1 for V
     * @return the native address (host or device) of the first token's vector of that page, layer and K/V;
     *         the page's other tokens follow contiguously, {@link KvLayout#bytesPerTokenVector()} apart
     */
    long address(int page, int layer, int kv);

    /**
     * The view an attention kernel needs for one layer's K or V across all pages: a base address and the
     * page, token and head strides (see {@link KernelView}). Storages whose pages of one layer and K/V are
     * not one uniform stride apart have none; this default says so.
     *
     * @param layer layer index
     * @param kv    0 for K, 1 for V
     * @return the view; {@code view.address(page)} equals {@link #address(int, int, int) address(page, layer, kv)}
     *         for every page
     * @throws UnsupportedOperationException if this storage has no uniform stride (the default)
     * @throws IndexOutOfBoundsException     if {@code layer} or {@code kv} is out of range
     * @throws IllegalStateException         if the storage is closed
     */
    default KernelView kernelView(int layer, int kv) {
        throw new UnsupportedOperationException(getClass().getName() + " offers no kernel view: its pages of one layer and K/V are not "
            + "one uniform stride apart; use address(page, layer, kv) for each page");
    }

    /**
     * Writes the fill pattern into every byte of a page ({@link FillMode#NONE} does nothing).
     *
     * @param page slot index
     * @param mode {@link FillMode#CANARY} for the {@link #CANARY} pattern, {@link FillMode#ZERO} for zeros
     */
    void fill(int page, FillMode mode);

    /**
     * Writes the fill pattern into the tail of a page: tokens {@code [fromToken, tokensPerPage)} of every layer's K and
     * V, each byte as {@link #fill} writes it ({@link FillMode#NONE} does nothing). A receiver fills the tail of a
     * partial last page it received: transports copy whole pages, so the bytes past the sender's last token are the
     * sender page's, another request's KV or the sender pool's own fill. The default writes through {@link #hostPage};
     * a storage that is not host-accessible implements it, or its receivers keep those bytes and log a WARNING once.
     *
     * @param page      slot index
     * @param fromToken the first token of the tail, in {@code [0, tokensPerPage]} ({@code tokensPerPage}: no tail)
     * @param mode      {@link FillMode#CANARY} for the {@link #CANARY} pattern, {@link FillMode#ZERO} for zeros
     * @throws IndexOutOfBoundsException     if {@code page} or {@code fromToken} is out of range
     * @throws UnsupportedOperationException (the default) if the storage is not host-accessible
     */
    default void fillTail(int page, int fromToken, FillMode mode) {
        java.util.Objects.requireNonNull(mode, "mode");
        java.util.Objects.checkIndex(page, pageCount());
        final int tpp = layout().tokensPerPage();
        java.util.Objects.checkFromToIndex(fromToken, tpp, tpp);
        if (mode != FillMode.NONE && fromToken < tpp) {
            fillTail(hostPage(page), layout(), fromToken, mode);
        }
    }

    /**
     * {@link #fillTail(int, int, FillMode)} on one page's bytes in the host layout, for implementations.
     *
     * @param page      the page's bytes, {@link KvLayout#bytesPerPage()} of them, laid out as {@link KvLayout} says
     * @param layout    the page's layout
     * @param fromToken the first token of the tail, in {@code [0, tokensPerPage)}
     * @param mode      {@link FillMode#CANARY} or {@link FillMode#ZERO}
     */
    static void fillTail(MemorySegment page, KvLayout layout, int fromToken, FillMode mode) {
        final long len = (long) (layout.tokensPerPage() - fromToken) * layout.bytesPerTokenVector();
        // CANARY's eight bytes at an offset that is a multiple of 8 (the segment's own alignment not assumed)
        final java.lang.foreign.ValueLayout.OfLong word =
            java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (int l = 0; l < layout.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                final long off = layout.offset(l, kv, fromToken);
                switch (mode) {
                    case ZERO -> page.asSlice(off, len).fill((byte) 0);
                    case CANARY -> {
                        final long end = off + len;
                        long o = off;
                        for (; o < end && (o & 7) != 0; o++) { // the pattern's phase is the page offset (CANARY)
                            page.set(java.lang.foreign.ValueLayout.JAVA_BYTE, o, (byte) (CANARY >>> (8 * (o & 7))));
                        }
                        for (; o + 8 <= end; o += 8) {
                            page.set(word, o, CANARY);
                        }
                        for (; o < end; o++) {
                            page.set(java.lang.foreign.ValueLayout.JAVA_BYTE, o, (byte) (CANARY >>> (8 * (o & 7))));
                        }
                    }
                    case NONE -> {
                        return;
                    }
                }
            }
        }
    }

    /**
     * Finds the first token of a range that was never (fully) written: one for which <em>any</em> vector
     * (any layer, K or V) still holds the canary pattern. A partially written token (some layers missing)
     * is therefore caught. Vectors shorter than 8 bytes can match the canary by chance; use layouts with
     * ≥ 8-byte vectors where that matters.
     *
     * @param page      slot index
     * @param fromToken first token index to check, inclusive, in {@code [0, tokensPerPage]}
     * @param toToken   last token index to check, exclusive, in {@code [fromToken, tokensPerPage]}
     * @return the first such token in {@code [fromToken, toToken)}, or -1 if none is (also for an empty range)
     */
    int firstCanaryToken(int page, int fromToken, int toToken);

    /**
     * Copies whole pages: {@code dst[dstOff + i] ← src[srcOff + i]} for {@code i < count}, as one batch.
     * Sources and destinations must not overlap.
     *
     * @param src    source slot indices
     * @param srcOff index in {@code src} of the first source slot
     * @param dst    destination slot indices
     * @param dstOff index in {@code dst} of the first destination slot
     * @param count  number of pages to copy, ≥ 0
     */
    void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count);

    /**
     * Releases the memory. Idempotent. Afterwards every method that touches the pages' bytes throws
     * {@link IllegalStateException}; {@link #layout()}, {@link #pageCount()} and {@link #isHostAccessible()} still answer.
     */
    @Override
    void close();
}
