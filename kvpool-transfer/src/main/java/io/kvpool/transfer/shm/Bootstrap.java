package io.kvpool.transfer.shm;

import io.kvpool.transfer.TransferException;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The shared-memory transport's own first message, sent by both sides of a socket before any kvpool
 * frame (little-endian):
 * <pre>
 *   version 2 (40 bytes + path):
 *     u32 magic 0x4B565342 ("BSVK" on the wire), u16 version, u16 path length (≤ 4096),
 *     i64 pid, i64 pid namespace (the inode of /proc/self/ns/pid; 0: unknown), i64 start time (field 22 of
 *     /proc/self/stat, clock ticks after boot; 0: unknown), i64 pool file identity (0: this side exposes no pool),
 *     path (UTF-8; empty with identity 0)
 *   version 3 (56 bytes + path + ring path): the same 40 bytes, then
 *     i64 ring nonce (0: no ring), u16 ring path length (≤ 4096), u16 0, u32 0, path, ring path (UTF-8; empty with nonce 0)
 * </pre>
 * Version 3 says "I speak control rings" ({@link ShmRingFile}): a listener that gets it may create a ring file and
 * name it in its answer, and from then on both sides put kvpool frames in the rings instead of the socket. A listener
 * answers in the version the connector spoke, so a version-2 connector keeps its frames on the socket; a connector
 * always speaks 3, so listeners are upgraded first.
 *
 * <p>The pid names the process whose death proves that the peer can no longer write ({@link ShmLink#tearDown}); the
 * namespace and start time let the other side check that the pid means the same process there — a peer in
 * another pid namespace (a container) names a pid that is some other process here, or none. They are what the
 * peer says of itself: honest peers are checked, a lying one is not (nor can it be stopped: a process that can
 * reach the socket and map the pool file can write any page anyway — see {@link ShmLink}'s trust note).
 */
record Bootstrap(int version, long pid, long pidNamespace, long startTicks, long identity, String poolFile,
                 long ringNonce, String ringFile) {

    static final int MAGIC = 0x4B565342;
    /** The version this side sends first (as a connector). */
    static final int VERSION = 3;
    /** The oldest version a listener still answers (frames on the socket, no rings). */
    static final int MIN_VERSION = 2;
    static final int FIXED_BYTES_V2 = 40;
    static final int FIXED_BYTES = 56;
    static final int MAX_PATH_BYTES = 4096;
    /** Most bytes a bootstrap of any version takes. */
    static final int MAX_BYTES = FIXED_BYTES + 2 * MAX_PATH_BYTES;
    /** This process's pid namespace (0 where /proc does not say). */
    static final long OWN_PID_NAMESPACE = pidNamespace(Path.of("/proc/self/ns/pid"));

    /** A bootstrap for {@code pid} with this host's view of it: this process's namespace, the pid's start time here. */
    Bootstrap(long pid, long identity, String poolFile) {
        this(pid, OWN_PID_NAMESPACE, startTicks(pid), identity, poolFile);
    }

    /** A version-{@value #VERSION} bootstrap without a ring. */
    Bootstrap(long pid, long pidNamespace, long startTicks, long identity, String poolFile) {
        this(VERSION, pid, pidNamespace, startTicks, identity, poolFile, 0, "");
    }

    /** {@return this bootstrap in another version (2: no ring), or naming a ring} */
    Bootstrap withVersion(int v) {
        return new Bootstrap(v, pid, pidNamespace, startTicks, identity, poolFile, ringNonce, ringFile);
    }

    /** {@return this bootstrap naming the ring file {@code ring}} */
    Bootstrap withRing(ShmRingFile ring) {
        return new Bootstrap(version, pid, pidNamespace, startTicks, identity, poolFile, ring.nonce(), ring.file().toAbsolutePath().toString());
    }

    /** @return the inode number in a {@code /proc/<pid>/ns/pid} link ("pid:[4026531836]"), or 0 */
    static long pidNamespace(Path nsLink) {
        try {
            final String t = Files.readSymbolicLink(nsLink).toString();
            return t.startsWith("pid:[") && t.endsWith("]") ? Long.parseLong(t.substring(5, t.length() - 1)) : 0;
        } catch (IOException | RuntimeException e) {
            return 0; // not Linux, or not allowed to look
        }
    }

    /** @return when {@code pid} started, in clock ticks after boot (field 22 of /proc/pid/stat), or 0 if unknown */
    static long startTicks(long pid) {
        try {
            final String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            final String[] after = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(after[22 - 3]); // after ") " come fields 3 (state), 4, ...
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    /** @return the encoded message */
    byte[] encode() {
        final byte[] path = poolFile.getBytes(StandardCharsets.UTF_8);
        final byte[] ring = ringFile.getBytes(StandardCharsets.UTF_8);
        if (path.length > MAX_PATH_BYTES || ring.length > MAX_PATH_BYTES) {
            throw new IllegalArgumentException("pool file path of " + path.length + " bytes or ring path of " + ring.length
                + " bytes, at most " + MAX_PATH_BYTES);
        }
        if (version == 2 && ring.length > 0) {
            throw new IllegalArgumentException("a version-2 bootstrap cannot name a ring");
        }
        final ByteBuffer b = ByteBuffer.allocate((version == 2 ? FIXED_BYTES_V2 : FIXED_BYTES) + path.length + ring.length)
            .order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putShort((short) version).putShort((short) path.length).putLong(pid).putLong(pidNamespace)
            .putLong(startTicks).putLong(identity);
        if (version != 2) {
            b.putLong(ringNonce).putShort((short) ring.length).putShort((short) 0).putInt(0);
        }
        b.put(path).put(ring);
        return b.array();
    }

    /**
     * @param in bytes received so far, from position 0 to position (not consumed)
     * @return total bytes of the bootstrap message once known (at least {@link #FIXED_BYTES_V2} for version 2,
     *         {@link #FIXED_BYTES} for version 3), or -1 while fewer bytes than the version's fixed part are there
     *         (magic and version are checked from 8 bytes on)
     * @throws TransferException on a bad magic, version or path length
     */
    static int length(ByteBuffer in) {
        if (in.position() < 8) {
            return -1;
        }
        final ByteBuffer b = in.duplicate().flip().order(ByteOrder.LITTLE_ENDIAN);
        final int magic = b.getInt();
        final int version = b.getShort() & 0xFFFF;
        final int pathLen = b.getShort() & 0xFFFF;
        if (magic != MAGIC) { // checked as soon as it is there: a stranger is refused without waiting for more
            throw new TransferException("shm bootstrap: bad magic 0x" + Integer.toHexString(magic) + ", expected 0x"
                + Integer.toHexString(MAGIC));
        }
        if (version < MIN_VERSION || version > VERSION) {
            throw new TransferException("shm bootstrap: version " + version + ", this side speaks " + MIN_VERSION + " to " + VERSION);
        }
        final int fixed = version == 2 ? FIXED_BYTES_V2 : FIXED_BYTES;
        if (in.position() < fixed) {
            return -1;
        }
        if (pathLen > MAX_PATH_BYTES) {
            throw new TransferException("shm bootstrap: pool file path of " + pathLen + " bytes exceeds " + MAX_PATH_BYTES);
        }
        if (version == 2) {
            return fixed + pathLen;
        }
        final int ringLen = b.position(48).getShort() & 0xFFFF;
        if (ringLen > MAX_PATH_BYTES) {
            throw new TransferException("shm bootstrap: ring path of " + ringLen + " bytes exceeds " + MAX_PATH_BYTES);
        }
        return fixed + pathLen + ringLen;
    }

    /** Decodes a whole bootstrap message from {@code in[0, length)}. */
    static Bootstrap decode(ByteBuffer in, int length) {
        final ByteBuffer b = in.duplicate().flip().limit(length).order(ByteOrder.LITTLE_ENDIAN);
        b.position(4);
        final int version = b.getShort() & 0xFFFF;
        final int pathLen = b.getShort() & 0xFFFF;
        final long pid = b.getLong();
        final long pidNamespace = b.getLong();
        final long startTicks = b.getLong();
        final long identity = b.getLong();
        long ringNonce = 0;
        int ringLen = 0;
        if (version != 2) {
            ringNonce = b.getLong();
            ringLen = b.getShort() & 0xFFFF;
            if (b.getShort() != 0 || b.getInt() != 0) {
                throw new TransferException("shm bootstrap: the reserved bytes 50..55 of a version-" + version + " bootstrap are not 0");
            }
        }
        final String path = utf8(b, pathLen, "pool file path");
        final String ring = utf8(b, ringLen, "ring path");
        if ((ringNonce == 0) != ring.isEmpty()) {
            throw new TransferException("shm bootstrap: ring nonce 0x" + Long.toHexString(ringNonce) + " with a " + ringLen
                + "-byte ring path (nonce 0 goes with an empty path and only then)");
        }
        if (pid <= 0) {
            throw new TransferException("shm bootstrap: pid " + pid + " is not a process id");
        }
        if ((identity == 0) != path.isEmpty()) {
            throw new TransferException("shm bootstrap: pool identity 0x" + Long.toHexString(identity) + " with a "
                + pathLen + "-byte path (identity 0 goes with an empty path and only then)");
        }
        if (pidNamespace < 0 || startTicks < 0) {
            throw new TransferException("shm bootstrap: pid namespace " + pidNamespace + " or start time " + startTicks + " is negative");
        }
        return new Bootstrap(version, pid, pidNamespace, startTicks, identity, path, ringNonce, ring);
    }

    /** Decodes {@code len} bytes of UTF-8 at {@code b}'s position and moves past them. */
    private static String utf8(ByteBuffer b, int len, String what) {
        try {
            final String s = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(b.slice(b.position(), len)).toString();
            b.position(b.position() + len);
            return s;
        } catch (CharacterCodingException e) {
            throw new TransferException("shm bootstrap: " + what + " is not valid UTF-8");
        }
    }
}
