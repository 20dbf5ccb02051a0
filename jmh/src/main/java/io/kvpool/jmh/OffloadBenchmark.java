package io.kvpool.jmh;

import io.kvpool.KvLayout;
import io.kvpool.cuda.Cuda;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.cuda.OffloadEngine;
import io.kvpool.cuda.PinnedPageBuffer;
import jcuda.Pointer;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.JCudaDriver;
import org.openjdk.jmh.annotations.AuxCounters;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.TimeUnit;

/**
 * Offload to and restore from pinned host memory versus contiguous pinned copies, in the
 * same run, per page size ({@link #pageKiB}: the layouts of {@link BlockCopyBenchmark}). Goal: offload
 * and restore at &ge; 90 % of the contiguous rate of the same direction.
 * <ul>
 *   <li>{@code offload} (device &rarr; host): {@link DevicePageStorage#offload} of {@code N} random
 *       pages of a pool of {@code 2 N} pages into consecutive pages of a {@link PinnedPageBuffer}
 *       ({@code cuMemHostAlloc(PORTABLE | DEVICEMAP)}): one synchronous index upload, ONE
 *       {@code kvpool_gather_pages} launch whose stores go over the bus into the mapped host memory, and
 *       the final {@code cuCtxSynchronize};</li>
 *   <li>{@code restore} (host &rarr; device): {@link DevicePageStorage#restore} of the same buffer into
 *       the same pages (one index upload, ONE {@code kvpool_scatter_pages} launch reading the mapped
 *       host memory, the wait);</li>
 *   <li>{@code offloadMemcpyBatch}, {@code restoreMemcpyBatch}: the same with
 *       {@link OffloadEngine#MEMCPY_BATCH}: ONE {@code cuMemcpyBatchAsync} of {@code N × 2·layers} copies of
 *       one page-plane each (the copy engines move the bytes), on the storage's own stream (ordered with
 *       the NULL stream the events are recorded on), then the wait. Whichever of the kernel and
 *       the batch copy measures faster becomes {@link OffloadEngine}'s default;</li>
 *   <li>{@code contiguousD2H}: one {@code cuMemcpyDtoHAsync} of the same {@code N} pages' bytes from a
 *       separate device buffer into a separate pinned buffer (also {@code cuMemHostAlloc(PORTABLE |
 *       DEVICEMAP)}), then wait: the copy engines' ceiling for offload;</li>
 *   <li>{@code contiguousH2D}: the reverse {@code cuMemcpyHtoDAsync}, then wait: the ceiling for restore.</li>
 * </ul>
 * {@code N} is {@value #BATCH_MIB} MiB per op for every variant, about 5 ms at ~55 GB/s (PCIe 5.0 x16).
 * Memory used, whatever the page size: device 3 &times; {@value #BATCH_MIB} MiB (pool of {@code 2 N}
 * pages plus the contiguous buffer), pinned host 2 &times; {@value #BATCH_MIB} MiB.
 *
 * <p>What each op reports:
 * <ul>
 *   <li>JMH's score: wall time of one op (call + wait), ms/op;</li>
 *   <li>{@code deviceGBps}: bytes moved ONE WAY (each byte crosses the bus once; unlike
 *       {@link BlockCopyBenchmark}, read + written is not counted twice) / time between two CUDA events
 *       recorded on the NULL stream right before the call and right after it returns (10<sup>9</sup>
 *       bytes per GB), summed over the ops of an iteration. For {@code offload} and {@code restore} the
 *       window includes the index upload and the host time between it and the launch (the real API's
 *       cost);</li>
 *   <li>{@code hostGBps}: the same bytes / host wall time from the call until the stop event has
 *       completed (what a caller sees);</li>
 *   <li>{@code deviceMs}: mean event time of one op in the iteration;</li>
 *   <li>{@code opMiB}: MiB moved by one op.</li>
 * </ul>
 * These are {@link AuxCounters.Type#EVENTS} counters holding per-iteration values (the unit JMH prints,
 * "#", is meaningless for them).
 *
 * <p>Without a usable CUDA device the benchmark does NOT run: {@link #setup()} throws with
 * {@link Cuda#unavailableReason()}, so JMH reports each benchmark as failed with that reason (and
 * {@code -foe true} turns it into a non-zero exit). A no-op would print scores that look like measurements.
 *
 * <p>At setup one page is offloaded and restored into another page, and both are checked byte for byte.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class OffloadBenchmark {

    /** MiB moved (one way) per op by every variant. */
    static final int BATCH_MIB = 256;

    /** Bytes of one page, all planes: see {@link BlockCopyBenchmark#pageKiB} (same layouts). */
    @Param({"16", "64", "256", "2048"})
    public int pageKiB;

    /**
     * Per-iteration results, besides JMH's wall time. JMH SUMS {@code EVENTS} counters over the measured iterations,
     * so its summary table (and the JSON's {@code score}) shows iterations × the per-iteration value: read the
     * per-iteration lines, the JSON's {@code rawData}, or the means {@code gpu-visit.sh} prints (score / Cnt).
     * Ratios between variants of one run are unaffected (each runs the same iterations).
     */
    @AuxCounters(AuxCounters.Type.EVENTS)
    @State(Scope.Thread)
    public static class Rates {
        /** Bytes moved one way / CUDA event time, GB/s. */
        public double deviceGBps;
        /** Bytes moved one way / host time of call + wait, GB/s. */
        public double hostGBps;
        /** Mean CUDA event time of one op, ms. */
        public double deviceMs;
        /** MiB moved by one op. */
        public double opMiB;

        private final CudaBench.Tally t = new CudaBench.Tally(); // host time: call + wait

        @Setup(Level.Iteration)
        public void reset() {
            t.reset();
            deviceGBps = hostGBps = deviceMs = opMiB = 0;
        }

        void add(long movedBytes, float ms, long hostNanos) {
            t.add(movedBytes, ms, hostNanos);
            deviceGBps = t.bytes / (t.eventMs * 1e6);
            hostGBps = (double) t.bytes / t.hostNs;
            deviceMs = t.deviceMs();
            opMiB = CudaBench.mib(movedBytes);
        }
    }

    CudaBench cuda;
    DevicePageStorage pool;
    PinnedPageBuffer pinned;   // offload target / restore source: n pages
    int n;                     // pages per op
    int[] pages;               // n random, distinct pages of the pool
    long opBytes;              // n pages
    CUdeviceptr devBuf;        // contiguous device side
    Pointer hostBuf;           // contiguous pinned side

    @Setup(Level.Trial)
    public void setup() {
        CudaBench.requireDevice("OffloadBenchmark");
        final KvLayout layout = BlockCopyBenchmark.layout(pageKiB);
        n = CudaBench.pagesIn(BATCH_MIB, layout);
        final int poolPages = 2 * n;
        pool = DevicePageStorage.allocate(layout, poolPages);
        cuda = new CudaBench();

        final Random rnd = new Random(4);
        final int[] perm = CudaBench.shuffled(poolPages, rnd);
        pages = Arrays.copyOfRange(perm, 0, n);
        opBytes = (long) n * layout.bytesPerPage();

        pinned = new PinnedPageBuffer(pool, n);
        devBuf = new CUdeviceptr();
        check(JCudaDriver.cuMemAlloc(devBuf, opBytes), "cuMemAlloc(" + opBytes + ")");
        check(JCudaDriver.cuMemsetD8(devBuf, (byte) 0x5a, opBytes), "cuMemsetD8");
        hostBuf = new Pointer();
        check(JCudaDriver.cuMemHostAlloc(hostBuf, opBytes, JCudaDriver.CU_MEMHOSTALLOC_PORTABLE | JCudaDriver.CU_MEMHOSTALLOC_DEVICEMAP),
            "cuMemHostAlloc(" + opBytes + ")");
        // touch the pinned bytes once so no variant pays a first use
        check(JCudaDriver.cuMemcpyDtoH(hostBuf, devBuf, opBytes), "cuMemcpyDtoH");


        verifyOnePage(layout, rnd, perm[n]);
        System.out.println("OffloadBenchmark: " + layout + ", pool " + poolPages + " pages (" + (pool.deviceLayout().arenaBytes() >> 20)
            + " MiB); " + n + " random pages = " + (opBytes >> 20) + " MiB per op, one way; pinned " + 2 * (opBytes >> 20)
            + " MiB, device buffer " + (opBytes >> 20) + " MiB");
    }

    /** With each engine: offloads one random page, checks the pinned copy, restores it into a page outside the list, checks that. */
    private void verifyOnePage(KvLayout layout, Random rnd, int spare) {
        for (OffloadEngine engine : OffloadEngine.values()) {
            verifyOnePage(layout, rnd, spare, engine);
        }
    }

    private void verifyOnePage(KvLayout layout, Random rnd, int spare, OffloadEngine engine) {
        try (Arena a = Arena.ofConfined()) {
            final long b = layout.bytesPerPage();
            final MemorySegment in = CudaBench.randomPage(a, b, rnd);
            final MemorySegment out = a.allocate(b, 16);
            pool.writePage(pages[0], in);
            pool.offload(pages, 0, 1, pinned, 0, engine);
            long mismatch = in.mismatch(pinned.page(0));
            if (mismatch != -1) {
                throw new IllegalStateException(engine + " offload check failed: page " + pages[0] + " differs at byte " + mismatch);
            }
            pool.restore(pinned, 0, new int[] {spare}, 0, 1, engine);
            pool.readPage(spare, out);
            mismatch = in.mismatch(out);
            if (mismatch != -1) {
                throw new IllegalStateException(engine + " restore check failed: page " + spare + " differs at byte " + mismatch);
            }
        }
    }

    @Setup(Level.Iteration)
    public void current() {
        cuda.current();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        if (cuda == null) {
            return;
        }
        cuda.current();
        JCudaDriver.cuCtxSynchronize();
        if (hostBuf != null) {
            JCudaDriver.cuMemFreeHost(hostBuf);
        }
        if (devBuf != null) {
            JCudaDriver.cuMemFree(devBuf);
        }
        if (pinned != null) {
            pinned.close();
        }
        pool.close();
        cuda.close();
        cuda = null;
    }

    private static void check(int result, String call) {
        CudaBench.check(result, call);
    }

    /** Records the stop event, waits for it and accounts the op that started at host time {@code t0}. */
    private void finish(Rates r, long t0) {
        final float ms = cuda.stopMs();
        r.add(opBytes, ms, System.nanoTime() - t0);
    }

    @Benchmark
    public void offload(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        pool.offload(pages, 0, n, pinned, 0);
        finish(r, t0);
    }

    @Benchmark
    public void restore(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        pool.restore(pinned, 0, pages, 0, n);
        finish(r, t0);
    }

    @Benchmark
    public void offloadMemcpyBatch(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        pool.offload(pages, 0, n, pinned, 0, OffloadEngine.MEMCPY_BATCH);
        finish(r, t0);
    }

    @Benchmark
    public void restoreMemcpyBatch(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        pool.restore(pinned, 0, pages, 0, n, OffloadEngine.MEMCPY_BATCH);
        finish(r, t0);
    }

    @Benchmark
    public void contiguousD2H(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        check(JCudaDriver.cuMemcpyDtoHAsync(hostBuf, devBuf, opBytes, null), "cuMemcpyDtoHAsync");
        finish(r, t0);
    }

    @Benchmark
    public void contiguousH2D(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        check(JCudaDriver.cuMemcpyHtoDAsync(devBuf, hostBuf, opBytes, null), "cuMemcpyHtoDAsync");
        finish(r, t0);
    }
}
