package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmLink;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.ForwardingPeerLink;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.RemoteRegion;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * Where the time of one {@link TransferProtocolBenchmark} transfer goes (64 pages of 16 KiB, checksums off,
 * fill NONE, one thread), phase by phase, next to the raw {@code putBatch + flush} of the same pages on the same
 * link. A diagnostic, not a benchmark: {@code System.nanoTime} around each call, the mean of the second half of
 * the iterations, with the bytes the thread allocated in each phase. The fixed cost is the total minus the raw time. Last, the pools' share of that cost: the same
 * pool calls the protocol makes (retain and release of the source, admission, allocation into RECEIVING, commit
 * and close at decode) with no copy between them, so with caches warm.
 *
 * With a page count other than {@value TransferProtocolBenchmark#PAGES}, two runs split the fixed cost into a
 * part per transfer and a part per page (the difference of the two fixed costs over the difference of the counts).
 *
 * <pre>java -cp jmh/target/benchmarks.jar io.kvpool.jmh.TransferPhases [iterations [pages]]</pre>
 */
public final class TransferPhases {
    private TransferPhases() {
    }

    private static final com.sun.management.ThreadMXBean THREADS =
        (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();

    /** Records the time and this thread's allocated bytes so far at phase boundary {@code i}. */
    private static void stamp(long[] at, long[] allocatedAt, int i) {
        at[i] = System.nanoTime();
        allocatedAt[i] = THREADS.getCurrentThreadAllocatedBytes();
    }

    /** A link that times its {@code putBatch} calls and passes everything else on, frames as buffers (no copy). */
    private static final class TimedPuts extends ForwardingPeerLink {
        long nanos, calls;

        TimedPuts(PeerLink link) {
            super(link);
        }

        void reset() {
            nanos = 0;
            calls = 0;
        }

        @Override
        public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
            final long t0 = System.nanoTime();
            super.putBatch(region, dst, source, src, off, count, firstToken);
            nanos += System.nanoTime() - t0;
            calls++;
        }

        @Override
        public void send(ByteBuffer frame) {
            delegate().send(frame);
        }
    }

    public static void main(String[] args) throws IOException {
        final int n = args.length > 0 ? Integer.parseInt(args[0]) : 400_000;
        final int pages = args.length > 1 ? Integer.parseInt(args[1]) : TransferProtocolBenchmark.PAGES;
        final int tokens = pages * TransferProtocolBenchmark.TOKENS_PER_PAGE;
        final KvLayout layout = new KvLayout(1, 4, 64, DType.FP16, TransferProtocolBenchmark.TOKENS_PER_PAGE);
        final Path tmp = Files.createTempDirectory(Files.isDirectory(Path.of("/dev/shm")) ? Path.of("/dev/shm")
            : Path.of(System.getProperty("java.io.tmpdir")), "kvpool-phases");
        try (KvPool prefill = KvPool.builder(layout).pages(pages + 4).maxContextTokens(tokens).build();
             KvPool decode = KvPool.builder(layout).pages(2 * pages + 8).maxContextTokens(tokens).fillMode(FillMode.NONE)
                 .storage((l, p) -> MappedPageStorage.create(tmp.resolve("pool"), l, p)).build()) {
            final PeerIdentity id = PeerIdentity.of(layout, "phases-model", "phases", "1");
            final TransferSender sender = TransferSender.builder(prefill, id).checksums(false).maxPagesInFlight(pages).build();
            final TransferReceiver receiver = TransferReceiver.builder(decode, id).checksums(false)
                .completionTimeout(Duration.ofSeconds(10)).build();
            final RawFlush raw = new RawFlush();
            final ShmListener listener = ShmTransport.listen(tmp.resolve("sock"), (MappedPageStorage) decode.storage());
            final ShmLink out = ShmTransport.connect(tmp.resolve("sock"));
            ShmLink in = null;
            while (in == null || !out.isReady()) {
                in = in == null ? listener.accept() : in;
                out.poll(raw, 16);
            }
            final TimedPuts timed = new TimedPuts(out);
            sender.addPeer(timed);
            final int peer = receiver.addPeer(in);
            while (!receiver.peer(peer).isUp() || !sender.peer(0).isUp()) {
                sender.doWork();
                receiver.doWork();
            }
            final Sequence source = prefill.admit(tokens, 0).sequence();
            source.append(tokens);
            final long[] handles = new long[pages];
            for (int i = 0; i < pages; i++) {
                handles[i] = source.pageHandle(i);
            }

            final String[] names = {"sender.offer", "receiver.start", "sender: descriptor → copy → flush",
                "sender: flush done → completion", "receiver: completion → commit", "committed sequence closed"};
            final long[] sum = new long[names.length], bytes = new long[names.length];
            final long[] at = new long[names.length + 1], allocatedAt = new long[names.length + 1]; // reused: no allocation of ours in the loop
            for (int it = 0; it < n; it++) {
                stamp(at, allocatedAt, 0);
                sender.offer(it + 1, handles, tokens);
                stamp(at, allocatedAt, 1);
                final IncomingTransfer t = receiver.start(it + 1, tokens, 0, peer);
                stamp(at, allocatedAt, 2);
                sender.doWork();
                stamp(at, allocatedAt, 3);
                sender.doWork();
                stamp(at, allocatedAt, 4);
                while (t.state() == IncomingTransfer.State.RECEIVING) {
                    receiver.doWork();
                    sender.doWork();
                }
                stamp(at, allocatedAt, 5);
                if (t.state() != IncomingTransfer.State.COMMITTED) {
                    throw new IllegalStateException(t.toString());
                }
                t.sequence().close();
                stamp(at, allocatedAt, 6);
                if (it == n / 2) {
                    timed.reset();
                }
                if (it >= n / 2) {
                    for (int i = 0; i < names.length; i++) {
                        sum[i] += at[i + 1] - at[i];
                        bytes[i] += allocatedAt[i + 1] - allocatedAt[i];
                    }
                }
            }

            final Sequence target = decode.admit(tokens, 0).sequence();
            target.append(tokens);
            final int[] idx = new int[pages], src = new int[pages], dst = new int[pages];
            for (int i = 0; i < pages; i++) {
                idx[i] = i;
                src[i] = PageHandle.slot(handles[i]);
                dst[i] = PageHandle.slot(target.pageHandle(i));
            }
            final RemoteRegion region = out.attach(in.register(decode.storage(), dst).key(), pages);
            final long protocolPutNanos = timed.nanos, protocolPuts = timed.calls;
            final TimedPuts rawTimed = new TimedPuts(out);
            long rawSum = 0;
            for (int it = 0; it < n; it++) {
                if (it == n / 2) {
                    rawTimed.reset();
                }
                final long t0 = System.nanoTime();
                raw.putBatchAndFlush(rawTimed, region, idx, prefill.storage(), src, pages);
                if (it >= n / 2) {
                    rawSum += System.nanoTime() - t0;
                }
            }

            // the pool's part alone, with no copy between its steps: the same calls the protocol makes on both pools
            final String[] poolNames = {"  prefill: retain " + pages + " (offer)", "  decode: admit",
                "  decode: " + pages + " pages allocated RECEIVING", "  decode: commit " + pages,
                "  decode: close; prefill: release " + pages};
            final long[] poolSum = new long[poolNames.length];
            final long[] received = new long[pages];
            for (int it = 0; it < n; it++) {
                final long t0 = System.nanoTime();
                prefill.retainAll(handles, 0, pages);
                final long t1 = System.nanoTime();
                final Sequence s = decode.admit(tokens, 0).sequence();
                final long t2 = System.nanoTime();
                decode.handles().appendPinned(s, tokens);
                final long t3 = System.nanoTime();
                for (int i = 0; i < pages; i++) {
                    received[i] = s.pageHandle(i);
                }
                decode.handles().commitReceiveAll(received, 0, pages);
                final long t4 = System.nanoTime();
                s.close();
                prefill.releaseAll(handles, 0, pages);
                final long t5 = System.nanoTime();
                if (it >= n / 2) {
                    final long[] d = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4};
                    for (int i = 0; i < d.length; i++) {
                        poolSum[i] += d[i];
                    }
                }
            }

            final double half = n - n / 2;
            double total = 0;
            for (int i = 0; i < names.length; i++) {
                System.out.printf("%-36s %8.0f ns %7.0f B%n", names[i], sum[i] / half, bytes[i] / half);
                total += sum[i] / half;
            }
            System.out.printf("%-36s %8.0f ns%n%-36s %8.0f ns%n%-36s %8.0f ns (%.2f× raw)%n", "protocol, total", total,
                "raw putBatch + flush", rawSum / half, "fixed cost", total - rawSum / half, rawSum / half / total);
            System.out.printf("the same putBatch (%d pages, same compiled code, same pages) inside the protocol %.0f ns in %.1f "
                + "calls a transfer; in the raw loop %.0f ns%n", pages, protocolPutNanos / half, protocolPuts / half,
                rawTimed.nanos / half);
            double poolTotal = 0;
            System.out.println("the pools' part of it, alone (no copy in between: caches warm):");
            for (int i = 0; i < poolNames.length; i++) {
                System.out.printf("%-36s %8.0f ns%n", poolNames[i], poolSum[i] / half);
                poolTotal += poolSum[i] / half;
            }
            System.out.printf("%-36s %8.0f ns%n", "  pools, total", poolTotal);
            target.close();
            source.close();
            receiver.close();
            sender.close();
            listener.close();
        } finally {
            Files.deleteIfExists(tmp.resolve("pool"));
            Files.deleteIfExists(tmp.resolve("sock"));
            Files.deleteIfExists(tmp);
        }
    }
}
