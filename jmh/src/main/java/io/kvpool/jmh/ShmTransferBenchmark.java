package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmLink;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.RemoteRegion;
import org.openjdk.jmh.annotations.AuxCounters;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/**
 * Shared-memory transfer of {@value #PAGES} pages (16 KiB or 256 KiB each, so 1 MiB or 16 MiB per op)
 * from host memory into a mapped pool file: {@code shm_putBatch_flush} goes through {@link ShmLink}
 * ({@code putBatch} + {@code flush} + {@code poll} until the flush is reported), {@code baseline_copy}
 * does the same {@link MemorySegment#copy} calls between the same two memories directly. Both ends of
 * the link live in this JVM (the sender maps the same file a second time, as a peer process would).
 * The {@code bytes} secondary result is bytes per second; bytes per op = pages × page size, printed at setup.
 * The file goes to {@code /dev/shm} when it exists (tmpfs), else to the temp directory.
 */
@BenchmarkMode(Mode.Throughput)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch"})
@OutputTimeUnit(TimeUnit.SECONDS)
@State(Scope.Thread)
public class ShmTransferBenchmark {

    static final int PAGES = 64;

    /** Page size in KiB: 16 (1 layer) or 256 (16 layers) of 4 KV heads × 64 dim × FP16 × 16 tokens. */
    @Param({"16", "256"})
    public int pageKiB;

    /** Bytes moved, reported as a rate next to the op rate. */
    @AuxCounters(AuxCounters.Type.OPERATIONS)
    @State(Scope.Thread)
    public static class Bytes {
        public long bytes;
    }

    Path tmp;
    MappedPageStorage pool;
    HostPageStorage source;
    ShmListener listener;
    ShmLink sender, receiver;
    RemoteRegion region;
    MemorySegment destination;
    int[] slots, idx;
    long pageBytes;
    final RawFlush raw = new RawFlush();

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        final int layers = pageKiB / 16;
        final KvLayout layout = new KvLayout(layers, 4, 64, DType.FP16, 16);
        if (layout.bytesPerPage() != pageKiB * 1024L) {
            throw new IllegalStateException(layout + " is not " + pageKiB + " KiB");
        }
        pageBytes = layout.bytesPerPage();
        final Path shm = Path.of("/dev/shm");
        tmp = Files.createTempDirectory(Files.isDirectory(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir")), "kvpool-shm-bench");
        pool = MappedPageStorage.create(tmp.resolve("pool"), layout, PAGES);
        source = HostPageStorage.allocate(layout, PAGES);
        listener = ShmTransport.listen(tmp.resolve("sock"), pool);
        sender = ShmTransport.connect(tmp.resolve("sock"));
        final long deadline = System.nanoTime() + 10_000_000_000L;
        while (receiver == null || !sender.isReady()) {
            if (receiver == null) {
                receiver = listener.accept();
            }
            sender.poll(raw, 16);
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("bootstrap timed out");
            }
        }
        slots = new int[PAGES];
        idx = new int[PAGES];
        for (int i = 0; i < PAGES; i++) {
            slots[i] = PAGES - 1 - i; // reversed: destination slots as a descriptor would scatter them
            idx[i] = i;
        }
        region = sender.attach(receiver.register(pool, slots).key(), PAGES);
        destination = pool.segment();
        System.out.println("\nbytes/op = " + PAGES * pageBytes + " (" + PAGES + " pages of " + pageBytes + " bytes)");
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        sender.close();
        receiver.close();
        listener.close();
        source.close();
        pool.close();
        Files.deleteIfExists(tmp.resolve("pool"));
        Files.deleteIfExists(tmp);
    }

    @Benchmark
    public long shm_putBatch_flush(Bytes b) {
        raw.putBatchAndFlush(sender, region, idx, source, idx, PAGES);
        b.bytes += PAGES * pageBytes;
        return b.bytes;
    }

    @Benchmark
    public long baseline_copy(Bytes b) {
        for (int i = 0; i < PAGES; i++) {
            MemorySegment.copy(source.hostPage(i), 0, destination, slots[i] * pageBytes, pageBytes);
        }
        b.bytes += PAGES * pageBytes;
        return b.bytes;
    }
}
