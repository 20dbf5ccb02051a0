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
 * <h2>What is compared, and why it is fair</h2>
 * <ul>
 *   <li><b>Same bytes, same pages:</b> {@value #PAGES} whole 16-KiB pages from a {@link HostPageStorage} into
 *       another, one put per page, one flush per op; both ops end when the flush (proof of delivery) is
 *       reported. {@code ucxLink} also reports every write's terminal state (the SPI requires it; the raw
 *       loop posts without callbacks), and checks at teardown that every write was reported OK.</li>
 *   <li><b>Same transport mode:</b> both ends live in this one JVM, each in its own {@link UcpContext} with
 *       one worker (two {@link UcxTransport}s linked over a loopback socket for {@code ucxLink}; two contexts
 *       for {@code rawJucx}), endpoints with peer error handling (failure detection), which limits UCX
 *       1.13.1 to tcp. The numbers compare the wrapper's overhead, not transports.</li>
 *   <li><b>Progress done the same way:</b> one thread progresses the sender's worker without parking while a
 *       write or flush is in flight (the benchmark thread for {@code rawJucx}, the transport's owner thread for
 *       {@code ucxLink}), and one thread progresses the receiver's worker with the transport's spin-then-park
 *       policy (over tcp the receiver must progress for puts to land); the sender-side thread spins and then
 *       yields while it waits, as the transport's owner thread does with requests in flight. The {@code ucxLink} benchmark thread
 *       only polls for events and yields while there are none, as an engine's duty cycle idles, so that on
 *       2 cores it does not take a core from the two progressing threads (a busy-spinning third thread would).</li>
 *   <li><b>Only one side runs at a time:</b> each benchmark has its own {@link State} ({@link LinkSide},
 *       {@link RawSide}), so a fork measuring one does not also run the other's threads (a shared state would
 *       run two idle transport threads, waking every ~50 µs, beside the {@code rawJucx} fork, and the raw
 *       receiver's thread beside the {@code ucxLink} fork).</li>
 * </ul>
 * On 2 cores expect ±20 % noise (see docs/dependencies.md, "UCX from Java"); note the machine's load alongside any figure.
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "-Xms256m", "-Xmx256m"})
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class UcxTransferBenchmark {

    static final int PAGES = 64;
    static final long PAGE_BYTES = Layouts.PAGE_16K.bytesPerPage();
    /** The transport's owner-thread policy: spins before it yields (busy) or parks (idle). */
    static final int SPINS = 200;
    static final long PARK_NANOS = 20_000;

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

    /** {@code ucxLink}'s side: two transports linked over a loopback bootstrap socket. */
    @State(Scope.Thread)
    public static class LinkSide {
        UcxTransport senderT, receiverT;
        UcxLink sender, receiver;
        HostPageStorage src, dst;
        RemoteRegion region;
        int[] idx;
        long token;
        final Counter counter = new Counter();

        @Setup(Level.Trial)
        public void setUp() throws Exception {
            idx = IntStream.range(0, PAGES).toArray();
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
            src = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
            dst = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
            final Registration reg = receiver.register(dst, idx);
            region = sender.attach(reg.key(), PAGES);
        }

        @TearDown(Level.Trial)
        public void tearDown() {
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
            src.close();
            dst.close();
            if (counter.writesOk != token || counter.writesBad != 0) {
                throw new IllegalStateException("writes: posted " + token + ", ok " + counter.writesOk + ", bad " + counter.writesBad);
            }
        }
    }

    /** {@code rawJucx}'s side: two contexts with a worker each, the receiving one progressed by its own thread. */
    @State(Scope.Thread)
    public static class RawSide {
        UcpContext sendCtx, recvCtx;
        UcpWorker send, recv;
        UcpEndpoint ep;
        UcpMemory dstMem;
        UcpRemoteKey rkey;
        HostPageStorage src, dst;
        long[] local;
        long remoteBase;
        volatile boolean recvRunning = true;
        Thread recvThread;
        final boolean[] flushed = new boolean[1];
        final UcxCallback flushCb = new UcxCallback() {
            @Override
            public void onSuccess(UcpRequest request) {
                flushed[0] = true;
            }

            @Override
            public void onError(int status, String message) {
                throw new IllegalStateException("raw flush failed: " + status + " " + message);
            }
        };

        @Setup(Level.Trial)
        public void setUp() {
            sendCtx = new UcpContext(new UcpParams().requestTagFeature().requestRmaFeature());
            recvCtx = new UcpContext(new UcpParams().requestTagFeature().requestRmaFeature());
            send = sendCtx.newWorker(new UcpWorkerParams());
            recv = recvCtx.newWorker(new UcpWorkerParams());
            src = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
            dst = HostPageStorage.allocate(Layouts.PAGE_16K, PAGES);
            dstMem = recvCtx.memoryMap(new UcpMemMapParams().setAddress(dst.segment().address()).setLength(PAGES * PAGE_BYTES));
            remoteBase = dstMem.getAddress();
            ep = send.newEndpoint(new UcpEndpointParams().setUcpAddress(recv.getAddress()).setPeerErrorHandlingMode()
                .setErrorHandler((e, status, msg) -> {
                    throw new IllegalStateException("raw endpoint error " + status + " " + msg);
                }));
            rkey = ep.unpackRemoteKey(dstMem.getRemoteKeyBuffer());
            local = new long[PAGES];
            for (int i = 0; i < PAGES; i++) {
                local[i] = src.hostPage(i).address();
            }
            recvThread = Thread.ofPlatform().daemon().name("raw-recv").start(() -> {
                int idle = 0;
                while (recvRunning) { // the transport's owner-thread policy when idle: spin, then park
                    try {
                        if (recv.progress() != 0) {
                            idle = 0;
                        } else if (++idle > SPINS) {
                            LockSupport.parkNanos(PARK_NANOS);
                        } else {
                            Thread.onSpinWait();
                        }
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }
            });
        }

        @TearDown(Level.Trial)
        public void tearDown() throws Exception {
            final UcpRequest close = ep.closeNonBlockingForce();
            while (!close.isCompleted()) {
                send.progress();
            }
            rkey.close();
            recvRunning = false;
            recvThread.join(5000);
            dstMem.deregister(); // before the context closes (docs/dependencies.md, "UCX from Java")
            send.close();
            recv.close();
            sendCtx.close();
            recvCtx.close();
            src.close();
            dst.close();
        }
    }

    @Benchmark
    public long ucxLink(LinkSide s) {
        s.sender.putBatch(s.region, s.idx, s.src, s.idx, 0, PAGES, s.token);
        s.token += PAGES;
        final long want = s.counter.flushOk + 1;
        s.sender.flush(s.token);
        while (s.counter.flushOk < want) {
            if (s.counter.flushBad != 0 || s.counter.failure != null) {
                throw new IllegalStateException("flush failed: " + s.counter.failure);
            }
            if (s.sender.poll(s.counter, 4096) == 0) {
                Thread.yield(); // the transport's thread does the work: leave it the core
            }
        }
        return s.counter.writesOk;
    }

    @Benchmark
    public boolean rawJucx(RawSide s) throws Exception {
        for (int i = 0; i < PAGES; i++) {
            s.ep.putNonBlocking(s.local[i], PAGE_BYTES, s.remoteBase + i * PAGE_BYTES, s.rkey, null);
        }
        s.flushed[0] = false;
        s.ep.flushNonBlocking(s.flushCb);
        int idle = 0;
        while (!s.flushed[0]) { // the transport's owner-thread policy while requests are in flight: spin, then yield
            if (s.send.progress() != 0) {
                idle = 0;
            } else if (++idle > SPINS) {
                Thread.yield();
            } else {
                Thread.onSpinWait();
            }
        }
        return s.flushed[0];
    }
}
