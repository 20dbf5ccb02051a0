package io.kvpool.transfer.shm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;

/**
 * The file that holds both control rings ({@link ShmRing}) of one {@link ShmLink}. The listener's side
 * creates it when the peer's bootstrap says it speaks rings, and announces its path and nonce in its own
 * bootstrap; the connector maps it, checks the nonce and deletes the name (the mappings live on). Layout
 * (native byte order; offsets in bytes):
 * <pre>
 *      0  u32 magic 0x4652564B ("KVRF" on the wire)   4  u32 version 1
 *      8  u64 nonce (random; the bootstrap names it)  16  u64 capacity of each ring (a power of two)
 *    128  u64 tail of ring C→L (connector writes)
 *    256  u64 head of ring C→L (listener reads)
 *    384  u64 tail of ring L→C (listener writes)
 *    512  u64 head of ring L→C (connector reads)
 *   4096  ring C→L data, capacity bytes
 *   4096 + capacity  ring L→C data, capacity bytes
 * </pre>
 * Each position sits on its own 128-byte stretch so that the two processes never write to one cache line (nor to
 * a pair that the hardware prefetches together).
 *
 * <p>The file is named {@code kvpool-ring-<pid>@<pid namespace>-<random>.shm} and its creator holds a lock on it
 * while the name lives. A listener that dies before its peer maps the file cannot delete the name, and one that closes
 * its link with frames in the ring for the peer leaves it ({@link #leaveName()}); the next ring created in that
 * directory deletes it once no process holds it ({@link StaleFiles}), so neither leaks a file for good.
 *
 * <p>Threads: {@link #close()} may be called from any thread, once no ring is in use.
 */
final class ShmRingFile implements AutoCloseable {

    static final int MAGIC = 0x4652564B;
    static final int VERSION = 1;
    static final long CAPACITY = 1L << 20;
    private static final long NONCE_AT = 8, CAPACITY_AT = 16;
    private static final long C2L_TAIL = 128, C2L_HEAD = 256, L2C_TAIL = 384, L2C_HEAD = 512;
    static final long DATA_AT = 4096;
    /** How every ring file's name starts; the creator's pid and namespace follow ({@link StaleFiles}). */
    static final String PREFIX = "kvpool-ring-";
    private static final SecureRandom RANDOM = new SecureRandom();

    private final Path file;
    private final long nonce;
    private final Arena arena;
    private final MemorySegment segment;
    /** The creator's open channel, holding the lock that tells sweeps the name is alive; null once the name is gone. */
    private FileChannel nameLock;
    private boolean closed;

    private ShmRingFile(Path file, long nonce, Arena arena, MemorySegment segment, FileChannel nameLock) {
        this.file = file;
        this.nonce = nonce;
        this.arena = arena;
        this.segment = segment;
        this.nameLock = nameLock;
    }

    /**
     * Creates a ring file ({@code rw-------}) in {@code directory}, locks and maps it, after deleting the ring files
     * there whose creators died before their peers mapped them.
     *
     * @throws UncheckedIOException if the file cannot be created or mapped (the file is removed again)
     */
    static ShmRingFile create(Path directory) {
        StaleFiles.sweep(directory, PREFIX, Bootstrap.OWN_PID_NAMESPACE);
        Path file = null;
        FileChannel ch = null;
        final Arena arena = Arena.ofShared();
        try {
            file = Files.createTempFile(directory, PREFIX + StaleFiles.owner() + "-", ".shm",
                PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE);
            StaleFiles.lockQuietly(ch);
            // written, not just sized: a full tmpfs says so here (ENOSPC), not later as SIGBUS in a ring access
            final java.nio.ByteBuffer zeros = java.nio.ByteBuffer.allocate(64 * 1024);
            final long size = DATA_AT + 2 * CAPACITY;
            for (long at = 0; at < size; at += zeros.limit()) {
                zeros.clear().limit((int) Math.min(zeros.capacity(), size - at));
                while (zeros.hasRemaining()) {
                    ch.write(zeros, at + zeros.position());
                }
            }
            final MemorySegment s = ch.map(FileChannel.MapMode.READ_WRITE, 0, DATA_AT + 2 * CAPACITY, arena);
            long nonce;
            do {
                nonce = RANDOM.nextLong();
            } while (nonce == 0);
            s.set(ValueLayout.JAVA_INT, 0, MAGIC);
            s.set(ValueLayout.JAVA_INT, 4, VERSION);
            s.set(ValueLayout.JAVA_LONG, NONCE_AT, nonce);
            s.set(ValueLayout.JAVA_LONG, CAPACITY_AT, CAPACITY);
            return new ShmRingFile(file, nonce, arena, s, ch);
        } catch (IOException | RuntimeException | InternalError e) { // InternalError: SIGBUS on the mapping
            arena.close();
            deleteQuietly(file);
            closeQuietly(ch); // after the delete: the lock kept sweeps off the name until it was gone
            throw e instanceof IOException io ? new UncheckedIOException("cannot create a control ring in " + directory + ": " + e, io)
                : e instanceof RuntimeException re ? re : new IllegalStateException("cannot create a control ring in " + directory + ": " + e, e);
        }
    }

