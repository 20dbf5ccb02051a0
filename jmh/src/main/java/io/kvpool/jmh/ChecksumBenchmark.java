package io.kvpool.jmh;

import io.kvpool.KvLayout;
import io.kvpool.cuda.ChecksumKeys;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.transfer.KvChecksum;
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
 * The device checksum kernel ({@link DevicePageStorage#checksums}: the transfer's position-keyed CRC32C of a
 * batch of pages, one launch) against one contiguous {@code cuMemcpyDtoDAsync} of the same bytes, per page
 * size ({@link #pageKiB}, the layouts of {@link BlockCopyBenchmark}), in the same run:
 * <ul>
 *   <li>{@code checksums}: the synchronous call over {@code N} random pages of a pool of {@code 2 N}: two
 *       uploads (keys, slots), the launch, the results copied back;</li>
 *   <li>{@code contiguous}: one copy of the same {@code N} pages' bytes between two device buffers.</li>
 * </ul>
 * {@code N} pages are {@value #BATCH_MIB} MiB. Counters, per iteration (the caveat of
 * {@link BlockCopyBenchmark.Rates} applies: JMH sums them over iterations):
 * <ul>
 *   <li>{@code readGBps}: bytes READ / CUDA event time (10<sup>9</sup> bytes per GB). The checksum reads each
 *       page once; the copy reads it once and writes it once;</li>
 *   <li>{@code deviceGBps}: bytes read + written / event time (the copy's figure in {@link BlockCopyBenchmark});
 *       for {@code checksums} equal to {@code readGBps};</li>
 *   <li>{@code deviceMs}: mean event time of one op.</li>
 * </ul>
 * The goal is a checksum {@code readGBps} of at least half the copy's {@code deviceGBps}: checking a page
 * costs no more than copying it.
 *
 * <p>Without a usable CUDA device {@link #setup()} throws with the reason. At setup one page's device checksum
 * is compared with {@link KvChecksum#of} on the host.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class ChecksumBenchmark {

    /** MiB checksummed (or copied) per op. */
    static final int BATCH_MIB = 1024;

    /** Bytes of one page, all planes: the layouts of {@link BlockCopyBenchmark#layout(int)}. */
    @Param({"16", "64", "256", "2048"})
    public int pageKiB;

    /** Per-iteration results besides JMH's wall time; see the class comment. */
    @AuxCounters(AuxCounters.Type.EVENTS)
    @State(Scope.Thread)
    public static class Rates {
        /** Bytes read / CUDA event time, GB/s. */
        public double readGBps;
        /** (Bytes read + written) / CUDA event time, GB/s. */
        public double deviceGBps;
        /** Mean CUDA event time of one op, ms. */
        public double deviceMs;

        private final CudaBench.Tally read = new CudaBench.Tally();
        private long moved;

        @Setup(Level.Iteration)
        public void reset() {
            read.reset();
            moved = 0;
            readGBps = deviceGBps = deviceMs = 0;
        }

        void add(long readBytes, long movedBytes, float ms) {
            read.add(readBytes, ms, 0);
            moved += movedBytes;
            readGBps = read.bytes / (read.eventMs * 1e6);
            deviceGBps = moved / (read.eventMs * 1e6);
            deviceMs = read.deviceMs();
        }
    }

    CudaBench cuda;
    DevicePageStorage pool;
    int n;
    int[] slots;
    int[] out;
    ChecksumKeys keys;
    long opBytes;
    CudaBench.ContiguousCopy copy; // the same bytes as one copy

    @Setup(Level.Trial)
    public void setup() {
        CudaBench.requireDevice("ChecksumBenchmark");
        final KvLayout layout = BlockCopyBenchmark.layout(pageKiB);
        n = CudaBench.pagesIn(BATCH_MIB, layout);
        pool = DevicePageStorage.allocate(layout, 2 * n);
        cuda = new CudaBench();
        final Random rnd = new Random(5);
        slots = java.util.Arrays.copyOf(CudaBench.shuffled(2 * n, rnd), n);
        keys = ChecksumKeys.ofRequest(layout, 42, 0, n, n * layout.tokensPerPage());
        out = new int[n];
        opBytes = (long) n * layout.bytesPerPage();
        copy = new CudaBench.ContiguousCopy(opBytes);
        verifyOnePage(layout, rnd);
        System.out.println("ChecksumBenchmark: " + layout + ", " + n + " pages = " + (opBytes >> 20) + " MiB per op");
    }

    /** The device's checksum of one random page equals the host's. */
    private void verifyOnePage(KvLayout layout, Random rnd) {
        try (Arena a = Arena.ofConfined()) {
            final MemorySegment page = CudaBench.randomPage(a, layout.bytesPerPage(), rnd);
            pool.writePage(slots[0], page);
            final ChecksumKeys one = ChecksumKeys.ofRequest(layout, 42, 0, 1, layout.tokensPerPage());
            final int device = pool.checksums(slots, 0, one)[0];
            final int host = KvChecksum.of(layout, page, 42, 0, layout.tokensPerPage());
            if (device != host) {
                throw new IllegalStateException("device checksum " + Integer.toHexString(device) + " != host " + Integer.toHexString(host));
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

    @Benchmark
    public int checksums(Rates r) {
        cuda.start();
        pool.checksums(slots, 0, keys, out, 0);
        r.add(opBytes, opBytes, cuda.stopMs());
        return out[n - 1];
    }

    @Benchmark
    public void contiguous(Rates r) {
        cuda.start();
        copy.copyAsync();
        r.add(opBytes, 2 * opBytes, cuda.stopMs());
    }
}
