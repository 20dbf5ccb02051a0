package io.kvpool.transfer.shm;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.util.Objects;

/**
 * One direction of an {@link ShmLink}'s control channel: a single-producer, single-consumer byte ring in
 * memory that both processes map ({@link ShmRingFile}). It moves bytes like a non-blocking socket does
 * (partial writes and reads, no record boundaries; the kvpool frame header says where a frame ends), but
 * without a system call.
 * <pre>
 *   tail  u64  bytes written so far: stored by the producer only (release), loaded by the consumer (acquire)
 *   head  u64  bytes read so far:    stored by the consumer only (release), loaded by the producer (acquire)
 *   data  capacity bytes (a power of two); the byte at position p is data[p &amp; (capacity − 1)]
 *
 *   invariant: 0 ≤ tail − head ≤ capacity
 * </pre>
 * The producer copies bytes into {@code [tail, head + capacity)} and then publishes the new tail; the consumer
 * copies {@code [head, tail)} out and then publishes the new head, which hands the space back. Each side keeps
 * its own position in a field and only ever <em>reads</em> the other's from shared memory, so a peer that
 * scribbles over the positions cannot move this side's; a position that breaks the invariant means a broken
 * peer and throws {@link CorruptRingException}. Positions are never reduced modulo the capacity: at 2<sup>63</sup>
 * bytes they cannot wrap in the life of a link.
 *
 * <p>Threads: one thread at a time uses an instance (the link's owner thread); the peer process uses the other
 * end. Either end may be this process's producer or consumer, never both.
 */
final class ShmRing {

    /** Plain, acquire and release access to a {@code long} at a byte offset of a segment. */
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    /** The positions broke the ring's invariant: the peer (or the memory under the ring) is broken. */
    static final class CorruptRingException extends RuntimeException {
        CorruptRingException(String message) {
            super(message);
        }
    }

    private final MemorySegment positions;
    private final long tailAt, headAt;
    private final MemorySegment data;
    private final long capacity, mask;
    /** This side's position: the tail if this side produces, the head if it consumes. */
    private long own;

    /**
     * @param positions the segment holding both positions (8-byte aligned offsets)
     * @param tailAt    offset of {@code tail} in {@code positions}
     * @param headAt    offset of {@code head} in {@code positions}
     * @param data      the ring's bytes; its size is the capacity, a power of two
     * @param producer  whether this side writes (else it reads)
     */
    ShmRing(MemorySegment positions, long tailAt, long headAt, MemorySegment data, boolean producer) {
        this.positions = Objects.requireNonNull(positions, "positions");
        this.tailAt = tailAt;
        this.headAt = headAt;
        this.data = Objects.requireNonNull(data, "data");
        this.capacity = data.byteSize();
        if (Long.bitCount(capacity) != 1) {
            throw new IllegalArgumentException("ring capacity " + capacity + " is not a power of two");
        }
        this.mask = capacity - 1;
        this.own = (long) LONG.getAcquire(positions, producer ? tailAt : headAt);
    }

    /**
     * Copies as many of {@code src}'s remaining bytes as there is room for, and publishes them.
     *
     * @return bytes written (0 when the ring is full); {@code src}'s position moves by as many
     * @throws CorruptRingException if the consumer's head is not within one capacity behind this tail
     */
    int write(ByteBuffer src) {
        final long used = unread();
        final int n = (int) Math.min(src.remaining(), capacity - used);
        if (n == 0) {
            return 0;
        }
        final long at = own & mask;
        final int first = (int) Math.min(n, capacity - at);
        own += n;
        if (publishBeforeCopyForTest) {
            publish(tailAt, own);
        }
        if (src.hasArray()) { // a heap buffer: copied from its array, with no segment made for it
            final int from = src.arrayOffset() + src.position();
            MemorySegment.copy(src.array(), from, data, ValueLayout.JAVA_BYTE, at, first);
            if (n > first) { // the bytes that wrap around to the ring's start
                MemorySegment.copy(src.array(), from + first, data, ValueLayout.JAVA_BYTE, 0, n - first);
            }
        } else {
            final MemorySegment from = MemorySegment.ofBuffer(src); // covers [position, limit)
            MemorySegment.copy(from, 0, data, at, first);
            if (n > first) {
                MemorySegment.copy(from, first, data, 0, n - first);
            }
        }
        publish(tailAt, own); // the bytes above become visible no later than the tail that covers them
        src.position(src.position() + n);
        return n;
    }

    /**
     * Copies as many published bytes as {@code dst} has room for, and hands their space back.
     *
     * @return bytes read (0 when nothing is published); {@code dst}'s position moves by as many
     * @throws CorruptRingException if the producer's tail is behind this head or more than one capacity ahead
     */
    int read(ByteBuffer dst) {
        final long avail = available();
        final int n = (int) Math.min(dst.remaining(), avail);
        if (n == 0) {
            return 0;
        }
        final long at = own & mask;
        final int first = (int) Math.min(n, capacity - at);
        if (dst.hasArray()) { // a heap buffer: copied into its array, with no segment made for it
            final int to = dst.arrayOffset() + dst.position();
            MemorySegment.copy(data, ValueLayout.JAVA_BYTE, at, dst.array(), to, first);
            if (n > first) { // the bytes that wrapped around to the ring's start
                MemorySegment.copy(data, ValueLayout.JAVA_BYTE, 0, dst.array(), to + first, n - first);
            }
        } else {
            final MemorySegment to = MemorySegment.ofBuffer(dst); // covers [position, limit)
            MemorySegment.copy(data, at, to, 0, first);
            if (n > first) {
                MemorySegment.copy(data, 0, to, first, n - first);
            }
        }
        own += n;
        publish(headAt, own); // after the copy: the producer may overwrite these bytes from now on
        dst.position(dst.position() + n);
        return n;
    }

    /**
     * @return bytes published and not yet read (consumer side)
     * @throws CorruptRingException if the producer's tail is behind this head or more than one capacity ahead
     */
    long available() {
        final long tail = (long) LONG.getAcquire(positions, tailAt);
        final long avail = tail - own;
        if (avail < 0 || avail > capacity) {
            throw new CorruptRingException("control ring: the writer's position " + tail + " is not within " + capacity
                + " bytes ahead of the reader's " + own);
        }
        return avail;
    }

    /**
     * Test-only: when set, {@link #write} publishes the tail before it copies the bytes — the ordering mistake
     * the release store prevents — so that a test can show its consumer catches bytes read before they were
     * written.
     */
    static volatile boolean publishBeforeCopyForTest;

    private void publish(long at, long position) {
        LONG.setRelease(positions, at, position);
    }

    /**
     * @return bytes this producer published that the consumer has not read yet (producer side)
     * @throws CorruptRingException if the consumer's head is not within one capacity behind this tail
     */
    long unread() {
        final long head = (long) LONG.getAcquire(positions, headAt);
        final long used = own - head;
        if (used < 0 || used > capacity) {
            throw new CorruptRingException("control ring: the reader's position " + head + " is not within " + capacity
                + " bytes behind the writer's " + own);
        }
        return used;
    }

    /** @return the capacity in bytes */
    long capacity() {
        return capacity;
    }

    @Override
    public String toString() {
        return "ShmRing[capacity " + capacity + ", own position " + own + "]";
    }
}
