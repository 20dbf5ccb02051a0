package io.kvpool.transfer.shm;

import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/** A real sender process ({@link ShmSenderMain}) writes into this process's pool through the mapped file. */
class ShmTwoProcessTest {

    @TempDir
    Path dir;

    @Test
    @Timeout(value = 40, unit = TimeUnit.SECONDS)
    void aChildProcessWritesExactlyTheRegisteredSlotsAndTearDownWaitsForItsDeath() throws Exception {
        final Path file = dir.resolve("pool"), sock = dir.resolve("sock"), log = dir.resolve("child.log");
        final int pages = 8;
        try (KvPool pool = KvPool.builder(MappedPageStorageTest.LAYOUT).pages(pages).maxContextTokens(128)
                .storage((l, n) -> MappedPageStorage.create(file, l, n)).build();
             ShmListener listener = ShmTransport.listen(sock, (MappedPageStorage) pool.storage())) {
            final MappedPageStorage storage = (MappedPageStorage) pool.storage();
            final long[] all = new long[6];
            for (int i = 0; i < all.length; i++) {
                all[i] = pool.tryAllocate();
                assertTrue(all[i] >= 0);
            }
            final long[] target = {all[4], all[1], all[3]}; // registered in this (logical) order
            final int[] slots = new int[target.length];
            for (int i = 0; i < target.length; i++) {
                pool.handles().pinWriter(target[i]);
                slots[i] = PageHandle.slot(target[i]);
            }
            final Process child = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xmx64m", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                ShmSenderMain.class.getName(), sock.toString())
                .redirectErrorStream(true).redirectOutput(log.toFile()).start();
            try {
                final long deadline = System.nanoTime() + 25_000_000_000L;
                ShmLink link;
                while ((link = listener.accept()) == null) {
                    assertTrue(child.isAlive(), () -> "child died: " + read(log));
                    assertTrue(System.nanoTime() < deadline, () -> "child never connected: " + read(log));
                    Thread.sleep(5);
                }
                try (ShmLink l = link) {
                    assertEquals(child.pid(), l.peerPid());
                    final Registration reg = l.register(storage, slots);
                    l.send(WireCodec.encode(new Message.Descriptor(1, 7, 1, 3 * 16, storage.layout().fingerprint(), 1, 0,
                        target, reg.key())));
                    final List<Message> got = new ArrayList<>();
                    final LinkListener rec = new LinkListener() {
                        @Override
                        public void onFrame(PeerLink link, ByteBuffer frame) {
                            got.add(WireCodec.decode(frame));
                        }

                        @Override
                        public void onWriteDone(PeerLink link, long token, int status) {
                            fail("the receiver posts no writes");
                        }

                        @Override
                        public void onFlushDone(PeerLink link, long token, boolean ok) {
                            fail("the receiver flushes nothing");
                        }

                        @Override
                        public void onLinkFailed(PeerLink link, String reason) {
                            fail("link failed: " + reason + "; child: " + read(log));
                        }
                    };
                    while (got.isEmpty()) {
                        l.poll(rec, 16);
                        assertTrue(System.nanoTime() < deadline, () -> "no DRAINED from the child: " + read(log));
                        Thread.sleep(1);
                    }
                    assertEquals(new Message.Drained(7, 1, 0, 3, 3, 0), got.get(0));

                    // bytes: region page i landed in slots[i], every other page is untouched canary
                    for (int i = 0; i < slots.length; i++) {
                        final MemorySegment p = storage.hostPage(slots[i]);
                        for (long o = 0; o < p.byteSize(); o++) {
                            assertEquals(ShmSenderMain.pattern(i, o), p.get(ValueLayout.JAVA_BYTE, o), "slot " + slots[i] + " offset " + o);
                        }
                    }
                    for (int s = 0; s < pages; s++) {
                        final int slot = s;
                        if (java.util.Arrays.stream(slots).noneMatch(x -> x == slot)) {
                            MappedPageStorageTest.assertCanaryPage(storage, s);
                        }
                    }

                    // the child still lives (and still maps the file): tearDown cannot be proven
                    assertFalse(reg.revoke());
                    assertTrue(child.isAlive(), () -> "child exited early: " + read(log));
                    assertFalse(l.tearDown(), "peer alive: tearDown must not be proven");
                    assertFalse(l.tearDown(), "still alive");
                    assertTrue(child.isAlive());

                    child.destroyForcibly();
                    assertTrue(child.waitFor(10, TimeUnit.SECONDS));
                    assertTrue(l.tearDown(), "peer dead: tearDown is proven");
                    for (long h : target) {
                        pool.handles().commitReceive(h);
                    }
                }
            } finally {
                child.destroyForcibly();
                child.waitFor(10, TimeUnit.SECONDS);
            }
            for (long h : all) {
                pool.release(h);
            }
        }
        assertFalse(Files.exists(file));
    }

    static String read(Path log) {
        try {
            return Files.readString(log);
        } catch (Exception e) {
            return "(no log: " + e + ")";
        }
    }
}
