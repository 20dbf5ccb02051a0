package io.kvpool.transfer.shm;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The shared-memory transport when something goes wrong: a peer whose pid is ambiguous or whose leader is a zombie,
 * a copy that faults, an owner or listener closed after another replaced its file, a failed create, a connection that
 * never bootstraps, a peer that reads nothing, a closed link's buffers, a connect or a listen that fails half-way.
 * Each test states the contract it checks.
 */
@Timeout(30)
class ShmFailureTest {

    static final KvLayout LAYOUT = MappedPageStorageTest.LAYOUT;

    @TempDir
    Path dir;
    MappedPageStorage pool;
    ShmListener listener;
    final List<AutoCloseable> toClose = new ArrayList<>();
    final List<Process> children = new ArrayList<>();

    @BeforeEach
    void setUp() {
        pool = MappedPageStorage.create(dir.resolve("pool"), LAYOUT, 8);
        listener = ShmTransport.listen(dir.resolve("sock"), pool);
    }

    @AfterEach
    void cleanUp() throws Exception {
        for (Process p : children) {
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
        }
        for (AutoCloseable c : toClose) {
            c.close();
        }
        listener.close();
        pool.close();
    }

    /**
     * In ring mode the frames the peer put in the ring before it closed are delivered before the failure, also when it
     * closed right after its answer to the bootstrap, before this side's first poll: a listener that refused and closed
     * its link then, its process still running, played by a raw one that makes the ring, puts a frame in it, answers and
     * closes its socket. A listener whose process has exited is refused at the bootstrap (its pid names no live process),
     * and its ring is not read.
     */
    @Test
    void aFrameAListenerPutInTheRingBeforeItClosedIsDeliveredBeforeTheFailure() throws Exception {
        final Path sock = dir.resolve("raw-sock");
        try (java.nio.channels.ServerSocketChannel server = java.nio.channels.ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            server.bind(UnixDomainSocketAddress.of(sock));
            final ShmLink connector = ShmTransport.connect(sock);
            toClose.add(connector);
            final ShmRingFile ring = ShmRingFile.create(dir);
            toClose.add(ring);
            try (SocketChannel ch = server.accept()) {
                final ByteBuffer in = ByteBuffer.allocate(Bootstrap.MAX_BYTES);
                while (Bootstrap.length(in) < 0 || in.position() < Bootstrap.length(in)) {
                    ch.read(in); // the connector's bootstrap, read as a listener does
                }
                final byte[] frame = WireCodec.encode(new Message.Refuse("written before the crash"));
                assertEquals(frame.length, ring.outgoing(false).write(ByteBuffer.wrap(frame)));
                final ByteBuffer b = ByteBuffer.wrap(new Bootstrap(ProcessHandle.current().pid(), pool.identity(),
                    pool.file().toAbsolutePath().toString()).withRing(ring).encode());
                while (b.hasRemaining()) {
                    ch.write(b);
                }
            } // the listener closes its end
            final ShmLinkTest.Recorder r = new ShmLinkTest.Recorder();
            ShmLinkTest.await("failure", () -> !r.failures.isEmpty(), () -> connector.poll(r, 10));
            assertTrue(connector.usesRings(), "the connector mapped the ring: " + r.failures);
            assertEquals(List.of(new Message.Refuse("written before the crash")), r.frames, "failure: " + r.failures);
        }
    }

