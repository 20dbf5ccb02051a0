package io.kvpool.transfer.shm;

import io.kvpool.transfer.TransferException;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * The shared-memory transport's own first message, sent by both sides of a socket before any kvpool
 * frame (little-endian):
 * <pre>
 *   u32 magic 0x4B565342 ("BSVK" on the wire), u16 version 1, u16 path length (≤ 4096),
 *   i64 pid, i64 pool file identity (0: this side exposes no pool), path (UTF-8; empty with identity 0)
 * </pre>
 */
record Bootstrap(long pid, long identity, String poolFile) {

    static final int MAGIC = 0x4B565342;
    static final int VERSION = 1;
    static final int FIXED_BYTES = 24;
    static final int MAX_PATH_BYTES = 4096;

    /** @return the encoded message */
    byte[] encode() {
        final byte[] path = poolFile.getBytes(StandardCharsets.UTF_8);
        if (path.length > MAX_PATH_BYTES) {
            throw new IllegalArgumentException("pool file path of " + path.length + " bytes, at most " + MAX_PATH_BYTES);
        }
        final ByteBuffer b = ByteBuffer.allocate(FIXED_BYTES + path.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putShort((short) VERSION).putShort((short) path.length).putLong(pid).putLong(identity).put(path);
        return b.array();
    }

    /**
     * @param in bytes received so far, from position 0 to position (not consumed)
     * @return total bytes of the bootstrap message once known (≥ {@link #FIXED_BYTES}), or -1 while
     *         fewer than {@link #FIXED_BYTES} bytes are there
     * @throws TransferException on a bad magic, version or path length
     */
    static int length(ByteBuffer in) {
        if (in.position() < FIXED_BYTES) {
            return -1;
        }
        final ByteBuffer b = in.duplicate().flip().order(ByteOrder.LITTLE_ENDIAN);
        final int magic = b.getInt();
        final int version = b.getShort() & 0xFFFF;
        final int pathLen = b.getShort() & 0xFFFF;
        if (magic != MAGIC) {
            throw new TransferException("shm bootstrap: bad magic 0x" + Integer.toHexString(magic) + ", expected 0x"
                + Integer.toHexString(MAGIC));
        }
        if (version != VERSION) {
            throw new TransferException("shm bootstrap: version " + version + ", this side speaks " + VERSION);
        }
        if (pathLen > MAX_PATH_BYTES) {
            throw new TransferException("shm bootstrap: pool file path of " + pathLen + " bytes exceeds " + MAX_PATH_BYTES);
        }
        return FIXED_BYTES + pathLen;
    }

    /** Decodes a whole bootstrap message from {@code in[0, length)}. */
    static Bootstrap decode(ByteBuffer in, int length) {
        final ByteBuffer b = in.duplicate().flip().limit(length).order(ByteOrder.LITTLE_ENDIAN);
        b.position(6);
        final int pathLen = b.getShort() & 0xFFFF;
        final long pid = b.getLong();
        final long identity = b.getLong();
        final String path;
        try {
            path = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(b.slice(b.position(), pathLen)).toString();
        } catch (CharacterCodingException e) {
            throw new TransferException("shm bootstrap: pool file path is not valid UTF-8");
        }
        if (pid <= 0) {
            throw new TransferException("shm bootstrap: pid " + pid + " is not a process id");
        }
        if ((identity == 0) != path.isEmpty()) {
            throw new TransferException("shm bootstrap: pool identity 0x" + Long.toHexString(identity) + " with a "
                + pathLen + "-byte path (identity 0 goes with an empty path and only then)");
        }
        return new Bootstrap(pid, identity, path);
    }
}
