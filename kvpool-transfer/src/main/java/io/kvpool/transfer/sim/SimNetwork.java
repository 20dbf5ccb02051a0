package io.kvpool.transfer.sim;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.NanoClock;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.SlotChecks;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.PriorityQueue;
import java.util.SplittableRandom;

/**
 * An in-JVM network for tests: links whose one-sided writes really land in the target pool's memory, at
 * a time the network picks — possibly after the receiver gave up, exactly as RDMA would — with injected
 * delays, reordering, failed, lost, misdirected and corrupted writes, writes that land long after their transport
 * reported them ended, lost and duplicated control frames, and peer crashes ({@link SimFaults}).
 *
 * <p>Deterministic: one seeded random source and a virtual clock ({@link #clock()}) that moves only when
 * {@link #advance} is called; events due at the same instant run in the order they were scheduled.
 * Single-threaded: the engines on both ends and the network are driven from one thread.
 *
 * <p>A write reads its source page at the last moment a transport may: when it completes or lands, whichever comes
 * first (or when it is cancelled). A sender that frees a source page before its write is terminal sends whatever the
 * page holds by then.
 *
 * <p>What ends a late write: the receiving end {@link PeerLink#tearDown() tore the link down}, or the
 * registration was {@link io.kvpool.transfer.spi.Registration#revoke() revoked} on a link created
 * {@code revocable} (like an RDMA memory window; a non-revocable link is like UCX over tcp, where
 * deregistering does not stop writes). Nothing else does: not a failure, not a close, not a timeout.
 */
public final class SimNetwork {

    private final SplittableRandom random;
    private final SimFaults faults;
    private final PriorityQueue<Event> events = new PriorityQueue<>();
    private final List<SimRegistration> registrations = new ArrayList<>();
    private long now;
    private long seq;
    private long landed;
    private long droppedLate;

    /**
     * Creates a network with no links and its virtual clock at 0.
     *
     * @param seed   the seed of every random choice
     * @param faults what goes wrong, and how often
     */
    public SimNetwork(long seed, SimFaults faults) {
        this.random = new SplittableRandom(seed);
        this.faults = faults;
    }

    /** {@return the virtual clock (nanoseconds), for the engines' builders} */
    public NanoClock clock() {
        return () -> now;
    }

    /** {@return virtual now, in nanoseconds} */
    public long now() {
        return now;
    }

    /** {@return writes that landed in a target's memory (including late ones)} */
    public long landedWrites() {
        return landed;
    }

    /** {@return writes dropped because the target tore the link down or revoked the registration} */
    public long droppedWrites() {
        return droppedLate;
    }

    /** {@return events not yet run (writes and frames in flight)} */
    public int pendingEvents() {
        return events.size();
    }

    /**
     * Connects two nodes.
     *
     * @param a         a name for the first end (e.g. "prefill-0")
     * @param b         a name for the second end
     * @param revocable whether {@link io.kvpool.transfer.spi.Registration#revoke()} can prove no write lands
     * @return {@code [the end at a, the end at b]}
     */
    public SimLink[] connect(String a, String b, boolean revocable) {
        final SimLink x = new SimLink(this, a + "→" + b, revocable);
        final SimLink y = new SimLink(this, b + "→" + a, revocable);
        x.peer = y;
        y.peer = x;
        return new SimLink[] {x, y};
    }

    /**
     * Moves virtual time forward, running every event due by then.
     *
     * @param nanos how far
     */
    public void advance(long nanos) {
        final long until = now + nanos;
        while (!events.isEmpty() && events.peek().at <= until) {
            final Event e = events.poll();
            now = Math.max(now, e.at);
            e.run();
        }
        now = until;
    }

    /** Runs every scheduled event (time jumps as far as needed). */
    public void drainAll() {
        while (!events.isEmpty()) {
            final Event e = events.poll();
            now = Math.max(now, e.at);
            e.run();
        }
    }

    /**
     * The node at {@code end} crashes: its links fail (the other side learns within the frame delay); the
     * writes it had posted still land unless the other side tears the link down first.
     *
     * @param end the crashing node's end of a link
     */
    public void crash(SimLink end) {
        end.crashed = true;
        end.down("crashed");
        final SimLink other = end.peer;
        schedule(now + delay(faults.maxFrameDelayNanos()), () -> other.failFromPeer("peer " + end.describe() + " crashed"));
    }

    // ---- used by SimLink ----

    SplittableRandom random() {
        return random;
    }

    SimFaults faults() {
        return faults;
    }

    long delay(long max) {
        return max <= 0 ? 0 : random.nextLong(max + 1);
    }

    long writeDelay() {
        return faults.minWriteDelayNanos() + delay(faults.maxWriteDelayNanos() - faults.minWriteDelayNanos());
    }

    void schedule(long at, Runnable r) {
        events.add(new Event(at, seq++, r));
    }

    SimRegistration register(SimLink owner, PageStorage storage, int[] slots, boolean revocable) {
        SlotChecks.requireDistinct(slots, storage.pageCount(), "registered twice");
        final SimRegistration r = new SimRegistration(registrations.size(), owner, storage, slots.clone(), revocable);
        registrations.add(r);
        return r;
    }

    SimRegistration registration(long id) {
        return id >= 0 && id < registrations.size() ? registrations.get((int) id) : null;
    }

    /** A write reaches the target's memory now, unless the target can prove it cannot. */
    void land(SimRegistration reg, int dstIndex, byte[] bytes) {
        if (reg.revoked || reg.owner.tornDown) {
            droppedLate++;
            return;
        }
        if (!reg.storage.isHostAccessible()) {
            throw new IllegalStateException("the simulated network writes host pages only");
        }
        final MemorySegment page;
        try {
            page = reg.storage.hostPage(reg.slots[dstIndex]);
        } catch (IllegalStateException closed) {
            droppedLate++; // the receiving pool's storage is gone (its process ended)
            return;
        }
        MemorySegment.copy(bytes, 0, page, ValueLayout.JAVA_BYTE, 0, bytes.length);
        landed++;
    }

    private record Event(long at, long seq, Runnable action) implements Comparable<Event> {
        void run() {
            action.run();
        }

        @Override
        public int compareTo(Event o) {
            return at != o.at ? Long.compare(at, o.at) : Long.compare(seq, o.seq);
        }
    }
}