    /** Collects write completions. */
    static final class Writes implements LinkListener {
        final List<long[]> writes = new ArrayList<>();

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            writes.add(new long[] {token, status});
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
        }
    }

    /** @return {sender, receiver}: a link to this test's listener with its bootstrap done (both closed after the test) */
    ShmLink[] connectedPair() {
        final ShmLink sender = ShmTransport.connect(dir.resolve("sock"));
        toClose.add(sender);
        final ShmLink[] receiver = new ShmLink[1];
        ShmLinkTest.await("bootstrap", () -> receiver[0] != null && sender.isReady(), () -> {
            if (receiver[0] == null) {
                receiver[0] = listener.accept();
            }
            sender.poll(new Writes(), 100);
        });
        toClose.add(receiver[0]);
        return new ShmLink[] {sender, receiver[0]};
    }

    @Test
    void aConnectWhoseLinkCannotBeMadeClosesItsSocket() {
        final SocketChannel[] made = new SocketChannel[1];
        final IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
            () -> ShmTransport.connectWith(dir.resolve("sock"), ch -> {
                made[0] = ch;
                throw new IllegalArgumentException("pool file path of 5000 bytes, at most 4096"); // as Bootstrap refuses one
            }));
        assertEquals("pool file path of 5000 bytes, at most 4096", refused.getMessage(), "rethrown as it was");
        assertNotNull(made[0], "the connect reached the link's making");
        assertFalse(made[0].isOpen(), "the socket of a link that was never made is closed");
    }

    @Test
    void aListenThatFailsAfterItsBindLeavesNoSocketFile() {
        final Path sock = dir.resolve("sock2");
        final java.io.UncheckedIOException failed = assertThrows(java.io.UncheckedIOException.class,
            () -> new ShmListener(sock, pool, () -> {
                assertTrue(Files.exists(sock), "the bind created the socket file");
                throw new IOException("no file descriptor left");
            }));
        assertTrue(failed.getMessage().contains("no file descriptor left"), failed::getMessage);
        assertFalse(Files.exists(sock), "the socket file of a listener that never started is gone");
        ShmTransport.listen(sock).close(); // and the path can be listened on again
    }

    ShmLink acceptOne() {
        final ShmLink[] l = new ShmLink[1];
        ShmLinkTest.await("accept", () -> l[0] != null, () -> l[0] = listener.accept());
        toClose.add(l[0]);
        return l[0];
    }

    static Bootstrap readBootstrap(SocketChannel ch) throws IOException {
        final ByteBuffer in = ByteBuffer.allocate(Bootstrap.FIXED_BYTES + Bootstrap.MAX_PATH_BYTES);
        while (Bootstrap.length(in) < 0 || in.position() < Bootstrap.length(in)) {
            if (ch.read(in) < 0) {
                throw new IOException("EOF before the bootstrap");
            }
        }
        return Bootstrap.decode(in, Bootstrap.length(in));
    }

    static char procState(long pid) {
        try {
            final String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            return stat.charAt(stat.lastIndexOf(')') + 2);
        } catch (IOException e) {
            return '?';
        }
    }

    /** Sends {@code b} from a raw socket and returns the listener's reason for refusing it. */
    private String refusalOf(Bootstrap b) throws IOException {
        final SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(ch);
        ch.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        ch.write(ByteBuffer.wrap(b.encode()));
        final String before = listener.lastRejection();
        ShmLinkTest.await("refusal", () -> listener.lastRejection() != null && !listener.lastRejection().equals(before),
            () -> assertNull(listener.accept()));
        return listener.lastRejection();
    }

    /**
     * The pid a peer names is what its teardown proof waits for, so it must mean the process on the socket.
     * Any live pid must not be accepted: a peer in another pid namespace (a container) names its own namespace's
     * pid, which here is some unrelated process (or pid 1): when that one exits, tearDown would "prove" the real
     * writer gone. The peer's pid namespace and start time are checked against this host's view.
     */
    @Test
    void aPeerWhosePidMeansAnotherProcessHereIsRefused() throws Exception {
        final Process bystander = new ProcessBuilder("sleep", "60").start();
        children.add(bystander);
        final long ns = Bootstrap.OWN_PID_NAMESPACE;
        assumeTrue(ns != 0, "no /proc/self/ns/pid here");
        final long ticks = Bootstrap.startTicks(bystander.pid());
        assumeTrue(ticks != 0, "no start time in /proc");
        final String otherNamespace = refusalOf(new Bootstrap(bystander.pid(), ns + 1, ticks, 0, ""));
        assertTrue(otherNamespace.contains("pid namespace " + (ns + 1)) && otherNamespace.contains("this side in " + ns), otherNamespace);
        final String otherProcess = refusalOf(new Bootstrap(bystander.pid(), ns, ticks + 1, 0, ""));
        assertTrue(otherProcess.contains("started at tick " + (ticks + 1)) && otherProcess.contains("started at tick " + ticks), otherProcess);
        // the same bootstrap with the true values is accepted (the checks can pass)
        final SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(ch);
        ch.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        ch.write(ByteBuffer.wrap(new Bootstrap(bystander.pid(), ns, ticks, 0, "").encode()));
        assertEquals(bystander.pid(), acceptOne().peerPid());
    }

    /**
     * A process whose thread-group leader (main thread) has exited while other threads run shows state
     * 'Z' in /proc/PID/stat, yet its memory map (and the pool file mapping) is alive. processGone() took
     * 'Z' for "gone", so tearDown() returned true while a thread of the peer still wrote into the pool.
     * Senders that embed the JVM in a native host (JNI_CreateJavaVM from a launcher whose main thread
     * exits) look exactly like this. The peer here is a python3 process that ends its main thread by the
     * raw exit syscall (60 on x86_64) and writes from a second thread once told to.
     */
    @Test
    void aZombieLeaderWithLiveThreadsIsNotTakenForDead() throws Exception {
        assumeTrue("amd64".equals(System.getProperty("os.arch")), "uses the x86_64 exit syscall number");
        final Path script = dir.resolve("peer.py"), trigger = dir.resolve("go"), log = dir.resolve("peer.log");
        Files.writeString(script, """
            import ctypes, mmap, os, socket, struct, sys, threading, time
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            s.sendall(struct.pack('<IHHqqqq', 0x4B565342, 2, 0, os.getpid(), 0, 0, 0))  # namespace, start: unknown
            buf = b''
            while len(buf) < 40:
                buf += s.recv(8192)
            plen = struct.unpack('<IHHqqqq', buf[:40])[2]
            while len(buf) < 40 + plen:
                buf += s.recv(8192)
            f = open(buf[40:40 + plen].decode(), 'r+b')
            m = mmap.mmap(f.fileno(), 0)
            def writer():
                while not os.path.exists(sys.argv[2]):
                    time.sleep(0.01)
                m[4096:4096 + 2048] = b'\\x5a' * 2048   # page 0 of the pool
                time.sleep(60)
            threading.Thread(target=writer).start()
            print('mapped', flush=True)
            ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: ends the main thread only
            """);
        final Process peer;
        try {
            peer = new ProcessBuilder("python3", script.toString(), dir.resolve("sock").toString(), trigger.toString())
                .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        } catch (IOException e) {
            assumeTrue(false, "no python3: " + e);
            return;
        }
        children.add(peer);
        final ShmLink receiver = acceptOne();
        assertEquals(peer.pid(), receiver.peerPid());
        final long deadline = System.nanoTime() + 10_000_000_000L;
        while (procState(peer.pid()) != 'Z') {
            assertTrue(System.nanoTime() < deadline, () -> "peer leader never became 'Z'; log: " + ShmTwoProcessTest.read(log));
            receiver.poll(new Writes(), 10);
            Thread.sleep(10);
        }
        final long threads;
        try (var tasks = Files.list(Path.of("/proc/" + peer.pid() + "/task"))) {
            threads = tasks.count();
        }
        final boolean proven = receiver.tearDown();
        Files.createFile(trigger);
        final long until = System.nanoTime() + 5_000_000_000L;
        while (pool.hostPage(0).get(ValueLayout.JAVA_BYTE, 0) != 0x5A && System.nanoTime() < until) {
            Thread.sleep(10);
        }
        final byte landed = pool.hostPage(0).get(ValueLayout.JAVA_BYTE, 0);
        assertFalse(proven, "tearDown() proved peer " + peer.pid() + " gone (leader state 'Z') while it still had "
            + threads + " task(s) and its mapping; after that proof its write landed: page 0 byte 0 = 0x"
            + Integer.toHexString(landed & 0xFF) + "; peer alive per Process.isAlive(): " + peer.isAlive());
    }

    /**
     * "A batch that is refused throws before any of its writes is posted", and every posted write reports
     * exactly one terminal state. If the pool file shrinks under the sender's mapping, the copy faults
     * (SIGBUS); the JVM turns that into java.lang.InternalError, an Error that a
     * catch (RuntimeException) does not catch: escaping, it would make putBatch throw after it already queued OK for
     * the earlier writes of the batch (and the faulting write would never report). The faulting write reports FAILED.
     */
    @Test
    void aFaultingCopyReportsFailedInsteadOfEscapingPutBatch() throws Exception {
        final ShmLink[] pair = connectedPair();
        final ShmLink sender = pair[0];
        final Registration reg = pair[1].register(pool, new int[] {0, 7});
        final RemoteRegion region = sender.attach(reg.key(), 2);
        try (FileChannel ch = FileChannel.open(pool.file(), StandardOpenOption.WRITE)) {
            ch.truncate(MappedPageStorage.HEADER_BYTES + LAYOUT.bytesPerPage()); // slot 7 now lies beyond EOF
        }
        try (HostPageStorage src = HostPageStorage.allocate(LAYOUT, 2)) {
            Throwable thrown = null;
            try {
                sender.putBatch(region, new int[] {0, 1}, src, new int[] {0, 1}, 0, 2, 100);
            } catch (Throwable t) {
                thrown = t;
            }
            final Writes w = new Writes();
            sender.poll(w, 100);
            final StringBuilder got = new StringBuilder();
            w.writes.forEach(x -> got.append(" token ").append(x[0]).append("→").append(x[1]));
            assertNull(thrown, "putBatch threw instead of reporting the faulting write FAILED");
            // the batch fails as a whole (the first write may be reported FAILED too: a FAILED write may have landed)
            assertTrue(got.toString().matches(" token 100→[" + PeerLink.OK + PeerLink.FAILED + "] token 101→" + PeerLink.FAILED),
                "each of the 2 writes reports once, the one beyond the file FAILED; got:" + got);
        }
    }

    /**
     * Closing the owner of a pool file deletes whatever file is at its path now. A receiver restarted on
     * the same path (create() replaces the old file) loses its new pool file when the old instance closes;
     * every sender's map() then fails.
     */
    @Test
    void closingAnOwnerLeavesTheFileThatReplacedIt() {
        final Path f = dir.resolve("pool2");
        final MappedPageStorage old = MappedPageStorage.create(f, LAYOUT, 2);
        final MappedPageStorage successor = MappedPageStorage.create(f, LAYOUT, 2);
        toClose.add(successor);
        old.close();
        assertTrue(Files.exists(f), "the old owner's close() deleted the successor's pool file " + f
            + " (identity 0x" + Long.toHexString(successor.identity()) + ", still open)");
    }

    @Test
    void closingAListenerLeavesTheSocketThatReplacedIt() throws Exception {
        final Path sock = dir.resolve("sock");
        Files.delete(sock); // a successor clears the path of a receiver still shutting down, then listens on it
        final ShmListener successor = ShmTransport.listen(sock, pool);
        toClose.add(successor);
        listener.close(); // the old receiver's close
        assertTrue(Files.exists(sock), "the old listener's close() deleted its successor's socket " + sock);
        final ShmLink sender = ShmTransport.connect(sock); // a new sender still reaches the successor
        toClose.add(sender);
        final ShmLink[] accepted = new ShmLink[1];
        ShmLinkTest.await("bootstrap", () -> accepted[0] != null && sender.isReady(), () -> {
            if (accepted[0] == null) {
                accepted[0] = successor.accept();
            }
            sender.poll(new Writes(), 16);
        });
        toClose.add(accepted[0]);
    }

    /**
     * A fault in mapped memory reported late, after a copy's own catch (compiled code reports it at its next safepoint
     * check): putBatch neither throws after posting nor leaves a write reported OK that may have faulted.
     */
    @Test
    void aFaultReportedAfterACopyFailsTheWholeBatchInsteadOfEscaping() {
        final ShmLink[] pair = connectedPair();
        final ShmLink sender = pair[0];
        final RemoteRegion region = sender.attach(pair[1].register(pool, new int[] {0, 1, 2}).key(), 3);
        try (HostPageStorage src = HostPageStorage.allocate(LAYOUT, 3)) {
            final int[] after = {0};
            ShmLink.lateFaultForTests = () -> {
                if (++after[0] == 2) { // after the second copy: reported where compiled code checks for it
                    throw new InternalError("a fault occurred in an unsafe memory access operation");
                }
            };
            try {
                sender.putBatch(region, new int[] {0, 1, 2}, src, new int[] {0, 1, 2}, 0, 3, 20);
            } finally {
                ShmLink.lateFaultForTests = null;
            }
            final Writes w = new Writes();
            sender.poll(w, 100);
            final StringBuilder got = new StringBuilder();
            w.writes.forEach(x -> got.append(" ").append(x[0]).append("→").append(x[1]));
            assertEquals(3, w.writes.size(), "each write reports once:" + got);
            assertTrue(w.writes.stream().allMatch(x -> x[1] == PeerLink.FAILED), "every write of the batch FAILED:" + got);
        }
    }

    /**
     * create() removes nothing it made when it fails after creating the file: the file stays behind (here a
     * size the file system refuses, EFBIG on ext4; on tmpfs the same happens when the canary fill faults
     * on a full /dev/shm).
     */
    @Test
    void aFailedCreateLeavesNoFileBehind() throws IOException {
        assumeTrue("ext4".equals(Files.getFileStore(dir).type()), "needs a 16 TiB file size limit (ext4): "
            + Files.getFileStore(dir).type());
        final KvLayout huge = new KvLayout(64, 64, 128, DType.FP32, 256); // 1 GiB per page
        final Path f = dir.resolve("too-big");
        final RuntimeException e = assertThrows(RuntimeException.class, () -> MappedPageStorage.create(f, huge, 1 << 15)); // 32 TiB
        assertFalse(Files.exists(f), "a failed create() (" + e.getMessage() + ") left " + f + " behind");
    }

    /**
     * A connection that never sends its bootstrap must not stay in the listener's pending list (with its socket)
     * for ever: it is dropped after the bootstrap timeout, named in lastRejection.
     */
    @Test
    void aConnectionThatNeverSaysWhoItIsIsDroppedAfterTheBootstrapTimeout() throws Exception {
        listener.bootstrapTimeoutNanos = 200_000_000L;
        final SocketChannel silent = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(silent);
        silent.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        ShmLinkTest.await("timeout", () -> listener.lastRejection() != null, () -> assertNull(listener.accept()));
        assertTrue(listener.lastRejection().contains("no bootstrap within 200 ms"), listener.lastRejection());
        final ByteBuffer b = ByteBuffer.allocate(64);
        silent.configureBlocking(true);
        int r = 0;
        while (r >= 0) { // the listener sent nothing (its path is for peers that said who they are) and closed it
            b.clear();
            r = silent.read(b);
            assertTrue(r <= 0, "the listener sent " + r + " bytes to a peer that never bootstrapped");
        }
    }

    /**
     * A peer that stops reading must not make the sender queue control frames without end (the socket is
     * non-blocking, so send never blocks): the queue is bounded, and the link fails past 64 MiB.
     */
    @Test
    void aPeerThatReadsNothingFailsTheLinkInsteadOfGrowingItsQueueForEver() throws Exception {
        final SocketChannel deaf = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(deaf);
        deaf.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        deaf.write(ByteBuffer.wrap(new Bootstrap(ProcessHandle.current().pid(), 0, "").encode()));
        final ShmLink receiver = acceptOne(); // it never reads what this link sends
        final byte[] frame = io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Refuse("x".repeat(60_000)));
        long sent = 0;
        io.kvpool.transfer.spi.LinkFailedException failed = null;
        try {
            while (sent < 4 * ShmLink.MAX_QUEUED_BYTES) {
                receiver.send(frame);
                sent += frame.length;
            }
        } catch (io.kvpool.transfer.spi.LinkFailedException e) {
            failed = e;
        }
        assertNotNull(failed, "sent " + sent + " bytes to a peer that reads nothing and the link is still up");
        assertTrue(failed.getMessage().contains("the peer reads nothing"), failed.getMessage());
        assertTrue(sent <= ShmLink.MAX_QUEUED_BYTES + (8 << 20), "failed only after " + sent + " bytes");
        assertFalse(receiver.isUp());
    }

    /** An engine keeps a closed link (ids are list indexes): it must not keep the link's input buffer too. */
    @Test
    void aClosedLinkGivesBackItsInputBuffer() {
        final ShmLink[] pair = connectedPair();
        final ShmLink sender = pair[0];
        final ShmLink receiver = pair[1];
        receiver.send(WireCodec.encode(new Message.Refuse("one frame, read through the link's view of its buffer")));
        final int[] frames = new int[1];
        final LinkListener counting = new LinkListener() {
            @Override public void onFrame(PeerLink link, ByteBuffer frame) { frames[0]++; }
            @Override public void onWriteDone(PeerLink link, long token, int status) { }
            @Override public void onFlushDone(PeerLink link, long token, boolean ok) { }
            @Override public void onLinkFailed(PeerLink link, String reason) { }
        };
        ShmLinkTest.await("a frame", () -> frames[0] == 1, () -> sender.poll(counting, 100));
        assertTrue(sender.inputBufferBytes() >= 64 * 1024);
        sender.close();
        receiver.close();
        assertEquals(0, sender.inputBufferBytes());
        assertEquals(0, receiver.inputBufferBytes());
        assertEquals(0, sender.poll(new Writes(), 100), "a closed link delivers nothing (and does not fail on its empty buffer)");
    }
}
