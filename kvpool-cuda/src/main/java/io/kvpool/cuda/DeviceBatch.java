package io.kvpool.cuda;

import jcuda.Pointer;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUevent;
import jcuda.driver.CUresult;
import jcuda.driver.JCudaDriver;

import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A batch of page operations submitted on a caller's stream ({@link DevicePageStorage#submitCopy},
 * {@link DevicePageStorage#submitFill submitFill}, {@link DevicePageStorage#submitOffload submitOffload},
 * {@link DevicePageStorage#submitRestore submitRestore}; {@link ChecksumBatch} wraps one): poll it with
 * {@link #isDone()}, wait with {@link #await()}, and {@link #close()} it to free its device buffer (index
 * lists, results) and event (closing waits first). The pages it touches must not be used from another
 * stream before it is done. Thread-safe: polls and waits of several threads run together (one thread's
 * {@code await()} does not hold up another's {@code isDone()}); {@code close()} waits for them.
 */
public final class DeviceBatch implements AutoCloseable {

    private final CUcontext context;
    private final CUdevice device;
    private final DevicePageStorage.DevicePtr buffer; // null for a batch that needed none
    private final long bufferBytes;
    private final CUevent done;
    /** Read: isDone, await, read (any number at once). Write: close. */
    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private boolean closed; // written under the write lock

    /**
     * Takes over {@code buffer} and {@code done}, and retains {@code device}'s primary context for itself: they belong
     * to that context, and the storage may be closed (releasing its own reference) before this batch is.
     *
     * @throws CudaException if the context cannot be retained (nothing is taken over then)
     */
    DeviceBatch(CUcontext context, CUdevice device, DevicePageStorage.DevicePtr buffer, long bufferBytes, CUevent done) {
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(new CUcontext(), device)), "cuDevicePrimaryCtxRetain");
        this.context = context;
        this.device = device;
        this.buffer = buffer;
        this.bufferBytes = bufferBytes;
        this.done = done;
    }

    /** {@return whether the device finished the batch ({@code cuEventQuery})} */
    public boolean isDone() {
        lock.readLock().lock();
        try {
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
        } finally {
            lock.readLock().unlock();
        }
    }

    /** Waits until the device finished the batch ({@code cuEventSynchronize}). */
    public void await() {
        lock.readLock().lock();
        try {
            if (!closed) {
                synchronizeHeld();
            }
        } finally {
            lock.readLock().unlock();
        }
    }

    /** cuEventSynchronize on the batch's event; the caller holds a lock and checked it open. */
    private void synchronizeHeld() {
        CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context)), "cuCtxSetCurrent");
        CudaException.check(CudaException.code(() -> JCudaDriver.cuEventSynchronize(done)), "cuEventSynchronize");
    }

    /** Waits for the batch, then copies {@code dst.length} ints from its buffer at {@code offset} (one copy). */
    void read(long offset, int[] dst) {
        lock.readLock().lock();
        try {
            if (closed) {
                throw new IllegalStateException("device batch is closed");
            }
            synchronizeHeld();
            if (dst.length > 0) {
                CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyDtoH(Pointer.to(dst), buffer.withByteOffset(offset), 4L * dst.length)),
                    "cuMemcpyDtoH(" + dst.length + " results)");
            }
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * Waits for the batch, then frees its device buffer and event and releases its context reference. Idempotent.
     * Without proof that the batch ended, nothing is freed: a kernel may still read the buffer. The buffer, the event and
     * the context reference then stay until this process exits.
     *
     * @throws CudaException if the context cannot be made current ({@code cuCtxSetCurrent}) or the wait fails
     *                       ({@code cuEventSynchronize}); the message names the driver's code and the buffer kept
     */
    @Override
    public void close() {
        lock.writeLock().lock(); // after every poll, wait and read under way
        try {
            if (closed) {
                return;
            }
            closed = true;
            final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
            if (current != CUresult.CUDA_SUCCESS) {
                // the wait and the frees would act on whatever context is current here, not the batch's
                throw keptUnproven("cuCtxSetCurrent", current);
            }
            final int ended = CudaException.code(() -> JCudaDriver.cuEventSynchronize(done));
            if (ended != CUresult.CUDA_SUCCESS) {
                // freed, the buffer could go to the next allocation while a queued kernel still reads it
                throw keptUnproven("cuEventSynchronize", ended);
            }
            CudaException.code(() -> JCudaDriver.cuEventDestroy(done));
            if (buffer != null) {
                CudaException.code(() -> JCudaDriver.cuMemFree(buffer));
            }
            CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** {@return the exception for a close that could not prove the batch ended: what stays, with the numbers} */
    private CudaException keptUnproven(String call, int result) {
        return new CudaException(call, result, "closing a device batch without proof that it ended: its "
            + (buffer == null ? "" : bufferBytes + "-byte device buffer at 0x" + Long.toHexString(buffer.address()) + ", its ")
            + "event and its context reference stay until this process exits (a leak, not a fault)");
    }
}
