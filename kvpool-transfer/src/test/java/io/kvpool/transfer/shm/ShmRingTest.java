package io.kvpool.transfer.shm;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

@Timeout(60)
class ShmRingTest {

    @TempDir
    Path dir;

    @AfterEach
    void safeguardBackOn() {
        ShmRing.publishBeforeCopyForTest = false;
    }

    /** A producer and a consumer end over one small ring in plain memory. */
    static ShmRing[] ends(Arena arena, int capacity) {
        final MemorySegment positions = arena.allocate(256, 128);
        final MemorySegment data = arena.allocate(capacity, 128);
        return new ShmRing[] {new ShmRing(positions, 0, 128, data, true), new ShmRing(positions, 0, 128, data, false)};
    }

    @Test
    void bytesComeOutInOrderAcrossManyWrapsWithPartialWritesAndReads() {
        try (Arena arena = Arena.ofConfined()) {
            final ShmRing[] r = ends(arena, 4096);
            final SplittableRandom rnd = new SplittableRandom(7);
            final ByteArrayOutputStream sent = new ByteArrayOutputStream(), got = new ByteArrayOutputStream();
            long inRing = 0;
            for (int step = 0; step < 20_000; step++) {
                final byte[] chunk = new byte[rnd.nextInt(1, 3000)];
                rnd.nextBytes(chunk);
                final ByteBuffer src = ByteBuffer.wrap(chunk);
                final int w = r[0].write(src);
                assertEquals(Math.min(chunk.length, 4096 - inRing), w, "writes what fits, no more");
                assertEquals(w, src.position());
                sent.write(chunk, 0, w);
                inRing += w;
                final ByteBuffer dst = ByteBuffer.allocate(rnd.nextInt(1, 3000));
                final int n = r[1].read(dst);
                assertEquals(Math.min(dst.capacity(), inRing), n, "reads what is there, no more");
                got.write(dst.array(), 0, n);
                inRing -= n;
            }
            final ByteBuffer rest = ByteBuffer.allocate(4096);
            got.write(rest.array(), 0, r[1].read(rest));
            assertTrue(sent.size() > 50 * 4096, "many wraps: " + sent.size() + " bytes");
            assertArrayEquals(sent.toByteArray(), got.toByteArray());
            assertEquals(0, r[0].write(ByteBuffer.allocate(0)));
            assertEquals(0, r[1].read(ByteBuffer.allocate(16)), "empty");
        }
    }

    @Test
    void heapSlicesDirectAndReadOnlyBuffersCarryTheSameBytesAcrossTheWrap() {
        try (Arena arena = Arena.ofConfined()) {
            final ShmRing[] r = ends(arena, 1024);
            final SplittableRandom rnd = new SplittableRandom(11);
            final ByteArrayOutputStream sent = new ByteArrayOutputStream(), got = new ByteArrayOutputStream();
            for (int step = 0; step < 4_000; step++) {
                final byte[] chunk = new byte[rnd.nextInt(1, 700)];
                rnd.nextBytes(chunk);
                final ByteBuffer src = buffer(rnd.nextInt(4), chunk.length, rnd);
                final int at = src.position();
                src.put(chunk).position(at);
                final ByteBuffer readable = src.isDirect() || rnd.nextBoolean() ? src : src.asReadOnlyBuffer();
                final int w = r[0].write(readable);
                assertEquals(at + w, readable.position(), "moves the position by what it wrote");
                sent.write(chunk, 0, w);
                final ByteBuffer dst = buffer(rnd.nextInt(3), rnd.nextInt(1, 700), rnd);
                final int from = dst.position();
                final int n = r[1].read(dst);
                assertEquals(from + n, dst.position());
                final byte[] bytes = new byte[n];
                dst.get(from, bytes);
                got.write(bytes, 0, n);
            }
            final ByteBuffer rest = ByteBuffer.allocate(1024);
            got.write(rest.array(), 0, r[1].read(rest));
            assertTrue(sent.size() > 100 * 1024, "many wraps: " + sent.size() + " bytes");
            assertArrayEquals(sent.toByteArray(), got.toByteArray());
        }
    }

    /**
     * A buffer with {@code room} bytes between its position and limit: 0, plain heap; 1, a heap slice (its array
     * starts before it) at a position past 0; 2, direct; 3, a heap buffer whose limit is short of its capacity.
     */
    private static ByteBuffer buffer(int kind, int room, SplittableRandom rnd) {
        final int before = rnd.nextInt(1, 9);
        return switch (kind) {
            case 0 -> ByteBuffer.allocate(room);
            case 1 -> ByteBuffer.allocate(before + room + 3 + 5).position(before).slice().position(3).limit(3 + room);
            case 2 -> ByteBuffer.allocateDirect(before + room).position(before);
            default -> ByteBuffer.allocate(room + before).limit(room);
        };
    }

