package io.kvpool.transfer.ucx;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.File;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;

import static io.kvpool.transfer.ucx.UcxTestSupport.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * What a UCX link holds over its life and gives back:
 * remote keys per registration, not per transfer; a closed link's worker and sockets after a grace; nothing of a
 * connect that failed; no failure reported by a link that was closed.
 */
@Timeout(60)
class UcxLinkLifecycleTest {

    UcxTransport a, b;
    PageStorage src, dst;

    @BeforeEach
    void setUp() {
        assumeUcx();
        a = UcxTransport.open("rev-sender");
        b = UcxTransport.open("rev-receiver");
        src = HostPageStorage.allocate(LAYOUT, 8);
        dst = HostPageStorage.allocate(LAYOUT, 8);
    }

    @AfterEach
    void close() {
        if (a != null) {
            a.close();
            b.close();
        }
        if (src != null) {
            src.close();
            dst.close();
        }
    }

    /** @return {sender link on a, receiver link on b} */
    UcxLink[] pair(String name) throws Exception {
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            final CompletableFuture<UcxLink> rf = CompletableFuture.supplyAsync(() -> {
                try (Socket s = ss.accept()) {
                    return b.connect(s, name + "-r", Duration.ofSeconds(5));
                } catch (java.io.IOException e) {
                    throw new RuntimeException(e);
                }
            });
            final UcxLink s;
            try (Socket sock = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                s = a.connect(sock, name + "-s", Duration.ofSeconds(5));
            }
            return new UcxLink[] {s, rf.get()};
        }
    }

    /** A link pair made and torn down first, so UCX's first-use allocations stay out of a file-descriptor baseline. */
    private void warmUp() throws Exception {
        final UcxLink[] warm = pair("warm");
        warm[0].close();
        warm[1].close();
        assertTrue(warm[0].tearDown() & warm[1].tearDown());
    }

    static int openFds() {
        final String[] fds = new File("/proc/self/fd").list();
        return fds == null ? -1 : fds.length;
    }


    /**
     * The UcpRemoteKey an attach() unpacks must not be kept until the link closes: TransferSender attaches once per
     * transfer on a long-lived link, so a sender would hold one native rkey per transfer, without bound.
     */
    @Test
    void attachOnALongLivedLinkKeepsOneNativeRkeyPerTransferForever() throws Exception {
        final UcxLink[] p = pair("rkeys");
        final UcxLink sender = p[0], receiver = p[1];
        final int transfers = 200;
        final Recorder rs = new Recorder();
        for (int t = 0; t < transfers; t++) {
            final Registration reg = receiver.register(dst, new int[] {t % 8});
            final RemoteRegion region = sender.attach(reg.key(), 1);
            sender.putBatch(region, new int[] {0}, src, new int[] {t % 8}, 0, 1, t);
            sender.flush(t);
            final int want = t + 1;
            assertTrue(rs.pollUntil(sender, () -> rs.flushes.size() == want, 10_000), "flush " + t);
            assertEquals(1, rs.flushes.get(t)[1], "flush " + t + " ok");
            reg.close(); // the transfer is over: every write flushed, the registration ended
        }
        final long unpacked = sender.unpackedKeyCount();
        assertEquals(1, unpacked, "the sender link unpacked " + unpacked + " UcpRemoteKeys for " + transfers
            + " transfers into one registered storage (one per attach, released only when the link closes)");
        sender.close();
        receiver.close();
    }

    /**
     * close() (what TransferEndpoint.fail() and closeLinks() call) force-closes the endpoint; it must not keep the
     * link's worker, its sockets and its place in the progress loop until tearDown() or the transport's close,
     * which a sender never calls: every closed link would leak a worker with its file descriptors. The worker
     * goes once the close finished and a grace passed (shortened here).
     */
    @Test
    void closedLinksGiveTheirWorkersAndSocketsBackAfterTheGrace() throws Exception {
        a.closedWorkerGraceNanos = 200_000_000L;
        b.closedWorkerGraceNanos = 200_000_000L;
        warmUp();
        Thread.sleep(200);
        final int before = openFds();
        final int links = 20;
        final UcxLink[] last = new UcxLink[2];
        for (int i = 0; i < links; i++) {
            final UcxLink[] p = pair("churn" + i);
            p[0].close(); // TransferEndpoint.fail(): the link is closed and forgotten
            p[1].close();
            last[0] = p[0];
            last[1] = p[1];
        }
        final long end = System.nanoTime() + 10_000_000_000L;
        while ((a.linkCount() > 0 || b.linkCount() > 0 || openFds() - before >= links) && System.nanoTime() < end) {
            Thread.sleep(50);
        }
        final int after = openFds();
        assertEquals(0, a.linkCount(), "closed links still progressed by the sender transport");
        assertEquals(0, b.linkCount(), "closed links still progressed by the receiver transport");
        assertTrue(after - before < links, "closing " + links + " link pairs left " + (after - before) + " more file descriptors open");
        assertTrue(last[0].tearDown() && last[1].tearDown(), "a reaped link's worker is gone: its teardown is proven");
        assertFalse(last[0].holdsReceiveBuffer() || last[1].holdsReceiveBuffer(), "a reaped link still holds its 1 MiB receive buffer");
    }

    @Test
    void aClosedLinksWorkerStaysForTheGrace() throws Exception {
        // the other side: the peer may still be applying our last puts, and UCX 1.13.1 aborts a process that
        // acks on an endpoint whose worker vanished (docs/dependencies.md, "UCX from Java"), so the worker is not destroyed at once
        final UcxLink[] p = pair("grace");
        p[0].close();
        Thread.sleep(500); // well inside the default 5 s grace, past several reaping rounds
        assertEquals(1, a.linkCount(), "the closed link's worker went before the grace");
        assertFalse(p[0].workerClosedForTests());
        p[1].close();
    }

    /** The control: with tearDown() after close() the same churn returns to the baseline (the churn test can pass). */
    @Test
    void controlTornDownLinksGiveTheirSocketsBack() throws Exception {
        warmUp();
        Thread.sleep(200);
        final int before = openFds();
        final int links = 20;
        for (int i = 0; i < links; i++) {
            final UcxLink[] p = pair("churn" + i);
            p[0].close();
            p[1].close();
            assertTrue(p[0].tearDown() & p[1].tearDown());
        }
        Thread.sleep(500);
        final int after = openFds();
        System.out.printf("control: fds before %d, after %d torn-down link pairs %d%n", before, links, after);
        assertTrue(after - before < links, "torn down, yet " + (after - before) + " more fds");
        assertEquals(0, a.linkCount());
    }

    /**
     * cancelWrites() on a link that was close()d (not failed) must not queue fail(): the closed link would later
     * report onLinkFailed — a failure of a link that never failed, after its close.
     */
    @Test
    void cancelWritesAfterCloseReportsALinkFailureOfAClosedLink() throws Exception {
        final UcxLink[] p = pair("cancel-after-close");
        final UcxLink sender = p[0];
        sender.close();
        final Recorder rs = new Recorder();
        rs.pollUntil(sender, () -> false, 100);
        assertTrue(rs.failures.isEmpty(), "a plain close reports no failure: " + rs.failures);
        sender.cancelWrites(); // e.g. TransferSender's forced cancel of a FAILING transfer whose peer was closed
        rs.pollUntil(sender, () -> !rs.failures.isEmpty(), 1_000);
        assertTrue(rs.failures.isEmpty(), "closed link reported onLinkFailed after close: " + rs.failures);
        p[1].close();
    }

    /**
     * connect() must not add the link to the progress list before start(): when start() throws (the peer's worker
     * address unreachable over tcp, here a worker of a shared-memory-only context) the link would stay there with its
     * worker open and no handle for the caller to close it. Nor may the exception be a raw UcxException.
     */
    @Test
    void aConnectWhoseEndpointCannotBeCreatedLeaksTheLinksWorker() throws Exception {
        final org.openucx.jucx.ucp.UcpContext shmOnly = new org.openucx.jucx.ucp.UcpContext(new org.openucx.jucx.ucp.UcpParams()
            .requestTagFeature().requestRmaFeature().setConfig("TLS", "posix"));
        final org.openucx.jucx.ucp.UcpWorker w = shmOnly.newWorker(new org.openucx.jucx.ucp.UcpWorkerParams());
        try {
            final java.nio.ByteBuffer addr = w.getAddress();
            final byte[] address = new byte[addr.remaining()];
            addr.duplicate().get(address);
            final int attempts = 5;
            int refused = 0;
            for (int i = 0; i < attempts; i++) {
                try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                    final CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                        try (Socket s = ss.accept()) {
                            final java.io.DataOutputStream out = new java.io.DataOutputStream(s.getOutputStream());
                            out.writeInt(0x55435831);
                            out.writeLong(7);
                            out.writeInt(address.length);
                            out.write(address);
                            out.flush();
                            final java.io.DataInputStream in = new java.io.DataInputStream(s.getInputStream());
                            in.readInt();
                            in.readLong();
                            in.readFully(new byte[in.readInt()]);
                        } catch (java.io.IOException e) {
                            throw new RuntimeException(e);
                        }
                    });
                    try (Socket sock = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                        a.connect(sock, "unreachable" + i, Duration.ofSeconds(5));
                    } catch (io.kvpool.transfer.spi.LinkFailedException e) {
                        refused++;
                        assertTrue(e.getMessage().contains("could not be created"), e.getMessage());
                    }
                    fake.get();
                }
            }
            assertEquals(attempts, refused, "every connect to an unreachable worker must fail");
            final int kept = a.linkCount();
            assertEquals(0, kept, kept + " links of failed connects are still in the transport, each with its worker open");
        } finally {
            w.close();
            shmOnly.close();
        }
    }

    /**
     * A connect whose last step (the endpoint, on the UCX thread) times out before that step starts: the link's worker,
     * made in its first step, must be closed, not left open outside the transport.
     */
    @Test
    void aConnectThatTimesOutBeforeItsEndpointClosesItsWorker() throws Exception {
        warmUp();
        final int before = openFds();
        final java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        final java.io.ByteArrayOutputStream peerHalf = new java.io.ByteArrayOutputStream();
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            final CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (Socket s = ss.accept()) {
                    final java.io.DataInputStream in = new java.io.DataInputStream(s.getInputStream());
                    final int magic = in.readInt();
                    final long tag = in.readLong();
                    final byte[] address = new byte[in.readInt()];
                    in.readFully(address);
                    // the connect's first two steps are done (its half came): only its last one meets a short timeout
                    a.callTimeout = Duration.ofMillis(300);
                    a.execute(() -> { // the UCX thread is busy past the connect's call timeout
                        try {
                            release.await();
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    });
                    final java.io.DataOutputStream out = new java.io.DataOutputStream(s.getOutputStream());
                    out.writeInt(magic); // its own half, as a peer would: the connect goes on to its last step
                    out.writeLong(tag + 1000);
                    out.writeInt(address.length);
                    out.write(address);
                    out.flush();
                    peerHalf.write(1);
                    in.read(); // until the connector closes its socket
                } catch (java.io.IOException e) {
                    throw new RuntimeException(e);
                }
            });
            try (Socket sock = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                final io.kvpool.transfer.TransferException late = assertThrows(io.kvpool.transfer.TransferException.class,
                    () -> a.connect(sock, "late", Duration.ofSeconds(5)));
                assertTrue(late.getMessage().contains("no answer from the UCX thread"), late.getMessage());
            } finally {
                release.countDown();
                a.callTimeout = Duration.ofSeconds(10); // the default again, for the checks and the close below
            }
            fake.get();
        }
        assertEquals(1, peerHalf.size(), "the fake peer did not answer: the connect failed before its last step");
        assertEquals(0, a.linkCount());
        a.call(() -> null); // the skipped command and what it released ran before this one
        final int after = openFds();
        assertTrue(after - before <= 0, (after - before) + " descriptors more than before the connect: its worker is still open");
    }

    /**
     * A control message shorter than the frame header (here empty) is malformed: the link fails. The receive buffer
     * still holds the previous frame, which must not be read again as if the peer had sent it twice.
     */
    @Test
    void anEmptyControlMessageFailsTheLinkInsteadOfRepeatingTheLastFrame() throws Exception {
        try (RawPeer peer = RawPeer.linkedTo(a, "short-messages")) {
            final byte[] ping = io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(42));
            peer.send(ping);
            peer.send(new byte[0]);
            final Recorder r = new Recorder();
            r.pollUntil(peer.link, () -> !r.failures.isEmpty() || r.frames.size() > 1, 3_000);
            assertEquals(java.util.List.of(new io.kvpool.transfer.wire.Message.Ping(42)), r.frames, "frames delivered");
            assertEquals(1, r.failures.size(), "the empty message did not fail the link");
            assertTrue(r.failures.get(0).contains("malformed control frame"), r.failures.get(0));
        }
    }

    /**
     * A control message longer than its frame header says fails the link, and its extra bytes never complete a later
     * frame: here a header-only message that declares a body would have been completed with the earlier message's
     * tail. The three messages are all sent before the link polls, so each was waiting before it was received.
     */
    @Test
    void aControlMessageLongerThanItsFrameFailsTheLinkAndLeavesNothingBehind() throws Exception {
        try (RawPeer peer = RawPeer.linkedTo(a, "long-messages")) {
            final byte[] first = io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(1));
            final byte[] second = io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(2));
            final byte[] tail = io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(0x3333333333333333L));
            final byte[] longer = java.util.Arrays.copyOf(second, second.length + tail.length); // a frame, then 16 bytes more
            System.arraycopy(tail, 0, longer, second.length, tail.length);
            final byte[] headerOnly = java.util.Arrays.copyOf(first, io.kvpool.transfer.wire.WireFormat.HEADER_BYTES); // declares 8
            peer.send(first);
            peer.send(longer);
            peer.send(headerOnly);
            final Recorder r = new Recorder();
            r.pollUntil(peer.link, () -> !r.failures.isEmpty() || r.frames.size() > 2, 3_000);
            assertEquals(java.util.List.of(new io.kvpool.transfer.wire.Message.Ping(1)), r.frames, "frames delivered");
            assertEquals(1, r.failures.size(), "the longer message did not fail the link: " + r.frames);
            assertTrue(r.failures.get(0).contains("declares a 8-byte body, the message carried 32 bytes"), r.failures.get(0));
        }
    }

    /**
     * A sender's last frame, sent just before its process vanished, is delivered before the link's failure, even when
     * the link's thread takes the frame and the endpoint error in one round (it was busy meanwhile): a COMPLETION or
     * a DRAINED followed by the sender's exit must not turn into a lost peer.
     */
    @Test
    void aFrameSentJustBeforeThePeerVanishedIsDeliveredBeforeTheFailure() throws Exception {
        peerSendsALastFrameAndVanishes("last-frame", false);
    }

    /**
     * As above, with one of this side's control sends still pending when the peer vanishes (a frame large enough for
     * rendezvous, which the peer never received): the send's failure, reported in the same round as the endpoint's,
     * must not overtake the peer's last frame nor keep it from being taken.
     */
    @Test
    void aFrameSentJustBeforeThePeerVanishedIsDeliveredBeforeTheFailureOfAPendingSend() throws Exception {
        peerSendsALastFrameAndVanishes("last-frame-pending-send", true);
    }

    /**
     * A peer sends a first frame, then, while the link's UCX thread is busy, a last one, and vanishes: the link must
     * deliver both frames, then one failure.
     *
     * @param pendingSend whether the link has a control send of its own pending when the peer vanishes (a frame of
     *                    ~480 KB goes by rendezvous, and stays pending: the raw peer posts no receive for it)
     */
    private void peerSendsALastFrameAndVanishes(String name, boolean pendingSend) throws Exception {
        try (RawPeer peer = RawPeer.linkedTo(a, name)) {
            peer.send(io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(1)));
            final Recorder r = new Recorder();
            r.pollUntil(peer.link, () -> !r.frames.isEmpty() || !r.failures.isEmpty(), 3_000);
            assertEquals(java.util.List.of(new io.kvpool.transfer.wire.Message.Ping(1)), r.frames, "the first frame " + r.failures);
            if (pendingSend) {
                peer.link.send(io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Descriptor(
                    1, 2, 3, 16, 4, 1, 0, new long[60_000], new byte[] {1, 2, 3, 4})));
                for (int i = 0; i < 1000; i++) {
                    peer.w.progress();
                }
            }
            // the link's thread is busy while the peer sends its last frame and goes away
            final CompletableFuture<Object> busy = CompletableFuture.supplyAsync(() -> a.call(() -> {
                Thread.sleep(1_500);
                return null;
            }));
            Thread.sleep(200);
            peer.send(io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(2)));
            for (int i = 0; i < 1000; i++) {
                peer.w.progress();
            }
            peer.vanish();
            busy.get();
            r.pollUntil(peer.link, () -> !r.failures.isEmpty(), 10_000);
            assertEquals(java.util.List.of(new io.kvpool.transfer.wire.Message.Ping(1), new io.kvpool.transfer.wire.Message.Ping(2)),
                r.frames, "the last frame before the peer vanished, then " + r.failures);
            assertEquals(1, r.failures.size(), r.failures::toString);
        }
    }

    /**
     * A control message on a tag other than the link's fails the link, naming both tags: the link's worker is its own,
     * so only the peer can have sent it, and left unreceived it would wait in UCX's queue until the link closed (a peer
     * sending such messages would grow this process's memory without bound, and a peer that swapped the tags would see
     * its frames vanish without a word).
     */
    @Test
    void aControlMessageOnAnotherTagFailsTheLinkNamingBothTags() throws Exception {
        try (RawPeer peer = RawPeer.linkedTo(a, "wrong-tag")) {
            final byte[] ping = io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(1));
            sendAndWait(peer.w, peer.ep, java.nio.ByteBuffer.allocateDirect(ping.length).put(ping).flip(), peer.linkTag + 1);
            peer.send(io.kvpool.transfer.wire.WireCodec.encode(new io.kvpool.transfer.wire.Message.Ping(2)));
            final Recorder r = new Recorder();
            r.pollUntil(peer.link, () -> !r.failures.isEmpty(), 3_000);
            assertEquals(1, r.failures.size(), "a message on tag " + (peer.linkTag + 1) + " did not fail the link (tag "
                + peer.linkTag + "); frames " + r.frames);
            assertTrue(r.failures.get(0).contains("tag " + (peer.linkTag + 1)) && r.failures.get(0).contains("tag " + peer.linkTag),
                r.failures.get(0));
            assertEquals(java.util.List.of(), r.frames, "frames delivered after a message on another tag");
        }
    }

    /**
     * A link whose worker could not be closed (the close threw) has not ended its writes: UCX may still read their
     * source pages and apply them at the peer. It must not report them CANCELED, or the sender releases those pages
     * for another request while a put still reads them; it reports them never, as the SPI asks of a transport that
     * cannot guarantee a write's end. Here the worker's close throws because its native id is hidden for the call.
     */
    @Test
    void writesOfAWorkerWhoseCloseFailedAreNeverReportedEnded() throws Exception {
        final UcxLink[] p = pair("close-fails");
        final UcxLink sender = p[0], receiver = p[1];
        completeWireUp(sender, receiver);
        final int[] slots = {0, 1, 2, 3, 4, 5, 6, 7};
        final Registration reg = receiver.register(dst, slots);
        final RemoteRegion region = sender.attach(reg.key(), slots.length);
        final java.lang.reflect.Field workerField = UcxLink.class.getDeclaredField("worker");
        workerField.setAccessible(true);
        final java.lang.reflect.Field idField = org.openucx.jucx.UcxNativeStruct.class.getDeclaredField("nativeId");
        idField.setAccessible(true);
        final org.openucx.jucx.ucp.UcpWorker real = (org.openucx.jucx.ucp.UcpWorker) workerField.get(sender);
        final long[] inFlight = new long[1];
        final java.util.concurrent.CountDownLatch thaw = new java.util.concurrent.CountDownLatch(1);
        b.execute(() -> { // the receiver's UCX thread stalls: 32 MiB of puts overflow the sockets and wait in UCX
            try {
                thaw.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        for (int r = 0; r < 256; r++) {
            sender.putBatch(region, slots, src, slots, 0, slots.length, (long) r * slots.length);
        }
        final Recorder rs = new Recorder();
        try {
            a.call(() -> {
                final java.lang.reflect.Field outstanding = UcxLink.class.getDeclaredField("outstandingWrites");
                outstanding.setAccessible(true);
                inFlight[0] = outstanding.getLong(sender);
                final Object id = idField.get(real);
                idField.set(real, null); // UcpWorker.close() now throws
                try {
                    sender.closeWorkerNow();
                } finally {
                    idField.set(real, id);
                }
                return null;
            });
            assertTrue(inFlight[0] > 0, "no write was in flight when the worker's close failed");
            rs.pollUntil(sender, () -> false, 300);
            assertEquals(0, rs.canceled + rs.failed, (rs.canceled + rs.failed) + " of " + inFlight[0]
                + " writes in flight on a worker whose close failed were reported ended (ok " + rs.ok + ")");
            assertFalse(sender.tearDown(), "a worker whose close failed proves no teardown");
        } finally {
            // the receiver's worker goes before its thread runs again (commands run before progress): puts of a sender
            // whose worker is gone, handled mid-stream, make UCX 1.13.1 abort the process in its put handler
            b.execute(receiver::closeWorkerNow);
            thaw.countDown();
            a.call(() -> {
                real.close(); // the test's own clean-up: the worker the link could not close
                return null;
            });
            reg.close();
            receiver.close();
        }
    }

    /**
     * The bootstrap's timeout bounds the whole wait for the peer's half, not each read: a peer that trickles its worker
     * address a byte at a time, each within the timeout, must not hold connect (and its caller's thread) for longer.
     */
    @Test
    void aPeerThatTricklesItsBootstrapHalfIsCutOffAtTheTimeout() throws Exception {
        final org.openucx.jucx.ucp.UcpContext ctx = new org.openucx.jucx.ucp.UcpContext(new org.openucx.jucx.ucp.UcpParams()
            .requestTagFeature().requestRmaFeature().setConfig("TLS", "tcp"));
        final org.openucx.jucx.ucp.UcpWorker w = ctx.newWorker(new org.openucx.jucx.ucp.UcpWorkerParams());
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            final java.nio.ByteBuffer addr = w.getAddress();
            final byte[] address = new byte[addr.remaining()];
            addr.duplicate().get(address);
            final CompletableFuture<Void> slow = CompletableFuture.runAsync(() -> {
                try (Socket s = ss.accept()) {
                    final java.io.DataOutputStream out = new java.io.DataOutputStream(s.getOutputStream());
                    out.writeInt(0x55435831);
                    out.writeLong(7);
                    out.writeInt(address.length);
                    out.flush();
                    for (byte x : address) { // one byte every 40 ms: each read is well within the 300 ms timeout
                        Thread.sleep(40);
                        out.write(x);
                        out.flush();
                    }
                    s.getInputStream().read(); // until the connector closes its socket
                } catch (java.io.IOException | InterruptedException e) {
                    // the connector gave up and closed its socket
                }
            });
            final long start = System.nanoTime();
            try (Socket sock = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                final UcxLink link = a.connect(sock, "trickle", Duration.ofMillis(300));
                link.close();
            } catch (io.kvpool.transfer.spi.LinkFailedException e) {
                assertTrue(e.getMessage().contains("300 ms"), e.getMessage());
            }
            final long ms = (System.nanoTime() - start) / 1_000_000;
            assertTrue(ms < 2_000, "connect with a 300 ms timeout waited " + ms + " ms for a peer that trickled its "
                + address.length + "-byte address");
            slow.get();
        } finally {
            w.close();
            ctx.close();
        }
    }

    /**
     * A raw UCX worker on the other end of a {@link UcxLink}: it answers the link's bootstrap by hand and sends tagged
     * messages of any content, as a broken peer would.
     */
    private static final class RawPeer implements AutoCloseable {
        final org.openucx.jucx.ucp.UcpContext ctx = new org.openucx.jucx.ucp.UcpContext(new org.openucx.jucx.ucp.UcpParams()
            .requestTagFeature().requestRmaFeature().setConfig("TLS", "tcp"));
        final org.openucx.jucx.ucp.UcpWorker w = ctx.newWorker(new org.openucx.jucx.ucp.UcpWorkerParams());
        org.openucx.jucx.ucp.UcpEndpoint ep;
        UcxLink link;
        long linkTag;

        static RawPeer linkedTo(UcxTransport transport, String label) throws Exception {
            final RawPeer p = new RawPeer();
            try {
                final java.nio.ByteBuffer addr = p.w.getAddress();
                final byte[] own = new byte[addr.remaining()];
                addr.duplicate().get(own);
                final byte[][] linkAddress = new byte[1][];
                try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                    final CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                        try (Socket s = ss.accept()) {
                            final java.io.DataInputStream in = new java.io.DataInputStream(s.getInputStream());
                            final int magic = in.readInt();
                            p.linkTag = in.readLong();
                            linkAddress[0] = new byte[in.readInt()];
                            in.readFully(linkAddress[0]);
                            final java.io.DataOutputStream out = new java.io.DataOutputStream(s.getOutputStream());
                            out.writeInt(magic);
                            out.writeLong(7);
                            out.writeInt(own.length);
                            out.write(own);
                            out.flush();
                        } catch (java.io.IOException e) {
                            throw new RuntimeException(e);
                        }
                    });
                    try (Socket sock = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                        p.link = transport.connect(sock, label, Duration.ofSeconds(5));
                    }
                    fake.get();
                }
                final java.nio.ByteBuffer to = java.nio.ByteBuffer.allocateDirect(linkAddress[0].length).put(linkAddress[0]).flip();
                p.ep = p.w.newEndpoint(new org.openucx.jucx.ucp.UcpEndpointParams().setUcpAddress(to).setPeerErrorHandlingMode());
                return p;
            } catch (Exception | Error e) {
                p.close();
                throw e;
            }
        }

        private boolean vanished;

        /** Sends {@code message} as one tagged message to the link and waits until the send completed. */
        void send(byte[] message) throws Exception {
            sendAndWait(w, ep, java.nio.ByteBuffer.allocateDirect(message.length).put(message).flip(), linkTag);
        }

        /** Closes the worker at once, its connection with it, as a process that exits does. */
        void vanish() {
            vanished = true;
            w.close();
        }

        @Override
        public void close() throws Exception {
            if (link != null) {
                link.close();
            }
            if (!vanished) {
                if (ep != null) {
                    ep.closeNonBlockingForce();
                    for (int i = 0; i < 100; i++) {
                        w.progress();
                    }
                }
                w.close();
            }
            ctx.close();
        }
    }

    /** {@return whether UCX still holds the native remote key (JUCX clears its id when it is destroyed)} */
    private static boolean nativeKeyAlive(org.openucx.jucx.ucp.UcpRemoteKey k) {
        return k.getNativeId() != null;
    }

    /** {@return the remote key of a region from {@link UcxLink#attach}} */
    private static org.openucx.jucx.ucp.UcpRemoteKey rkeyOf(RemoteRegion region) throws Exception {
        final java.lang.reflect.Method m = region.getClass().getDeclaredMethod("rkey");
        m.setAccessible(true);
        return (org.openucx.jucx.ucp.UcpRemoteKey) m.invoke(region);
    }

    /**
     * The assumption {@code closeOnOwner} rests on when it goes on to close the remote keys: a force close ends every
     * write of the endpoint by the time its close completes (here inside the call, with the receiver stalled so that
     * the writes wait in UCX), so no put can still be using a remote key once the close is seen completed.
     */
    @Test
    void aForceCloseEndsEveryWriteByTheTimeItsCloseCompletes() throws Exception {
        final UcxLink[] p = pair("force-close-ends-writes");
        final UcxLink sender = p[0], receiver = p[1];
        completeWireUp(sender, receiver);
        final int[] slots = {0, 1, 2, 3, 4, 5, 6, 7};
        final Registration reg = receiver.register(dst, slots);
        final RemoteRegion region = sender.attach(reg.key(), slots.length);
        final java.util.concurrent.CountDownLatch thaw = new java.util.concurrent.CountDownLatch(1);
        b.execute(() -> { // the receiver's UCX thread stalls: the puts overflow the sockets and wait in UCX
            try {
                thaw.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        try {
            for (int r = 0; r < 256; r++) {
                sender.putBatch(region, slots, src, slots, 0, slots.length, (long) r * slots.length);
            }
            final long[] outstanding = a.call(() -> {
                final java.lang.reflect.Field writes = UcxLink.class.getDeclaredField("outstandingWrites");
                writes.setAccessible(true);
                final java.lang.reflect.Field request = UcxLink.class.getDeclaredField("closeRequest");
                request.setAccessible(true);
                final java.lang.reflect.Method forceClose = UcxLink.class.getDeclaredMethod("forceClose");
                forceClose.setAccessible(true);
                final long before = writes.getLong(sender);
                forceClose.invoke(sender);
                final org.openucx.jucx.ucp.UcpRequest close = (org.openucx.jucx.ucp.UcpRequest) request.get(sender);
                assertTrue(a.progressUntil(close::isCompleted, System.nanoTime() + 5_000_000_000L), "the force close did not complete");
                return new long[] {before, writes.getLong(sender)};
            });
            assertTrue(outstanding[0] > 0, "no write was in flight when the endpoint was force-closed");
            assertEquals(0, outstanding[1], outstanding[1] + " of " + outstanding[0] + " writes still in flight when the force close completed");
        } finally {
            thaw.countDown();
            sender.close();
            reg.close();
            receiver.close();
        }
    }

    /**
     * A teardown whose force close of the endpoint fails destroys the link's worker at once (the only other fence).
     * The remote keys unpacked on it must be destroyed first: UCX wants a remote key destroyed before the endpoint it
     * was unpacked on, and nothing can destroy it after the worker is gone (its memory pool went with the worker).
     * closeWorkerNow must destroy them. Here the force close throws because the endpoint's native id is hidden.
     */
    @Test
    void aWorkerClosedWithoutItsCloseFinishingDestroysItsRemoteKeysFirst() throws Exception {
        final UcxLink[] p = pair("rkeys-of-a-forced-worker-close");
        final UcxLink sender = p[0], receiver = p[1];
        completeWireUp(sender, receiver);
        final Registration reg = receiver.register(dst, new int[] {0, 1});
        final org.openucx.jucx.ucp.UcpRemoteKey key = rkeyOf(sender.attach(reg.key(), 2));
        final java.lang.reflect.Field epField = UcxLink.class.getDeclaredField("ep");
        epField.setAccessible(true);
        final java.lang.reflect.Field idField = org.openucx.jucx.UcxNativeStruct.class.getDeclaredField("nativeId");
        idField.setAccessible(true);
        try {
            a.call(() -> {
                idField.set(epField.get(sender), null); // closeNonBlockingForce() now throws; the worker's close destroys the endpoint
                return null;
            });
            assertTrue(sender.tearDown(), "the worker's close is the teardown's proof");
            assertTrue(sender.workerClosedForTests());
            assertFalse(a.call(() -> nativeKeyAlive(key)), "the link's worker is closed and its remote key was never destroyed");
        } finally {
            reg.close();
            receiver.close();
        }
    }

    /**
     * An exception from a link's per-round work on the transport's thread (here a remote key whose close throws, met
     * when a close that completed in the background is finished after a progress round) must not stop that thread:
     * the transport would go on accepting commands that never run, and every link on it would hang. The link's other
     * remote keys are still destroyed. The exception must not leave loop(): the thread would end.
     */
    @Test
    void aRemoteKeyWhoseCloseThrowsDoesNotStopTheTransportsThread() throws Exception {
        final UcxLink[] p = pair("rkey-close-throws");
        final UcxLink sender = p[0], receiver = p[1];
        final UcxLink[] other = pair("bystander");
        completeWireUp(sender, receiver);
        completeWireUp(other[0], other[1]);
        final Registration reg = receiver.register(dst, new int[] {0, 1});
        final org.openucx.jucx.ucp.UcpRemoteKey key = rkeyOf(sender.attach(reg.key(), 2));
        final java.lang.reflect.Field keysField = UcxLink.class.getDeclaredField("remoteKeys");
        keysField.setAccessible(true);
        final java.lang.reflect.Constructor<org.openucx.jucx.ucp.UcpRemoteKey> bare =
            org.openucx.jucx.ucp.UcpRemoteKey.class.getDeclaredConstructor();
        bare.setAccessible(true);
        a.call(() -> {
            @SuppressWarnings("unchecked")
            final java.util.Map<java.nio.ByteBuffer, org.openucx.jucx.ucp.UcpRemoteKey> keys =
                (java.util.Map<java.nio.ByteBuffer, org.openucx.jucx.ucp.UcpRemoteKey>) keysField.get(sender);
            for (int i = 0; i < 4; i++) { // keys with no native id: close() throws (a NullPointerException)
                keys.put(java.nio.ByteBuffer.wrap(new byte[] {(byte) i, 1, 2, 3}), bare.newInstance());
            }
            return null;
        });
        sender.cancelWrites(); // its close completes in the background, and a progress round then finishes it
        final Recorder rs = new Recorder();
        rs.pollUntil(sender, () -> !rs.failures.isEmpty(), 5_000);
        Thread.sleep(500);
        a.callTimeout = Duration.ofSeconds(3);
        try {
            assertEquals(1, (int) a.call(() -> 1), "the transport's thread runs commands");
            assertFalse(a.call(() -> nativeKeyAlive(key)), "the link's real remote key was not destroyed");
            other[0].send(note("still here", 1));
            final Recorder ro = new Recorder();
            assertTrue(ro.pollUntil(other[1], () -> ro.frames.size() == 1, 5_000), "another link of the transport hangs");
        } finally {
            a.callTimeout = Duration.ofSeconds(10);
            other[0].close();
            other[1].close();
            reg.close();
            receiver.close();
        }
    }

    /** A connect that the transport's close overtakes after its worker was made: the close takes the worker too. */
    @Test
    void aTransportClosedDuringAConnectClosesTheConnectsWorker() throws Exception {
        warmUp();
        UcxTransport.open("rev-throwaway").close(); // a transport's own first-use allocations stay out of the baseline
        final int before = openFds();
        final UcxTransport c = UcxTransport.open("rev-closing");
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            final CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (Socket s = ss.accept()) {
                    final java.io.DataInputStream in = new java.io.DataInputStream(s.getInputStream());
                    in.readInt();
                    in.readLong();
                    in.readFully(new byte[in.readInt()]); // the connect made its worker and sent its address
                    c.close();                            // then the transport closes, before the peer's half comes
                } catch (java.io.IOException e) {
                    throw new RuntimeException(e);
                }
            });
            try (Socket sock = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                assertThrows(io.kvpool.transfer.spi.LinkFailedException.class, () -> c.connect(sock, "overtaken", Duration.ofSeconds(5)));
            }
            fake.get();
        } finally {
            c.close();
        }
        final int after = openFds();
        assertTrue(after - before <= 0, (after - before) + " descriptors more than before the transport: the connect's worker is still open");
    }

    /** Sends one tagged message from a raw worker and progresses it until the send completed. */
    private static void sendAndWait(org.openucx.jucx.ucp.UcpWorker w, org.openucx.jucx.ucp.UcpEndpoint ep, java.nio.ByteBuffer msg,
                                    long tag) throws Exception {
        final org.openucx.jucx.ucp.UcpRequest req = ep.sendTaggedNonBlocking(msg, tag, null);
        final long deadline = System.nanoTime() + 5_000_000_000L;
        while (!req.isCompleted()) {
            w.progress();
            if (System.nanoTime() > deadline) {
                fail("a tagged send of " + msg.capacity() + " bytes did not complete");
            }
        }
    }
}
