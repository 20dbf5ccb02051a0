package io.kvpool.cuda;

import jcuda.Pointer;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUevent;
import jcuda.driver.CUresult;
import jcuda.driver.JCudaDriver;

/**
 * A batch of page operations submitted on a caller's stream ({@link DevicePageStorage#submitCopy},
 * {@link DevicePageStorage#submitFill submitFill}, {@link DevicePageStorage#submitOffload submitOffload},
 * {@link DevicePageStorage#submitRestore submitRestore}; {@link ChecksumBatch} wraps one): poll it with
 * {@link #isDone()}, wait with {@link #await()}, and {@link #close()} it to free its device buffer (index
 * lists, results) and event (closing waits first). The pages it touches must not be used from another
 * stream before it is done. Thread-safe.
 */
public final class DeviceBatch implements AutoCloseable {

    private final CUcontext context;
    private final CUdevice device;
    private final CUdeviceptr buffer; // null for a batch that needed none
    private final CUevent done;
    private boolean closed;

    /**
     * Takes over {@code buffer} and {@code done}, and retains {@code device}'s primary context for itself: they belong
     * to that context, and the storage may be closed (releasing its own reference) before this batch is.
     *
     * @throws CudaException if the context cannot be retained (nothing is taken over then)
     */
    DeviceBatch(CUcontext context, CUdevice device, CUdeviceptr buffer, CUevent done) {
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(new CUcontext(), device)), "cuDevicePrimaryCtxRetain");
        this.context = context;
        this.device = device;
        this.buffer = buffer;
        this.done = done;
    }

    /** {@return whether the device finished the batch ({@code cuEventQuery})} */
    public synchronized boolean isDone() {
        if (closed) {
            return true;
        }
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context)), "cuCtxSetCurrent");
        final int r = CudaException.code(() -> JCudaDriver.cuEventQuery(done));
        if (r == CUresult.CUDA_ERROR_NOT_READY) {
            return false;
        }
        CudaException.check(r, "cuEventQuery");
        return true;
    }

    /** Waits until the device finished the batch ({@code cuEventSynchronize}). */
    public synchronized void await() {
        if (closed) {
            return;
        }
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context)), "cuCtxSetCurrent");
        CudaException.check(CudaException.code(() -> JCudaDriver.cuEventSynchronize(done)), "cuEventSynchronize");
    }

    /** Waits for the batch, then copies {@code dst.length} ints from its buffer at {@code offset} (one copy). */
    synchronized void read(long offset, int[] dst) {
        if (closed) {
            throw new IllegalStateException("device batch is closed");
        }
        await();
        if (dst.length > 0) {
            CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyDtoH(Pointer.to(dst), buffer.withByteOffset(offset), 4L * dst.length)),
                "cuMemcpyDtoH(" + dst.length + " results)");
        }
    }

    /** Waits for the batch, then frees its device buffer and event and releases its context reference. Idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        try {
            await();
        } finally { // also after a (sticky) device error: the event, buffer and context reference go either way
            closed = true;
            CudaException.code(() -> JCudaDriver.cuEventDestroy(done));
            if (buffer != null) {
                CudaException.code(() -> JCudaDriver.cuMemFree(buffer));
            }
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
        }
    }
}
