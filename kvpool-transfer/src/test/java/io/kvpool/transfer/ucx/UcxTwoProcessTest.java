package io.kvpool.transfer.ucx;

import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static io.kvpool.transfer.ucx.UcxTestSupport.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The receiver (this JVM, a {@link KvPool} on host storage) and a sender child JVM ({@link UcxPeerMain}) over
 * UCX on loopback.
 */
@Timeout(60)
class UcxTwoProcessTest {

    static final int POOL_PAGES = 64;
    static final int TRANSFER_PAGES = 24;

    UcxTransport transport;
    UcxLink link;
    KvPool pool;
    Process child;
    int[] slots;
    long[] handles;

    @BeforeEach
    void setUp() {
        assumeUcx();
        pool = KvPool.builder(LAYOUT).pages(POOL_PAGES).maxContextTokens((long) POOL_PAGES * LAYOUT.tokensPerPage()).build();
        final List<Long> all = new ArrayList<>();
        for (int i = 0; i < POOL_PAGES; i++) {
            all.add(pool.tryAllocate());
        }
        Collections.shuffle(all, new Random(42));
        handles = new long[TRANSFER_PAGES];
        slots = new int[TRANSFER_PAGES];
        for (int i = 0; i < TRANSFER_PAGES; i++) {
            handles[i] = all.get(i);
            pool.handles().pinWriter(handles[i]);
            slots[i] = PageHandle.slot(handles[i]);
        }
        transport = UcxTransport.open("parent");
    }

    @AfterEach
    void cleanUp() throws Exception {
        if (child != null) {
            child.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        if (link != null) {
            link.close();
        }
        if (transport != null) {
            transport.close(); // before the pool: deregisters the storage
        }
        if (pool != null) {
            pool.close();
        }
    }

    private Registration connectAndDescribe(String mode) throws Exception {
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            ss.setSoTimeout(20_000);
            child = new ProcessBuilder(System.getProperty("java.home") + "/bin/java", "--enable-native-access=ALL-UNNAMED",
                "-cp", System.getProperty("java.class.path"), UcxPeerMain.class.getName(), Integer.toString(ss.getLocalPort()), mode)
                .redirectOutput(ProcessBuilder.Redirect.INHERIT).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            try (Socket s = ss.accept()) {
                link = transport.connect(s, "parent←child", Duration.ofSeconds(20));
            }
        }
        final Registration reg = link.register(pool.storage(), slots);
        for (int i = 0; i < 3; i++) {
            link.send(note("p2c-" + i, i));
        }
        link.send(WireCodec.encode(new Message.Descriptor(1, 5, 1, TRANSFER_PAGES * LAYOUT.tokensPerPage(), 0L, 1, 0, handles, reg.key())));
        return reg;
    }

    @Test
    void childWritesLandInExactlyTheRegisteredSlotsAndFramesKeepOrderBothWays() throws Exception {
        connectAndDescribe("write");
        final Recorder r = new Recorder();
        assertTrue(r.pollUntil(link, () -> r.frames.size() >= 4 || !r.failures.isEmpty(), 20_000),
            "frames " + r.frames + ", failures " + r.failures);
        assertEquals(List.of(), r.failures);
        for (int i = 0; i < 3; i++) {
            assertEquals("c2p-" + i, ((Message.Abort) r.frames.get(i)).detail(), "frame " + i + " of " + r.frames);
        }
        // the child sends Completion only after its flush succeeded: every byte must already be here
        final Message.Completion c = assertInstanceOf(Message.Completion.class, r.frames.get(3));
        assertEquals(TRANSFER_PAGES, c.posted());
        assertEquals(TRANSFER_PAGES, c.succeeded());
        assertEquals(0, c.failed());
        final Set<Integer> registered = new HashSet<>();
        for (int i = 0; i < TRANSFER_PAGES; i++) {
            assertEquals(-1, firstPatternMismatch(pool.storage(), slots[i], i), "slot " + slots[i] + " (page " + i + ")");
            registered.add(slots[i]);
        }
        for (int s = 0; s < POOL_PAGES; s++) {
            if (!registered.contains(s)) {
                assertEquals(-1, firstNonCanary(pool.storage(), s), "slot " + s + " is not registered but changed");
            }
        }
        link.send(note("bye", 9));
        assertTrue(child.waitFor(20, TimeUnit.SECONDS), "child did not exit");
        assertEquals(0, child.exitValue(), "child exit code");
    }

    @Test
    void killedPeerFailsTheLinkInBoundedTimeAndTearDownCompletes() throws Exception {
        connectAndDescribe("stream");
        final Recorder r = new Recorder();
        assertTrue(r.pollUntil(link, () -> r.frames.size() >= 4 || !r.failures.isEmpty(), 20_000),
            "frames " + r.frames + ", failures " + r.failures);
        assertEquals("streaming", ((Message.Abort) r.frames.get(3)).detail());
        Thread.sleep(100); // mid-stream
        final long t0 = System.nanoTime();
        child.destroyForcibly();
        assertTrue(r.pollUntil(link, () -> !r.failures.isEmpty(), 15_000), "no onLinkFailed within 15 s of the kill");
        final long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("peer killed: onLinkFailed after " + ms + " ms: " + r.failures);
        assertFalse(link.isUp());
        assertTrue(link.tearDown(), "tearDown must prove the endpoint closed");
        Thread.sleep(50);
        link.poll(r, Integer.MAX_VALUE);
        assertEquals(1, r.failures.size(), "onLinkFailed exactly once: " + r.failures);
    }
}
