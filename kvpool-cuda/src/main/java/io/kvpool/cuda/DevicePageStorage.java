package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.PageStorage;
import jcuda.Pointer;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUfunction;
import jcuda.driver.CUmodule;
import jcuda.driver.JCudaDriver;

import java.lang.foreign.MemorySegment;
import java.util.Objects;

/**
 * Pages in GPU memory: one arena laid out as {@link DeviceLayout} draws, managed through JCuda's driver
 * API on the device's <em>primary context</em> (the one the CUDA runtime, and so a host application's own
 * CUDA code, also uses). Fill, canary check and page copies are single kernel launches over index lists
 * ({@link Kernels}), never one driver call per page.
 *
 * <p>Not host-accessible: {@link #hostPage} throws; {@link #readPage}/{@link #writePage} copy one page
 * to or from host memory (per-plane copies: for tests and debugging, not the data path).
 *
 * <p>Thread-safety: every call makes the primary context current on the calling thread and is
 * synchronous (it returns when the device is done), so calls on different pages from different threads
 * are safe, as the SPI requires. The one exception, {@link #copyPagesAsync}, is outside the SPI and
 * exists to measure submission cost.
 */
public final class DevicePageStorage implements PageStorage {

    private static final System.Logger LOG = System.getLogger("io.kvpool.cuda");

    /** A device pointer whose raw address can be read (JCuda keeps it protected). */
    static final class DevicePtr extends CUdeviceptr {
        long address() {
            return getNativePointer();
        }
    }

    private final DeviceLayout dl;
    private final CUdevice device;
    private final CUcontext context;
    private final CUmodule module;
    private final CUfunction copyFn;
    private final CUfunction fillFn;
    private final CUfunction canaryFn;
    private final CUfunction gatherFn;
    private final CUfunction scatterFn;
    private final DevicePtr arena;
    private final long base;
    private final DevicePtr scratch; // index lists and results of one call at a time (guarded by this)
    private final long scratchBytes;
    private volatile boolean closed;

    private DevicePageStorage(KvLayout layout, int pages, int ordinal) {
        Cuda.requireAvailable();
        this.dl = DeviceLayout.of(layout, pages);
        this.device = new CUdevice();
        CudaException.check(JCudaDriver.cuDeviceGet(device, ordinal), "cuDeviceGet(" + ordinal + ")");
        this.context = new CUcontext();
        CudaException.check(JCudaDriver.cuDevicePrimaryCtxRetain(context, device), "cuDevicePrimaryCtxRetain");
        boolean ok = false;
        final DevicePtr a = new DevicePtr();
        final DevicePtr s = new DevicePtr();
        CUmodule m = null;
        try {
            current();
            final long[] free = new long[1];
            final long[] total = new long[1];
            CudaException.check(JCudaDriver.cuMemGetInfo(free, total), "cuMemGetInfo");
            final int r = JCudaDriver.cuMemAlloc(a, dl.arenaBytes());
            if (r != 0) {
                throw new CudaException("cuMemAlloc(" + dl.arenaBytes() + " bytes)", r, "asked for " + dl.arenaBytes() + " bytes ("
                    + pages + " pages of " + layout + "), " + free[0] + " of " + total[0] + " bytes free on " + Cuda.deviceName(device));
            }
            this.arena = a;
            this.base = a.address();
            this.scratchBytes = 8L * pages + 64;
            CudaException.check(JCudaDriver.cuMemAlloc(s, scratchBytes), "cuMemAlloc(scratch " + scratchBytes + " bytes)");
            this.scratch = s;
            m = new CUmodule();
            CudaException.check(JCudaDriver.cuModuleLoadData(m, Kernels.loadFatbin()), "cuModuleLoadData(kvpool kernels)");
            this.module = m;
            this.copyFn = function(m, Kernels.COPY_PAGES);
            this.fillFn = function(m, Kernels.FILL_PAGES);
            this.canaryFn = function(m, Kernels.FIRST_CANARY_TOKEN);
            this.gatherFn = function(m, Kernels.GATHER_PAGES);
            this.scatterFn = function(m, Kernels.SCATTER_PAGES);
            ok = true;
            LOG.log(System.Logger.Level.INFO, "device pool: " + pages + " pages (" + dl.arenaBytes() + " bytes) on " + Cuda.deviceName(device)
                + "; " + free[0] + " of " + total[0] + " bytes were free");
        } finally {
            if (!ok) {
                if (m != null) {
                    JCudaDriver.cuModuleUnload(m);
                }
                JCudaDriver.cuMemFree(a);
                JCudaDriver.cuMemFree(s);
                JCudaDriver.cuDevicePrimaryCtxRelease(device);
            }
        }
    }

