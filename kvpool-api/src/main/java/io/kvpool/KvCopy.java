package io.kvpool;

import io.kvpool.storage.KernelView;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * Bulk copies of a run of tokens into and out of a {@link Sequence}, for one layer's K or V or for all
 * layers, from and to a {@link MemorySegment}, a {@code float[]} (FP32 pools) or a {@code short[]} (FP16
 * and BF16 pools, the raw 16-bit patterns; see {@link Half}). The copy splits the run at page boundaries
 * itself: one bulk copy per page and layer, never one per token. No call allocates.
 *
 * <h2>The caller's side of a copy of {@code n} tokens</h2>
 * <pre>
 *  one layer, K or V (copyLayerIn / copyLayerOut): n · bytesPerTokenVector bytes
 *  +-----------------------+-----------------------+-----+-------------------------+
 *  | token 0               | token 1               | ... | token n-1               |
 *  | [head 0]..[head H-1]  | [head 0]..[head H-1]  |     | [head 0]..[head H-1]    |
 *  +-----------------------+-----------------------+-----+-------------------------+
 *    each head: headDim elements            (token i at i · bytesPerTokenVector)
 *
 *  all layers (copyIn / copyOut): n · bytesPerToken bytes, one such run per layer and K/V
 *  +--------------+--------------+--------------+--------------+-----+------------------+------------------+
 *  | layer 0, K   | layer 0, V   | layer 1, K   | layer 1, V   | ... | layer L-1, K     | layer L-1, V     |
 *  | n vectors    | n vectors    | n vectors    | n vectors    |     | n vectors        | n vectors        |
 *  +--------------+--------------+--------------+--------------+-----+------------------+------------------+
 *    token i of (layer l, kv k) at ((2·l + k) · n + i) · bytesPerTokenVector
 * </pre>
 * So a whole page of the pool is exactly the all-layers run of its {@code tokensPerPage} tokens
 * ({@link KvLayout}). Offsets into a segment are in bytes, into an array in elements; elements are
 * little-endian in segments and pages ({@link KernelView#byteOrder()}), and a segment's bytes are copied
 * as they are.
 *
 * <h2>Rules every call enforces, before it moves a byte</h2>
 * <ul>
 *   <li>Only tokens in {@code [0, tokenCount())} of the sequence: {@link Sequence#append} first. Otherwise
 *       {@link IndexOutOfBoundsException}.</li>
 *   <li>Writes go only into pages this sequence holds alone and that hold no published prefix: a page
 *       shared by a fork (refcount &gt; 1) or published to the prefix cache is immutable, and writing it
 *       would change another request's KV. Otherwise {@link IllegalStateException} naming the page and its
 *       slot. Tokens appended after a fork or publication are always writable: {@link Sequence#append}
 *       copies a shared partial last page first.</li>
 *   <li>Every page's handle is checked, as {@link KvPool#page(long)} does: a handle whose page was released
 *       behind the sequence's back throws {@link StaleHandleException}, a page being drained or in
 *       quarantine {@link IllegalStateException}.</li>
 *   <li>The array type matches the layout's element type: {@code float[]} needs {@link DType#FP32},
 *       {@code short[]} {@link DType#FP16} or {@link DType#BF16}; otherwise {@link IllegalArgumentException}.</li>
 * </ul>
 * A call that throws has copied nothing (unless a handle is released by another thread while it runs,
 * which no rule of the pool allows).
 *
 * <p>Only host-accessible storages ({@link io.kvpool.storage.HostPageStorage}, the mapped shm storage):
 * {@link #of} refuses device storage, whose pages Java cannot address.
 *
 * <p>Threads: a {@code KvCopy} holds no mutable state and may be shared by all threads. A sequence is
 * still used by one thread at a time ({@link Sequence}); copies into different sequences may run at once.
 */
public final class KvCopy {

    private static final ValueLayout.OfFloat FLOAT_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfShort SHORT_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final KvPool pool;
    private final KvLayout layout;
    /** Per plane ({@code 2 · layer + kv}): the kernel view's host segment, page {@code s}'s block at {@code s · pageStride[plane]}. */
    private final MemorySegment[] planes;
    private final long[] pageStride;
    private final long vectorBytes;
    private final int vectorElements;
    private final int tokensPerPage;

    private KvCopy(KvPool pool) {
        this.pool = pool;
        this.layout = pool.layout();
        this.vectorBytes = layout.bytesPerTokenVector();
        this.vectorElements = layout.kvHeads() * layout.headDim(); // ≤ MAX_PAGE_BYTES: fits an int
        this.tokensPerPage = layout.tokensPerPage();
        final PageStorage storage = pool.storage();
        final String name = storage.getClass().getSimpleName();
        if (!storage.isHostAccessible()) {
            throw new UnsupportedOperationException("KvCopy copies host-accessible storages only; " + name
                + " keeps its pages where Java cannot address them (device memory): copy with the storage's own transfers");
        }
        this.planes = new MemorySegment[2 * layout.layers()];
        this.pageStride = new long[planes.length];
        for (int l = 0; l < layout.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                final KernelView view;
                try {
                    view = storage.kernelView(l, kv);
                } catch (UnsupportedOperationException e) {
                    throw new UnsupportedOperationException("KvCopy needs the storage's kernel views, and " + name + " has none: "
                        + e.getMessage(), e);
                }
                if (!view.hostAccessible()) {
                    throw new UnsupportedOperationException("KvCopy needs host segments; " + name + "'s kernel view of layer " + l
                        + " kv " + kv + " has none");
                }
                planes[2 * l + kv] = view.hostSegment();
                pageStride[2 * l + kv] = view.pageStride();
            }
        }
    }

    /**
     * Binds copies to a pool's storage (its kernel views are taken once, here).
     *
     * @param pool an open pool with host-accessible storage
     * @return the copier
     * @throws UnsupportedOperationException if the storage is not host-accessible (device storage) or has no
     *                                       kernel views
     * @throws IllegalStateException         if the pool's storage is closed
     */
    public static KvCopy of(KvPool pool) {
        Objects.requireNonNull(pool, "pool");
        return new KvCopy(pool);
    }

    /**
     * The pool this copier was made for.
     *
     * @return the pool
     */
    public KvPool pool() {
        return pool;
    }

    // ---- one layer, K or V ----

    /**
     * Copies tokens {@code [fromToken, fromToken + tokens)} of one layer's K or V from {@code src} into the
     * sequence: {@code tokens × bytesPerTokenVector} bytes from {@code srcOffset} (see the class comment).
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param layer     layer index
     * @param kv        0 for K, 1 for V
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param src       the vectors, little-endian elements
     * @param srcOffset byte offset of the run's first vector in {@code src}
     * @throws IndexOutOfBoundsException if an index, the token run or the source range is out of range
     * @throws IllegalStateException     if a page in the run is shared or published (nothing is written), or
     *                                   the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     * @throws IllegalArgumentException  if the sequence belongs to another pool
     */
    public void copyLayerIn(Sequence seq, int layer, int kv, int fromToken, int tokens, MemorySegment src, long srcOffset) {
        final int plane = plane(layer, kv);
        checkSegment(src, srcOffset, tokens, 1, "source");
        checkPages(seq, fromToken, tokens, true);
        copy(seq, plane, plane + 1, fromToken, tokens, src, null, srcOffset, true);
    }

    /**
     * Like {@link #copyLayerIn(Sequence, int, int, int, int, MemorySegment, long)} from a {@code float[]}:
     * {@code tokens × kvHeads × headDim} elements from {@code srcIndex}.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param layer     layer index
     * @param kv        0 for K, 1 for V
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param src       the vectors
     * @param srcIndex  index of the run's first element in {@code src}
     * @throws IllegalArgumentException  if the layout's element type is not FP32, or the sequence belongs to
     *                                   another pool
     * @throws IndexOutOfBoundsException if an index, the token run or the source range is out of range
     * @throws IllegalStateException     if a page in the run is shared or published (nothing is written), or
     *                                   the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyLayerIn(Sequence seq, int layer, int kv, int fromToken, int tokens, float[] src, int srcIndex) {
        checkType(src, "float[]");
        final int plane = plane(layer, kv);
        checkArray(src.length, srcIndex, tokens, 1, "source");
        checkPages(seq, fromToken, tokens, true);
        copy(seq, plane, plane + 1, fromToken, tokens, null, src, srcIndex, true);
    }

    /**
     * Like {@link #copyLayerIn(Sequence, int, int, int, int, MemorySegment, long)} from a {@code short[]} of
     * FP16 or BF16 bit patterns: {@code tokens × kvHeads × headDim} elements from {@code srcIndex}.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param layer     layer index
     * @param kv        0 for K, 1 for V
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param src       the vectors, as 16-bit patterns
     * @param srcIndex  index of the run's first element in {@code src}
     * @throws IllegalArgumentException  if the layout's element type is not FP16 or BF16, or the sequence
     *                                   belongs to another pool
     * @throws IndexOutOfBoundsException if an index, the token run or the source range is out of range
     * @throws IllegalStateException     if a page in the run is shared or published (nothing is written), or
     *                                   the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyLayerIn(Sequence seq, int layer, int kv, int fromToken, int tokens, short[] src, int srcIndex) {
        checkType(src, "short[]");
        final int plane = plane(layer, kv);
        checkArray(src.length, srcIndex, tokens, 1, "source");
        checkPages(seq, fromToken, tokens, true);
        copy(seq, plane, plane + 1, fromToken, tokens, null, src, srcIndex, true);
    }

    /**
     * Copies tokens {@code [fromToken, fromToken + tokens)} of one layer's K or V out of the sequence into
     * {@code dst}: {@code tokens × bytesPerTokenVector} bytes from {@code dstOffset}. Shared and published
     * pages may be read.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param layer     layer index
     * @param kv        0 for K, 1 for V
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param dst       receives the vectors, little-endian elements
     * @param dstOffset byte offset in {@code dst} for the run's first vector
     * @throws IndexOutOfBoundsException if an index, the token run or the destination range is out of range
     * @throws IllegalStateException     if the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     * @throws IllegalArgumentException  if the sequence belongs to another pool
     */
    public void copyLayerOut(Sequence seq, int layer, int kv, int fromToken, int tokens, MemorySegment dst, long dstOffset) {
        final int plane = plane(layer, kv);
        checkSegment(dst, dstOffset, tokens, 1, "destination");
        checkPages(seq, fromToken, tokens, false);
        copy(seq, plane, plane + 1, fromToken, tokens, dst, null, dstOffset, false);
    }

    /**
     * Like {@link #copyLayerOut(Sequence, int, int, int, int, MemorySegment, long)} into a {@code float[]}.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param layer     layer index
     * @param kv        0 for K, 1 for V
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param dst       receives {@code tokens × kvHeads × headDim} elements
     * @param dstIndex  index in {@code dst} for the run's first element
     * @throws IllegalArgumentException  if the layout's element type is not FP32, or the sequence belongs to
     *                                   another pool
     * @throws IndexOutOfBoundsException if an index, the token run or the destination range is out of range
     * @throws IllegalStateException     if the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyLayerOut(Sequence seq, int layer, int kv, int fromToken, int tokens, float[] dst, int dstIndex) {
        checkType(dst, "float[]");
        final int plane = plane(layer, kv);
        checkArray(dst.length, dstIndex, tokens, 1, "destination");
        checkPages(seq, fromToken, tokens, false);
        copy(seq, plane, plane + 1, fromToken, tokens, null, dst, dstIndex, false);
    }

    /**
     * Like {@link #copyLayerOut(Sequence, int, int, int, int, MemorySegment, long)} into a {@code short[]} of
     * FP16 or BF16 bit patterns.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param layer     layer index
     * @param kv        0 for K, 1 for V
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param dst       receives {@code tokens × kvHeads × headDim} elements
     * @param dstIndex  index in {@code dst} for the run's first element
     * @throws IllegalArgumentException  if the layout's element type is not FP16 or BF16, or the sequence
     *                                   belongs to another pool
     * @throws IndexOutOfBoundsException if an index, the token run or the destination range is out of range
     * @throws IllegalStateException     if the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyLayerOut(Sequence seq, int layer, int kv, int fromToken, int tokens, short[] dst, int dstIndex) {
        checkType(dst, "short[]");
        final int plane = plane(layer, kv);
        checkArray(dst.length, dstIndex, tokens, 1, "destination");
        checkPages(seq, fromToken, tokens, false);
        copy(seq, plane, plane + 1, fromToken, tokens, null, dst, dstIndex, false);
    }

    // ---- all layers ----

    /**
     * Copies tokens {@code [fromToken, fromToken + tokens)} of every layer, K and V, from {@code src} into the
     * sequence: {@code tokens × bytesPerToken} bytes from {@code srcOffset}, laid out layer by layer (see the
     * class comment).
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param src       the vectors, little-endian elements
     * @param srcOffset byte offset of the run in {@code src}
     * @throws IndexOutOfBoundsException if the token run or the source range is out of range
     * @throws IllegalStateException     if a page in the run is shared or published (nothing is written), or
     *                                   the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     * @throws IllegalArgumentException  if the sequence belongs to another pool
     */
    public void copyIn(Sequence seq, int fromToken, int tokens, MemorySegment src, long srcOffset) {
        checkSegment(src, srcOffset, tokens, planes.length, "source");
        checkPages(seq, fromToken, tokens, true);
        copy(seq, 0, planes.length, fromToken, tokens, src, null, srcOffset, true);
    }

    /**
     * Like {@link #copyIn(Sequence, int, int, MemorySegment, long)} from a {@code float[]}:
     * {@code tokens × 2 × layers × kvHeads × headDim} elements from {@code srcIndex}.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param src       the vectors
     * @param srcIndex  index of the run's first element in {@code src}
     * @throws IllegalArgumentException  if the layout's element type is not FP32, or the sequence belongs to
     *                                   another pool
     * @throws IndexOutOfBoundsException if the token run or the source range is out of range
     * @throws IllegalStateException     if a page in the run is shared or published (nothing is written), or
     *                                   the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyIn(Sequence seq, int fromToken, int tokens, float[] src, int srcIndex) {
        checkType(src, "float[]");
        checkArray(src.length, srcIndex, tokens, planes.length, "source");
        checkPages(seq, fromToken, tokens, true);
        copy(seq, 0, planes.length, fromToken, tokens, null, src, srcIndex, true);
    }

    /**
     * Like {@link #copyIn(Sequence, int, int, MemorySegment, long)} from a {@code short[]} of FP16 or BF16
     * bit patterns: {@code tokens × 2 × layers × kvHeads × headDim} elements from {@code srcIndex}.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param src       the vectors, as 16-bit patterns
     * @param srcIndex  index of the run's first element in {@code src}
     * @throws IllegalArgumentException  if the layout's element type is not FP16 or BF16, or the sequence
     *                                   belongs to another pool
     * @throws IndexOutOfBoundsException if the token run or the source range is out of range
     * @throws IllegalStateException     if a page in the run is shared or published (nothing is written), or
     *                                   the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyIn(Sequence seq, int fromToken, int tokens, short[] src, int srcIndex) {
        checkType(src, "short[]");
        checkArray(src.length, srcIndex, tokens, planes.length, "source");
        checkPages(seq, fromToken, tokens, true);
        copy(seq, 0, planes.length, fromToken, tokens, null, src, srcIndex, true);
    }

    /**
     * Copies tokens {@code [fromToken, fromToken + tokens)} of every layer, K and V, out of the sequence into
     * {@code dst}: {@code tokens × bytesPerToken} bytes from {@code dstOffset}, laid out layer by layer.
     * Shared and published pages may be read.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param dst       receives the vectors, little-endian elements
     * @param dstOffset byte offset in {@code dst} for the run
     * @throws IndexOutOfBoundsException if the token run or the destination range is out of range
     * @throws IllegalStateException     if the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     * @throws IllegalArgumentException  if the sequence belongs to another pool
     */
    public void copyOut(Sequence seq, int fromToken, int tokens, MemorySegment dst, long dstOffset) {
        checkSegment(dst, dstOffset, tokens, planes.length, "destination");
        checkPages(seq, fromToken, tokens, false);
        copy(seq, 0, planes.length, fromToken, tokens, dst, null, dstOffset, false);
    }

    /**
     * Like {@link #copyOut(Sequence, int, int, MemorySegment, long)} into a {@code float[]}.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param dst       receives {@code tokens × 2 × layers × kvHeads × headDim} elements
     * @param dstIndex  index in {@code dst} for the run's first element
     * @throws IllegalArgumentException  if the layout's element type is not FP32, or the sequence belongs to
     *                                   another pool
     * @throws IndexOutOfBoundsException if the token run or the destination range is out of range
     * @throws IllegalStateException     if the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyOut(Sequence seq, int fromToken, int tokens, float[] dst, int dstIndex) {
        checkType(dst, "float[]");
        checkArray(dst.length, dstIndex, tokens, planes.length, "destination");
        checkPages(seq, fromToken, tokens, false);
        copy(seq, 0, planes.length, fromToken, tokens, null, dst, dstIndex, false);
    }

    /**
     * Like {@link #copyOut(Sequence, int, int, MemorySegment, long)} into a {@code short[]} of FP16 or BF16 bit
     * patterns.
     *
     * @param seq       the sequence, holding at least {@code fromToken + tokens} tokens
     * @param fromToken first token of the run, within the sequence
     * @param tokens    tokens in the run, ≥ 0
     * @param dst       receives {@code tokens × 2 × layers × kvHeads × headDim} elements
     * @param dstIndex  index in {@code dst} for the run's first element
     * @throws IllegalArgumentException  if the layout's element type is not FP16 or BF16, or the sequence
     *                                   belongs to another pool
     * @throws IndexOutOfBoundsException if the token run or the destination range is out of range
     * @throws IllegalStateException     if the sequence or pool is closed
     * @throws StaleHandleException      if a page's handle is stale
     */
    public void copyOut(Sequence seq, int fromToken, int tokens, short[] dst, int dstIndex) {
        checkType(dst, "short[]");
        checkArray(dst.length, dstIndex, tokens, planes.length, "destination");
        checkPages(seq, fromToken, tokens, false);
        copy(seq, 0, planes.length, fromToken, tokens, null, dst, dstIndex, false);
    }

    // ---- checks ----

    private int plane(int layer, int kv) {
        if (layer < 0 || layer >= layout.layers() || kv < 0 || kv > 1) {
            throw new IndexOutOfBoundsException("layer " + layer + ", kv " + kv + ": the layout has layers 0.." + (layout.layers() - 1)
                + ", and kv is 0 (K) or 1 (V)");
        }
        return 2 * layer + kv;
    }

    private void checkType(Object array, String arrayType) {
        Objects.requireNonNull(array, arrayType);
        final DType t = layout.dtype();
        final boolean ok = array instanceof float[] ? t == DType.FP32 : t == DType.FP16 || t == DType.BF16;
        if (!ok) {
            throw new IllegalArgumentException(arrayType + " needs " + (array instanceof float[] ? "an FP32" : "an FP16 or BF16")
                + " layout; this pool's elements are " + t + " (copy through a MemorySegment, or convert with Half)");
        }
    }

    /** @return {@code a × b} for non-negative operands, or {@link Long#MAX_VALUE} where it would overflow */
    private static long saturatingMultiply(long a, long b) {
        return Math.multiplyHigh(a, b) != 0 || a * b < 0 ? Long.MAX_VALUE : a * b;
    }

    private void checkSegment(MemorySegment seg, long offset, int tokens, int planeCount, String what) {
        Objects.requireNonNull(seg, what);
        if (tokens < 0) {
            throw new IndexOutOfBoundsException("tokens must be ≥ 0, was " + tokens);
        }
        final long bytes = saturatingMultiply(saturatingMultiply(tokens, vectorBytes), planeCount);
        if (offset < 0 || offset > seg.byteSize() || bytes > seg.byteSize() - offset) {
            throw new IndexOutOfBoundsException(what + " of " + seg.byteSize() + " bytes cannot hold " + tokens + " tokens × "
                + planes(planeCount) + " × " + vectorBytes + " bytes at offset " + offset);
        }
    }

    private void checkArray(int length, int index, int tokens, int planeCount, String what) {
        if (tokens < 0) {
            throw new IndexOutOfBoundsException("tokens must be ≥ 0, was " + tokens);
        }
        final long elements = saturatingMultiply(saturatingMultiply(tokens, vectorElements), planeCount);
        if (index < 0 || index > length || elements > length - index) {
            throw new IndexOutOfBoundsException(what + " array of " + length + " elements cannot hold " + tokens + " tokens × "
                + planes(planeCount) + " × " + vectorElements + " elements at index " + index);
        }
    }

    private static String planes(int planeCount) {
        return planeCount == 1 ? "1 layer's K or V" : planeCount / 2 + " layers × K and V";
    }

    /**
     * Checks the sequence, the token run, and every page's handle in it (and, for a write, that no page is
     * shared or published). Moves nothing; allocates nothing unless it throws.
     */
    private void checkPages(Sequence seq, int fromToken, int tokens, boolean write) {
        Objects.requireNonNull(seq, "seq");
        if (seq.pool() != pool) {
            throw new IllegalArgumentException("the sequence belongs to " + seq.pool() + ", this copier to " + pool);
        }
        if (seq.isClosed()) {
            throw new IllegalStateException("sequence is closed");
        }
        if (pool.isClosed()) { // also for an empty run, which reaches no validate()
            throw new IllegalStateException("kvpool is closed");
        }
        final int count = seq.tokenCount();
        if (fromToken < 0 || tokens < 0 || fromToken > count || tokens > count - fromToken) {
            throw new IndexOutOfBoundsException((write ? "cannot write" : "cannot read") + " tokens [" + fromToken + ", "
                + ((long) fromToken + tokens) + "): the sequence holds tokens [0, " + count + ")"
                + (write ? "; append the tokens before writing their KV" : ""));
        }
        if (tokens == 0) {
            return;
        }
        final int lastPage = (fromToken + tokens - 1) / tokensPerPage;
        for (int i = fromToken / tokensPerPage; i <= lastPage; i++) {
            final long handle = seq.pageHandle(i);
            final long slot = pool.validate(handle);
            if (slot < 0) {
                throw refused(handle, slot, i, write);
            }
            if (write && pool.allocations().mustCopyBeforeWrite((int) slot)) {
                throw immutable(seq, i, (int) slot, fromToken, tokens);
            }
        }
    }

    private RuntimeException refused(long handle, long code, int page, boolean write) {
        final int slot = PageHandle.slot(handle);
        final String what = (write ? "copy into" : "copy out of") + " page " + page + " of the sequence refused: ";
        if (code == PageHandle.STALE) {
            return new StaleHandleException(handle, StaleHandleException.Refusal.STALE, what + "stale handle "
                + PageHandle.toString(handle) + "; slot " + slot + " is now " + pool.stateOfSlot(slot)
                + " (a reference the sequence held was released elsewhere)");
        }
        if (code == PageHandle.INVALID) {
            return new StaleHandleException(handle, StaleHandleException.Refusal.INVALID, what + "invalid handle "
                + PageHandle.toString(handle));
        }
        return new IllegalStateException(what + PageHandle.toString(handle) + " is " + pool.stateOfSlot(slot)
            + ", not accessible until its transfer is settled");
    }

    private IllegalStateException immutable(Sequence seq, int page, int slot, int fromToken, int tokens) {
        final int refs = pool.refcountOfSlot(slot);
        final String why = refs > 1 ? "is shared (refcount " + refs + "): writing it would change another sequence's KV"
            : "holds a published prefix, which is immutable";
        return new IllegalStateException("cannot write tokens [" + fromToken + ", " + ((long) fromToken + tokens) + "): page " + page
            + " (slot " + slot + ") " + why + ". Write only tokens appended after the fork or publication: append (which copies a "
            + "shared last page) first, then write the appended tokens (the sequence holds " + seq.tokenCount() + " tokens)");
    }

    // ---- the copy ----

    /**
     * Moves planes {@code [planeFrom, planeTo)} of the run, one bulk copy per plane and page: plane by plane,
     * so the caller's side is read or written front to back (its planes are consecutive runs of tokens) and
     * the pool's side in blocks of up to {@code tokensPerPage} vectors. Exactly one of {@code seg} and
     * {@code array} is non-null; {@code at} is in bytes for a segment, elements for an array.
     */
    private void copy(Sequence seq, int planeFrom, int planeTo, int fromToken, int tokens, MemorySegment seg, Object array, long at,
                      boolean in) {
        final long unit = seg != null ? vectorBytes : vectorElements; // of one token vector, on the caller's side
        for (int p = planeFrom; p < planeTo; p++) {
            final MemorySegment plane = planes[p];
            final long stride = pageStride[p];
            long callerAt = at + (long) (p - planeFrom) * tokens * unit;
            int t = fromToken;
            final int end = fromToken + tokens;
            while (t < end) {
                final int inPage = t % tokensPerPage;
                final int n = Math.min(tokensPerPage - inPage, end - t);
                final long poolOffset = PageHandle.slot(seq.pageHandle(t / tokensPerPage)) * stride + inPage * vectorBytes;
                if (seg != null) {
                    if (in) {
                        MemorySegment.copy(seg, callerAt, plane, poolOffset, n * vectorBytes);
                    } else {
                        MemorySegment.copy(plane, poolOffset, seg, callerAt, n * vectorBytes);
                    }
                } else if (array instanceof float[] f) {
                    if (in) {
                        MemorySegment.copy(f, (int) callerAt, plane, FLOAT_LE, poolOffset, n * vectorElements);
                    } else {
                        MemorySegment.copy(plane, FLOAT_LE, poolOffset, f, (int) callerAt, n * vectorElements);
                    }
                } else {
                    final short[] s = (short[]) array;
                    if (in) {
                        MemorySegment.copy(s, (int) callerAt, plane, SHORT_LE, poolOffset, n * vectorElements);
                    } else {
                        MemorySegment.copy(plane, SHORT_LE, poolOffset, s, (int) callerAt, n * vectorElements);
                    }
                }
                callerAt += n * unit;
                t += n;
            }
        }
    }
}
