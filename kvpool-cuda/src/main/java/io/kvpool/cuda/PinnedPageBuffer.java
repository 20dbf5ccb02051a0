package io.kvpool.cuda;

import io.kvpool.KvLayout;
import jcuda.Pointer;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.JCudaDriver;

import java.lang.foreign.MemorySegment;
import java.util.Objects;

/**
 * Pinned, device-mapped host memory holding pages in the host page layout ({@link KvLayout#offset}):
 * where {@link DevicePageStorage#offload} puts pages and {@link DevicePageStorage#restore} takes them
 * from, each in one kernel launch that reads or writes this memory directly over the bus. Allocated with
 * {@code cuMemHostAlloc(PORTABLE | DEVICEMAP)}; Java sees it as a {@link MemorySegment}.
 */
public final class PinnedPageBuffer implements AutoCloseable {

    /** A host pointer whose raw address can be read (JCuda keeps it protected). */
    static final class HostPtr extends Pointer {
        long address() {
            return getNativePointer();
        }
    }

    private final KvLayout layout;
    private final int pages;
    private final HostPtr host = new HostPtr();
    private final CUdeviceptr device = new CUdeviceptr();
    private final MemorySegment segment;
    /** The scope of {@link #segment} and its pages: closed first by {@link #close()}, so a stale page throws, not faults. */
    private final java.lang.foreign.Arena scope = java.lang.foreign.Arena.ofShared();
    private final jcuda.driver.CUdevice owner;   // whose primary context this buffer retains until close
    private final jcuda.driver.CUcontext context;
    private volatile boolean closed;

