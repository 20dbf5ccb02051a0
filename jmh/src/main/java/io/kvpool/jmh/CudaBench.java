package io.kvpool.jmh;

import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUevent;
import jcuda.driver.CUevent_flags;
import jcuda.driver.CUresult;
import jcuda.driver.JCudaDriver;

import java.util.Random;

/**
 * What the GPU benchmarks share: device 0's primary context (retained for the benchmark's life) and a
 * pair of CUDA events on the NULL stream that time one op. Close it after everything allocated in the
 * context is freed.
 */
final class CudaBench implements AutoCloseable {

    private final CUdevice device = new CUdevice();
    private final CUcontext context = new CUcontext();
    private final CUevent start = new CUevent();
    private final CUevent stop = new CUevent();
    private final float[] ms = new float[1];
    private boolean closed;

    CudaBench() {
        check(JCudaDriver.cuDeviceGet(device, 0), "cuDeviceGet");
        check(JCudaDriver.cuDevicePrimaryCtxRetain(context, device), "cuDevicePrimaryCtxRetain");
        current();
        check(JCudaDriver.cuEventCreate(start, CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate");
        check(JCudaDriver.cuEventCreate(stop, CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate");
    }

    /** Makes the primary context current on the calling thread. */
    void current() {
        check(JCudaDriver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    }

    /** Records the start event. */
    void start() {
        check(JCudaDriver.cuEventRecord(start, null), "cuEventRecord");
    }

    /** Records the stop event, waits for it, and returns the time since {@link #start()} in ms. */
    float stopMs() {
        check(JCudaDriver.cuEventRecord(stop, null), "cuEventRecord");
        check(JCudaDriver.cuEventSynchronize(stop), "cuEventSynchronize");
        check(JCudaDriver.cuEventElapsedTime(ms, start, stop), "cuEventElapsedTime");
        return ms[0];
    }

    /** Waits for the device, destroys the events and releases the context. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        current();
        JCudaDriver.cuCtxSynchronize();
        JCudaDriver.cuEventDestroy(start);
        JCudaDriver.cuEventDestroy(stop);
        JCudaDriver.cuDevicePrimaryCtxRelease(device);
    }

    static void check(int result, String call) {
        if (result != CUresult.CUDA_SUCCESS) {
            throw new IllegalStateException(call + " failed: " + CUresult.stringFor(result));
        }
    }

    /** @return {@code 0 .. n-1} in a random order */
    static int[] shuffled(int n, Random rnd) {
        final int[] perm = new int[n];
        for (int i = 0; i < n; i++) {
            perm[i] = i;
        }
        for (int i = n - 1; i > 0; i--) {
            final int j = rnd.nextInt(i + 1);
            final int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        return perm;
    }
}
