package io.kvpool.transfer.shm;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireFormat;
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
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

@Timeout(20)
class ShmLinkTest {

    static final KvLayout LAYOUT = MappedPageStorageTest.LAYOUT;

    @TempDir
    Path dir;
    MappedPageStorage pool;
    ShmListener listener;
    final List<AutoCloseable> toClose = new ArrayList<>();

    /** Records every event. */
    static class Recorder implements LinkListener {
        final List<Message> frames = new ArrayList<>();
        final List<long[]> writes = new ArrayList<>();
        final List<Object[]> flushes = new ArrayList<>();
        final List<String> failures = new ArrayList<>();

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            frames.add(WireCodec.decode(frame));
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            writes.add(new long[] {token, status});
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            flushes.add(new Object[] {token, ok});
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            failures.add(reason);
        }
    }

    @Test
    void aFailingAcceptStillServesTheConnectionsAlreadyWaiting() throws Exception {
        // out of file descriptors, accept() throws every time: the connections already accepted must still be timed
        // out (freeing theirs) and handed out, or the listener never recovers
        listener.bootstrapTimeoutNanos = java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(50);
        final SocketChannel silent = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(silent);
        silent.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        assertNull(listener.accept(), "accepted; its bootstrap never comes");
        listener.acceptor = () -> {
            throw new IOException("Too many open files");
        };
        Thread.sleep(100);
        final java.io.UncheckedIOException e = assertThrows(java.io.UncheckedIOException.class, listener::accept);
        assertTrue(e.getMessage().contains("Too many open files"), e.getMessage());
        assertNotNull(listener.lastRejection(), "the silent connection was not timed out");
        assertTrue(listener.lastRejection().contains("no bootstrap within 50 ms"), listener.lastRejection());
    }

    @Test
    void anAcceptedConnectionTheListenerCannotKeepIsClosed() {
        final UnusableChannel accepted = new UnusableChannel();
        listener.acceptor = () -> accepted.handedOut ? null : accepted.handOut();
        final java.io.UncheckedIOException e = assertThrows(java.io.UncheckedIOException.class, listener::accept);
        assertTrue(e.getMessage().contains("cannot switch to non-blocking"), e.getMessage());
        assertFalse(accepted.isOpen(), "the accepted channel's descriptor leaked");
    }

    /** An accepted channel that cannot be made non-blocking (its descriptor went bad); only open and close work. */
    private static final class UnusableChannel extends SocketChannel {
        boolean handedOut;

        UnusableChannel() {
            super(java.nio.channels.spi.SelectorProvider.provider());
        }

        UnusableChannel handOut() {
            handedOut = true;
            return this;
        }

        @Override
        protected void implConfigureBlocking(boolean block) throws IOException {
            throw new IOException("cannot switch to non-blocking");
        }

        @Override
        protected void implCloseSelectableChannel() {
        }

        @Override public SocketChannel bind(java.net.SocketAddress local) { throw new UnsupportedOperationException(); }
        @Override public <T> SocketChannel setOption(java.net.SocketOption<T> name, T value) { throw new UnsupportedOperationException(); }
        @Override public <T> T getOption(java.net.SocketOption<T> name) { throw new UnsupportedOperationException(); }
        @Override public java.util.Set<java.net.SocketOption<?>> supportedOptions() { return java.util.Set.of(); }
        @Override public SocketChannel shutdownInput() { throw new UnsupportedOperationException(); }
        @Override public SocketChannel shutdownOutput() { throw new UnsupportedOperationException(); }
        @Override public java.net.Socket socket() { throw new UnsupportedOperationException(); }
        @Override public boolean isConnected() { return true; }
        @Override public boolean isConnectionPending() { return false; }
        @Override public boolean connect(java.net.SocketAddress remote) { throw new UnsupportedOperationException(); }
        @Override public boolean finishConnect() { return true; }
        @Override public java.net.SocketAddress getRemoteAddress() { return null; }
        @Override public int read(ByteBuffer dst) { throw new UnsupportedOperationException(); }
        @Override public long read(ByteBuffer[] dsts, int offset, int length) { throw new UnsupportedOperationException(); }
        @Override public int write(ByteBuffer src) { throw new UnsupportedOperationException(); }
        @Override public long write(ByteBuffer[] srcs, int offset, int length) { throw new UnsupportedOperationException(); }
        @Override public java.net.SocketAddress getLocalAddress() { return null; }
    }

    @Test
    void aConnectToAListenerThatDoesNotAcceptFailsInsteadOfBlocking() {
        // the listener's backlog (50) fills; a blocking connect would then wait for an accept that never comes,
        // freezing the caller's duty cycle and every other link on it
        final LinkFailedException full = assertTimeoutPreemptively(java.time.Duration.ofSeconds(10), () -> {
            for (int i = 0; i < 10_000; i++) {
                try {
                    toClose.add(ShmTransport.connect(dir.resolve("sock")));
                } catch (LinkFailedException e) {
                    return e;
                }
            }
            return null;
        });
        assertNotNull(full, "10,000 connects to a listener that accepts none all succeeded");
        assertTrue(full.getMessage().contains(dir.resolve("sock").toString()), full.getMessage());
    }

    @Test
    void smallFramesThatStraddleTheBufferEndDoNotGrowIt() {
        // 900 KB of 48-byte frames in one burst: many straddle the end of the 64 KiB input buffer, and compacting
        // makes room for each; a bigger buffer would stay with the link for its life
        final ShmLink[] p = pair();
        final int before = p[1].inputBufferBytes();
        final byte[] f = WireCodec.encode(new Message.Drained(1, 2, 0, 3, 3, 0));
        int sent = 0;
        while (sent * (long) f.length < 900_000) {
            p[0].send(f);
            sent++;
        }
        final Recorder r = new Recorder();
        final int total = sent;
        await("frames", () -> r.frames.size() == total, () -> p[1].poll(r, Integer.MAX_VALUE));
        assertEquals(before, p[1].inputBufferBytes(), total + " frames of " + f.length + " bytes grew the input buffer");
    }

    @BeforeEach
    void setUp() {
        pool = MappedPageStorage.create(dir.resolve("pool"), LAYOUT, 8);
        listener = ShmTransport.listen(dir.resolve("sock"), pool);
    }

    @AfterEach
    void tearDownAll() throws Exception {
        for (AutoCloseable c : toClose) {
            c.close();
        }
        listener.close();
        pool.close();
    }

    static void await(String what, BooleanSupplier cond, Runnable pump) {
        final long deadline = System.nanoTime() + 5_000_000_000L;
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out waiting for " + what);
            }
            pump.run();
            Thread.onSpinWait();
        }
    }

    /** Connects a sender link and accepts its receiver end, both ready. */
    ShmLink[] pair() {
        final ShmLink sender = ShmTransport.connect(dir.resolve("sock"));
        toClose.add(sender);
        final ShmLink[] receiver = new ShmLink[1];
        final Recorder sink = new Recorder();
        await("bootstrap", () -> receiver[0] != null && sender.isReady(), () -> {
            if (receiver[0] == null) {
                receiver[0] = listener.accept();
            }
            sender.poll(sink, 100);
        });
        toClose.add(receiver[0]);
        assertTrue(sink.frames.isEmpty() && sink.failures.isEmpty());
        assertEquals(ProcessHandle.current().pid(), receiver[0].peerPid());
        return new ShmLink[] {sender, receiver[0]};
    }

    /**
     * A raw socket peer that sent a valid sender bootstrap, the receiver link the listener made for it, and the
     * listener's answer.
     */
    record Raw(SocketChannel ch, ShmLink link, Bootstrap answer) {
    }

    /** A raw peer speaking version 2 of the bootstrap: its frames go over the socket, as before rings. */
    Raw raw() throws IOException {
        final Raw raw = raw(2);
        assertFalse(raw.link().usesRings(), "a version-2 peer keeps its frames on the socket");
        assertEquals(new Bootstrap(ProcessHandle.current().pid(), pool.identity(), pool.file().toAbsolutePath().toString())
            .withVersion(2), raw.answer(), "answered in version 2");
        return raw;
    }

    Raw raw(int version) throws IOException {
        final SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        ch.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        toClose.add(ch);
        ch.write(ByteBuffer.wrap(new Bootstrap(ProcessHandle.current().pid(), 0, "").withVersion(version).encode()));
        final ShmLink[] link = new ShmLink[1];
        await("accept", () -> link[0] != null, () -> link[0] = listener.accept());
        toClose.add(link[0]);
        // the receiver announces its pool file only now that it knows our pid
        final ByteBuffer in = ByteBuffer.allocate(Bootstrap.MAX_BYTES);
        while (Bootstrap.length(in) < 0 || in.position() < Bootstrap.length(in)) {
            ch.read(in);
        }
        return new Raw(ch, link[0], Bootstrap.decode(in, Bootstrap.length(in)));
    }

    @Test
    void aVersionThreeConnectorGetsRingsAndNoRingFileIsLeftBehind() {
        final ShmLink[] p = pair();
        assertTrue(p[0].usesRings() && p[1].usesRings(), "both ends use the rings");
        final Path ring = p[1].ringFile();
        assertFalse(java.nio.file.Files.exists(ring), "the connector deleted the ring file's name once it mapped it: " + ring);
        p[0].send(WireCodec.encode(new Message.Refuse("over the ring")));
        final Recorder r = new Recorder();
        await("frame", () -> r.frames.size() == 1, () -> p[1].poll(r, 10));
        assertEquals(new Message.Refuse("over the ring"), r.frames.get(0));
    }

    @Test
    void aConnectorThatSeesTheSocketsDirectoryElsewhereStillFindsTheRing() throws IOException {
        // the listener names the ring by its own path to the socket's directory; a connector that reaches that
        // directory by another path (a bind mount in a container) finds the ring next to the socket as it sees it
        final Path view = java.nio.file.Files.createSymbolicLink(dir.resolve("listeners-view"), dir);
        listener.ringDirectory = view;
        final ShmLink sender = ShmTransport.connect(dir.resolve("sock"));
        toClose.add(sender);
        final ShmLink[] receiver = new ShmLink[1];
        await("accept", () -> receiver[0] != null, () -> receiver[0] = listener.accept());
        toClose.add(receiver[0]);
        java.nio.file.Files.delete(view); // the connector cannot reach the listener's path
        final Recorder sink = new Recorder();
        await("bootstrap", () -> sender.isReady() || !sink.failures.isEmpty(), () -> sender.poll(sink, 100));
        assertEquals(List.of(), sink.failures);
        assertTrue(sender.usesRings() && receiver[0].usesRings());
        sender.send(WireCodec.encode(new Message.Refuse("over the ring")));
        final Recorder r = new Recorder();
        await("frame", () -> r.frames.size() == 1, () -> receiver[0].poll(r, 10));
        assertEquals(new Message.Refuse("over the ring"), r.frames.get(0));
        try (var left = java.nio.file.Files.list(dir)) {
            assertEquals(List.of(), left.filter(f -> f.getFileName().toString().startsWith("kvpool-ring")).toList(),
                "the connector deleted the ring's name once it mapped it");
        }
    }

    @Test
    void theListenerDeletesARingNoPeerEverMapped() throws IOException {
        final Raw raw = raw(3);
        assertTrue(raw.link().usesRings());
        final Path ring = Path.of(raw.answer().ringFile());
        assertTrue(java.nio.file.Files.exists(ring), "named in the answer: " + ring);
        raw.link().close();
        assertFalse(java.nio.file.Files.exists(ring), "closed before the peer mapped it: the listener removed it");
    }

    @Test
    void aFrameTheListenerSentBeforeItClosedReachesAConnectorThatHadNotMappedTheRingYet() throws IOException {
        // the listener answers, puts a frame in the ring and closes its link before the connector's next poll: on the
        // socket that frame would arrive before the EOF, and through the ring it must too
        final ShmLink sender = ShmTransport.connect(dir.resolve("sock"));
        toClose.add(sender);
        final ShmLink[] receiver = new ShmLink[1];
        await("accept", () -> receiver[0] != null, () -> receiver[0] = listener.accept());
        assertTrue(receiver[0].usesRings());
        final Path ring = receiver[0].ringFile();
        receiver[0].send(WireCodec.encode(new Message.Refuse("sent before the close")));
        receiver[0].close();
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> sender.poll(r, 10));
        assertEquals(List.of(new Message.Refuse("sent before the close")), r.frames, "failure: " + r.failures);
        assertTrue(r.failures.get(0).contains("EOF"), r.failures.get(0));
        assertFalse(java.nio.file.Files.exists(ring), "the connector deleted the ring's name once it mapped it: " + ring);
    }

    @Test
    void aListenerThatClosesWithNothingInTheRingDeletesItsName() {
        final ShmLink sender = ShmTransport.connect(dir.resolve("sock"));
        toClose.add(sender);
        final ShmLink[] receiver = new ShmLink[1];
        await("accept", () -> receiver[0] != null, () -> receiver[0] = listener.accept());
        final Path ring = receiver[0].ringFile();
        receiver[0].tearDown();
        receiver[0].close();
        assertFalse(java.nio.file.Files.exists(ring), "no frame waits in it for the peer: " + ring);
    }

    @Test
    void aListenerThatCannotCreateARingKeepsTheFramesOnTheSocket() {
        listener.ringDirectory = dir.resolve("no-such-directory");
        final ShmLink[] p = pair();
        assertFalse(p[0].usesRings() || p[1].usesRings());
        p[0].send(WireCodec.encode(new Message.Refuse("over the socket")));
        p[1].send(WireCodec.encode(new Message.Refuse("back")));
        final Recorder r = new Recorder(), back = new Recorder();
        await("frames", () -> r.frames.size() == 1 && back.frames.size() == 1, () -> {
            p[1].poll(r, 10);
            p[0].poll(back, 10);
        });
        assertEquals(new Message.Refuse("over the socket"), r.frames.get(0));
        assertEquals(new Message.Refuse("back"), back.frames.get(0));
    }

    @Test
    void framesSentBeforeTheBootstrapIsDoneWaitAndArriveThroughTheRing() {
        final ShmLink sender = ShmTransport.connect(dir.resolve("sock"));
        toClose.add(sender);
        sender.send(WireCodec.encode(new Message.Refuse("early")));
        final ShmLink[] receiver = new ShmLink[1];
        final Recorder r = new Recorder();
        await("early frame", () -> r.frames.size() == 1, () -> {
            if (receiver[0] == null) {
                receiver[0] = listener.accept();
            } else {
                receiver[0].poll(r, 10);
            }
            sender.poll(new Recorder(), 10);
        });
        toClose.add(receiver[0]);
        assertTrue(sender.usesRings() && receiver[0].usesRings());
        assertEquals(new Message.Refuse("early"), r.frames.get(0));
    }

    @Test
    void inRingModeThePeersCloseFailsTheLinkAfterEveryFrameItWroteBefore() {
        final ShmLink[] p = pair();
        for (int i = 0; i < 50; i++) {
            p[0].send(WireCodec.encode(new Message.Drained(i, i, 0, 3, 3, 0)));
        }
        p[0].close();
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> p[1].poll(r, 3));
        assertEquals(50, r.frames.size(), "every frame before the close, then the failure");
        assertTrue(r.failures.get(0).contains("EOF"), r.failures.get(0));
        p[1].poll(r, 10);
        assertEquals(1, r.failures.size(), "delivered once");
    }

    @Test
    void inRingModeBytesOnTheSocketFailTheLink() throws IOException {
        final Raw raw = raw(3);
        raw.ch().write(ByteBuffer.wrap(WireCodec.encode(new Message.Refuse("on the wrong channel"))));
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> raw.link().poll(r, 10));
        assertTrue(r.failures.get(0).contains("on the socket after the bootstrap"), r.failures.get(0));
        assertTrue(r.frames.isEmpty());
    }

    @Test
    void aFrameFromThePeerIsDeliveredBetweenRoundsOfWritesNotAfterAllOfThem() {
        // a sender that posts its next batch from each completion (as TransferSender's pump does) runs a whole
        // transfer in one poll, since copies complete at once: the receiver's ABORT, already in the ring, must be read
        // before the next batch is posted, not after the last write
        final ShmLink[] p = pair();
        final Registration reg = p[1].register(pool, new int[] {0, 1, 2, 3});
        final RemoteRegion region = p[0].attach(reg.key(), 4);
        final List<String> order = new ArrayList<>();
        try (HostPageStorage src = HostPageStorage.allocate(LAYOUT, 4)) {
            final Recorder r = new Recorder() {
                @Override
                public void onWritesDone(PeerLink link, long firstToken, int count, int status) {
                    order.add("write " + firstToken);
                    if (firstToken < 103 && !order.contains("abort")) {
                        final int next = (int) (firstToken - 100 + 1);
                        link.putBatch(region, new int[] {next}, src, new int[] {next}, 0, 1, firstToken + 1);
                    }
                }

                @Override
                public void onFrame(PeerLink link, ByteBuffer frame) {
                    order.add(WireCodec.decode(frame) instanceof Message.Abort ? "abort" : "frame");
                }
            };
            p[1].send(WireCodec.encode(new Message.Abort(1, 1, Message.Abort.REQUESTED, "client went away")));
            p[0].putBatch(region, new int[] {0}, src, new int[] {0}, 0, 1, 100);
            await("the abort and the write posted before it", () -> order.size() >= 2, () -> p[0].poll(r, 100));
            p[0].poll(r, 100);
        }
        // write 100 was posted before the abort was read; nothing after it
        assertEquals(List.of("abort", "write 100"), order, "the abort waited behind the writes completions posted");
    }

    @Test
    void completionsPostedFromCompletionsKeepTheirOwnTokensAndStatuses() {
        // each completion posts the next batch and flush from its listener, on the events the link just freed: every
        // write and flush must still report once, with its own token and status (a closed source makes writes FAILED)
        final ShmLink[] p = pair();
        final Registration reg = p[1].register(pool, new int[] {0, 1});
        final RemoteRegion region = p[0].attach(reg.key(), 2);
        final List<String> got = new ArrayList<>(), expected = new ArrayList<>();
        try (HostPageStorage open = HostPageStorage.allocate(LAYOUT, 2)) {
            final HostPageStorage closed = HostPageStorage.allocate(LAYOUT, 2);
            closed.close();
            final long[] next = {100};
            final Runnable post = () -> {
                final long first = next[0];
                final boolean fail = (first / 10) % 2 == 1;
                p[0].putBatch(region, new int[] {0, 1}, fail ? closed : open, new int[] {0, 1}, 0, 2, first);
                p[0].flush(first + 2);
                expected.add("write " + first + " " + (fail ? PeerLink.FAILED : PeerLink.OK));
                expected.add("write " + (first + 1) + " " + (fail ? PeerLink.FAILED : PeerLink.OK));
                expected.add("flush " + (first + 2));
                next[0] += 10;
            };
            final LinkListener r = new Recorder() {
                @Override
                public void onWritesDone(PeerLink link, long firstToken, int count, int status) {
                    for (int i = 0; i < count; i++) {
                        got.add("write " + (firstToken + i) + " " + status);
                    }
                    if (next[0] < 300) {
                        post.run();
                    }
                }

                @Override
                public void onFlushDone(PeerLink link, long token, boolean ok) {
                    got.add("flush " + token);
                    if (next[0] < 300) {
                        post.run();
                    }
                }
            };
            post.run();
            // completions are queued at once: polls alone deliver the 60 (4 a poll: some runs are cut at the limit)
            for (int polls = 0; polls < 100; polls++) {
                p[0].poll(r, 4);
            }
        }
        assertEquals(expected, got);
    }

    @Test
    void writesAreReportedInRunsWithinThePollLimit() {
        final ShmLink[] p = pair();
        final Registration reg = p[1].register(pool, new int[] {0, 1, 2, 3, 4});
        final RemoteRegion region = p[0].attach(reg.key(), 5);
        final List<String> runs = new ArrayList<>();
        final Recorder r = new Recorder() {
            @Override
            public void onWritesDone(PeerLink link, long firstToken, int count, int status) {
                runs.add(firstToken + "+" + count);
                super.onWritesDone(link, firstToken, count, status);
            }
        };
        try (HostPageStorage src = HostPageStorage.allocate(LAYOUT, 5)) {
            p[0].putBatch(region, new int[] {0, 1, 2, 3, 4}, src, new int[] {0, 1, 2, 3, 4}, 0, 5, 100);
            p[0].flush(9);
            assertEquals(2, p[0].poll(r, 2));
            assertEquals(2, p[0].poll(r, 2));
            assertEquals(2, p[0].poll(r, 2), "the last write and the flush");
        }
        assertEquals(List.of("100+2", "102+2", "104+1"), runs, "one run per batch, cut at the limit");
        assertEquals(5, r.writes.size());
        for (int i = 0; i < 5; i++) {
            assertArrayEquals(new long[] {100 + i, PeerLink.OK}, r.writes.get(i));
        }
        assertEquals(1, r.flushes.size());
    }

    @Test
    void aRingFileTruncatedUnderItsMappingFailsTheLinkNotThePoller() throws IOException {
        final Raw raw = raw(3);
        try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(Path.of(raw.answer().ringFile()),
            java.nio.file.StandardOpenOption.WRITE)) {
            ch.truncate(0); // what a broken peer could do: every access to the mapping now faults (SIGBUS)
        }
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> raw.link().poll(r, 10));
        assertTrue(r.failures.get(0).contains("faulted"), r.failures.get(0));
        assertThrows(LinkFailedException.class, () -> raw.link().send(WireCodec.encode(new Message.Refuse("x"))));
    }

    @Test
    void malformedVersionThreeBootstrapsAreRefused() throws IOException {
        final long pid = ProcessHandle.current().pid();
        final byte[] good = new Bootstrap(pid, 0, "").encode();
        final byte[] longRingPath = good.clone();
        longRingPath[48] = (byte) 0x88; // ring path length 5000: over the 4096-byte limit
        longRingPath[49] = (byte) 0x13;
        final byte[] reserved = good.clone();
        reserved[53] = 1;
        final java.util.Map<String, byte[]> cases = new java.util.LinkedHashMap<>();
        cases.put("exceeds 4096", longRingPath);
        cases.put("reserved bytes", reserved);
        cases.put("nonce 0 goes with an empty path", new Bootstrap(3, pid, Bootstrap.OWN_PID_NAMESPACE, Bootstrap.startTicks(pid), 0, "",
            42, "").encode());
        cases.put("only a listener creates one", new Bootstrap(3, pid, Bootstrap.OWN_PID_NAMESPACE, Bootstrap.startTicks(pid), 0, "",
            42, "/dev/shm/elsewhere").encode());
        for (var c : cases.entrySet()) {
            final SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            toClose.add(ch);
            ch.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
            final ByteBuffer bytes = ByteBuffer.wrap(c.getValue());
            while (bytes.hasRemaining()) {
                ch.write(bytes.slice(bytes.position(), Math.min(7, bytes.remaining()))); // in pieces: reassembled first
                bytes.position(Math.min(bytes.limit(), bytes.position() + 7));
                assertNull(listener.accept());
            }
            await(c.getKey(), () -> listener.lastRejection() != null && listener.lastRejection().contains(c.getKey()),
                () -> assertNull(listener.accept()));
        }
    }

    @Test
    void aPeerThatCorruptsTheRingPositionsFailsTheLink() throws IOException {
        final Raw raw = raw(3);
        try (ShmRingFile ring = ShmRingFile.map(Path.of(raw.answer().ringFile()), raw.answer().ringNonce())) {
            // the peer's tail of the connector→listener ring, two capacities ahead of what the listener read
            ring.segmentForTest().set(ValueLayout.JAVA_LONG, 128, 2 * ShmRingFile.CAPACITY);
            final Recorder r = new Recorder();
            await("failure", () -> !r.failures.isEmpty(), () -> raw.link().poll(r, 10));
            assertTrue(r.failures.get(0).contains("control ring"), r.failures.get(0));
            assertTrue(r.frames.isEmpty());
        }
    }

    @Test
    void framesSentFromOneReusedBufferArriveIntactAlsoWhenTheRingIsFull() {
        final ShmLink[] p = pair();
        final List<Message> sent = new ArrayList<>();
        ByteBuffer reused = ByteBuffer.allocate(16);
        final Recorder r = new Recorder();
        for (int i = 0; i < 40; i++) {
            // 480 KB descriptors fill the 1 MiB ring within three frames: the rest is queued in the link, so the
            // link must have copied what it queued before the caller's next frame overwrites the buffer
            final Message m = i % 4 == 3 ? new Message.Drained(i, i, 0, i, i, 0)
                : new Message.Descriptor(i, i, 3, 16, LAYOUT.fingerprint(), 1, 0, new long[60_000 - i], new byte[i % 7]);
            sent.add(m);
            final ByteBuffer frame = WireCodec.encode(m, WireFormat.VERSION, reused);
            assertTrue(i == 0 || frame == reused, "every frame after the first fits the first one's buffer");
            reused = frame;
            final int length = frame.remaining();
            p[0].send(frame);
            assertEquals(0, frame.position(), "send leaves the buffer where it was");
            assertEquals(length, frame.limit());
            Arrays.fill(frame.array(), (byte) 0x5A); // the caller reuses its buffer at once
            if (i % 8 == 7) {
                p[1].poll(r, 2); // some room now and then, so that queued frames go through the ring in between
                p[0].poll(new Recorder(), 10);
            }
        }
        // a frame inside a larger buffer, between its position and limit
        final byte[] last = WireCodec.encode(new Message.Refuse("at an offset"));
        final ByteBuffer inside = ByteBuffer.allocate(last.length + 9).put(5, last).position(5).limit(5 + last.length);
        p[0].send(inside);
        assertEquals(5, inside.position());
        sent.add(new Message.Refuse("at an offset"));
        await("41 frames", () -> r.frames.size() == sent.size(), () -> {
            p[0].poll(new Recorder(), 10);
            p[1].poll(r, 3);
        });
        assertEquals(sent, r.frames);
        assertTrue(r.failures.isEmpty(), r.failures::toString);
    }

    @Test
    void framesArriveInOrderBothWaysIncludingFramesLargerThanTheBuffer() {
        final ShmLink[] p = pair();
        final List<Message> sent = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            final Message m = switch (i % 3) {
                case 0 -> new Message.Drained(i, i * 7, 1, i, i, 0);
                case 1 -> new Message.Abort(i, 2, Message.Abort.TIMEOUT, "detail " + "x".repeat(i % 200));
                default -> new Message.Descriptor(i, i, 3, 16, LAYOUT.fingerprint(), 1, 0,
                    new long[i == 2 ? 20_000 : i % 3 == 2 && i < 30 ? 60_000 : i % 50], new byte[i % 100]);
                // 160 KB once (more than the 64 KiB input buffer), and 480 KB frames that fill the 1 MiB ring
            };
            sent.add(m);
            p[0].send(WireCodec.encode(m));
        }
        final Recorder r = new Recorder();
        await("300 frames", () -> r.frames.size() == 300, () -> {
            p[0].poll(new Recorder(), 10);
            p[1].poll(r, 7); // a small limit: the rest waits for the next poll
        });
        assertEquals(sent, r.frames);
        assertTrue(r.failures.isEmpty(), r.failures::toString);
        p[1].send(WireCodec.encode(new Message.Refuse("back")));
        final Recorder back = new Recorder();
        await("reply", () -> back.frames.size() == 1, () -> p[0].poll(back, 10));
        assertEquals(new Message.Refuse("back"), back.frames.get(0));
    }

    @Test
    void partialReadsAreReassembled() throws IOException {
        final Raw raw = raw();
        final byte[] f1 = WireCodec.encode(new Message.Abort(1, 1, Message.Abort.REQUESTED, "first"));
        final byte[] f2 = WireCodec.encode(new Message.Drained(2, 2, 0, 3, 3, 0));
        final Recorder r = new Recorder();
        for (int i = 0; i < f1.length - 1; i++) {
            raw.ch().write(ByteBuffer.wrap(f1, i, 1));
            raw.link().poll(r, 10);
            assertEquals(0, r.frames.size(), "no frame before its last byte (sent " + (i + 1) + " of " + f1.length + ")");
        }
        final ByteBuffer rest = ByteBuffer.allocate(1 + f2.length + 5).put(f1, f1.length - 1, 1).put(f2).put(f1, 0, 5).flip();
        raw.ch().write(rest);
        await("two frames", () -> r.frames.size() == 2, () -> raw.link().poll(r, 10));
        assertEquals(List.of(WireCodec.decode(f1), WireCodec.decode(f2)), r.frames);
        raw.ch().write(ByteBuffer.wrap(f1, 5, f1.length - 5));
        await("third frame", () -> r.frames.size() == 3, () -> raw.link().poll(r, 10));
        assertEquals(WireCodec.decode(f1), r.frames.get(2));
        assertTrue(r.failures.isEmpty());
    }

    @Test
    void aMalformedHeaderFailsTheLinkOnce() throws IOException {
        final Raw raw = raw();
        final byte[] good = WireCodec.encode(new Message.Drained(2, 2, 0, 3, 3, 0));
        final byte[] bad = good.clone();
        bad[0] ^= 0x55; // magic
        raw.ch().write(ByteBuffer.wrap(good));
        raw.ch().write(ByteBuffer.wrap(bad));
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> raw.link().poll(r, 10));
        assertEquals(1, r.frames.size(), "the good frame before the bad one is delivered");
        assertTrue(r.failures.get(0).contains("bad magic"), r.failures.get(0));
        assertFalse(raw.link().isUp());
        for (int i = 0; i < 5; i++) {
            raw.link().poll(r, 10);
        }
        assertEquals(1, r.failures.size(), "delivered once");
        final LinkFailedException e = assertThrows(LinkFailedException.class, () -> raw.link().send(good));
        assertTrue(e.getMessage().contains("bad magic"), e.getMessage());
        // and the peer sees the socket closed
        final ByteBuffer b = ByteBuffer.allocate(64);
        int n;
        while ((n = raw.ch().read(b)) > 0) {
            b.clear();
        }
        assertEquals(-1, n);
    }

    @Test
    void anOversizeBodyIsRefusedBeforeBuffering() throws IOException {
        final Raw raw = raw();
        final ByteBuffer h = ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN)
            .putShort((short) 0x564B).put((byte) 1).put((byte) 3).putInt(Integer.MAX_VALUE).flip();
        raw.ch().write(h);
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> raw.link().poll(r, 10));
        assertTrue(r.failures.get(0).contains("exceeds the limit"), r.failures.get(0));
    }

    @Test
    void peerEofFailsTheLinkOnceAfterTheFramesBeforeIt() throws IOException {
        final Raw raw = raw();
        raw.ch().write(ByteBuffer.wrap(WireCodec.encode(new Message.Drained(2, 2, 0, 3, 3, 0))));
        raw.ch().close();
        final Recorder r = new Recorder();
        await("failure", () -> !r.failures.isEmpty(), () -> raw.link().poll(r, 10));
        assertEquals(1, r.frames.size());
        assertTrue(r.failures.get(0).contains("EOF"), r.failures.get(0));
        raw.link().poll(r, 10);
        assertEquals(1, r.failures.size());
    }

    @Test
    void aBadBootstrapIsDroppedByTheListener() throws IOException {
        final SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(ch);
        ch.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        ch.write(ByteBuffer.wrap(new byte[32]));
        await("rejection", () -> listener.lastRejection() != null, () -> assertNull(listener.accept()));
        assertTrue(listener.lastRejection().contains("magic"), listener.lastRejection());
        // a peer claiming a pid that is no process here is refused too
        final SocketChannel ch2 = SocketChannel.open(StandardProtocolFamily.UNIX);
        toClose.add(ch2);
        ch2.connect(UnixDomainSocketAddress.of(dir.resolve("sock")));
        ch2.write(ByteBuffer.wrap(new Bootstrap(Integer.MAX_VALUE - 1, 0, "").encode()));
        await("pid rejection", () -> listener.lastRejection().contains("pid"), () -> assertNull(listener.accept()));
    }

    @Test
    void writesLandInTheRegisteredSlotsOnlyAndEachReportsOnce() {
        final ShmLink[] p = pair();
        final ShmLink sender = p[0], receiver = p[1];
        final int[] slots = {5, 2, 6};
        final Registration reg = receiver.register(pool, slots);
        final RemoteRegion region = sender.attach(reg.key(), 3);
        assertEquals(3, region.pages());
        try (HostPageStorage src = HostPageStorage.allocate(LAYOUT, 3)) {
            for (int i = 0; i < 3; i++) {
                src.hostPage(i).fill((byte) (0x10 + i));
            }
            sender.putBatch(region, new int[] {2, 0, 1}, src, new int[] {0, 1, 2}, 0, 3, 100);
            sender.flush(7);
            final Recorder r = new Recorder();
            await("completions", () -> r.flushes.size() == 1, () -> sender.poll(r, 2));
            assertEquals(3, r.writes.size());
            for (int i = 0; i < 3; i++) {
                assertArrayEquals(new long[] {100 + i, PeerLink.OK}, r.writes.get(i));
            }
            assertArrayEquals(new Object[] {7L, true}, r.flushes.get(0));
            // region page 2 = slot 6 ← src 0; region 0 = slot 5 ← src 1; region 1 = slot 2 ← src 2
            assertEquals(-1L, pool.hostPage(6).mismatch(src.hostPage(0)));
            assertEquals(-1L, pool.hostPage(5).mismatch(src.hostPage(1)));
            assertEquals(-1L, pool.hostPage(2).mismatch(src.hostPage(2)));
            for (int s : new int[] {0, 1, 3, 4, 7}) {
                MappedPageStorageTest.assertCanaryPage(pool, s);
            }
            // bad uses are refused before anything is posted
            assertThrows(IndexOutOfBoundsException.class,
                () -> sender.putBatch(region, new int[] {3}, src, new int[] {0}, 0, 1, 200));
            try (HostPageStorage other = HostPageStorage.allocate(MappedPageStorageTest.OTHER, 1)) {
                final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> sender.putBatch(region, new int[] {0}, other, new int[] {0}, 0, 1, 200));
                assertTrue(e.getMessage().contains(Long.toHexString(MappedPageStorageTest.OTHER.fingerprint())), e.getMessage());
            }
            sender.poll(r, 100);
            assertEquals(3, r.writes.size(), "refused batches post nothing");
        }
        assertTrue(assertThrows(LinkFailedException.class, () -> sender.attach(reg.key(), 4)).getMessage().contains("3 pages"));
        final byte[] forged = reg.key().clone(); // the registration's own array: a forgery changes a copy
        forged[5] ^= 1; // file identity
        assertTrue(assertThrows(LinkFailedException.class, () -> sender.attach(forged, 3)).getMessage().contains("identity"));
        assertThrows(IllegalArgumentException.class, () -> receiver.register(pool, new int[] {1, 1}));
        assertThrows(IndexOutOfBoundsException.class, () -> receiver.register(pool, new int[] {8}));
        assertFalse(reg.revoke(), "mapped memory cannot be revoked");
        assertFalse(receiver.tearDown(), "the peer is this very process: never proven gone");
        assertFalse(receiver.tearDown());
        assertFalse(receiver.isUp());
        sender.cancelWrites();
        sender.close();
        sender.close();
        assertThrows(LinkFailedException.class, () -> sender.flush(1));
    }
}
