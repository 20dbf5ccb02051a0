package io.kvpool.jmh;

import io.kvpool.KvLayout;
import io.kvpool.cuda.Cuda;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUevent;
import jcuda.driver.CUevent_flags;
import jcuda.driver.CUresult;
import jcuda.driver.JCudaDriver;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Random;

/**
 * What the GPU benchmarks share: device 0's primary context (retained for the benchmark's life) and a
 * pair of CUDA events on the NULL stream that time one op. Close it after everything allocated in the
 * context is freed. Also the per-iteration sums behind their {@code Rates} ({@link Tally}) and the setup
 * steps they have in common (the device check, pages per op, a random page to verify with).
 */
final class CudaBench implements AutoCloseable {

    /**
     * What a benchmark's {@code Rates} sums over the ops of an iteration; its public
     * {@code @AuxCounters} fields are computed from these.
     */
    static final class Tally {
        /** Bytes the ops moved (as the benchmark counts them). */
        long bytes;
        /** CUDA event time of the ops, ms. */
        double eventMs;
        /** Host time of the ops, ns (what the benchmark measures: submission, or call + wait). */
        long hostNs;
        /** Ops accounted. */
        long ops;

        void reset() {
            bytes = 0;
            eventMs = 0;
            hostNs = 0;
            ops = 0;
        }

        void add(long opBytes, float ms, long hostNanos) {
            bytes += opBytes;
            eventMs += ms;
            hostNs += hostNanos;
            ops++;
        }

        /** @return mean event time of one op, ms */
        double deviceMs() {
            return eventMs / ops;
        }
    }

    /**
     * The reference the GPU benchmarks measure against: two device buffers of {@code bytes}, the source filled with
     * 0x5a and the destination zeroed, and one {@code cuMemcpyDtoDAsync} of all of it on the NULL stream. Allocated in
     * the current context; {@link #close()} frees both, before the context goes.
     */
    static final class ContiguousCopy implements AutoCloseable {
        final long bytes;
        private final CUdeviceptr from = new CUdeviceptr();
        private final CUdeviceptr to = new CUdeviceptr();

        ContiguousCopy(long bytes) {
            this.bytes = bytes;
            check(JCudaDriver.cuMemAlloc(from, bytes), "cuMemAlloc(" + bytes + ")");
            check(JCudaDriver.cuMemAlloc(to, bytes), "cuMemAlloc(" + bytes + ")");
            check(JCudaDriver.cuMemsetD8(from, (byte) 0x5a, bytes), "cuMemsetD8");
            check(JCudaDriver.cuMemsetD8(to, (byte) 0, bytes), "cuMemsetD8");
        }

        /** Queues the copy and returns without waiting. */
        void copyAsync() {
            check(JCudaDriver.cuMemcpyDtoDAsync(to, from, bytes, null), "cuMemcpyDtoDAsync");
        }

        @Override
        public void close() {
            JCudaDriver.cuMemFree(from);
            JCudaDriver.cuMemFree(to);
        }
    }

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

    /** @throws IllegalStateException naming {@code benchmark} and {@link Cuda#unavailableReason()} without a usable device */
    static void requireDevice(String benchmark) {
        if (!Cuda.available()) {
            throw new IllegalStateException(benchmark + " needs a CUDA device: " + Cuda.unavailableReason());
        }
    }

    /** @return how many pages of {@code layout} make {@code mib} MiB */
    static int pagesIn(int mib, KvLayout layout) {
        return (int) ((long) mib * 1024 * 1024 / layout.bytesPerPage());
    }

    /** @return MiB in {@code bytes} */
    static double mib(long bytes) {
        return bytes / (1024.0 * 1024.0);
    }

    /** @return a page of {@code bytes} (16-byte aligned) in {@code a}, filled with {@code rnd}'s next longs */
    static MemorySegment randomPage(Arena a, long bytes, Random rnd) {
        final MemorySegment page = a.allocate(bytes, 16);
        for (long i = 0; i < bytes; i += 8) {
            page.set(ValueLayout.JAVA_LONG_UNALIGNED, i, rnd.nextLong());
        }
        return page;
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
