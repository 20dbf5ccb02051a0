package io.kvpool.examples.server.role;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * Request ids remembered for a while: an abort or a give-back that arrived before the call it ends, so that the
 * call, when it comes, is refused instead of served for nobody. Bounded: at most {@code max} ids at once, and an
 * id that does not fit is counted ({@link #notKept()}), not kept. Expired ids leave in sweeps, at most one every
 * {@value #SWEEP_INTERVAL_NANOS} ns, never in a scan per id added.
 * <p>
 * {@link #add} and {@link #sweep} belong to one thread (a role's duty thread); {@link #take}, {@link #isEmpty}
 * and {@link #notKept} are safe from any thread.
 */
final class ExpiringIds {

    /** Shortest time between two sweeps. */
    static final long SWEEP_INTERVAL_NANOS = 100_000_000L;

    private final Map<Long, Long> forgetAt = new ConcurrentHashMap<>();
    private final int max;
    private final long keepNanos;
    private final LongAdder notKept = new LongAdder();
    private long nextSweep; // the owner thread's

    /**
     * @param max       most ids kept at once, ≥ 1
     * @param keepNanos how long each id is kept
     */
    ExpiringIds(int max, long keepNanos) {
        if (max < 1 || keepNanos < 1) {
            throw new IllegalArgumentException("max and keepNanos must be ≥ 1, were " + max + " and " + keepNanos);
        }
        this.max = max;
        this.keepNanos = keepNanos;
        this.nextSweep = System.nanoTime();
    }

    /**
     * Remembers {@code id} until {@code now + keepNanos}, after a sweep if one is due. Owner thread.
     *
     * @return whether it was kept; {@code false} (and counted) when {@code max} ids are kept already
     */
    boolean add(long id, long now) {
        sweep(now);
        if (forgetAt.size() < max) {
            forgetAt.put(id, now + keepNanos);
            return true;
        }
        notKept.increment();
        return false;
    }

    /** Forgets {@code id}. Any thread. @return whether it was remembered (expired or not, until a sweep) */
    boolean take(long id) {
        return forgetAt.remove(id) != null;
    }

    /** Forgets the expired ids, unless the last sweep was less than {@link #SWEEP_INTERVAL_NANOS} ago. Owner thread. */
    void sweep(long now) {
        if (now - nextSweep < 0 || forgetAt.isEmpty()) {
            return;
        }
        nextSweep = now + SWEEP_INTERVAL_NANOS;
        forgetAt.values().removeIf(until -> now - until >= 0);
    }

    /** @return whether no id is remembered. Any thread. */
    boolean isEmpty() {
        return forgetAt.isEmpty();
    }

    /** @return ids that were not kept because {@code max} were. Any thread. */
    long notKept() {
        return notKept.sum();
    }
}
