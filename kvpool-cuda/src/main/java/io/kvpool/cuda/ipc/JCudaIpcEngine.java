package io.kvpool.cuda.ipc;

import io.kvpool.KvLayout;
import io.kvpool.cuda.Cuda;
import io.kvpool.cuda.CudaException;
import io.kvpool.cuda.DeviceIpc;
import io.kvpool.cuda.DeviceLayout;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.cuda.Kernels;
import io.kvpool.storage.PageStorage;
import jcuda.Pointer;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUevent;
import jcuda.driver.CUevent_flags;
import jcuda.driver.CUfunction;
import jcuda.driver.CUmodule;
import jcuda.driver.CUpointer_attribute;
import jcuda.driver.CUresult;
import jcuda.driver.CUstream;
import jcuda.driver.CUstream_flags;
import jcuda.driver.JCudaDriver;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The CUDA engine of a {@link CudaIpcLink}, on JCuda's driver API, in the primary context of the device
 * that holds the source pool (the context {@link DevicePageStorage} and the CUDA runtime use).
 *
 * <p>Per batch: the two index lists go from a reused direct buffer (pageable: {@code cuMemcpyHtoDAsync}
 * stages it before returning) into a reused device buffer on the link's own non-blocking stream; then
 * ONE {@value Kernels#IPC_PUT_PAGES} launch; then ONE event. Reusing one device index buffer is safe
 * because the stream orders the next batch's upload after the previous batch's kernel. The buffer grows
 * (after a stream synchronize) when a larger batch comes.
 *
 * <p>Source and destination must be on the same device: the peer's arena is opened
 * ({@link DeviceIpc#open}) in the primary context of the exported device, and the kernel runs in the
 * source's; a cross-device put is refused rather than relying on peer access.
 */
final class JCudaIpcEngine implements IpcEngine {

    private static final System.Logger LOG = System.getLogger("io.kvpool.cuda");

    private static final int THREADS = 256;
    private static final long MAX_BLOCKS = 65_535L * 16;
    /** Where {@link DeviceIpc}'s handle keeps the exported device's ordinal (its documented format). */
    private static final int HANDLE_ORDINAL_OFFSET = 20;

    private record Opened(DeviceIpc.OpenedArena arena, int ordinal, long address) implements Mapping {
        @Override
        public int pages() {
            return arena.layout().pages();
        }

        @Override
        public long fingerprint() {
            return arena.layout().layout().fingerprint();
        }
    }

    /** The index buffer's pointer, whose address a WARNING names (JCuda keeps it protected). */
    private static final class IndexPtr extends CUdeviceptr {
        long address() {
            return getNativePointer();
        }
    }

    private final List<Opened> opened = new ArrayList<>();
    private final Map<Long, CUevent> inFlight = new HashMap<>();
    private final Map<PageStorage, Integer> sourceOrdinals = new java.util.IdentityHashMap<>();
    private final ArrayDeque<CUevent> spareEvents = new ArrayDeque<>();
    private long nextBatch;
    private int ordinal = -1;
    private CUdevice device;
    private CUcontext context;
    private CUmodule module;
    private CUfunction putPages;
    private CUstream stream;
    private IndexPtr indices;
    private int indexCapacity; // pages whose two index lists fit
    private ByteBuffer staging;
    private boolean closed;

    JCudaIpcEngine() {
        final String reason = Cuda.unavailableReason();
        if (reason != null) {
            throw new IllegalStateException("the CUDA IPC transport needs a CUDA device: " + reason);
        }
    }

    private static void check(int result, String call) {
        if (result != CUresult.CUDA_SUCCESS) {
            throw new CudaException(call, result, "");
        }
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("CUDA IPC engine is closed");
        }
    }

    @Override
    public Export export(PageStorage storage) {
        ensureOpen();
        if (!(storage instanceof DevicePageStorage d)) {
            throw new IllegalArgumentException("the CUDA IPC transport exposes a DevicePageStorage; " + storage + " is not one");
        }
        final DeviceIpc.ExportLease lease = DeviceIpc.exportLease(d);
        return new Export() {
            @Override
            public byte[] handle() {
                return lease.handle();
            }

            @Override
            public void end() {
                lease.close();
            }
        };
    }

    @Override
    public Mapping open(byte[] handle, KvLayout layout) {
        ensureOpen();
        final DeviceIpc.OpenedArena a = DeviceIpc.open(handle, layout); // checks format, fingerprint and size
        final int ord = ByteBuffer.wrap(handle).order(ByteOrder.LITTLE_ENDIAN).getInt(HANDLE_ORDINAL_OFFSET);
        final Opened o = new Opened(a, ord, a.address());
        opened.add(o);
        return o;
    }

    /** Sets up context, module, stream on the source's device (once). */
    private void setUp(int ord) {
        if (ordinal >= 0) {
            if (ord != ordinal) {
                throw new IllegalArgumentException("this link copies from device " + ordinal + "; a source on device " + ord
                    + " needs its own link");
            }
            return;
        }
        final CUdevice dev = new CUdevice();
        check(CudaException.code(() -> JCudaDriver.cuDeviceGet(dev, ord)), "cuDeviceGet(" + ord + ")");
        final CUcontext ctx = new CUcontext();
        check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(ctx, dev)), "cuDevicePrimaryCtxRetain");
        final CUmodule m = new CUmodule();
        final CUstream s = new CUstream();
        boolean ok = false;
        try {
            check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(ctx)), "cuCtxSetCurrent");
            check(CudaException.code(() -> JCudaDriver.cuModuleLoadData(m, Kernels.loadFatbin())), "cuModuleLoadData(kvpool kernels, for " + Kernels.IPC_PUT_PAGES + ")");
            final CUfunction f = new CUfunction();
            check(CudaException.code(() -> JCudaDriver.cuModuleGetFunction(f, m, Kernels.IPC_PUT_PAGES)), "cuModuleGetFunction(" + Kernels.IPC_PUT_PAGES + ")");
            check(CudaException.code(() -> JCudaDriver.cuStreamCreate(s, CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate");
            device = dev;
            context = ctx;
            module = m;
            putPages = f;
            stream = s;
            ordinal = ord;
            ok = true;
        } finally {
            if (!ok) {
                CudaException.code(() -> JCudaDriver.cuModuleUnload(m));
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(dev));
            }
        }
    }

    /** @return the device of the storage's arena ({@code cuPointerGetAttribute}; on a thread without a current context, once more after the storage made its own current) */
    private static int ordinalOf(DevicePageStorage s) {
        final long address = s.address(0, 0, 0);
        final int[] ord = new int[1];
        final CUdeviceptr p = new CUdeviceptr().withByteOffset(address);
        int r = CudaException.code(() -> JCudaDriver.cuPointerGetAttribute(Pointer.to(ord), CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
        if (r == CUresult.CUDA_ERROR_INVALID_CONTEXT) {
            s.synchronize(); // makes the storage's (primary) context current on this thread
            r = CudaException.code(() -> JCudaDriver.cuPointerGetAttribute(Pointer.to(ord), CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
        }
        check(r, "cuPointerGetAttribute(DEVICE_ORDINAL of 0x" + Long.toHexString(address) + ")");
        return ord[0];
    }

    @Override
    public long submit(Mapping dst, PageStorage source, int[] srcPages, int[] dstPages, int count) {
        ensureOpen();
        if (!(source instanceof DevicePageStorage s)) {
            throw new IllegalArgumentException("the CUDA IPC transport copies from a DevicePageStorage; " + source + " is not one");
        }
        final Opened o = (Opened) dst;
        final DeviceLayout sl = s.deviceLayout();
        final DeviceLayout dl = o.arena().layout();
        if (sl.pageStride() != dl.pageStride() || sl.planes() != dl.planes()) {
            throw new IllegalArgumentException("source arena (" + sl.planes() + " planes of " + sl.pageStride() + "-byte pages) and the peer's ("
                + dl.planes() + " planes of " + dl.pageStride() + "-byte pages) differ");
        }
        final int srcOrdinal;
        try {
            Integer known = sourceOrdinals.get(s);
            if (known == null) {
                known = ordinalOf(s);
                sourceOrdinals.put(s, known);
            }
            srcOrdinal = known;
            setUp(srcOrdinal);
        } catch (CudaException e) {
            throw new SubmitException(e.getMessage(), e.result(), false);
        }
        if (o.ordinal() != srcOrdinal) {
            throw new IllegalArgumentException("the source pool is on device " + srcOrdinal + ", the peer's arena on device " + o.ordinal()
                + ": cross-device CUDA IPC puts are not supported");
        }
        int r = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
        if (r != CUresult.CUDA_SUCCESS) {
            throw new SubmitException("cuCtxSetCurrent failed: " + describe(r), r, false);
        }
        if (count > indexCapacity) {
            grow(count);
        }
        staging.clear();
        staging.asIntBuffer().put(srcPages, 0, count).put(dstPages, 0, count);
        r = CudaException.code(() -> JCudaDriver.cuMemcpyHtoDAsync(indices, Pointer.to(staging), 8L * count, stream));
        if (r != CUresult.CUDA_SUCCESS) {
            throw new SubmitException("cuMemcpyHtoDAsync(" + 2 * count + " indices) failed: " + describe(r), r, false);
        }
        final CUevent spare = spareEvents.poll();
        final CUevent ev = spare != null ? spare : new CUevent();
        if (spare == null) {
            r = CudaException.code(() -> JCudaDriver.cuEventCreate(ev, CUevent_flags.CU_EVENT_DISABLE_TIMING));
            if (r != CUresult.CUDA_SUCCESS) {
                throw new SubmitException("cuEventCreate failed: " + describe(r), r, false);
            }
        }
        final int blocks = (int) Math.max(1, Math.min(MAX_BLOCKS, (long) count * sl.planes()));
        // The storage's monitor from its address to the launch, and no longer (its other calls wait for the device
        // under it): its close() holds it while it waits for the context's work and frees the arena, so the arena
        // cannot go between the two (DevicePageStorage, "Lifetime")
        final int launched;
        synchronized (s) {
            final long srcBase;
            try {
                srcBase = s.address(0, 0, 0);
            } catch (RuntimeException e) { // closed: nothing launched, the event goes back
                spareEvents.add(ev);
                throw e;
            }
            // again after the wait for the storage's monitor: a virtual thread that waited may go on on another OS
            // thread, and the current context is the OS thread's
            final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
            if (current != CUresult.CUDA_SUCCESS) {
                spareEvents.add(ev);
                throw new SubmitException("cuCtxSetCurrent failed: " + describe(current), current, false);
            }
            launched = CudaException.code(() -> JCudaDriver.cuLaunchKernel(putPages, blocks, 1, 1, THREADS, 1, 1, 0, stream,
                Pointer.to(Pointer.to(indices), Pointer.to(indices.withByteOffset(4L * count)), Pointer.to(new int[] {count}),
                    Pointer.to(new long[] {srcBase}), Pointer.to(new long[] {sl.planeBytes()}), Pointer.to(new long[] {o.address()}),
                    Pointer.to(new long[] {dl.planeBytes()}), Pointer.to(new int[] {sl.planes()}), Pointer.to(new long[] {sl.pageStride()})),
                null));
        }
        if (launched != CUresult.CUDA_SUCCESS) {
            spareEvents.add(ev);
            throw new SubmitException("cuLaunchKernel(" + Kernels.IPC_PUT_PAGES + ", " + count + " pages, " + blocks + " blocks) failed: "
                + describe(launched), launched, false);
        }
        r = CudaException.code(() -> JCudaDriver.cuEventRecord(ev, stream));
        if (r != CUresult.CUDA_SUCCESS) {
            CudaException.code(() -> JCudaDriver.cuEventDestroy(ev));
            throw new SubmitException("cuEventRecord after " + Kernels.IPC_PUT_PAGES + " (" + count + " pages) failed: " + describe(r), r, true);
        }
        final long id = nextBatch++;
        inFlight.put(id, ev);
        return id;
    }

    /** Makes room for {@code count} pages of index lists; the old device buffer may be read by queued kernels: synchronize first. */
    private void grow(int count) {
        final int cap = Math.max(count, Math.max(1024, Integer.highestOneBit(Math.max(1, count - 1)) << 1));
        if (indices != null) {
            final int r = CudaException.code(() -> JCudaDriver.cuStreamSynchronize(stream));
            if (r != CUresult.CUDA_SUCCESS) {
                throw new SubmitException("cuStreamSynchronize before growing the index buffer failed: " + describe(r), r, false);
            }
            CudaException.code(() -> JCudaDriver.cuMemFree(indices));
            indices = null;
            indexCapacity = 0;
        }
        final IndexPtr p = new IndexPtr();
        final int r = CudaException.code(() -> JCudaDriver.cuMemAlloc(p, 8L * cap));
        if (r != CUresult.CUDA_SUCCESS) {
            throw new SubmitException("cuMemAlloc(" + 8L * cap + " bytes of index lists) failed: " + describe(r), r, false);
        }
        indices = p;
        indexCapacity = cap;
        staging = ByteBuffer.allocateDirect(8 * cap).order(ByteOrder.nativeOrder());
    }

    @Override
    public int query(long batch) {
        final CUevent ev = inFlight.get(batch);
        if (ev == null) {
            throw new IllegalArgumentException("no batch " + batch + " in flight");
        }
        final int r = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
        return r != CUresult.CUDA_SUCCESS ? r : CudaException.code(() -> JCudaDriver.cuEventQuery(ev));
    }

    @Override
    public void release(long batch) {
        final CUevent ev = inFlight.remove(batch);
        if (ev != null) {
            spareEvents.add(ev);
        }
    }

    @Override
    public int drain() {
        if (stream == null || closed) {
            return DONE;
        }
        final int r = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
        return r != CUresult.CUDA_SUCCESS ? r : CudaException.code(() -> JCudaDriver.cuStreamSynchronize(stream));
    }

    @Override
    public String describe(int code) {
        return CUresult.stringFor(code) + " (" + code + ")";
    }

    /**
     * {@inheritDoc}
     *
     * <p>Every free happens in the engine's context, made current again after the drain (the calling virtual thread may
     * have moved to another OS thread since). If it cannot be made current, the index buffer, module, stream, events and
     * context reference stay until this process exits, with a WARNING naming the driver's code and the buffer; a mapping
     * whose own close fails likewise stays, with a WARNING, and the rest is freed.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        final int drained = drain(); // DONE: nothing of ours runs after this, and only then may what it uses go
        closed = true;
        final boolean idle = drained == DONE;
        if (idle) {
            for (Opened o : opened) {
                try {
                    o.arena().close(); // cuIpcCloseMemHandle: this process can no longer write into the peer's arena
                } catch (CudaException e) { // its context could not be made current: the mapping stays, the rest goes on
                    LOG.log(System.Logger.Level.WARNING, "CUDA IPC engine close: " + e.getMessage());
                }
            }
        } else if (!opened.isEmpty() || indices != null) {
            // A copy may still be queued. Unmapped, a peer's range could be mapped again here and the copy land there;
            // freed, the index buffer could be reused and the copy write other pages of the peer. So both stay
            LOG.log(System.Logger.Level.WARNING, "CUDA IPC engine closed without proof that its copies ended (" + describe(drained)
                + "): its " + opened.size() + " mapping(s) of peer arenas, its index buffer and its module stay until this "
                + "process exits");
        }
        opened.clear();
        if (context != null) {
            // drain() made it current, but a virtual thread may go on on another OS thread since (the arenas' closes lock)
            final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
            if (current != CUresult.CUDA_SUCCESS) {
                // the frees and the unload would act in whatever context this thread has, or none
                LOG.log(System.Logger.Level.WARNING, "CUDA IPC engine closed while its context could not be made current "
                    + "(cuCtxSetCurrent: " + describe(current) + "): its "
                    + (indices == null ? "" : 8L * indexCapacity + "-byte index buffer at 0x" + Long.toHexString(indices.address()) + ", its ")
                    + "module, stream, " + (inFlight.size() + spareEvents.size()) + " event(s) and its context reference stay until "
                    + "this process exits (a leak, not a fault)");
                inFlight.clear();
                spareEvents.clear();
                return;
            }
            for (CUevent ev : inFlight.values()) {
                CudaException.code(() -> JCudaDriver.cuEventDestroy(ev));
            }
            for (CUevent ev : spareEvents) {
                CudaException.code(() -> JCudaDriver.cuEventDestroy(ev));
            }
            inFlight.clear();
            spareEvents.clear();
            CudaException.code(() -> JCudaDriver.cuStreamDestroy(stream)); // with work queued, released once it ends
            if (idle) {
                if (indices != null) {
                    CudaException.code(() -> JCudaDriver.cuMemFree(indices));
                }
                CudaException.code(() -> JCudaDriver.cuModuleUnload(module));
            }
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
        }
    }
}
