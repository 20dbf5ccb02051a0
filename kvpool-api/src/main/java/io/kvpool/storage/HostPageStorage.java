package io.kvpool.storage;

import io.kvpool.KvLayout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;

/**
 * Pages in off-heap host memory: one large segment from a shared {@link Arena}, page {@code p} at byte
 * offset {@code p × bytesPerPage}, the whole segment aligned to 4096 bytes (so every page is aligned to
 * at least 256 bytes whenever {@code bytesPerPage} is a multiple of 256, which every realistic layout is,
 * and to the largest power of two dividing {@code bytesPerPage} otherwise). Needs no native access
 * permission: only {@link Arena#allocate} is used.
 *
 * <p>Closing frees the memory; a thread still touching a page then gets an {@link IllegalStateException}
 * from the FFM runtime, never freed memory.
 */
public final class HostPageStorage implements PageStorage {

    /** Alignment of the whole segment. */
    public static final long ALIGNMENT = 4096;

    private final KvLayout layout;
    private final int pages;
    private final long pageBytes;
    private final Arena arena;
    private final MemorySegment all;
    private final MemorySegment canaryPage;
    private final Runnable onClose;
    private volatile boolean closed;

    private HostPageStorage(KvLayout layout, int pages) {
        this(layout, pages, null, true, null);
    }

    private HostPageStorage(KvLayout layout, int pages, MemorySegment external, boolean canaryFill, Runnable onClose) {
        if (pages < 1) {
            throw new IllegalArgumentException("a storage needs at least 1 page, was " + pages);
        }
        this.layout = Objects.requireNonNull(layout, "layout");
        this.pages = pages;
        this.pageBytes = layout.bytesPerPage();
        final long total;
        try {
            total = Math.multiplyExact(pageBytes, (long) pages);
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException(pages + " pages of " + pageBytes + " bytes overflow a long", e);
        }
        if (external != null && external.byteSize() < total) {
            throw new IllegalArgumentException("segment of " + external.byteSize() + " bytes cannot hold " + pages
                + " pages of " + pageBytes + " bytes (" + total + " bytes)");
        }
        this.onClose = onClose;
        this.arena = Arena.ofShared();
        try {
            this.all = external != null ? external.asSlice(0, total) : arena.allocate(total, ALIGNMENT);
            this.canaryPage = arena.allocate(pageBytes, ALIGNMENT);
        } catch (OutOfMemoryError | IllegalArgumentException e) {
            arena.close();
            throw new IllegalStateException("cannot allocate " + total + " bytes of host memory for " + pages
                + " pages of " + pageBytes + " bytes: " + e.getMessage(), e);
        }
        for (long o = 0; o < pageBytes; o++) {
            canaryPage.set(ValueLayout.JAVA_BYTE, o, canaryByte(o));
        }
        if (canaryFill) {
            try {
                for (int p = 0; p < pages; p++) {
                    fill(p, FillMode.CANARY);
                }
            } catch (RuntimeException | Error e) { // e.g. a fault in mapped memory: nothing of this storage stays
                arena.close();
                throw e;
            }
        }
    }

    /**
     * Allocates host storage; every page starts filled with the canary.
     *
     * @param layout the page layout
     * @param pages  number of pages, ≥ 1
     * @return the storage
     * @throws IllegalStateException if the host memory cannot be allocated (naming the bytes and pages)
     */
    public static HostPageStorage allocate(KvLayout layout, int pages) {
        return new HostPageStorage(layout, pages);
    }

    /**
     * Host storage over memory the caller provides and owns, e.g. a file mapping shared with another
     * process: page {@code p} at offset {@code p × bytesPerPage} of {@code segment}. Fill, canary and copy
     * behave exactly as for {@link #allocate}. Closing the storage makes it refuse further use and then
     * runs {@code onClose} once (which should release the segment's memory); the segment itself is
     * never freed by this class.
     *
     * @param layout     the page layout
     * @param pages      number of pages, ≥ 1
     * @param segment    at least {@code pages × bytesPerPage} bytes
     * @param canaryFill whether to fill every page with the canary now ({@code false} keeps the current
     *                   bytes, e.g. when attaching to pages another process already owns)
     * @param onClose    run once by the first {@link #close()}, or {@code null}
     * @return the storage
     * @throws IllegalArgumentException if the segment is too small
     */
    public static HostPageStorage over(KvLayout layout, int pages, MemorySegment segment, boolean canaryFill, Runnable onClose) {
        return new HostPageStorage(layout, pages, Objects.requireNonNull(segment, "segment"), canaryFill, onClose);
    }