    /**
     * Allocates pinned, device-mapped memory for {@code pages} pages of the storage's layout, in the
     * primary context of the storage's device, which it retains until {@link #close()}.
     *
     * @param storage the device storage whose pages this buffer will hold (its layout and context)
     * @param pages   how many pages it holds, ≥ 1
     * @throws IllegalArgumentException if {@code pages < 1}
     * @throws CudaException            if the driver cannot allocate or map the memory
     */
    @SuppressWarnings("restricted") // sizes a segment over memory the driver allocated; needs native access
    public PinnedPageBuffer(DevicePageStorage storage, int pages) {
        if (pages < 1) {
            throw new IllegalArgumentException("pages must be ≥ 1, was " + pages);
        }
        this.layout = storage.layout();
        this.pages = pages;
        // Retain the primary context ourselves: the memory belongs to it, and close() may run after the
        // storage closed (its release could otherwise reset the context under us) or on another thread.
        this.owner = storage.device();
        this.context = new jcuda.driver.CUcontext();
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(context, owner)), "cuDevicePrimaryCtxRetain");
        final int c = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
        if (c != 0) {
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(owner));
            throw new CudaException("cuCtxSetCurrent", c, "making the device's primary context current for " + pages + " pinned pages");
        }
        final long bytes = Math.multiplyExact(layout.bytesPerPage(), (long) pages);
        final int r = CudaException.code(() -> JCudaDriver.cuMemHostAlloc(host, bytes,
            JCudaDriver.CU_MEMHOSTALLOC_PORTABLE | JCudaDriver.CU_MEMHOSTALLOC_DEVICEMAP));
        if (r != 0) {
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(owner));
            throw new CudaException("cuMemHostAlloc(" + bytes + " bytes)", r, pages + " pinned pages of " + layout);
        }
        final int d = CudaException.code(() -> JCudaDriver.cuMemHostGetDevicePointer(device, host, 0));
        if (d != 0) {
            CudaException.code(() -> JCudaDriver.cuMemFreeHost(host));
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(owner));
            throw new CudaException("cuMemHostGetDevicePointer", d, "for " + bytes + " pinned bytes (" + pages + " pages of " + layout + ")");
        }
        try {
            this.segment = MemorySegment.ofAddress(host.address()).reinterpret(bytes, scope, null);
        } catch (RuntimeException | Error e) { // e.g. IllegalCallerException: native access is denied to this module
            scope.close();
            CudaException.code(() -> JCudaDriver.cuMemFreeHost(host));
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(owner));
            throw e;
        }
    }

    /** {@return the layout of the pages} */
    public KvLayout layout() {
        return layout;
    }

    /** {@return how many pages it holds} */
    public int capacity() {
        return pages;
    }

    /**
     * {@return page {@code i}, host layout}
     *
     * @param i the page's index in this buffer, {@code 0 ≤ i < capacity()}
     * @throws IllegalStateException     if the buffer is closed
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     */
    public MemorySegment page(int i) {
        ensureOpen();
        Objects.checkIndex(i, pages);
        return segment.asSlice(i * layout.bytesPerPage(), layout.bytesPerPage());
    }

    /** @return the device's view of page {@code i}'s first byte (for kernels) */
    CUdeviceptr devicePage(int i) {
        ensureOpen();
        Objects.checkIndex(i, pages);
        return device.withByteOffset(i * layout.bytesPerPage());
    }

    /** @return the host address of page {@code i}'s first byte (for {@code cuMemcpyBatchAsync}, which takes unified addresses) */
    long hostAddress(int i) {
        ensureOpen();
        Objects.checkIndex(i, pages);
        return host.address() + i * layout.bytesPerPage();
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("pinned page buffer is closed");
        }
    }

    /**
     * Frees the pinned memory, once the device finished the work queued in its context (a batch submitted with this
     * buffer may still be reading or writing it). Segments from {@link #page} throw {@link IllegalStateException}
     * afterwards. Idempotent. Waits for a storage's synchronous offload or restore with this buffer in progress, and
     * for the submit of a batch with it (each holds this buffer's monitor from its address to the launch).
     *
     * @throws IllegalStateException if a native call still holds one of its pages after about a second: the memory is
     *                               then left allocated rather than freed under that call
     * @throws CudaException         if the context cannot be made current or the wait for its work fails (the memory is
     *                               then left allocated: a batch may still use it), or the free does
     */
    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            if (!closeScope()) {
                // a native call still holds one of its pages: freeing now would let it (or a stale page) touch memory
                // the next allocation may get, so the memory, and the context it lives in, stay allocated
                throw new IllegalStateException("pinned page buffer of " + pages + " pages: a page is still in use by a native "
                    + "call after " + SCOPE_CLOSE_TRIES * 10 + " ms; its memory is left allocated (a leak, not a fault)");
            }
            final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
            if (current != 0) {
                // the synchronize below would wait for whatever context is current here, not the one the memory is mapped in
                throw new CudaException("cuCtxSetCurrent", current, "before freeing " + pages + " pinned pages (" + Math.multiplyExact(
                    layout.bytesPerPage(), (long) pages) + " bytes at 0x" + Long.toHexString(host.address())
                    + "): nothing proves the batches using them ended, so they stay allocated (a leak, not a fault)");
            }
            final int idle = CudaException.code(() -> JCudaDriver.cuCtxSynchronize()); // batches still using the memory end first
            if (idle != 0) {
                // no proof that they ended: freed, the memory could go to the next allocation while a kernel still writes it
                // over the bus, so it stays, with the context it is mapped in
                throw new CudaException("cuCtxSynchronize", idle, "before freeing " + pages + " pinned pages (" + Math.multiplyExact(
                    layout.bytesPerPage(), (long) pages) + " bytes): a batch may still use them, so they stay allocated (a leak, not a fault)");
            }
            try {
                CudaException.check(CudaException.code(() -> JCudaDriver.cuMemFreeHost(host)), "cuMemFreeHost(" + pages + " pinned pages)");
            } finally {
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(owner));
            }
        }
    }

    private static final int SCOPE_CLOSE_TRIES = 100;

    /**
     * Closes the pages' scope, retrying while a native call holds one of them (such holds are short).
     *
     * @return whether it closed within {@link #SCOPE_CLOSE_TRIES} tries, 10 ms apart
     */
    private boolean closeScope() {
        for (int i = 0; i < SCOPE_CLOSE_TRIES; i++) {
            try {
                scope.close();
                return true;
            } catch (IllegalStateException inUse) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
        }
        return false;
    }
}
