package io.kvpool.transfer.ucx;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.stream.IntStream;

import static io.kvpool.transfer.ucx.UcxTestSupport.*;
import static org.junit.jupiter.api.Assertions.*;

/** Two transports (two workers) in one JVM, linked over loopback: frames, writes, flush, cancel, close. */
@Timeout(30)
class UcxLinkInJvmTest {

    UcxTransport a, b;
    UcxLink sender, receiver;
    PageStorage src, dstStorage;

    @BeforeEach
    void setUp() throws Exception {
        assumeUcx();
        a = UcxTransport.open("sender");
        b = UcxTransport.open("receiver");
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            final CompletableFuture<UcxLink> rf = CompletableFuture.supplyAsync(() -> {
                try (Socket s = ss.accept()) {
                    return b.connect(s, "receiver←sender", Duration.ofSeconds(5));
                } catch (java.io.IOException e) {
                    throw new RuntimeException(e);
                }
            });
            try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                sender = a.connect(s, "sender→receiver", Duration.ofSeconds(5));
            }
            receiver = rf.get();
        }
        completeWireUp(sender, receiver);
        src = HostPageStorage.allocate(LAYOUT, 64);
        dstStorage = HostPageStorage.allocate(LAYOUT, 64);
    }

    @AfterEach
    void tearDownAll() {
        if (sender != null) {
            sender.close();
            sender.close(); // idempotent
        }
        if (receiver != null) {
            receiver.close();
        }
        if (a != null) {
            a.close();
            a.close(); // idempotent
        }
        if (b != null) {
            b.close();
        }
        if (src != null) {
            src.close();
            dstStorage.close();
        }
    }

    @Test
    void framesArriveInOrderBothWays() throws Exception {
        for (int i = 0; i < 200; i++) {
            sender.send(note("s" + i, i));
            receiver.send(note("r" + i, i));
        }
        final Recorder rs = new Recorder(), rr = new Recorder();
        assertTrue(rr.pollUntil(receiver, () -> rr.frames.size() == 200, 10_000), "receiver got " + rr.frames.size());
        assertTrue(rs.pollUntil(sender, () -> rs.frames.size() == 200, 10_000), "sender got " + rs.frames.size());
        for (int i = 0; i < 200; i++) {
            assertEquals("s" + i, ((Message.Abort) rr.frames.get(i)).detail());
            assertEquals("r" + i, ((Message.Abort) rs.frames.get(i)).detail());
        }
        assertTrue(rs.failures.isEmpty() && rr.failures.isEmpty(), rs.failures + " " + rr.failures);
    }

    @Test
    void writesLandInTheRegisteredSlotsOnlyAndFlushProvesIt() throws Exception {
        final int[] slots = {7, 3, 60, 12, 41, 0, 63, 22};
        final Registration reg = receiver.register(dstStorage, slots);
        assertFalse(reg.revoke(), "UCX cannot revoke on tcp");
        final RemoteRegion region = sender.attach(reg.key(), slots.length);
        assertEquals(slots.length, region.pages());
        final int[] dst = IntStream.range(0, slots.length).toArray();
        final int[] srcSlots = IntStream.range(0, slots.length).map(i -> 50 - i).toArray();
        for (int i = 0; i < slots.length; i++) {
            fillPattern(src, srcSlots[i], i);
        }
        sender.putBatch(region, dst, src, srcSlots, 0, slots.length, 100);
        sender.flush(999);
        final Recorder rs = new Recorder();
        assertTrue(rs.pollUntil(sender, () -> rs.flushes.size() == 1 && rs.writes.size() == slots.length, 10_000),
            "flushes " + rs.flushes.size() + ", writes " + rs.writes);
        assertEquals(999, rs.flushes.get(0)[0]);
        assertEquals(1, rs.flushes.get(0)[1], "flush must succeed");
        // flush done ⇒ every byte is there, checked right away on the receiver's memory
        final java.util.Set<Integer> written = new java.util.HashSet<>();
        for (int i = 0; i < slots.length; i++) {
            assertEquals(-1, firstPatternMismatch(dstStorage, slots[i], i), "slot " + slots[i] + " (page " + i + ")");
            written.add(slots[i]);
        }
        for (int s = 0; s < dstStorage.pageCount(); s++) {
            if (!written.contains(s)) {
                assertEquals(-1, firstNonCanary(dstStorage, s), "slot " + s + " was not registered but changed");
            }
        }
        for (long t = 100; t < 100 + slots.length; t++) {
            assertEquals(java.util.List.of(PeerLink.OK), rs.writes.get(t), "token " + t);
        }
        reg.close();
        reg.close();
    }

    @Test
    void cancelWritesGivesEveryPostedWriteExactlyOneTerminalState() throws Exception {
        final int[] slots = IntStream.range(0, 64).toArray();
        final Registration reg = receiver.register(dstStorage, slots);
        final RemoteRegion region = sender.attach(reg.key(), slots.length);
        final int rounds = 64; // 64 MiB: enough that the cancel overtakes writes on a wired-up link
        for (int r = 0; r < rounds; r++) {
            sender.putBatch(region, slots, src, slots, 0, slots.length, (long) r * 64);
        }
        sender.cancelWrites();
        assertFalse(sender.isUp());
        assertThrows(LinkFailedException.class, () -> sender.flush(1));
        final long posted = rounds * 64L;
        final Recorder rs = new Recorder();
        assertTrue(rs.pollUntil(sender, () -> rs.ok + rs.failed + rs.canceled == posted && !rs.failures.isEmpty(), 10_000),
            "terminal " + (rs.ok + rs.failed + rs.canceled) + " of " + posted + ", failures " + rs.failures);
        Thread.sleep(100);
        sender.poll(rs, Integer.MAX_VALUE);
        assertEquals(posted, rs.writes.size(), "distinct tokens");
        rs.writes.forEach((t, s) -> assertEquals(1, s.size(), "token " + t + " reported " + s));
        assertEquals(posted, rs.ok + rs.failed + rs.canceled);
        assertEquals(1, rs.failures.size(), "link failure once: " + rs.failures);
        System.out.printf("cancelWrites: posted %d, ok %d, failed %d, canceled %d%n", posted, rs.ok, rs.failed, rs.canceled);
        assertTrue(sender.tearDown());
    }

    @Test
    void tearDownClosesTheEndpointAndTheLinkRefusesUse() {
        assertTrue(receiver.tearDown());
        assertTrue(receiver.tearDown());
        assertFalse(receiver.isUp());
        assertThrows(LinkFailedException.class, () -> receiver.send(note("x", 1)));
        assertThrows(LinkFailedException.class, () -> receiver.register(dstStorage, new int[] {1}));
    }

    @Test
    void badKeysAndArgumentsAreRefusedWithNumbers() {
        final LinkFailedException bad = assertThrows(LinkFailedException.class, () -> sender.attach(new byte[] {1, 2, 3, 4, 5}, 1));
        assertTrue(bad.getMessage().contains("magic"), bad.getMessage());
        final Registration reg = receiver.register(dstStorage, new int[] {1, 2});
        final LinkFailedException count = assertThrows(LinkFailedException.class, () -> sender.attach(reg.key(), 3));
        assertTrue(count.getMessage().contains("2 slots") && count.getMessage().contains("3 pages"), count.getMessage());
        final IndexOutOfBoundsException slot = assertThrows(IndexOutOfBoundsException.class,
            () -> receiver.register(dstStorage, new int[] {64}));
        assertTrue(slot.getMessage().contains("64"), slot.getMessage());
        final IllegalArgumentException twice = assertThrows(IllegalArgumentException.class,
            () -> receiver.register(dstStorage, new int[] {3, 5, 3}));
        assertTrue(twice.getMessage().contains("slot 3 is registered twice"), twice.getMessage());
        final IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
            () -> receiver.register(dstStorage, new int[70_000])); // over WireFormat.MAX_KEY_BYTES / 4 slots
        assertTrue(big.getMessage().contains("70000"), big.getMessage());
        final RemoteRegion region = sender.attach(reg.key(), 2);
        assertThrows(IllegalArgumentException.class, () -> sender.putBatch(region, new int[] {2}, src, new int[] {0}, 0, 1, 0));
    }
}