    @Test
    void aFullRingTakesNothingUntilTheReaderHandsSpaceBack() {
        try (Arena arena = Arena.ofConfined()) {
            final ShmRing[] r = ends(arena, 1024);
            assertEquals(1024, r[0].write(ByteBuffer.allocate(5000)));
            assertEquals(0, r[0].write(ByteBuffer.allocate(1)), "full");
            assertEquals(100, r[1].read(ByteBuffer.allocate(100)));
            assertEquals(100, r[0].write(ByteBuffer.allocate(5000)), "exactly the space handed back");
        }
    }

    @Test
    void positionsThatBreakTheInvariantAreRefusedWithTheNumbers() {
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment positions = arena.allocate(256, 128);
            final ShmRing[] r = ends(arena, 1024);
            final ShmRing producer = new ShmRing(positions, 0, 128, arena.allocate(1024, 128), true);
            final ShmRing consumer = new ShmRing(positions, 0, 128, arena.allocate(1024, 128), false);
            positions.set(ValueLayout.JAVA_LONG, 0, 1025); // a tail more than one capacity ahead
            final ShmRing.CorruptRingException ahead = assertThrows(ShmRing.CorruptRingException.class,
                () -> consumer.read(ByteBuffer.allocate(8)));
            assertTrue(ahead.getMessage().contains("1025") && ahead.getMessage().contains("1024"), ahead.getMessage());
            positions.set(ValueLayout.JAVA_LONG, 128, 5); // a head ahead of the producer's own tail (0)
            final ShmRing.CorruptRingException behind = assertThrows(ShmRing.CorruptRingException.class,
                () -> producer.write(ByteBuffer.allocate(8)));
            assertTrue(behind.getMessage().contains("position 5"), behind.getMessage());
            assertEquals(4, r[0].write(ByteBuffer.allocate(4)), "other rings are not affected");
            assertThrows(IllegalArgumentException.class, () -> new ShmRing(positions, 0, 128, arena.allocate(1000), true));
        }
    }

    @Test
    void aRingFileIsCheckedWhenMappedAndHasNoNameAfterDeleteFile() throws Exception {
        try (ShmRingFile created = ShmRingFile.create(dir)) {
            assertEquals("rw-------", java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(created.file())));
            final IllegalArgumentException wrongNonce = assertThrows(IllegalArgumentException.class,
                () -> ShmRingFile.map(created.file(), created.nonce() + 1));
            assertTrue(wrongNonce.getMessage().contains("nonce"), wrongNonce.getMessage());
            try (ShmRingFile mapped = ShmRingFile.map(created.file(), created.nonce())) {
                mapped.deleteFile();
                assertFalse(Files.exists(created.file()));
                // the mappings outlive the name: a frame goes both ways
                assertEquals(3, created.outgoing(false).write(ByteBuffer.wrap(new byte[] {1, 2, 3})));
                final ByteBuffer in = ByteBuffer.allocate(8);
                assertEquals(3, mapped.incoming(true).read(in));
                assertEquals(2, mapped.outgoing(true).write(ByteBuffer.wrap(new byte[] {4, 5})));
                assertEquals(2, created.incoming(false).read(ByteBuffer.allocate(8)));
            }
        }
        final Path shortFile = Files.write(dir.resolve("short"), new byte[4096]);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ShmRingFile.map(shortFile, 1)).getMessage().contains("4096 bytes"));
    }

    @Test
    void aRingFileIsLockedWhileItsNameLives() throws Exception {
        try (ShmRingFile created = ShmRingFile.create(dir)) {
            assertTrue(created.file().getFileName().toString().startsWith(ShmRingFile.PREFIX + StaleFiles.owner() + "-"),
                created.file()::toString);
            assertTrue(FileLockProbe.lockedElsewhere(created.file()), "a sweep in another process must see it alive");
            created.deleteFile();
            assertFalse(Files.exists(created.file()));
            assertFalse(created.holdsNameLock());
        }
    }

    @Test
    void aCreateDeletesTheRingFilesOfListenersThatDiedBeforeTheirPeerMappedThem() throws Exception {
        final long gone = FileLockProbe.aPidThatExited();
        final String ns = StaleFiles.PID_NAMESPACE;
        final Path dead = FileLockProbe.aged(Files.createFile(dir.resolve(ShmRingFile.PREFIX + gone + ns + "-1.shm")));
        final Path deadElsewhere = FileLockProbe.aged(Files.createFile(dir.resolve(ShmRingFile.PREFIX + gone + "@1-2.shm")));
        final Path fresh = Files.createFile(dir.resolve(ShmRingFile.PREFIX + gone + ns + "-3.shm"));
        final Path held = FileLockProbe.aged(Files.createFile(dir.resolve(ShmRingFile.PREFIX + gone + "@1-4.shm")));
        final Path ours = FileLockProbe.aged(Files.createFile(dir.resolve(ShmRingFile.PREFIX + StaleFiles.owner() + "-5.shm")));
        final Path notARing = FileLockProbe.aged(Files.createFile(dir.resolve("kvpool-other-" + gone + ns + "-6.shm")));
        final Process holder = FileLockProbe.lockHolder(held);
        try {
            ShmRingFile.create(dir).close();
            assertFalse(Files.exists(dead), "its listener is gone and nobody holds it");
            assertFalse(Files.exists(deadElsewhere), "no process holds it, whatever its pid namespace");
            assertTrue(Files.exists(fresh), "just made: its creator may not hold its lock yet");
            assertTrue(Files.exists(held), "a live listener holds it: its peer has yet to map it");
            assertTrue(Files.exists(ours), "this process's: never tested (a test would drop its lock)");
            assertTrue(Files.exists(notARing), "not a ring file");
        } finally {
            holder.getOutputStream().close();
            holder.waitFor();
        }
    }

    /**
     * Two threads, each through its own mapping of one ring file (as two processes would), move frames of random
     * length whose every byte depends on the frame's number; the consumer checks each byte.
     *
     * @param untilFirstBad stop at the first frame whose bytes were wrong (a control needs only one)
     * @return frames whose bytes were not the ones written
     */
    long stress(int frames, int maxFrameBytes, boolean untilFirstBad) throws Exception {
        try (ShmRingFile a = ShmRingFile.create(dir); ShmRingFile b = ShmRingFile.map(a.file(), a.nonce())) {
            final ShmRing producer = a.outgoing(true), consumer = b.incoming(false);
            final AtomicReference<Throwable> producerFailed = new AtomicReference<>();
            final AtomicBoolean stop = new AtomicBoolean();
            final Thread t = new Thread(() -> {
                try {
                    final SplittableRandom rnd = new SplittableRandom(11);
                    for (int f = 0; f < frames && !stop.get(); f++) {
                        final ByteBuffer frame = frame(f, rnd.nextInt(12, maxFrameBytes));
                        while (frame.hasRemaining() && !stop.get()) {
                            if (producer.write(frame) == 0) {
                                Thread.onSpinWait();
                            }
                        }
                    }
                } catch (Throwable e) {
                    producerFailed.set(e);
                }
            }, "ring-producer");
            t.start();
            final AtomicLong bad = new AtomicLong();
            try {
                final ByteBuffer in = ByteBuffer.allocate(2 * maxFrameBytes + 64);
                final SplittableRandom rnd = new SplittableRandom(13);
                final long deadline = System.nanoTime() + 30_000_000_000L;
                for (int f = 0; f < frames; ) {
                    assertTrue(System.nanoTime() < deadline, "frame " + f + " of " + frames + " after 30 s");
                    assertNull(producerFailed.get());
                    in.limit(Math.min(in.capacity(), in.position() + rnd.nextInt(1, maxFrameBytes)));
                    if (consumer.read(in) == 0) {
                        Thread.onSpinWait();
                    }
                    in.flip();
                    while (in.remaining() >= 8) {
                        final int len = in.getInt(in.position());
                        if (len < 12 || len > maxFrameBytes) {
                            // judged as soon as the length is read: a stale length larger than the buffer would
                            // otherwise wait for bytes that never come
                            bad.incrementAndGet();
                            return bad.get(); // the stream lost its framing: nothing after it can be read
                        }
                        if (in.remaining() < len) {
                            break;
                        }
                        if (!matches(in, f, len)) {
                            bad.incrementAndGet();
                            if (untilFirstBad) {
                                return bad.get();
                            }
                        }
                        in.position(in.position() + len);
                        f++;
                    }
                    in.compact();
                }
            } finally {
                stop.set(true);
                t.join();
            }
            assertNull(producerFailed.get());
            return bad.get();
        }
    }

    /** A frame: u32 length, u64 number, then bytes derived from the number and their offset. */
    static ByteBuffer frame(long number, int len) {
        final ByteBuffer b = ByteBuffer.allocate(len);
        b.putInt(len).putLong(number);
        for (int i = 12; i < len; i++) {
            b.put((byte) (number * 31 + i));
        }
        return b.flip();
    }

    static boolean matches(ByteBuffer in, long number, int len) {
        final int at = in.position();
        if (in.getLong(at + 4) != number) {
            return false;
        }
        for (int i = 12; i < len; i++) {
            if (in.get(at + i) != (byte) (number * 31 + i)) {
                return false;
            }
        }
        return true;
    }

    @Test
    void twoThreadsOnTwoMappingsMoveHalfAMillionFramesIntact() throws Exception {
        assertEquals(0, stress(500_000, 600, false));
    }

    @Test
    void theStressTestCatchesAProducerThatPublishesBeforeItCopies() throws Exception {
        ShmRing.publishBeforeCopyForTest = true;
        // big frames: the window between the early tail and the copy is microseconds wide
        final long bad = stress(100_000, 200_000, true);
        assertTrue(bad > 0, "the consumer read bytes before they were written and did not notice");
    }
}
