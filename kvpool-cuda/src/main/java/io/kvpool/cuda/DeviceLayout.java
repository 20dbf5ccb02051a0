package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.storage.KernelView;

import java.lang.foreign.MemorySegment;

/**
 * Where a device pool's pages live: one allocation (the <em>arena</em>) holding, for every layer and for K
 * and V, a <em>plane</em> of all pages in the NHD layout FlashInfer and SGLang kernels read directly.
 *
 * <pre>
 *  arena ─┬─ plane 0  = layer 0, K ─┬─ page 0: [tokensPerPage][kvHeads][headDim]   (pageStride bytes)
 *         │                         ├─ page 1
 *         │                         └─ …  page pages-1                               (planeBytes = pages · pageStride)
 *         ├─ plane 1  = layer 0, V
 *         ├─ plane 2  = layer 1, K
 *         └─ …  plane 2·layers − 1   = layer layers−1, V
 *
 *  address(page p, layer l, kv) = arena + (2·l + kv) · planeBytes + p · pageStride
 *  pageStride = tokensPerPage · kvHeads · headDim · dtypeBytes = tokensPerPage · bytesPerTokenVector
 * </pre>
 * A page's <em>host</em> layout ({@link KvLayout#offset}) is its planes one after another, so gathering a
 * page's planes into consecutive {@code pageStride} chunks gives exactly the host page (offload, checks).
 * Every plane base and page start is 16-byte aligned (the kernels move 16 bytes at a time): layouts whose
 * {@code pageStride} is not a multiple of 16 are refused.
 *
 * @param layout     the page layout
 * @param pages      pages in the pool
 * @param pageStride bytes of one page in one plane
 * @param planes     {@code 2 · layers}
 * @param planeBytes bytes of one plane ({@code pages · pageStride})
 */
public record DeviceLayout(KvLayout layout, int pages, long pageStride, int planes, long planeBytes) {

    /** Alignment of every plane and page start, and the kernels' access width. */
    public static final int ALIGNMENT = 16;

    /**
     * Lays out an arena for {@code pages} pages of a layout.
     *
     * @param layout the page layout
     * @param pages  pages in the pool (≥ 1)
     * @return the arena layout
     * @throws IllegalArgumentException if {@code pages < 1}, a page's plane is not a multiple of
     *                                  {@value #ALIGNMENT} bytes, or the arena would not fit a {@code long}
     */
    public static DeviceLayout of(KvLayout layout, int pages) {
        if (pages < 1) {
            throw new IllegalArgumentException("pages must be ≥ 1, was " + pages);
        }
        final long stride = layout.tokensPerPage() * layout.bytesPerTokenVector();
        if (stride % ALIGNMENT != 0) {
            throw new IllegalArgumentException("a page's plane is " + stride + " bytes (" + layout + "); the device layout needs a multiple of "
                + ALIGNMENT + " (tokensPerPage · kvHeads · headDim · dtype bytes)");
        }
        final int planes = 2 * layout.layers();
        final long planeBytes = Math.multiplyExact(stride, (long) pages);
        Math.multiplyExact(planeBytes, (long) planes); // the arena must fit a long
        return new DeviceLayout(layout, pages, stride, planes, planeBytes);
    }

    /** {@return bytes of the whole arena ({@code planes · planeBytes})} */
    public long arenaBytes() {
        return planes * planeBytes;
    }

    /**
     * {@return the plane index of a layer's K ({@code kv = 0}) or V ({@code kv = 1})}
     *
     * @param layer the layer
     * @param kv    0 for K, 1 for V
     * @throws IndexOutOfBoundsException if {@code layer} or {@code kv} is out of range
     */
    public int plane(int layer, int kv) {
        if (layer < 0 || layer >= layout.layers() || kv < 0 || kv > 1) {
            throw new IndexOutOfBoundsException("layer " + layer + " kv " + kv + " of " + layout.layers() + " layers");
        }
        return 2 * layer + kv;
    }

    /**
     * {@return the byte offset in the arena of page {@code page}'s first token of that layer and K/V}
     *
     * @param page  the page (slot)
     * @param layer the layer
     * @param kv    0 for K, 1 for V
     * @throws IndexOutOfBoundsException if an index is out of range
     */
    public long offset(int page, int layer, int kv) {
        if (page < 0 || page >= pages) {
            throw new IndexOutOfBoundsException("page " + page + " of " + pages);
        }
        return plane(layer, kv) * planeBytes + page * pageStride;
    }

    /**
     * The kernel view of one plane (a layer's K or V) of an arena at {@code arenaAddress}: page blocks
     * {@link #pageStride()} apart from {@code arenaAddress + offset(0, layer, kv)}, no host segment.
     * {@link DevicePageStorage#kernelView} is this with its arena's address; pure arithmetic, no device needed.
     *
     * @param arenaAddress device address of the arena
     * @param layer        layer index
     * @param kv           0 for K, 1 for V
     * @return the view; {@code view.address(p) == arenaAddress + offset(p, layer, kv)} for every page
     * @throws IndexOutOfBoundsException if {@code layer} or {@code kv} is out of range
     */
    public KernelView kernelView(long arenaAddress, int layer, int kv) {
        return KernelView.of(layout, pages, layer, kv, arenaAddress + offset(0, layer, kv), pageStride, MemorySegment.NULL);
    }

    /**
     * {@return the offset in a host page of the plane's chunk (planes one after another)}
     *
     * @param plane the plane index, as {@link #plane} gives it (not checked)
     */
    public long hostOffset(int plane) {
        return plane * pageStride;
    }
}
