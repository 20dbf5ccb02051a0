package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.KernelView;
import io.kvpool.storage.PageStorage;
import jcuda.Pointer;
import jcuda.driver.CUDA_MEMCPY2D;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUevent;
import jcuda.driver.CUevent_flags;
import jcuda.driver.CUfunction;
import jcuda.driver.CUmemorytype;
import jcuda.driver.CUmodule;
import jcuda.driver.CUstream;
import jcuda.driver.CUstream_flags;
import jcuda.driver.JCudaDriver;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Pages in GPU memory: one arena laid out as {@link DeviceLayout} draws, managed through JCuda's driver
 * API on the device's <em>primary context</em> (the one the CUDA runtime, and so a host application's own
 * CUDA code, also uses). Fill, canary check and page copies are single kernel launches over index lists
 * ({@link Kernels}), never one driver call per page.
 *
 * <p>Every page starts filled with the canary, as host storage does, so a page that was never written
 * is caught by the canary checks.
 *
 * <p>Not host-accessible: {@link #hostPage} throws; {@link #readPage}/{@link #writePage} copy one page
 * to or from host memory (per-plane copies: for tests and debugging, not the data path).
 *
 * <p>Position-keyed checksums ({@link io.kvpool.transfer.KvChecksum}) of a batch of pages are one launch too
 * ({@link #checksums}); {@link DeviceChecksums} plugs them into kvpool-transfer's senders and receivers.
 *
 * <p>Thread-safety: every call makes the primary context current on the calling thread and is
 * synchronous (it returns when the device is done), so calls on different pages from different threads
 * are safe, as the SPI requires. Exceptions: {@link #copyPagesAsync}, outside the SPI, exists to measure
 * submission cost; the {@code submit*} methods ({@link #submitCopy}, {@link #submitFill},
 * {@link #submitOffload}, {@link #submitRestore}, {@link #submitChecksums}) queue one batch on the caller's
 * stream and return a completion to poll or wait on.
 *
 * <p>Lifetime: the methods that touch the arena hold this storage's monitor, and {@link #close()} holds it while it
 * waits for the context's work and frees the arena. Code outside this class that launches work on the arena
 * ({@link #address}, then a launch) holds the monitor from the address to the launch: then a close either came
 * first (the address throws) or waits for that work before it frees.
 *
 * <p>Index lists: every slot a call takes in an {@code int[]} is checked against the pool before the list is
 * uploaded, and the kernels trust the upload (they do no bounds check of their own). The list is read twice, for
 * the check and for the upload, so a caller must not change it from another thread during the call; the pool's
 * own callers pass lists no other thread sees.
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
    private final CUfunction checksumFn;
    private final DevicePtr arena;
    private final long base;
    private final DevicePtr scratch; // index lists and results of one call at a time (guarded by this)
    private final long scratchBytes;
    private CUstream ownStream; // created at the first synchronous MEMCPY_BATCH offload or restore (guarded by this)
    private final int ordinal;
    private volatile boolean closed;
    /** {@link DeviceIpc.ExportLease}s not closed yet: while any is open, {@link #close()} keeps the arena (guarded by this). */
    private int openLeases;
    /** Exported by {@link DeviceIpc#export}, whose importers nobody tracks: the arena stays until the process ends (guarded by this). */
    private boolean exportedUntracked;
    private volatile boolean arenaFreed; // with the context reference it needs (written under this)
    /**
     * close() could not prove the context idle, or a later free could not make it current: nothing a batch touches is ever
     * freed (written under this).
     */
    private volatile boolean keptUnproven;

    private DevicePageStorage(KvLayout layout, int pages, int ordinal) {
        Cuda.requireAvailable();
        this.ordinal = ordinal;
        this.dl = DeviceLayout.of(layout, pages);
        this.device = new CUdevice();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDeviceGet(device, ordinal)), "cuDeviceGet(" + ordinal + ")");
        this.context = new CUcontext();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(context, device)), "cuDevicePrimaryCtxRetain");
        boolean ok = false;
        final DevicePtr a = new DevicePtr();
        final DevicePtr s = new DevicePtr();
        CUmodule m = null;
        try {
            current();
            final long[] free = new long[1];
            final long[] total = new long[1];
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemGetInfo(free, total)), "cuMemGetInfo");
            final int r = CudaException.code(() -> JCudaDriver.cuMemAlloc(a, dl.arenaBytes()));
            if (r != 0) {
                throw new CudaException("cuMemAlloc(" + dl.arenaBytes() + " bytes)", r, "asked for " + dl.arenaBytes() + " bytes ("
                    + pages + " pages of " + layout + "), " + free[0] + " of " + total[0] + " bytes free on " + Cuda.deviceName(device));
            }
            this.arena = a;
            this.base = a.address();
            this.scratchBytes = 24L * pages + 64; // the largest call: a checksum batch's keys, slots and results
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemAlloc(s, scratchBytes)), "cuMemAlloc(scratch " + scratchBytes + " bytes)");
            this.scratch = s;
            m = new CUmodule();
            final CUmodule loaded = m;
            CudaException.check(CudaException.code(() -> JCudaDriver.cuModuleLoadData(loaded, Kernels.loadFatbin())), "cuModuleLoadData(kvpool kernels)");
            this.module = m;
            this.copyFn = function(m, Kernels.COPY_PAGES);
            this.fillFn = function(m, Kernels.FILL_PAGES);
            this.canaryFn = function(m, Kernels.FIRST_CANARY_TOKEN);
            this.gatherFn = function(m, Kernels.GATHER_PAGES);
            this.scatterFn = function(m, Kernels.SCATTER_PAGES);
            this.checksumFn = function(m, Kernels.PAGE_CHECKSUMS);
            fillAllWithCanary(pages);
            final String name = Cuda.deviceName(device); // may throw: before ok, so the cleanup below still runs
            ok = true;
            LOG.log(System.Logger.Level.INFO, "device pool: " + pages + " pages (" + dl.arenaBytes() + " bytes) on " + name
                + "; " + free[0] + " of " + total[0] + " bytes were free");
        } finally {
            if (!ok) {
                if (m != null) {
                    final CUmodule loaded = m;
                    CudaException.code(() -> JCudaDriver.cuModuleUnload(loaded));
                }
                CudaException.code(() -> JCudaDriver.cuMemFree(a));
                CudaException.code(() -> JCudaDriver.cuMemFree(s));
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
            }
        }
    }

    /**
     * Every page starts holding the canary, as in {@code HostPageStorage}: the pool fills pages only when
     * they are freed, so without this a never-used page would hold whatever {@code cuMemAlloc} returned
     * (zeros) and the commit-time canary check could not see that it was never written. One launch.
     */
    private void fillAllWithCanary(int pages) {
        final int[] all = new int[pages];
        for (int p = 0; p < pages; p++) {
            all[p] = p;
        }
        upload(all, 0, pages, 0);
        launch(fillFn, Kernels.FILL_PAGES, (long) pages * dl.planes(), listParams(scratch, pages, Pointer.to(new long[] {CANARY})));
    }

    /**
     * Allocates a device pool on device 0. Use as {@code KvPool.builder(layout).storage(DevicePageStorage::allocate)}.
     *
     * @param layout the page layout
     * @param pages  number of pages, ≥ 1
     * @return the storage, every page filled with the canary
     * @throws CudaException            if the allocation fails (the message says how much was asked and free)
     * @throws IllegalStateException    if no CUDA device can be used ({@link Cuda#unavailableReason()})
     * @throws IllegalArgumentException if the layout cannot be laid out on the device ({@link DeviceLayout#of})
     */
    public static DevicePageStorage allocate(KvLayout layout, int pages) {
        return new DevicePageStorage(layout, pages, 0);
    }

    /**
     * Device memory a storage needs besides its pages, whatever their number: the kernels' module, the
     * allocation granularity of its buffers, and room for the driver's own growth.
     */
    static final long RESERVE_BYTES = 64L << 20;
    /**
     * Device memory a storage needs per page besides the page: its scratch buffer's share (a checksum batch's
     * keys, slots and results, 24 bytes a page) and as much again for one {@code submit*} batch of every page.
     */
    static final long OVERHEAD_BYTES_PER_PAGE = 48;

    /**
     * {@return the pages that fit in {@code fraction} of {@code freeBytes}, with the storage's own buffers} At
     * most {@code (freeBytes · fraction − RESERVE_BYTES) / (bytesPerPage + OVERHEAD_BYTES_PER_PAGE)}; 0 when
     * that share is not more than the reserve.
     */
    static long pagesFor(long freeBytes, double fraction, long bytesPerPage) {
        final long usable = (long) (freeBytes * fraction) - RESERVE_BYTES;
        return usable <= 0 ? 0 : usable / (bytesPerPage + OVERHEAD_BYTES_PER_PAGE);
    }

    /**
     * Sizes a pool by device memory: {@code fraction} of device 0's free memory now ({@code cuMemGetInfo}),
     * less what the storage itself needs ({@value #RESERVE_BYTES} bytes, and {@value #OVERHEAD_BYTES_PER_PAGE}
     * bytes a page), divided by the layout's bytes per page; so {@code fraction} 1 still leaves room for
     * {@link #allocate}. Retains and releases device 0's primary context, and makes it current on the calling
     * thread.
     *
     * @param layout   the page layout
     * @param fraction share of the device's free memory to use, in (0, 1]
     * @return how many pages of this layout fit in that share of device 0's free memory now
     *         ({@code cuMemGetInfo}), 0 if none; pass it to {@code KvPoolBuilder#pages}, whose startup check
     *         then refuses a pool smaller than the advertised context with both numbers
     * @throws IllegalArgumentException if {@code fraction} is not in (0, 1]
     * @throws IllegalStateException    if no CUDA device can be used ({@link Cuda#unavailableReason()})
     * @throws CudaException            if a driver call fails
     */
    public static int pagesForFreeMemory(KvLayout layout, double fraction) {
        if (!(fraction > 0 && fraction <= 1)) {
            throw new IllegalArgumentException("fraction must be in (0, 1], was " + fraction);
        }
        Cuda.requireAvailable();
        final CUdevice dev = new CUdevice();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDeviceGet(dev, 0)), "cuDeviceGet(0)");
        final CUcontext ctx = new CUcontext();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(ctx, dev)), "cuDevicePrimaryCtxRetain");
        try {
            CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(ctx)), "cuCtxSetCurrent");
            final long[] free = new long[1];
            final long[] total = new long[1];
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemGetInfo(free, total)), "cuMemGetInfo");
            final long pages = pagesFor(free[0], fraction, layout.bytesPerPage());
            LOG.log(System.Logger.Level.INFO, "device memory: " + free[0] + " free of " + total[0] + " bytes; " + fraction + " of free, less "
                + RESERVE_BYTES + " bytes and " + OVERHEAD_BYTES_PER_PAGE + " per page for the storage's own buffers = "
                + pages + " pages of " + layout.bytesPerPage() + " bytes");
            return (int) Math.min(Integer.MAX_VALUE, pages);
        } finally {
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(dev));
        }
    }

    private static CUfunction function(CUmodule m, String name) {
        final CUfunction f = new CUfunction();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuModuleGetFunction(f, m, name)), "cuModuleGetFunction(" + name + ")");
        return f;
    }

    /** @return the arena's device pointer (tests; a caller that uses it holds this storage's monitor, see Lifetime) */
    CUdeviceptr arenaPointer() {
        ensureOpen();
        return arena;
    }

    /**
     * Takes the arena's IPC handle under this storage's monitor, from the open check to the driver call, so that
     * {@link #close()} cannot free the arena in between (a handle to freed memory, or to memory reused since, would let
     * a peer write into someone else's allocation). From then on {@link #close()} keeps the arena: until
     * {@link #leaseEnded()} for each tracked export, for good for an untracked one.
     *
     * @param tracked whether a {@link DeviceIpc.ExportLease} will end it ({@link #leaseEnded()}), else kept until the process ends
     * @throws IllegalStateException if the storage is closed
     * @throws CudaException         if the driver cannot export the arena
     */
    synchronized jcuda.driver.CUipcMemHandle ipcHandle(boolean tracked) {
        ensureOpen();
        current();
        final jcuda.driver.CUipcMemHandle h = new jcuda.driver.CUipcMemHandle();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuIpcGetMemHandle(h, arena)), "cuIpcGetMemHandle");
        if (tracked) {
            openLeases++;
        } else {
            exportedUntracked = true;
        }
        return h;
    }

    /**
     * One tracked export ended: every process that opened it has closed its mapping or is gone. A closed storage frees
     * its arena with the last one. Once per lease ({@link DeviceIpc.ExportLease#close()} sees to it).
     */
    synchronized void leaseEnded() {
        if (openLeases <= 0) {
            throw new IllegalStateException("no export lease of " + this + " is open");
        }
        openLeases--;
        if (closed && openLeases == 0) {
            freeArenaIfUnshared(); // the warning that it stays was said at close; this says it only for an untracked export
        }
    }

    /** Test-only: {@link #close()} frees the arena even while an IPC export may still map it (the unsafe old way). */
    static volatile boolean unsafeFreeExportedArenaForTests;

    /** Frees the arena and the context reference it needs, unless a process may still map it (caller holds the lock, closed). */
    private void freeArenaIfUnshared() {
        if (arenaFreed || keptUnproven) {
            return;
        }
        if ((openLeases > 0 || exportedUntracked) && !unsafeFreeExportedArenaForTests) {
            // cuMemFree under another process's cuIpcOpenMemHandle mapping is undefined, and the next cuMemAlloc here may
            // hand the same memory to another pool while that peer can still write it: keep it, as a quarantine keeps pages
            LOG.log(System.Logger.Level.WARNING, this + " closed; its " + dl.arenaBytes() + "-byte arena stays allocated: "
                + (exportedUntracked ? "it was exported by DeviceIpc.export, whose importers nobody tracks, so until this process ends"
                : openLeases + " IPC export lease(s) are open (a peer process may still map it), so until they end"
                + " (CudaIpcLink: its teardown is proven) or this process ends"));
            return;
        }
        final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
        if (current != 0) {
            // a lease may end on any thread: without the arena's context current, the free would act on another one
            keptUnproven = true;
            LOG.log(System.Logger.Level.WARNING, this + ": its " + dl.arenaBytes() + "-byte arena at 0x" + Long.toHexString(base)
                + " stays until this process exits (cuCtxSetCurrent failed: " + jcuda.driver.CUresult.stringFor(current) + " ("
                + current + "))");
            return;
        }
        arenaFreed = true;
        CudaException.code(() -> JCudaDriver.cuMemFree(arena));
        CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
    }

    /** Makes this storage's (primary) context current on the calling thread. */
    void makeCurrent() {
        current();
    }

    /** @return the device this storage lives on (for buffers that retain its primary context themselves) */
    CUdevice device() {
        return device;
    }

    /** @return the ordinal of that device ({@code cuDeviceGet}) */
    int deviceOrdinal() {
        return ordinal;
    }

    private void current() {
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context)), "cuCtxSetCurrent");
    }

    /** @return whether {@link #close()} was called (the arena may still be kept for IPC) */
    boolean isClosed() {
        return closed;
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("device page storage is closed");
        }
    }

    /** {@return the arena layout: where each page's planes lie in device memory} */
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

    /**
     * The kernel view of one plane: the device address of page 0's block of that layer and K/V and a page
     * stride of {@link DeviceLayout#pageStride()} (one page's block within the plane), as a CUDA kernel
     * reading the arena takes them ({@link DeviceLayout#kernelView}). No host segment: device memory.
     *
     * @param layer layer index
     * @param kv    0 for K, 1 for V
     * @return the view; {@code view.address(page)} equals {@link #address(int, int, int) address(page, layer, kv)}
     * @throws IndexOutOfBoundsException if {@code layer} or {@code kv} is out of range
     * @throws IllegalStateException     if the storage is closed
     */
    @Override
    public KernelView kernelView(int layer, int kv) {
        ensureOpen();
        return dl.kernelView(base, layer, kv);
    }

    /** Uploads {@code n} ints to the scratch buffer (caller holds the lock). */
    private void upload(int[] values, int off, int n, long at) {
        CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyHtoD(scratch.withByteOffset(at), Pointer.to(values).withByteOffset(4L * off), 4L * n)),
            "cuMemcpyHtoD(" + n + " indices)");
    }

    private void launch(CUfunction fn, String name, long work, Pointer params) {
        launchAsync(fn, name, work, params);
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSynchronize()), "cuCtxSynchronize after " + name);
    }

    /** Queues the kernel on the context's legacy default (NULL) stream and returns without waiting. */
    private void launchAsync(CUfunction fn, String name, long work, Pointer params) {
        enqueue(fn, name, blocks(work), 256, params, null);
    }

    /** @return blocks for {@code work} grid-stride items or pages (at least one; the kernels loop over the rest) */
    private static int blocks(long work) {
        return (int) Math.max(1, Math.min(65_535L * 16, work));
    }

    /** Queues one launch on {@code stream} ({@code null}: the legacy default stream) and returns without waiting. */
    private static void enqueue(CUfunction fn, String name, int blocks, int threads, Pointer params, CUstream stream) {
        CudaException.check(CudaException.code(() -> JCudaDriver.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, stream, params, null)), "cuLaunchKernel(" + name + ")");
    }

    private void checkPages(int[] pages, int off, int n) {
        Objects.checkFromIndexSize(off, n, pages.length);
        for (int i = off; i < off + n; i++) {
            Objects.checkIndex(pages[i], dl.pages());
        }
        if (n > dl.pages()) {
            throw new IllegalArgumentException(n + " pages in one call; at most " + dl.pages());
        }
    }

    /** The checks of a copy between listed pages (first that this storage is open). */
    private void checkCopy(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        ensureOpen();
        checkPages(src, srcOff, count);
        checkPages(dst, dstOff, count);
    }

    /** The checks of an offload or restore between listed pages and pinned pages {@code [index, index + n)} (first that this storage is open). */
    private void checkPinnedBatch(int[] pages, int off, int n, PinnedPageBuffer pinned, int index) {
        ensureOpen();
        checkPages(pages, off, n);
        if (!pinned.layout().equals(dl.layout())) {
            throw new IllegalArgumentException("pinned buffer of " + pinned.layout() + " pages; this pool holds " + dl.layout());
        }
        Objects.checkFromIndexSize(index, n, pinned.capacity());
    }

    // ---------------------------------------------------------------------------------------------
    // kernel parameters (C parameter order of kvpool_kernels.cu, see Kernels), shared by the
    // synchronous calls (lists in the scratch buffer) and the submit* forms (lists in a batch's buffer)

    private Pointer copyParams(CUdeviceptr src, CUdeviceptr dst, int n) {
        return Pointer.to(Pointer.to(src), Pointer.to(dst), Pointer.to(new int[] {n}), Pointer.to(arena),
            Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}), Pointer.to(new long[] {dl.pageStride()}));
    }

    /** kvpool_fill_pages, and kvpool_gather_pages / kvpool_scatter_pages with {@code last} the pinned pages' device address. */
    private Pointer listParams(CUdeviceptr pages, int n, Pointer last) {
        return Pointer.to(Pointer.to(pages), Pointer.to(new int[] {n}), Pointer.to(arena), Pointer.to(new long[] {dl.planeBytes()}),
            Pointer.to(new int[] {dl.planes()}), Pointer.to(new long[] {dl.pageStride()}), last);
    }

    private Pointer checksumParams(CUdeviceptr keys, CUdeviceptr slots, int n, CUdeviceptr out) {
        return Pointer.to(Pointer.to(slots), Pointer.to(keys), Pointer.to(new int[] {n}), Pointer.to(arena),
            Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {dl.planes()}), Pointer.to(new long[] {dl.pageStride()}),
            Pointer.to(new long[] {dl.layout().bytesPerTokenVector()}), Pointer.to(new int[] {dl.layout().tokensPerPage()}), Pointer.to(out));
    }

    /** Threads per block of the checksum kernel: a 512-byte chunk each for a full page, 32 to 256. */
    private int checksumThreads() {
        final long pageBytes = dl.planes() * dl.pageStride();
        int t = 32;
        while (t < 256 && (long) t * 512 < pageBytes) {
            t <<= 1;
        }
        return t;
    }

    @Override
    public synchronized void fill(int page, FillMode mode) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        if (Objects.requireNonNull(mode, "mode") == FillMode.NONE) {
            return;
        }
        current();
        upload(new int[] {page}, 0, 1, 0);
        launch(fillFn, Kernels.FILL_PAGES, dl.planes(), listParams(scratch, 1, Pointer.to(new long[] {pattern(mode)})));
    }

    /**
     * The largest pitch a 2D copy takes ({@code CU_DEVICE_ATTRIBUTE_MAX_PITCH}: 2<sup>31</sup> − 1 bytes on the
     * NVIDIA GPUs kvpool targets); a larger one is refused with {@code CUDA_ERROR_INVALID_VALUE}.
     */
    static final long MAX_COPY_PITCH = Integer.MAX_VALUE;

    /**
     * As {@link PageStorage#fillTail}: one 2D copy from a host page of the pattern writes the tail of every plane (the
     * planes' tails lie {@code planeBytes} apart here, {@code pageStride} apart in the host page, at the same offsets
     * within a plane, so the pattern's phase is the host layout's). Where a plane is larger than a 2D copy's pitch
     * may be ({@link #MAX_COPY_PITCH}: pools past 2 GiB a plane), one copy per plane instead. Returns once the tail is
     * on the device.
     *
     * @throws CudaException if the driver reports an error
     */
    @Override
    public synchronized void fillTail(int page, int fromToken, FillMode mode) {
        Objects.requireNonNull(mode, "mode");
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        final int tpp = dl.layout().tokensPerPage();
        Objects.checkFromToIndex(fromToken, tpp, tpp);
        if (mode == FillMode.NONE || fromToken == tpp) {
            return;
        }
        final long skip = fromToken * dl.layout().bytesPerTokenVector();
        current();
        if (dl.planeBytes() <= MAX_COPY_PITCH) {
            copyTail(page, fromToken, mode, skip, 0, dl.planes());
        } else {
            for (int q = 0; q < dl.planes(); q++) {
                copyTail(page, fromToken, mode, skip, q, 1);
            }
        }
        // from pageable memory the copy may return once staged: return only when the tail is there (as writePage)
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSynchronize()), "cuCtxSynchronize after fillTail(" + page + ")");
    }

    /** Copies the tail of planes {@code [plane, plane + planes)} of {@code page} from the pattern; one 2D copy. */
    private void copyTail(int page, int fromToken, FillMode mode, long skip, int plane, int planes) {
        final CUDA_MEMCPY2D copy = new CUDA_MEMCPY2D();
        copy.srcMemoryType = CUmemorytype.CU_MEMORYTYPE_HOST;
        // plane q of the host page at q × pageStride (DeviceLayout#hostOffset), of this page at q × planeBytes
        copy.srcHost = Pointer.to(patternPage(mode)).withByteOffset(plane * dl.pageStride() + skip);
        copy.srcPitch = dl.pageStride();
        copy.dstMemoryType = CUmemorytype.CU_MEMORYTYPE_DEVICE;
        copy.dstDevice = arena.withByteOffset(plane * dl.planeBytes() + page * dl.pageStride() + skip);
        copy.WidthInBytes = dl.pageStride() - skip;
        copy.dstPitch = planes == 1 ? copy.WidthInBytes : dl.planeBytes(); // one row: no pitch to go past the limit
        copy.Height = planes;
        CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpy2D(copy)), "cuMemcpy2D(the tail of page " + page
            + " from token " + fromToken + ", planes " + plane + ".." + (plane + planes - 1) + ")");
    }

    /** One host page of {@code mode}'s pattern in the host layout, made on first use (owner: this storage's monitor). */
    private ByteBuffer patternPage(FillMode mode) {
        if (mode == FillMode.ZERO) {
            if (zeroPage == null) {
                zeroPage = ByteBuffer.allocateDirect(Math.toIntExact(dl.layout().bytesPerPage()));
            }
            return zeroPage;
        }
        if (canaryPage == null) {
            final ByteBuffer b = ByteBuffer.allocateDirect(Math.toIntExact(dl.layout().bytesPerPage()));
            PageStorage.fillTail(MemorySegment.ofBuffer(b), dl.layout(), 0, FillMode.CANARY);
            canaryPage = b;
        }
        return canaryPage;
    }

    private ByteBuffer zeroPage, canaryPage;

    private static long pattern(FillMode mode) {
        return switch (Objects.requireNonNull(mode, "mode")) { // as on the host: no fill mode is an error, not zeros
            case CANARY -> CANARY;
            case ZERO -> 0L;
            case NONE -> throw new IllegalArgumentException("FillMode.NONE has no pattern");
        };
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
        CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyDtoH(Pointer.to(result), out, 4)), "cuMemcpyDtoH(canary result)");
        return result[0];
    }

    @Override
    public synchronized void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        copyPagesAsync(src, srcOff, dst, dstOff, count);
        if (count > 0) { // (an empty batch launched nothing and made no context current)
            CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSynchronize()), "cuCtxSynchronize after " + Kernels.COPY_PAGES);
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
     *
     * @param src    source slot indices
     * @param srcOff index in {@code src} of the first source slot
     * @param dst    destination slot indices
     * @param dstOff index in {@code dst} of the first destination slot
     * @param count  number of pages to copy, 0 to {@link #pageCount()}
     */
    public synchronized void copyPagesAsync(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        checkCopy(src, srcOff, dst, dstOff, count);
        if (count == 0) {
            return;
        }
        current();
        upload(src, srcOff, count, 0);
        upload(dst, dstOff, count, 4L * count);
        launchAsync(copyFn, Kernels.COPY_PAGES, (long) count * dl.planes(), copyParams(scratch, scratch.withByteOffset(4L * count), count));
    }

    /**
     * Offloads pages to pinned host memory in one kernel launch: {@code to.page(toIndex + i) ← page(pages[off + i])}
     * in the host layout. Synchronous.
     *
     * @param pages   slot indices of the pages to offload
     * @param off     index in {@code pages} of the first slot
     * @param n       number of pages, 0 to {@link #pageCount()}
     * @param to      pinned buffer of this storage's layout
     * @param toIndex first pinned page to write; {@code [toIndex, toIndex + n)} must lie within {@code to}
     */
    public synchronized void offload(int[] pages, int off, int n, PinnedPageBuffer to, int toIndex) {
        pinnedSync(true, OffloadEngine.KERNEL, pages, off, n, to, toIndex);
    }

    /**
     * Restores pages from pinned host memory in one kernel launch: {@code page(pages[off + i]) ← from.page(fromIndex + i)}.
     * Synchronous.
     *
     * @param from      pinned buffer of this storage's layout
     * @param fromIndex first pinned page to read; {@code [fromIndex, fromIndex + n)} must lie within {@code from}
     * @param pages     slot indices of the pages to restore into
     * @param off       index in {@code pages} of the first slot
     * @param n         number of pages, 0 to {@link #pageCount()}
     */
    public synchronized void restore(PinnedPageBuffer from, int fromIndex, int[] pages, int off, int n) {
        pinnedSync(false, OffloadEngine.KERNEL, pages, off, n, from, fromIndex);
    }

    /**
     * Offloads pages to pinned host memory with the given engine: {@code to.page(toIndex + i) ← page(pages[off + i])}
     * in the host layout, as ONE kernel launch ({@link OffloadEngine#KERNEL}, what {@link #offload(int[], int, int,
     * PinnedPageBuffer, int)} does) or ONE {@code cuMemcpyBatchAsync} ({@link OffloadEngine#MEMCPY_BATCH}, on a
     * stream of this storage's own that is ordered with the legacy default stream). Synchronous.
     *
     * @param pages   slot indices of the pages to offload
     * @param off     index in {@code pages} of the first slot
     * @param n       number of pages, 0 to {@link #pageCount()}
     * @param to      pinned buffer of this storage's layout
     * @param toIndex first pinned page to write; {@code [toIndex, toIndex + n)} must lie within {@code to}
     * @param engine  a kernel launch or a {@code cuMemcpyBatchAsync}
     * @throws UnsupportedOperationException for {@code MEMCPY_BATCH} on a driver without {@code cuMemcpyBatchAsync}
     */
    public synchronized void offload(int[] pages, int off, int n, PinnedPageBuffer to, int toIndex, OffloadEngine engine) {
        pinnedSync(true, engine, pages, off, n, to, toIndex);
    }

    /**
     * Restores pages from pinned host memory with the given engine: {@code page(pages[off + i]) ← from.page(fromIndex + i)}.
     * Synchronous. See {@link #offload(int[], int, int, PinnedPageBuffer, int, OffloadEngine)}.
     *
     * @param from      pinned buffer of this storage's layout
     * @param fromIndex first pinned page to read; {@code [fromIndex, fromIndex + n)} must lie within {@code from}
     * @param pages     slot indices of the pages to restore into
     * @param off       index in {@code pages} of the first slot
     * @param n         number of pages, 0 to {@link #pageCount()}
     * @param engine    a kernel launch or a {@code cuMemcpyBatchAsync}
     * @throws UnsupportedOperationException for {@code MEMCPY_BATCH} on a driver without {@code cuMemcpyBatchAsync}
     */
    public synchronized void restore(PinnedPageBuffer from, int fromIndex, int[] pages, int off, int n, OffloadEngine engine) {
        pinnedSync(false, engine, pages, off, n, from, fromIndex);
    }

    /**
     * A synchronous offload ({@code toHost}: gather) or restore (scatter) between listed pages and consecutive pages of
     * a pinned buffer (caller holds the lock): {@link OffloadEngine#KERNEL}, one launch on the legacy default stream;
     * otherwise one MEMCPY_BATCH on this storage's own stream.
     */
    private void pinnedSync(boolean toHost, OffloadEngine engine, int[] pages, int off, int n, PinnedPageBuffer pinned, int index) {
        Objects.requireNonNull(engine, "engine");
        checkPinnedBatch(pages, off, n, pinned, index);
        if (n == 0) {
            return;
        }
        // the buffer's monitor from its address to the end of the copy: its close() cannot free it in between
        synchronized (pinned) {
            // after the wait for the monitor: a virtual thread that waited may go on on another OS thread, and the
            // current context is the OS thread's
            current();
            if (engine == OffloadEngine.KERNEL) {
                upload(pages, off, n, 0);
                launch(pinnedKernel(toHost), pinnedKernelName(toHost), (long) n * dl.planes(),
                    listParams(scratch, n, Pointer.to(pinned.devicePage(index))));
                return;
            }
            if (!MemcpyBatch.available()) { // before a stream is made for it
                throw new UnsupportedOperationException(MemcpyBatch.symbol());
            }
            if (ownStream == null) {
                final CUstream s = new CUstream();
                // a blocking stream: ordered with the legacy default stream that this storage's other calls use
                CudaException.check(CudaException.code(() -> JCudaDriver.cuStreamCreate(s, CUstream_flags.CU_STREAM_DEFAULT)), "cuStreamCreate");
                ownStream = s;
            }
            try {
                enqueueMemcpyBatch(toHost, pages, off, n, pinned, index, ownStream);
            } catch (RuntimeException | Error e) {
                // a batch that failed part-way may have queued its first copies: they end before the caller hears of it
                CudaException.code(() -> JCudaDriver.cuStreamSynchronize(ownStream)); // the batch's failure is the one reported
                throw e;
            }
            CudaException.check(CudaException.code(() -> JCudaDriver.cuStreamSynchronize(ownStream)), "cuStreamSynchronize after " + MemcpyBatch.symbol());
        }
    }

    /** @return the kernel of an offload ({@code toHost}: gather) or a restore (scatter) */
    private CUfunction pinnedKernel(boolean toHost) {
        return toHost ? gatherFn : scatterFn;
    }

    private static String pinnedKernelName(boolean toHost) {
        return toHost ? Kernels.GATHER_PAGES : Kernels.SCATTER_PAGES;
    }

    /** Queues ONE cuMemcpyBatchAsync of {@code n · planes} copies of {@code pageStride} bytes between the pages and the pinned pages. */
    private void enqueueMemcpyBatch(boolean toHost, int[] pages, int off, int n, PinnedPageBuffer pinned, int index, CUstream stream) {
        final int planes = dl.planes();
        final int count = Math.multiplyExact(n, planes);
        final long[] device = new long[count];
        final long[] host = new long[count];
        for (int i = 0; i < n; i++) {
            final long page = base + pages[off + i] * dl.pageStride();
            final long pinnedPage = pinned.hostAddress(index + i);
            for (int q = 0; q < planes; q++) {
                device[i * planes + q] = page + q * dl.planeBytes();
                host[i * planes + q] = pinnedPage + dl.hostOffset(q);
            }
        }
        final int r = MemcpyBatch.copy(toHost ? host : device, toHost ? device : host, count, dl.pageStride(), MemcpyBatch.nativePointer(stream));
        if (r != 0) {
            throw new CudaException(MemcpyBatch.symbol() + "(" + count + " copies of " + dl.pageStride() + " bytes)", r,
                (toHost ? "offloading " : "restoring ") + n + " pages of " + dl.layout());
        }
    }

    /**
     * Position-keyed checksums of a batch of pages in ONE kernel launch: {@code out[outOff + i]} =
     * {@link io.kvpool.transfer.KvChecksum#of KvChecksum.of}{@code (layout, page slots[off + i] in host layout, key i)}
     * for {@code i < keys.size()}, bit for bit the host's value for the same bytes. Synchronous: two uploads (slots,
     * keys), the launch, one copy of the results back.
     *
     * @param slots  slot indices (as {@link PageStorage} methods take them)
     * @param off    index in {@code slots} of the first page's slot
     * @param keys   one key per page ({@link ChecksumKeys}: request id, logical page, token count), for this layout
     * @param out    receives the checksums, one per key in key order
     * @param outOff index in {@code out} of the first checksum
     * @throws IllegalArgumentException if the keys are for another layout or more than {@link #pageCount()}
     */
    public synchronized void checksums(int[] slots, int off, ChecksumKeys keys, int[] out, int outOff) {
        ensureOpen();
        final int n = checkKeys(slots, off, keys);
        Objects.checkFromIndexSize(outOff, n, out.length);
        if (n == 0) {
            return;
        }
        current();
        // scratch: [keys 16·n][slots 4·n][results 4·n]
        CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyHtoD(scratch, Pointer.to(keys.buffer()), (long) ChecksumKeys.BYTES * n)),
            "cuMemcpyHtoD(" + n + " checksum keys)");
        upload(slots, off, n, (long) ChecksumKeys.BYTES * n);
        final CUdeviceptr results = scratch.withByteOffset(20L * n);
        enqueue(checksumFn, Kernels.PAGE_CHECKSUMS, blocks(n), checksumThreads(),
            checksumParams(scratch, scratch.withByteOffset((long) ChecksumKeys.BYTES * n), n, results), null);
        // a synchronous copy on the legacy default stream: it runs after the kernel
        CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyDtoH(Pointer.to(out).withByteOffset(4L * outOff), results, 4L * n)),
            "cuMemcpyDtoH(" + n + " checksums) after " + Kernels.PAGE_CHECKSUMS);
    }

    /**
     * {@return {@link #checksums(int[], int, ChecksumKeys, int[], int)} into a new array, one checksum per key in key
     * order}
     *
     * @param slots slot indices (as {@link PageStorage} methods take them)
     * @param off   index in {@code slots} of the first page's slot
     * @param keys  one key per page, for this layout
     * @throws IllegalArgumentException if the keys are for another layout or more than {@link #pageCount()}
     */
    public int[] checksums(int[] slots, int off, ChecksumKeys keys) {
        final int[] out = new int[keys.size()];
        checksums(slots, off, keys, out, 0);
        return out;
    }

    private int checkKeys(int[] slots, int off, ChecksumKeys keys) {
        if (!keys.layout().equals(dl.layout())) {
            throw new IllegalArgumentException("checksum keys for " + keys.layout() + "; this pool holds " + dl.layout());
        }
        checkPages(slots, off, keys.size());
        return keys.size();
    }

    // ---------------------------------------------------------------------------------------------
    // the submit* forms: one batch on the caller's stream, a completion to poll or wait on

    /**
     * Submits {@link #copyPages} as one launch on the caller's stream and returns at once. The index lists
     * get their own device buffer, freed when the returned batch is closed, so batches on different
     * streams may be in flight together; they must not share destination pages.
     *
     * @param src    source slot indices
     * @param srcOff index in {@code src} of the first source slot
     * @param dst    destination slot indices
     * @param dstOff index in {@code dst} of the first destination slot
     * @param count  number of pages to copy, 0 to {@link #pageCount()}
     * @param stream a stream of this storage's (primary) context, or {@code null} for the legacy default stream
     * @return the batch: poll, wait, then close it
     */
    @SuppressWarnings("exports") // JCuda has no module descriptor; a caller that passes a CUstream already reads jcuda to make one
    public DeviceBatch submitCopy(int[] src, int srcOff, int[] dst, int dstOff, int count, CUstream stream) {
        checkCopy(src, srcOff, dst, dstOff, count);
        final ByteBuffer lists = direct(8L * count);
        lists.asIntBuffer().put(src, srcOff, count).put(dst, dstOff, count);
        return submit(stream, lists, 0, idx -> {
            if (count > 0) {
                enqueue(copyFn, Kernels.COPY_PAGES, blocks((long) count * dl.planes()), 256,
                    copyParams(idx, idx.withByteOffset(4L * count), count), stream);
            }
        });
    }

    /**
     * Submits a fill of {@code n} pages ({@link #fill} for a batch: the canary or zeros; {@link FillMode#NONE}
     * enqueues nothing but the completion) as one launch on the caller's stream and returns at once.
     *
     * @param pages  slot indices of the pages to fill
     * @param off    index in {@code pages} of the first slot
     * @param n      number of pages, 0 to {@link #pageCount()}
     * @param mode   {@link FillMode#CANARY} for the canary pattern, {@link FillMode#ZERO} for zeros
     * @param stream a stream of this storage's (primary) context, or {@code null} for the legacy default stream
     * @return the batch: poll, wait, then close it
     */
    @SuppressWarnings("exports") // JCuda has no module descriptor; a caller that passes a CUstream already reads jcuda to make one
    public DeviceBatch submitFill(int[] pages, int off, int n, FillMode mode, CUstream stream) {
        ensureOpen();
        Objects.requireNonNull(mode, "mode");
        checkPages(pages, off, n);
        final int work = mode == FillMode.NONE ? 0 : n;
        final ByteBuffer lists = direct(4L * work);
        lists.asIntBuffer().put(pages, off, work);
        return submit(stream, lists, 0, idx -> {
            if (work > 0) {
                enqueue(fillFn, Kernels.FILL_PAGES, blocks((long) work * dl.planes()), 256,
                    listParams(idx, work, Pointer.to(new long[] {pattern(mode)})), stream);
            }
        });
    }

    /**
     * Submits {@link #offload(int[], int, int, PinnedPageBuffer, int, OffloadEngine)} on the caller's stream and returns
     * at once. The pinned pages must not be read before the batch is done.
     *
     * @param pages   slot indices of the pages to offload
     * @param off     index in {@code pages} of the first slot
     * @param n       number of pages, 0 to {@link #pageCount()}
     * @param to      pinned buffer of this storage's layout
     * @param toIndex first pinned page to write; {@code [toIndex, toIndex + n)} must lie within {@code to}
     * @param engine  a kernel launch or a {@code cuMemcpyBatchAsync}
     * @param stream a stream of this storage's (primary) context; {@code null} (the legacy default stream) only for
     *               {@link OffloadEngine#KERNEL}
     * @return the batch: poll, wait, then close it
     * @throws IllegalArgumentException      for {@link OffloadEngine#MEMCPY_BATCH} on the legacy default stream
     * @throws UnsupportedOperationException for {@code MEMCPY_BATCH} on a driver without {@code cuMemcpyBatchAsync}
     */
    @SuppressWarnings("exports") // JCuda has no module descriptor; a caller that passes a CUstream already reads jcuda to make one
    public DeviceBatch submitOffload(int[] pages, int off, int n, PinnedPageBuffer to, int toIndex, OffloadEngine engine, CUstream stream) {
        return submitPinned(true, pages, off, n, to, toIndex, engine, stream);
    }

    /**
     * Submits {@link #restore(PinnedPageBuffer, int, int[], int, int, OffloadEngine)} on the caller's stream and returns
     * at once. The pinned pages must not be modified before the batch is done.
     *
     * @param from      pinned buffer of this storage's layout
     * @param fromIndex first pinned page to read; {@code [fromIndex, fromIndex + n)} must lie within {@code from}
     * @param pages     slot indices of the pages to restore into
     * @param off       index in {@code pages} of the first slot
     * @param n         number of pages, 0 to {@link #pageCount()}
     * @param engine    a kernel launch or a {@code cuMemcpyBatchAsync}
     * @param stream a stream of this storage's (primary) context; {@code null} (the legacy default stream) only for
     *               {@link OffloadEngine#KERNEL}
     * @return the batch: poll, wait, then close it
     * @throws IllegalArgumentException      for {@link OffloadEngine#MEMCPY_BATCH} on the legacy default stream
     * @throws UnsupportedOperationException for {@code MEMCPY_BATCH} on a driver without {@code cuMemcpyBatchAsync}
     */
    @SuppressWarnings("exports") // JCuda has no module descriptor; a caller that passes a CUstream already reads jcuda to make one
    public DeviceBatch submitRestore(PinnedPageBuffer from, int fromIndex, int[] pages, int off, int n, OffloadEngine engine, CUstream stream) {
        return submitPinned(false, pages, off, n, from, fromIndex, engine, stream);
    }

    private DeviceBatch submitPinned(boolean toHost, int[] pages, int off, int n, PinnedPageBuffer pinned, int index, OffloadEngine engine,
                                     CUstream stream) {
        checkPinnedBatch(pages, off, n, pinned, index);
        Objects.requireNonNull(engine, "engine");
        if (engine == OffloadEngine.MEMCPY_BATCH) {
            if (MemcpyBatch.nativePointer(stream) <= 1) {
                throw new IllegalArgumentException("cuMemcpyBatchAsync cannot use the legacy default stream; pass a stream of your own");
            }
            if (!MemcpyBatch.available()) { // now: inside submit its failure would wait for the caller's stream, under the lock
                throw new UnsupportedOperationException(MemcpyBatch.symbol());
            }
            // the storage's monitor, then the buffer's (the order of the synchronous calls), from the buffer's address
            // to the enqueue: its close() cannot free it in between, and waits for the context after
            synchronized (this) {
                synchronized (pinned) {
                    return submit(stream, direct(0), 0, none -> {
                        if (n > 0) {
                            enqueueMemcpyBatch(toHost, pages, off, n, pinned, index, stream);
                        }
                    });
                }
            }
        }
        final ByteBuffer lists = direct(4L * n);
        lists.asIntBuffer().put(pages, off, n);
        final CUfunction fn = pinnedKernel(toHost);
        final String name = pinnedKernelName(toHost);
        synchronized (this) { // as above: storage, then buffer, from the buffer's address to the launch
            synchronized (pinned) {
                final CUdeviceptr pinnedPage = n > 0 ? pinned.devicePage(index) : null;
                return submit(stream, lists, 0, idx -> {
                    if (n > 0) {
                        enqueue(fn, name, blocks((long) n * dl.planes()), 256, listParams(idx, n, Pointer.to(pinnedPage)), stream);
                    }
                });
            }
        }
    }

    /**
     * Submits {@link #checksums(int[], int, ChecksumKeys, int[], int)} as one launch on the caller's stream and returns at
     * once; the results land in the batch's device buffer and are copied back once, by {@link ChecksumBatch#await()}.
     *
     * @param slots  slot indices (as {@link PageStorage} methods take them)
     * @param off    index in {@code slots} of the first page's slot
     * @param keys   one key per page, for this layout; copied when this returns, so reusable at once
     * @param stream a stream of this storage's (primary) context, or {@code null} for the legacy default stream
     * @return the batch: poll, wait for the checksums, then close it
     * @throws IllegalArgumentException if the keys are for another layout or more than {@link #pageCount()}
     */
    @SuppressWarnings("exports") // JCuda has no module descriptor; a caller that passes a CUstream already reads jcuda to make one
    public ChecksumBatch submitChecksums(int[] slots, int off, ChecksumKeys keys, CUstream stream) {
        ensureOpen();
        final int n = checkKeys(slots, off, keys);
        // batch buffer: [keys 16·n][slots 4·n] then, at a 16-byte boundary, [results 4·n]
        final ByteBuffer lists = direct(20L * n);
        lists.put(keys.buffer()).asIntBuffer().put(slots, off, n);
        final long results = align16(lists.capacity());
        final DeviceBatch batch = submit(stream, lists, 4L * n, buf -> {
            if (n > 0) {
                enqueue(checksumFn, Kernels.PAGE_CHECKSUMS, blocks(n), checksumThreads(),
                    checksumParams(buf, buf.withByteOffset((long) ChecksumKeys.BYTES * n), n, buf.withByteOffset(results)), stream);
            }
        });
        return new ChecksumBatch(batch, results, n);
    }

    private static ByteBuffer direct(long bytes) {
        return ByteBuffer.allocateDirect(Math.toIntExact(bytes)).order(ByteOrder.nativeOrder());
    }

    private static long align16(long bytes) {
        return (bytes + 15) & ~15L;
    }

    /** <b>Test seam</b>: runs inside every batch's submit, just before its work is enqueued. Null in production. */
    static volatile Runnable inBatchForTests;

    /**
     * The one way a batch goes onto a caller's stream (every {@code submit*} method): a device buffer of the batch's
     * own holding {@code lists} (uploaded with {@code cuMemcpyHtoDAsync} from pageable memory, which the driver
     * stages before returning, so the Java buffer may go) and then, at a 16-byte boundary, {@code resultBytes}; the
     * batch's work, which {@code work} enqueues given that buffer ({@code null} when the batch needs none); and the
     * completion event. On failure everything is released after waiting for the stream, and the exception thrown; if
     * the wait fails, what the batch queued may still read its buffer, so the buffer and the event are kept (until this
     * process exits) and a suppressed {@link CudaException} says so, with the code and the buffer.
     */
    private synchronized DeviceBatch submit(CUstream stream, ByteBuffer lists, long resultBytes, Consumer<CUdeviceptr> work) {
        // under the storage's lock, open checked again: close() cannot unload the module or free the arena between
        // the caller's check and this launch
        ensureOpen();
        current();
        final long bytes = align16(lists.capacity()) + resultBytes;
        final DevicePtr buf = bytes == 0 ? null : new DevicePtr();
        if (buf != null) {
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemAlloc(buf, bytes)), "cuMemAlloc(" + bytes + " bytes of batch lists)");
        }
        final CUevent done = new CUevent();
        boolean event = false;
        try {
            CudaException.check(CudaException.code(() -> JCudaDriver.cuEventCreate(done, CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate");
            event = true;
            if (lists.capacity() > 0) {
                CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyHtoDAsync(buf, Pointer.to(lists.clear()), lists.capacity(), stream)),
                    "cuMemcpyHtoDAsync(" + lists.capacity() + " bytes of batch lists)");
            }
            final Runnable planted = inBatchForTests;
            if (planted != null) {
                planted.run();
            }
            work.accept(buf);
            CudaException.check(CudaException.code(() -> JCudaDriver.cuEventRecord(done, stream)), "cuEventRecord");
            return new DeviceBatch(context, device, buf, bytes, done);
        } catch (RuntimeException | Error e) { // an Error too (an OutOfMemoryError making a launch's arguments): nothing stays held
            final int waited = CudaException.code(() -> JCudaDriver.cuStreamSynchronize(stream));
            if (waited != jcuda.driver.CUresult.CUDA_SUCCESS) {
                // a copy or kernel the batch queued before it failed may still run: freed, its buffer could be reused under it
                e.addSuppressed(new CudaException("cuStreamSynchronize", waited, "a failed batch's "
                    + (buf == null ? "" : bytes + "-byte device buffer at 0x" + Long.toHexString(buf.address()) + " and its ")
                    + "event stay until this process exits: what it queued could not be awaited"));
                throw e;
            }
            if (event) {
                CudaException.code(() -> JCudaDriver.cuEventDestroy(done));
            }
            if (buf != null) {
                CudaException.code(() -> JCudaDriver.cuMemFree(buf));
            }
            throw e;
        }
    }

    /**
     * Waits until all work queued on the primary context (e.g. by {@link #copyPagesAsync}) is done ({@code cuCtxSynchronize}).
     *
     * @throws IllegalStateException if the storage is closed
     * @throws CudaException         if the driver reports an error, a failure of queued work included
     */
    public synchronized void synchronize() {
        ensureOpen();
        current();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSynchronize()), "cuCtxSynchronize");
    }

    /**
     * Copies page {@code page} into {@code dst} in the host page layout (one copy per plane: tests and debugging).
     * Synchronous.
     *
     * @param page slot index
     * @param dst  host memory of at least {@link KvLayout#bytesPerPage()} bytes; its first page's worth is overwritten
     * @throws IllegalStateException     if the storage is closed
     * @throws IndexOutOfBoundsException if {@code page} is not a slot of this storage, or {@code dst} is too small
     * @throws CudaException             if the driver reports an error
     */
    public synchronized void readPage(int page, MemorySegment dst) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        current();
        final java.nio.ByteBuffer bb = dst.asSlice(0, dl.layout().bytesPerPage()).asByteBuffer();
        for (int plane = 0; plane < dl.planes(); plane++) {
            final int q = plane;
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyDtoH(Pointer.to(bb).withByteOffset(dl.hostOffset(q)),
                arena.withByteOffset(q * dl.planeBytes() + page * dl.pageStride()), dl.pageStride())), "cuMemcpyDtoH(page " + page + ")");
        }
    }

    /**
     * Copies {@code src} (host page layout) into page {@code page} (one copy per plane: tests and debugging).
     * Returns once the page is on the device ({@code cuCtxSynchronize}). It writes the slot whatever the pool holds
     * there, with none of the pool's state checks: never call it on a pool's storage in production.
     *
     * @param page slot index
     * @param src  host memory of at least {@link KvLayout#bytesPerPage()} bytes, in the host page layout
     * @throws IllegalStateException     if the storage is closed
     * @throws IndexOutOfBoundsException if {@code page} is not a slot of this storage, or {@code src} is too small
     * @throws CudaException             if the driver reports an error
     */
    public synchronized void writePage(int page, MemorySegment src) {
        ensureOpen();
        Objects.checkIndex(page, dl.pages());
        current();
        final java.nio.ByteBuffer bb = src.asSlice(0, dl.layout().bytesPerPage()).asByteBuffer();
        for (int plane = 0; plane < dl.planes(); plane++) {
            final int q = plane;
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyHtoD(arena.withByteOffset(q * dl.planeBytes() + page * dl.pageStride()),
                Pointer.to(bb).withByteOffset(dl.hostOffset(q)), dl.pageStride())), "cuMemcpyHtoD(page " + page + ")");
        }
        // From pageable memory cuMemcpyHtoD may return once the bytes are staged; work on other (non-blocking)
        // streams, such as the CUDA IPC transport's, is not ordered after it. Return only when the page is there.
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSynchronize()), "cuCtxSynchronize after writePage(" + page + ")");
    }

    /**
     * Frees the module, the scratch buffer, the arena and the primary-context reference. Idempotent. An arena that was
     * exported ({@link DeviceIpc}) stays allocated while another process may map it: until every
     * {@link DeviceIpc.ExportLease} is closed, or, after {@link DeviceIpc#export}, until this process ends. A WARNING says
     * so with the arena's size. If the wait for the context's work ({@code cuCtxSynchronize}) fails, nothing proves that
     * submitted batches ended: the module, scratch buffer and arena then stay until this process ends (a WARNING names
     * the driver's code). So do they if the storage's context cannot be made current ({@code cuCtxSetCurrent}): the wait
     * and the frees would act on another context. An arena freed later, at the end of its last lease, stays the same way
     * if its context cannot be made current then.
     */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
        if (current != 0) {
            // the wait below would prove only that whatever context is current here is idle, and the frees would act on
            // it: no proof that the batches ended, so everything stays, as after a failed wait
            keepUnproven("cuCtxSetCurrent", current);
            return;
        }
        if (ownStream != null) {
            CudaException.code(() -> JCudaDriver.cuStreamSynchronize(ownStream));
            CudaException.code(() -> JCudaDriver.cuStreamDestroy(ownStream));
        }
        // batches submitted on callers' streams may still run this module's kernels on the arena: wait for them
        // before both go (submit holds this lock, so no new one starts)
        final int idle = CudaException.code(() -> JCudaDriver.cuCtxSynchronize());
        if (idle != 0) {
            // no proof that the batches ended: freed, the arena or scratch buffer could be handed to another allocation
            // while a queued kernel still writes it. Keep them, the module and the context reference, as the CUDA IPC
            // engine keeps its mappings after a failed drain
            keepUnproven("cuCtxSynchronize", idle);
            return;
        }
        CudaException.code(() -> JCudaDriver.cuModuleUnload(module));
        CudaException.code(() -> JCudaDriver.cuMemFree(scratch));
        freeArenaIfUnshared();
    }

    /** Keeps the module, scratch buffer, arena and context reference for good, with a WARNING (caller holds the lock, closed). */
    private void keepUnproven(String call, int result) {
        keptUnproven = true;
        LOG.log(System.Logger.Level.WARNING, this + " closed without proof that its batches ended (" + call + " failed: "
            + jcuda.driver.CUresult.stringFor(result) + " (" + result + ")): its " + dl.arenaBytes() + "-byte arena at 0x"
            + Long.toHexString(base) + ", its " + scratchBytes + "-byte scratch buffer and its module stay until this process exits");
    }

    @Override
    public String toString() {
        return "DevicePageStorage[" + dl.pages() + " pages of " + dl.layout() + ", " + dl.arenaBytes() + " bytes"
            + (closed ? (arenaFreed ? ", closed" : keptUnproven ? ", closed, arena kept without proof" : ", closed, arena kept for IPC") : "") + "]";
    }
}
