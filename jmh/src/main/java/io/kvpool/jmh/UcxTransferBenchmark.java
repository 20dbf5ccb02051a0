package io.kvpool.jmh;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.ucx.UcxLink;
import io.kvpool.transfer.ucx.UcxTransport;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpRemoteKey;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.stream.IntStream;

/**
 * One transfer's data path: {@value #PAGES} pages of 16 KiB ({@link Layouts#PAGE_16K}, 1 MiB per op) written
 * one-sided and flushed, through {@link UcxLink} ({@code putBatch} + {@code flush}, then {@code poll} until the
 * flush is reported) versus a raw JUCX loop of the same bytes ({@code putNonBlocking} per page without
 * callbacks, then {@code flushNonBlocking}, progressing the sender's worker on the benchmark thread).
 *
 * <p><b>Both ends live in this one JVM</b>: two {@link UcxTransport}s (two contexts and workers, linked over a
 * loopback socket) for {@code ucxLink}; one context with two workers for {@code rawJucx}, the receiving worker
 * progressed by its own thread with the same spin-then-park policy as the transport's thread (over tcp the
 * receiver must progress for puts to land). Both use peer error handling (failure detection), which limits
 * UCX 1.13.1 to tcp, so the numbers compare the wrapper's overhead, not transports. On 2 cores the three
 * busy threads compete; expect ±20 % noise (see {@code ucx.md}).
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "-Xms256m", "-Xmx256m"})
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@State(Scope.Thread)
public class UcxTransferBenchmark {

    static final int PAGES = 64;
    static final long PAGE_BYTES = Layouts.PAGE_16K.bytesPerPage();

    // ---- UcxLink ----
    UcxTransport senderT, receiverT;
    UcxLink sender, receiver;
    HostPageStorage linkSrc, linkDst;
    RemoteRegion region;
    int[] idx;
    long token;
    final Counter counter = new Counter();

    // ---- raw JUCX ----
    UcpContext ctx;
    UcpWorker rawSend, rawRecv;
    UcpEndpoint rawEp;
    UcpMemory rawDstMem;
    UcpRemoteKey rawRkey;
    HostPageStorage rawSrc, rawDst;
    long[] rawLocal;
    long rawRemoteBase;
    volatile boolean rawRecvRunning = true;
    Thread rawRecvThread;
    final boolean[] rawFlushed = new boolean[1];
    final UcxCallback rawFlushCb = new UcxCallback() {
        @Override
        public void onSuccess(UcpRequest request) {
            rawFlushed[0] = true;
        }

        @Override
        public void onError(int status, String message) {
            throw new IllegalStateException("raw flush failed: " + status + " " + message);
        }
    };

    static final class Counter implements LinkListener {
        long writesOk, writesBad, flushOk, flushBad;
        String failure;

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            if (status == PeerLink.OK) {
                writesOk++;
            } else {
                writesBad++;
            }
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            if (ok) {
                flushOk++;
            } else {
                flushBad++;
            }
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            failure = reason;
        }
    }

    @Setup(Level.Trial)
    public void setUp() throws Exception {
        idx = IntStream.range(0, PAGES).toArray();
        // UcxLink: two transports over a loopback bootstrap socket
        senderT = UcxTransport.open("bench-sender");
        receiverT = UcxTransport.open("bench-receiver");
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            final CompletableFuture<UcxLink> rf = CompletableFuture.supplyAsync(() -> {
                try (Socket s = ss.accept()) {
                    return receiverT.connect(s, "bench-receiver", Duration.ofSeconds(10));
                } catch (java.io.IOException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                sender = senderT.connect(s, "bench-sender", Duration.ofSeconds(10));
            }
            receiver = rf.get(10, TimeUnit.SECONDS);
        }
        linkSrc = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
        linkDst = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
        final Registration reg = receiver.register(linkDst, idx);
        region = sender.attach(reg.key(), PAGES);

        // raw JUCX: one context, two workers, the receiving one progressed by its own thread
        ctx = new UcpContext(new UcpParams().requestTagFeature().requestRmaFeature());
        rawSend = ctx.newWorker(new UcpWorkerParams());
        rawRecv = ctx.newWorker(new UcpWorkerParams());
        rawSrc = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
        rawDst = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
        rawDstMem = ctx.memoryMap(new UcpMemMapParams().setAddress(rawDst.segment().address()).setLength(PAGES * PAGE_BYTES));
        rawRemoteBase = rawDstMem.getAddress();
        rawEp = rawSend.newEndpoint(new UcpEndpointParams().setUcpAddress(rawRecv.getAddress()).setPeerErrorHandlingMode()
            .setErrorHandler((ep, status, msg) -> {
                throw new IllegalStateException("raw endpoint error " + status + " " + msg);
            }));
        rawRkey = rawEp.unpackRemoteKey(rawDstMem.getRemoteKeyBuffer());
        rawLocal = new long[PAGES];
        for (int i = 0; i < PAGES; i++) {
            rawLocal[i] = rawSrc.hostPage(i).address();
        }
        rawRecvThread = Thread.ofPlatform().daemon().name("raw-recv").start(() -> {
            int idle = 0;
            while (rawRecvRunning) {
                try {
                    if (rawRecv.progress() == 0) {
                        if (++idle > 200) {
                            LockSupport.parkNanos(20_000);
                        } else {
                            Thread.onSpinWait();
                        }
                    } else {
                        idle = 0;
                    }
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }
        });
    }

    @Benchmark
    public long ucxLink() {
        sender.putBatch(region, idx, linkSrc, idx, 0, PAGES, token);
        token += PAGES;
        final long want = counter.flushOk + 1;
        sender.flush(token);
        while (counter.flushOk < want) {
            if (counter.flushBad != 0 || counter.failure != null) {
                throw new IllegalStateException("flush failed: " + counter.failure);
            }
            if (sender.poll(counter, 4096) == 0) {
                Thread.onSpinWait();
            }
        }
        return counter.writesOk;
    }

    @Benchmark
    public boolean rawJucx() throws Exception {
        for (int i = 0; i < PAGES; i++) {
            rawEp.putNonBlocking(rawLocal[i], PAGE_BYTES, rawRemoteBase + i * PAGE_BYTES, rawRkey, null);
        }
        rawFlushed[0] = false;
        rawEp.flushNonBlocking(rawFlushCb);
        while (!rawFlushed[0]) {
            rawSend.progress();
        }
        return rawFlushed[0];
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        // drain the link's remaining write reports, then check the books: every write reported OK
        sender.poll(counter, Integer.MAX_VALUE);
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (counter.writesOk + counter.writesBad < token && System.nanoTime() < deadline) {
            sender.poll(counter, Integer.MAX_VALUE);
        }
        sender.close();
        receiver.close();
        senderT.close();
        receiverT.close();
        linkSrc.close();
        linkDst.close();
        if (counter.writesOk != token || counter.writesBad != 0) {
            throw new IllegalStateException("writes: posted " + token + ", ok " + counter.writesOk + ", bad " + counter.writesBad);
        }

        final UcpRequest close = rawEp.closeNonBlockingForce();
        while (!close.isCompleted()) {
            rawSend.progress();
        }
        rawRkey.close();
        rawRecvRunning = false;
        rawRecvThread.join(5000);
        rawDstMem.deregister(); // before the context closes (ucx.md)
        rawSend.close();
        rawRecv.close();
        ctx.close();
        rawSrc.close();
        rawDst.close();
    }
}