    /**
     * Maps a ring file another process created and checks it is the one announced.
     *
     * @param file  the announced path
     * @param nonce the announced nonce
     * @throws IllegalArgumentException if the file's magic, version, nonce, capacity or size is not what it must be
     * @throws UncheckedIOException     if the file cannot be opened or mapped
     */
    static ShmRingFile map(Path file, long nonce) {
        final Arena arena = Arena.ofShared();
        try {
            final MemorySegment s;
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                final long size = ch.size();
                if (size != DATA_AT + 2 * CAPACITY) {
                    throw new IllegalArgumentException("control ring " + file + " has " + size + " bytes, expected "
                        + (DATA_AT + 2 * CAPACITY));
                }
                s = ch.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
            }
            final int magic = s.get(ValueLayout.JAVA_INT, 0);
            final int version = s.get(ValueLayout.JAVA_INT, 4);
            final long got = s.get(ValueLayout.JAVA_LONG, NONCE_AT);
            final long capacity = s.get(ValueLayout.JAVA_LONG, CAPACITY_AT);
            if (magic != MAGIC || version != VERSION || got != nonce || capacity != CAPACITY) {
                throw new IllegalArgumentException("control ring " + file + ": magic 0x" + Integer.toHexString(magic) + " version "
                    + version + " nonce 0x" + Long.toHexString(got) + " capacity " + capacity + ", expected 0x"
                    + Integer.toHexString(MAGIC) + ", " + VERSION + ", 0x" + Long.toHexString(nonce) + ", " + CAPACITY);
            }
            return new ShmRingFile(file, nonce, arena, s, null);
        } catch (IOException e) {
            arena.close();
            throw new UncheckedIOException("cannot map control ring " + file + ": " + e, e);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        } catch (InternalError e) { // SIGBUS: the file shrank between its size check and the header read
            arena.close();
            throw new IllegalArgumentException("control ring " + file + " faulted while its header was read: " + e, e);
        }
    }

    /** {@return the ring this side writes into: connector → listener if {@code connector}, else listener → connector} */
    ShmRing outgoing(boolean connector) {
        return connector ? ring(C2L_TAIL, C2L_HEAD, DATA_AT, true) : ring(L2C_TAIL, L2C_HEAD, DATA_AT + CAPACITY, true);
    }

    /** {@return the ring this side reads from} */
    ShmRing incoming(boolean connector) {
        return connector ? ring(L2C_TAIL, L2C_HEAD, DATA_AT + CAPACITY, false) : ring(C2L_TAIL, C2L_HEAD, DATA_AT, false);
    }

    private ShmRing ring(long tailAt, long headAt, long dataAt, boolean producer) {
        return new ShmRing(segment, tailAt, headAt, segment.asSlice(dataAt, CAPACITY), producer);
    }

    /** {@return the file's path (its name may already be deleted)} */
    Path file() {
        return file;
    }

    /** {@return the nonce written in the header} */
    long nonce() {
        return nonce;
    }

    /** {@return the whole mapped file (tests that play a broken peer)} */
    MemorySegment segmentForTest() {
        return segment;
    }

    /** Removes the file's name, then drops the creator's lock; both sides' mappings stay valid. Best effort, idempotent. */
    void deleteFile() {
        deleteQuietly(file);
        closeQuietly(nameLock);
        nameLock = null;
    }

    /**
     * Drops the creator's lock and leaves the name for the peer, which deletes it once it mapped the file; if it never
     * does, the next ring create in the directory deletes it once it is {@link StaleFiles#LOCK_TEST_MIN_AGE} old.
     * Idempotent; the mappings stay valid.
     */
    void leaveName() {
        closeQuietly(nameLock);
        nameLock = null;
    }

    /** {@return whether this side still holds the lock that marks the name alive (the creator, until the name goes)} */
    boolean holdsNameLock() {
        return nameLock != null;
    }

    private static void deleteQuietly(Path file) {
        if (file == null) {
            return;
        }
        try {
            Files.deleteIfExists(file);
        } catch (IOException ignored) {
            // best effort: a ring file left behind holds no data of any request, only control frames
        }
    }

    private static void closeQuietly(FileChannel ch) {
        if (ch != null) {
            try {
                ch.close();
            } catch (IOException ignored) {
                // best effort: the lock dies with the process anyway
            }
        }
    }

    /**
     * Unmaps the file and drops the creator's lock. The name stays if {@link #deleteFile()} was not called, and without
     * the lock any process's next ring create may delete it once it is {@link StaleFiles#LOCK_TEST_MIN_AGE} old: a
     * creator calls {@link #deleteFile()} first, once no peer will map it. Idempotent; no ring of this file may be used
     * afterwards.
     */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            closeQuietly(nameLock);
            nameLock = null;
            arena.close();
        }
    }
}