    /**
     * Allocates a device pool on device 0. Use as {@code KvPool.builder(layout).storage(DevicePageStorage::allocate)}.
     *
     * @throws CudaException            if the allocation fails (the message says how much was asked and free)
     * @throws IllegalStateException    if no CUDA device can be used ({@link Cuda#unavailableReason()})
     * @throws IllegalArgumentException if the layout cannot be laid out on the device ({@link DeviceLayout#of})
     */
    public static DevicePageStorage allocate(KvLayout layout, int pages) {
        return new DevicePageStorage(layout, pages, 0);
    }

    /**
     * @param fraction share of the device's free memory to use, in (0, 1]
     * @return how many pages of this layout fit in that share of device 0's free memory now
     *         ({@code cuMemGetInfo}); pass it to {@code KvPool.Builder#pages}, whose startup check then
     *         refuses a pool smaller than the advertised context with both numbers
     */
    public static int pagesForFreeMemory(KvLayout layout, double fraction) {
        if (!(fraction > 0 && fraction <= 1)) {
            throw new IllegalArgumentException("fraction must be in (0, 1], was " + fraction);
        }
        Cuda.requireAvailable();
        final CUdevice dev = new CUdevice();
        CudaException.check(JCudaDriver.cuDeviceGet(dev, 0), "cuDeviceGet(0)");
        final CUcontext ctx = new CUcontext();
        CudaException.check(JCudaDriver.cuDevicePrimaryCtxRetain(ctx, dev), "cuDevicePrimaryCtxRetain");
        try {
            CudaException.check(JCudaDriver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
            final long[] free = new long[1];
            final long[] total = new long[1];
            CudaException.check(JCudaDriver.cuMemGetInfo(free, total), "cuMemGetInfo");
            final long pages = (long) (free[0] * fraction) / layout.bytesPerPage();
            LOG.log(System.Logger.Level.INFO, "device memory: " + free[0] + " free of " + total[0] + " bytes; " + fraction + " of free = "
                + pages + " pages of " + layout.bytesPerPage() + " bytes");
            return (int) Math.min(Integer.MAX_VALUE, pages);
        } finally {
            JCudaDriver.cuDevicePrimaryCtxRelease(dev);
        }
    }

    private static CUfunction function(CUmodule m, String name) {
        final CUfunction f = new CUfunction();
        CudaException.check(JCudaDriver.cuModuleGetFunction(f, m, name), "cuModuleGetFunction(" + name + ")");
        return f;
    }

    /** @return the arena's device pointer (for IPC export) */
    CUdeviceptr arenaPointer() {
        ensureOpen();
        return arena;
    }

    /** Makes this storage's (primary) context current on the calling thread. */
    void makeCurrent() {
        current();
    }

    private void current() {
        CudaException.check(JCudaDriver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("device page storage is closed");
        }
    }

    /** @return the arena layout */
    public DeviceLayout deviceLayout() {
        return dl;
    }

    @Override
    public KvLayout layout() {
        return dl.layout();
    }

    @Override
    public int pageCount() {
        return dl.pages();
    }

    @Override
    public boolean isHostAccessible() {
        return false;
    }

    @Override
    public MemorySegment hostPage(int page) {
        throw new UnsupportedOperationException("device pages are not host-accessible; use readPage/writePage to copy one");
    }

    @Override
    public long address(int page, int layer, int kv) {
        ensureOpen();
        return base + dl.offset(page, layer, kv);
    }

    /** Uploads {@code n} ints to the scratch buffer (caller holds the lock). */
    private void upload(int[] values, int off, int n, long at) {
        CudaException.check(JCudaDriver.cuMemcpyHtoD(scratch.withByteOffset(at), Pointer.to(values).withByteOffset(4L * off), 4L * n),
            "cuMemcpyHtoD(" + n + " indices)");
    }

    private void launch(CUfunction fn, String name, int work, Pointer params) {
        launchAsync(fn, name, work, params);
        CudaException.check(JCudaDriver.cuCtxSynchronize(), "cuCtxSynchronize after " + name);
    }

    /** Queues the kernel on the context's legacy default (NULL) stream and returns without waiting. */
    private void launchAsync(CUfunction fn, String name, int work, Pointer params) {
        final int threads = 256;
        final int blocks = (int) Math.max(1, Math.min(65_535L * 16, (long) work));
        CudaException.check(JCudaDriver.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, null, params, null), "cuLaunchKernel(" + name + ")");
    }