    static byte canaryByte(long pageOffset) {
        return (byte) (CANARY >>> (8 * (pageOffset & 7)));
    }

    @Override
    public KvLayout layout() {
        return layout;
    }

    @Override
    public int pageCount() {
        return pages;
    }

    @Override
    public boolean isHostAccessible() {
        return true;
    }

    @Override
    public MemorySegment hostPage(int page) {
        ensureOpen();
        Objects.checkIndex(page, pages);
        return all.asSlice(page * pageBytes, pageBytes);
    }

    /**
     * {@return the segment over all pages (page {@code p} at {@code p × bytesPerPage})}
     *
     * @throws IllegalStateException if the storage is closed
     */
    public MemorySegment segment() {
        ensureOpen();
        return all;
    }

    @Override
    public long address(int page, int layer, int kv) {
        ensureOpen();
        Objects.checkIndex(page, pages);
        return all.address() + page * pageBytes + layout.offset(layer, kv, 0);
    }

    /**
     * The kernel view of one layer's K or V: blocks {@code bytesPerPage} apart (whole pages), starting at
     * the layer's offset in page 0, with a host segment over them all (see {@link KernelView}).
     *
     * @param layer layer index
     * @param kv    0 for K, 1 for V
     * @return the view
     * @throws IndexOutOfBoundsException if {@code layer} or {@code kv} is out of range
     * @throws IllegalStateException     if the storage is closed
     */
    @Override
    public KernelView kernelView(int layer, int kv) {
        ensureOpen();
        final long first = layout.offset(layer, kv, 0);
        final long span = (pages - 1L) * pageBytes + layout.tokensPerPage() * layout.bytesPerTokenVector();
        return KernelView.of(layout, pages, layer, kv, all.address() + first, pageBytes, all.asSlice(first, span));
    }

    @Override
    public void fill(int page, FillMode mode) {
        ensureOpen();
        Objects.checkIndex(page, pages);
        switch (mode) {
            case CANARY -> MemorySegment.copy(canaryPage, 0, all, page * pageBytes, pageBytes);
            case ZERO -> all.asSlice(page * pageBytes, pageBytes).fill((byte) 0);
            case NONE -> { }
        }
    }

    @Override
    public int firstCanaryToken(int page, int fromToken, int toToken) {
        ensureOpen();
        Objects.checkIndex(page, pages);
        Objects.checkFromToIndex(fromToken, toToken, layout.tokensPerPage());
        final long vec = layout.bytesPerTokenVector();
        final long base = page * pageBytes;
        for (int t = fromToken; t < toToken; t++) {
            for (int l = 0; l < layout.layers(); l++) {
                for (int kv = 0; kv < 2; kv++) {
                    final long off = layout.offset(l, kv, t);
                    if (MemorySegment.mismatch(all, base + off, base + off + vec, canaryPage, off, off + vec) == -1) {
                        return t;
                    }
                }
            }
        }
        return -1;
    }

    @Override
    public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        ensureOpen();
        Objects.checkFromIndexSize(srcOff, count, src.length);
        Objects.checkFromIndexSize(dstOff, count, dst.length);
        for (int i = 0; i < count; i++) {
            final int s = Objects.checkIndex(src[srcOff + i], pages);
            final int d = Objects.checkIndex(dst[dstOff + i], pages);
            if (s != d) {
                MemorySegment.copy(all, s * pageBytes, all, d * pageBytes, pageBytes);
            }
        }
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("host page storage is closed");
        }
    }

    @Override
    public void close() {
        if (!closed) {
            synchronized (this) {
                if (!closed) {
                    closed = true;
                    try {
                        arena.close();
                    } finally {
                        if (onClose != null) {
                            onClose.run();
                        }
                    }
                }
            }
        }
    }
}
