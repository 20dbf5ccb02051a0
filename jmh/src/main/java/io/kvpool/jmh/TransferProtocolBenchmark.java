package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
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
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * One request of {@code pages} pages (by default {@value #PAGES}, 1,024 tokens; 16 KiB or 256 KiB each: 1 MiB or 16 MiB per
 * op) handed from a
 * prefill pool to a decode pool by the full transfer protocol, against the raw transport in the same run:
 * <ul>
 *   <li>{@code protocol}: {@link TransferSender#offer} + {@link TransferReceiver#start} → both duty cycles
 *       until COMMITTED (descriptor, attach, {@code putBatch}, flush, completion with or without checksums,
 *       length/canary/checksum verification, commit) → the committed sequence is closed (its pages are
 *       freed, and with {@code fill=CANARY} refilled with the canary, as the pool does in production);</li>
 *   <li>{@code raw_putBatch_flush}: the same source pages through the same {@link ShmLink}
 *       ({@code putBatch} + {@code flush} + {@code poll} until the flush is reported), no protocol;</li>
 *   <li>{@code raw_copy}: the same bytes with {@link MemorySegment#copy} between the same two memories.</li>
 * </ul>
 * Everything runs in one JVM on one thread; the link is a real Unix-socket + mapped-file {@link ShmLink}
 * pair (the sender maps the decode pool file a second time, as a peer process would). Every op moves the
 * same bytes, so throughput ratios are the cost ratios: {@code protocol / raw_putBatch_flush} is what the
 * protocol keeps of the transport (the goal: ≥ 0.8× with checksums off and {@code fill=NONE}, which isolates
 * the protocol from the pool's free-page fill). The raw ops ignore {@code checksums} and {@code fill}, so they run
 * once per combination: compare the protocol with the raw op of the same combination. The {@code bytes}
 * secondary result is bytes per second; bytes per op = pages × page size, printed at setup.
 * The pool file goes to {@code /dev/shm} when it exists (tmpfs), else to the temp directory.
 */
@BenchmarkMode(Mode.Throughput)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch"})
@OutputTimeUnit(TimeUnit.SECONDS)
@State(Scope.Thread)
public class TransferProtocolBenchmark {

    /** The default request: 64 pages of 16 tokens. */
    static final int PAGES = 64;
    static final int TOKENS_PER_PAGE = 16;
    static final int TOKENS = PAGES * TOKENS_PER_PAGE;

    /**
     * Pages per request: 64 (1,024 tokens) by default; {@code -p pages=256} (4,096 tokens) shows how the protocol's cost
     * per transfer and per page weigh against a copy that no longer fits the core's cache.
     */
    @Param({"64"})
    public int pages;

    /** Page size in KiB: 16 (1 layer) or 256 (16 layers) of 4 KV heads × 64 dim × FP16 × 16 tokens. */
    @Param({"16", "256"})
    public int pageKiB;

    /** Whether the sender sends and the receiver verifies per-page CRC32C checksums. */
    @Param({"false", "true"})
    public boolean checksums;

    /** The decode pool's free-page fill: NONE isolates the protocol, CANARY is the production default. */
    @Param({"NONE", "CANARY"})
    public FillMode fill;

    /** Bytes moved, reported as a rate next to the op rate. */
    @AuxCounters(AuxCounters.Type.OPERATIONS)
    @State(Scope.Thread)
    public static class Bytes {
        public long bytes;
    }

    Path tmp;
    KvPool prefill, decode;
    ShmListener listener;
    ShmLink senderLink, receiverLink;
    TransferSender sender;
    TransferReceiver receiver;
    int peer;
    Sequence source;
    long[] sourceHandles;
    long pageBytes, requestId = 1;
    int tokens;

    // the raw baselines: the same source pages, into pages of the decode pool held for them
    Sequence rawTarget;
    RemoteRegion rawRegion;
    PageStorage sourceStorage;
    MemorySegment destination;
    int[] rawIdx, rawSrc, rawDstSlots;
    final RawFlush raw = new RawFlush();

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        final KvLayout layout = new KvLayout(pageKiB / 16, 4, 64, DType.FP16, TOKENS_PER_PAGE);
        if (layout.bytesPerPage() != pageKiB * 1024L) {
            throw new IllegalStateException(layout + " is not " + pageKiB + " KiB");
        }
        pageBytes = layout.bytesPerPage();
        tokens = pages * TOKENS_PER_PAGE;
        final Path shm = Path.of("/dev/shm");
        tmp = Files.createTempDirectory(Files.isDirectory(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir")), "kvpool-proto-bench");
        final Path file = tmp.resolve("pool");
        prefill = KvPool.builder(layout).pages(pages + 4).maxContextTokens(tokens).build();
        // exactly two requests' pages: the raw baselines hold one request's, and every protocol op reuses the other half,
        // so both ops write the same amount of distinct memory per op (with more, the protocol rotated through extra pages)
        decode = KvPool.builder(layout).pages(2 * pages).maxContextTokens(tokens).fillMode(fill)
            .storage((l, n) -> MappedPageStorage.create(file, l, n)).build();
        final PeerIdentity identity = PeerIdentity.of(layout, "bench-model@r1", "bench", "1");
        sender = TransferSender.builder(prefill, identity).checksums(checksums).maxPagesInFlight(pages).build();
        receiver = TransferReceiver.builder(decode, identity).checksums(checksums)
            .completionTimeout(Duration.ofSeconds(10)).drainTimeout(Duration.ofSeconds(10)).build();

        listener = ShmTransport.listen(tmp.resolve("sock"), (MappedPageStorage) decode.storage());
        senderLink = ShmTransport.connect(tmp.resolve("sock"));
        final long deadline = System.nanoTime() + 10_000_000_000L;
        while (receiverLink == null || !senderLink.isReady()) {
            if (receiverLink == null) {
                receiverLink = listener.accept();
            }
            senderLink.poll(raw, 16);
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("bootstrap timed out");
            }
        }
        sender.addPeer(senderLink);
        peer = receiver.addPeer(receiverLink);
        while (!receiver.peer(peer).isUp() || !sender.peer(0).isUp()) {
            sender.doWork();
            receiver.doWork();
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("handshake timed out: " + receiver.peer(peer) + " / " + sender.peer(0));
            }
        }

        source = prefill.admit(tokens, 0).sequence();
        source.append(tokens);
        sourceHandles = new long[pages];
        for (int i = 0; i < pages; i++) {
            sourceHandles[i] = source.pageHandle(i);
            final MemorySegment p = source.page(i);
            for (long o = 0; o < p.byteSize(); o += 8) {
                p.set(ValueLayout.JAVA_LONG_UNALIGNED, o, (long) i << 32 ^ o * 0x9E3779B97F4A7C15L);
            }
        }

        sourceStorage = prefill.storage();
        rawTarget = decode.admit(tokens, 0).sequence();
        rawTarget.append(tokens);
        rawIdx = new int[pages];
        rawSrc = new int[pages];
        rawDstSlots = new int[pages];
        for (int i = 0; i < pages; i++) {
            rawIdx[i] = i;
            rawSrc[i] = PageHandle.slot(sourceHandles[i]);
            rawDstSlots[i] = PageHandle.slot(rawTarget.pageHandle(i));
        }
        rawRegion = senderLink.attach(receiverLink.register(decode.storage(), rawDstSlots).key(), pages);
        destination = ((MappedPageStorage) decode.storage()).segment(); // page p at p × bytesPerPage
        System.out.println("\nbytes/op = " + pages * pageBytes + " (" + pages + " pages of " + pageBytes + " bytes)");
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        if (receiver.metrics().committed() != requestId - 1 || sender.activeTransfers() != 0 || receiver.activeTransfers() != 0) {
            throw new IllegalStateException("protocol runs did not all commit: " + receiver.metrics().committed() + " of "
                + (requestId - 1) + " committed, sender " + sender + ", receiver " + receiver);
        }
        receiver.close();
        sender.close();
        listener.close();
        rawTarget.close();
        source.close();
        prefill.close();
        decode.close();
        Files.deleteIfExists(tmp.resolve("pool"));
        Files.deleteIfExists(tmp);
    }

    @Benchmark
    public long protocol(Bytes b) {
        final long id = requestId++;
        sender.offer(id, sourceHandles, tokens);
        final IncomingTransfer t = receiver.start(id, tokens, 0, peer);
        while (t.state() == IncomingTransfer.State.RECEIVING) {
            sender.doWork();
            receiver.doWork();
        }
        if (t.state() != IncomingTransfer.State.COMMITTED) {
            throw new IllegalStateException(t.toString());
        }
        t.sequence().close();
        b.bytes += pages * pageBytes;
        return id;
    }

    @Benchmark
    public long raw_putBatch_flush(Bytes b) {
        raw.putBatchAndFlush(senderLink, rawRegion, rawIdx, sourceStorage, rawSrc, pages);
        b.bytes += pages * pageBytes;
        return b.bytes;
    }

    @Benchmark
    public long raw_copy(Bytes b) {
        for (int i = 0; i < pages; i++) {
            MemorySegment.copy(sourceStorage.hostPage(rawSrc[i]), 0, destination, rawDstSlots[i] * pageBytes, pageBytes);
        }
        b.bytes += pages * pageBytes;
        return b.bytes;
    }
}
