package io.kvpool.cuda;

import jcuda.driver.CUcontext;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUevent;
import jcuda.driver.CUresult;
import jcuda.driver.JCudaDriver;

/**
 * A batch of page operations submitted on a caller's stream ({@link DevicePageStorage#submitCopy}):
 * poll it with {@link #isDone()}, wait with {@link #await()}, and {@link #close()} it to free its index
 * lists (closing waits first). The pages it touches must not be used from another stream before it is done.
 */
public final class DeviceBatch implements AutoCloseable {

    private final CUcontext context;
    private final CUdeviceptr indices;
    private final CUevent done;
    private boolean closed;

    DeviceBatch(CUcontext context, CUdeviceptr indices, CUevent done) {
        this.context = context;
        this.indices = indices;
        this.done = done;
    }

    /** @return whether the device finished the batch ({@code cuEventQuery}) */
    public synchronized boolean isDone() {
        if (closed) {
            return true;
        }
        CudaException.check(JCudaDriver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
        final int r = JCudaDriver.cuEventQuery(done);
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
        CudaException.check(JCudaDriver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
        CudaException.check(JCudaDriver.cuEventSynchronize(done), "cuEventSynchronize");
    }

    /** Waits for the batch, then frees its index lists and event. Idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        await();
        closed = true;
        JCudaDriver.cuEventDestroy(done);
        JCudaDriver.cuMemFree(indices);
    }
}