    private void checkPages(int[] pages, int off, int n) {
        Objects.checkFromIndexSize(off, n, pages.length);
        for (int i = off; i < off + n; i++) {
            Objects.checkIndex(pages[i], dl.pages());
        }
        if (8L * n + 64 > scratchBytes) {
            throw new IllegalArgumentException(n + " pages in one call; at most " + dl.pages());
        }
    }

    @Override
    public synchronized void fill(int page, FillMode mode) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        if (mode == FillMode.NONE) {
            return;
        }
        current();
        upload(new int[] {page}, 0, 1, 0);
        final long pattern = mode == FillMode.CANARY ? CANARY : 0L;
        launch(fillFn, Kernels.FILL_PAGES, dl.planes(), Pointer.to(Pointer.to(scratch), Pointer.to(new int[] {1}), Pointer.to(arena),
            Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}), Pointer.to(new long[] {dl.pageStride()}),
            Pointer.to(new long[] {pattern})));
    }

    @Override
    public synchronized int firstCanaryToken(int page, int fromToken, int toToken) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        Objects.checkFromToIndex(fromToken, toToken, dl.layout().tokensPerPage());
        if (fromToken == toToken) {
            return -1;
        }
        current();
        upload(new int[] {page}, 0, 1, 0);
        final CUdeviceptr out = scratch.withByteOffset(32);
        // one block per page (the kernel's design): one block for this one page
        launch(canaryFn, Kernels.FIRST_CANARY_TOKEN, 1, Pointer.to(Pointer.to(scratch),
            Pointer.to(new int[] {1}), Pointer.to(arena), Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}),
            Pointer.to(new long[] {dl.pageStride()}), Pointer.to(new long[] {dl.layout().bytesPerTokenVector()}),
            Pointer.to(new int[] {fromToken}), Pointer.to(new int[] {toToken}), Pointer.to(new long[] {CANARY}), Pointer.to(out)));
        final int[] result = new int[1];
        CudaException.check(JCudaDriver.cuMemcpyDtoH(Pointer.to(result), out, 4), "cuMemcpyDtoH(canary result)");
        return result[0];
    }

    @Override
    public synchronized void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        copyPagesAsync(src, srcOff, dst, dstOff, count);
        if (count > 0) { // (an empty batch launched nothing and made no context current)
            CudaException.check(JCudaDriver.cuCtxSynchronize(), "cuCtxSynchronize after " + Kernels.COPY_PAGES);
        }
    }

    /**
     * {@link #copyPages} without the final wait: uploads the two index lists (synchronous
     * {@code cuMemcpyHtoD}s, which also wait for earlier work on the stream) and queues the one
     * {@value Kernels#COPY_PAGES} launch on the primary context's legacy default (NULL) stream, then
     * returns while the copy may still run. For measuring the host cost of submitting a batch
     * ({@code BlockCopyBenchmark}), not for the pool's data path.
     *
     * <p>The copy is complete once {@link #synchronize()} (or any synchronous call of this storage,
     * or {@code cuCtxSynchronize} on the primary context) returns. Work queued later on the NULL stream
     * (including this storage's next call, whose index upload waits for it) runs after it, so reusing
     * the scratch buffer is safe; the caller must not read or write the pages involved from another
     * stream before synchronising.
     */
    public synchronized void copyPagesAsync(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        ensureOpen();
        checkPages(src, srcOff, count);
        checkPages(dst, dstOff, count);
        if (count == 0) {
            return;
        }
        current();
        upload(src, srcOff, count, 0);
        upload(dst, dstOff, count, 4L * count);
        launchAsync(copyFn, Kernels.COPY_PAGES, count * dl.planes(), Pointer.to(Pointer.to(scratch), Pointer.to(scratch.withByteOffset(4L * count)),
            Pointer.to(new int[] {count}), Pointer.to(arena), Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}),
            Pointer.to(new long[] {dl.pageStride()})));
    }

    /**
     * Offloads pages to pinned host memory in one kernel launch: {@code to.page(toIndex + i) ← page(pages[off + i])}
     * in the host layout. Synchronous.
     */
    public synchronized void offload(int[] pages, int off, int n, PinnedPageBuffer to, int toIndex) {
        pinnedBatch(gatherFn, Kernels.GATHER_PAGES, pages, off, n, to, toIndex);
    }

    /** Restores pages from pinned host memory in one kernel launch: {@code page(pages[off + i]) ← from.page(fromIndex + i)}. Synchronous. */
    public synchronized void restore(PinnedPageBuffer from, int fromIndex, int[] pages, int off, int n) {
        pinnedBatch(scatterFn, Kernels.SCATTER_PAGES, pages, off, n, from, fromIndex);
    }

    /** One gather or scatter launch between listed pages and consecutive pages of a pinned buffer (same parameters). */
    private void pinnedBatch(CUfunction fn, String name, int[] pages, int off, int n, PinnedPageBuffer pinned, int index) {
        ensureOpen();
        checkPages(pages, off, n);
        Objects.checkFromIndexSize(index, n, pinned.capacity());
        if (n == 0) {
            return;
        }
        current();
        upload(pages, off, n, 0);
        launch(fn, name, n * dl.planes(), Pointer.to(Pointer.to(scratch), Pointer.to(new int[] {n}), Pointer.to(arena),
            Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}), Pointer.to(new long[] {dl.pageStride()}),
            Pointer.to(pinned.devicePage(index))));
    }

    /**
     * Submits {@link #copyPages} as one launch on the caller's stream and returns at once. The index lists
     * get their own device buffer, freed when the returned batch is closed, so batches on different
     * streams may be in flight together; they must not share destination pages.
     *
     * @param stream a stream of this storage's (primary) context, or {@code null} for the legacy default stream
     * @return the batch: poll, wait, then close it
     */
    public DeviceBatch submitCopy(int[] src, int srcOff, int[] dst, int dstOff, int count, jcuda.driver.CUstream stream) {
        ensureOpen();
        checkPages(src, srcOff, count);
        checkPages(dst, dstOff, count);
        current();
        final CUdeviceptr idx = new CUdeviceptr();
        CudaException.check(JCudaDriver.cuMemAlloc(idx, 8L * Math.max(1, count)), "cuMemAlloc(" + 8L * count + " bytes of indices)");
        final jcuda.driver.CUevent done = new jcuda.driver.CUevent();
        try {
            CudaException.check(JCudaDriver.cuEventCreate(done, jcuda.driver.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate");
            if (count > 0) {
                // off-heap (a Java array may move during an async copy); from pageable memory the driver stages
                // the bytes before returning, so the buffer may be dropped at once (cuMemcpyHtoDAsync's contract)
                final java.nio.ByteBuffer lists = java.nio.ByteBuffer.allocateDirect(8 * count).order(java.nio.ByteOrder.nativeOrder());
                lists.asIntBuffer().put(src, srcOff, count).put(dst, dstOff, count);
                CudaException.check(JCudaDriver.cuMemcpyHtoDAsync(idx, Pointer.to(lists), 8L * count, stream),
                    "cuMemcpyHtoDAsync(" + 2 * count + " indices)");
                final int blocks = (int) Math.max(1, Math.min(65_535L * 16, (long) count * dl.planes()));
                CudaException.check(JCudaDriver.cuLaunchKernel(copyFn, blocks, 1, 1, 256, 1, 1, 0, stream,
                    Pointer.to(Pointer.to(idx), Pointer.to(idx.withByteOffset(4L * count)), Pointer.to(new int[] {count}), Pointer.to(arena),
                        Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}), Pointer.to(new long[] {dl.pageStride()})),
                    null), "cuLaunchKernel(" + Kernels.COPY_PAGES + ")");
            }
            CudaException.check(JCudaDriver.cuEventRecord(done, stream), "cuEventRecord");
        } catch (RuntimeException e) {
            JCudaDriver.cuStreamSynchronize(stream);
            JCudaDriver.cuEventDestroy(done);
            JCudaDriver.cuMemFree(idx);
            throw e;
        }
        return new DeviceBatch(context, idx, done);
    }

    /** Waits until all work queued on the primary context (e.g. by {@link #copyPagesAsync}) is done ({@code cuCtxSynchronize}). */
    public synchronized void synchronize() {
        ensureOpen();
        current();
        CudaException.check(JCudaDriver.cuCtxSynchronize(), "cuCtxSynchronize");
    }

    /** Copies page {@code page} into {@code dst} in the host page layout (one copy per plane: tests and debugging). */
    public synchronized void readPage(int page, MemorySegment dst) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        current();
        final java.nio.ByteBuffer bb = dst.asSlice(0, dl.layout().bytesPerPage()).asByteBuffer();
        for (int q = 0; q < dl.planes(); q++) {
            CudaException.check(JCudaDriver.cuMemcpyDtoH(Pointer.to(bb).withByteOffset(dl.hostOffset(q)),
                arena.withByteOffset(q * dl.planeBytes() + page * dl.pageStride()), dl.pageStride()), "cuMemcpyDtoH(page " + page + ")");
        }
    }

    /** Copies {@code src} (host page layout) into page {@code page} (one copy per plane: tests and debugging). */
    public synchronized void writePage(int page, MemorySegment src) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        current();
        final java.nio.ByteBuffer bb = src.asSlice(0, dl.layout().bytesPerPage()).asByteBuffer();
        for (int q = 0; q < dl.planes(); q++) {
            CudaException.check(JCudaDriver.cuMemcpyHtoD(arena.withByteOffset(q * dl.planeBytes() + page * dl.pageStride()),
                Pointer.to(bb).withByteOffset(dl.hostOffset(q)), dl.pageStride()), "cuMemcpyHtoD(page " + page + ")");
        }
    }

    /** Frees the arena, the module and the primary-context reference. Idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        current();
        JCudaDriver.cuModuleUnload(module);
        JCudaDriver.cuMemFree(scratch);
        JCudaDriver.cuMemFree(arena);
        JCudaDriver.cuDevicePrimaryCtxRelease(device);
    }

    @Override
    public String toString() {
        return "DevicePageStorage[" + dl.pages() + " pages of " + dl.layout() + ", " + dl.arenaBytes() + " bytes"
            + (closed ? ", closed" : "") + "]";
    }
}
