package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.cuda.Cuda;
import io.kvpool.cuda.DeviceLayout;
import io.kvpool.cuda.DevicePageStorage;
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
import java.util.Random;
import java.util.concurrent.TimeUnit;

/**
 * Device-to-device page copies on the GPU, three ways in the same run, per page size
 * ({@link #pageKiB}: all planes of one page, BF16, 16 tokens/page, 128 dim):
 * <ul>
 *   <li>{@code batched}: {@link DevicePageStorage#copyPagesAsync} of {@code N} random, disjoint
 *       src&rarr;dst page pairs of a pool of {@code 2.5 N} pages (two index uploads and ONE
 *       {@code kvpool_copy_pages} launch), then wait;</li>
 *   <li>{@code contiguous}: one {@code cuMemcpyDtoDAsync} of the same {@code N} pages' bytes between two
 *       separate device buffers, then wait: the ceiling;</li>
 *   <li>{@code perPageLoop}: one {@code cuMemcpyDtoDAsync} per page per plane (K and V of every layer),
 *       between the same pool pages as {@code batched} (vLLM's old {@code swap_blocks}), then wait. One
 *       driver call costs microseconds, so this variant copies only the first {@code min(N, }{@value
 *       #PER_PAGE_CALLS}{@code / planes)} pairs of the lists: compare the per-byte rates, not the times.</li>
 * </ul>
 * {@code N} is {@value #BATCH_MIB} MiB per op for {@code batched} and {@code contiguous}: 4 GiB read plus
 * written, about 1 ms at the H200's measured 4280 GB/s contiguous rate. The device memory used is
 * about 9 GiB (pool 5 GiB, two 2 GiB buffers).
 *
 * <p>What each op reports:
 * <ul>
 *   <li>JMH's score: wall time of one op (submit + wait), ms/op;</li>
 *   <li>{@code deviceGBps}: (bytes read + bytes written) / time between two CUDA events recorded on the
 *       NULL stream right before the submission and right after it (10<sup>9</sup> bytes per GB), summed
 *       over the ops of an iteration. For {@code batched} the window includes the index uploads (the
 *       real API's cost), for {@code perPageLoop} the gaps between driver calls;</li>
 *   <li>{@code deviceMs}: mean event time of one op in the iteration;</li>
 *   <li>{@code submitUs}: mean host time from the call to its return, before waiting: index checks,
 *       both index uploads and the launch for {@code batched}; the one call for {@code contiguous}; the
 *       whole loop of calls for {@code perPageLoop} (which may block when the driver's queue fills);</li>
 *   <li>{@code opMiB}: MiB copied by one op (each direction once).</li>
 * </ul>
 * These are {@link AuxCounters.Type#EVENTS} counters holding per-iteration values (the unit JMH prints,
 * "#", is meaningless for them).
 *
 * <p>Without a usable CUDA device the benchmark does NOT run: {@link #setup()} throws with
 * {@link Cuda#unavailableReason()}, so JMH reports each benchmark as failed with that reason (and
 * {@code -foe true} turns it into a non-zero exit). That is deliberate: a no-op would print scores that
 * look like measurements.
 *
 * <p>At setup a one-page copy through {@link DevicePageStorage#copyPages} is checked byte for byte.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class BlockCopyBenchmark {

    /** MiB copied per op by {@code batched} and {@code contiguous}. */
    static final int BATCH_MIB = 2048;
    /** Driver calls per op of {@code perPageLoop} (about 75 ms at 4.6 µs a call). */
    static final int PER_PAGE_CALLS = 16_384;

    /**
     * Bytes of one page, all planes: 16 = 1 layer × 2 KV heads (planes of 8 KiB); 64 = 1 layer × 8 KV heads;
     * 256 = 4 layers × 8 KV heads; 2048 = 32 layers × 8 KV heads (a Llama-3-8B page); planes of 32 KiB for
     * all but 16. Always 128 dim, BF16, 16 tokens/page.
     */
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
        /** (bytes read + written) / CUDA event time, GB/s. */
        public double deviceGBps;
        /** Mean CUDA event time of one op, ms. */
        public double deviceMs;
        /** Mean host time to submit one op (call to return, before waiting), µs. */
        public double submitUs;
        /** MiB copied by one op. */
        public double opMiB;

        private final CudaBench.Tally t = new CudaBench.Tally(); // host time: submission

        @Setup(Level.Iteration)
        public void reset() {
            t.reset();
            deviceGBps = deviceMs = submitUs = opMiB = 0;
        }

        void add(long copiedBytes, float ms, long submitNanos) {
            t.add(copiedBytes, ms, submitNanos);
            deviceGBps = 2.0 * t.bytes / (t.eventMs * 1e6);
            deviceMs = t.deviceMs();
            submitUs = t.hostNs / 1e3 / t.ops;
            opMiB = CudaBench.mib(copiedBytes);
        }
    }

    static KvLayout layout(int pageKiB) {
        final KvLayout l = switch (pageKiB) {
            case 16 -> new KvLayout(1, 2, 128, DType.BF16, 16);
            case 64 -> new KvLayout(1, 8, 128, DType.BF16, 16);
            case 256 -> new KvLayout(4, 8, 128, DType.BF16, 16);
            case 2048 -> new KvLayout(32, 8, 128, DType.BF16, 16);
            default -> throw new IllegalArgumentException("pageKiB " + pageKiB + ": 16, 64, 256 or 2048");
        };
        if (l.bytesPerPage() != pageKiB * 1024L) {
            throw new AssertionError(l + " is " + l.bytesPerPage() + " bytes, not " + pageKiB + " KiB");
        }
        return l;
    }

    CudaBench cuda;
    DevicePageStorage pool;
    DeviceLayout dl;
    int n;            // pairs per batched op
    int nLoop;        // pairs per perPageLoop op
    int[] src, dst;   // disjoint random pages of the pool
    long opBytes;     // n pages
    long loopBytes;   // nLoop pages
    CudaBench.ContiguousCopy copy; // the same bytes as one copy
    CUdeviceptr[][] loopSrc, loopDst; // [pair][plane]

    @Setup(Level.Trial)
    public void setup() {
        CudaBench.requireDevice("BlockCopyBenchmark");
        final KvLayout layout = layout(pageKiB);
        n = CudaBench.pagesIn(BATCH_MIB, layout);
        final int pages = n * 5 / 2;
        pool = DevicePageStorage.allocate(layout, pages);
        dl = pool.deviceLayout();
        cuda = new CudaBench();

        final Random rnd = new Random(4);
        final int[] perm = CudaBench.shuffled(pages, rnd);
        src = java.util.Arrays.copyOfRange(perm, 0, n);
        dst = java.util.Arrays.copyOfRange(perm, n, 2 * n);
        opBytes = (long) n * layout.bytesPerPage();

        copy = new CudaBench.ContiguousCopy(opBytes);

        nLoop = Math.max(1, Math.min(n, PER_PAGE_CALLS / dl.planes()));
        loopBytes = (long) nLoop * layout.bytesPerPage();
        loopSrc = new CUdeviceptr[nLoop][dl.planes()];
        loopDst = new CUdeviceptr[nLoop][dl.planes()];
        final CUdeviceptr zero = new CUdeviceptr();
        for (int i = 0; i < nLoop; i++) {
            for (int q = 0; q < dl.planes(); q++) {
                loopSrc[i][q] = zero.withByteOffset(pool.address(src[i], q / 2, q % 2));
                loopDst[i][q] = zero.withByteOffset(pool.address(dst[i], q / 2, q % 2));
            }
        }


        verifyOnePage(layout, rnd);
        System.out.println("BlockCopyBenchmark: " + layout + ", pool " + pages + " pages (" + (dl.arenaBytes() >> 20) + " MiB); batched/contiguous "
            + n + " pages = " + (opBytes >> 20) + " MiB per op; perPageLoop " + nLoop + " pages x " + dl.planes() + " planes = "
            + (long) nLoop * dl.planes() + " calls of " + dl.pageStride() + " bytes = " + (loopBytes >> 20) + " MiB per op");
    }

    /** Copies one random page through the synchronous API and compares it with what was written. */
    private void verifyOnePage(KvLayout layout, Random rnd) {
        try (Arena a = Arena.ofConfined()) {
            final long b = layout.bytesPerPage();
            final MemorySegment in = CudaBench.randomPage(a, b, rnd);
            final MemorySegment out = a.allocate(b, 16);
            pool.writePage(src[0], in);
            pool.copyPages(src, 0, dst, 0, 1);
            pool.readPage(dst[0], out);
            final long mismatch = in.mismatch(out);
            if (mismatch != -1) {
                throw new IllegalStateException("copyPages check failed: page " + src[0] + " -> " + dst[0] + " differs at byte " + mismatch);
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
        copy.close();
        pool.close();
        cuda.close();
        cuda = null;
    }

    private static void check(int result, String call) {
        CudaBench.check(result, call);
    }

    /** Records the stop event, waits for it and accounts the op. */
    private void finish(Rates r, long bytes, long submitNanos) {
        r.add(bytes, cuda.stopMs(), submitNanos);
    }

    @Benchmark
    public void batched(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        pool.copyPagesAsync(src, 0, dst, 0, n);
        final long t1 = System.nanoTime();
        finish(r, opBytes, t1 - t0);
    }

    @Benchmark
    public void contiguous(Rates r) {
        cuda.start();
        final long t0 = System.nanoTime();
        copy.copyAsync();
        final long t1 = System.nanoTime();
        finish(r, opBytes, t1 - t0);
    }

    @Benchmark
    public void perPageLoop(Rates r) {
        final long stride = dl.pageStride();
        final int planes = dl.planes();
        cuda.start();
        final long t0 = System.nanoTime();
        for (int i = 0; i < nLoop; i++) {
            final CUdeviceptr[] s = loopSrc[i];
            final CUdeviceptr[] d = loopDst[i];
            for (int q = 0; q < planes; q++) {
                check(JCudaDriver.cuMemcpyDtoDAsync(d[q], s[q], stride, null), "cuMemcpyDtoDAsync");
            }
        }
        final long t1 = System.nanoTime();
        finish(r, loopBytes, t1 - t0);
    }
}
