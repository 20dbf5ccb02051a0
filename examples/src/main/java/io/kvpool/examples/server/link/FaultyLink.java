package io.kvpool.examples.server.link;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.ForwardingPeerLink;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.RemoteRegion;
import org.agrona.collections.LongHashSet;

import java.util.ArrayDeque;
import java.util.Objects;
import java.util.SplittableRandom;

/**
 * The prefill side's end of a link: the transport's link with
 * <ul>
 *   <li><b>grants</b> ({@link LocalGrants}, when the decode role is in this JVM): every write into the
 *       receiver's pages runs under its registration's grant, so a revoked registration is proven unable
 *       to take another byte;</li>
 *   <li><b>fault injection</b> ({@link FaultPlan}): failed, delayed and refused batches, dropped links;</li>
 *   <li>a <b>{@link LinkGate}</b> test hook that holds writes while closed.</li>
 * </ul>
 *
 * <h2>How it keeps the {@link PeerLink} semantics</h2>
 * Held or delayed operations wait in one FIFO queue, flushes included, so a flush is passed to the
 * transport only after every write posted before it: a flush still proves delivery of everything before
 * it. Each write reaches exactly one terminal state: the transport's, rewritten to FAILED for an injected
 * "failed after landing", or FAILED / CANCELED reported here for a write that never reached the
 * transport (injected failure, revoked grant, cancel, close or a dropped link). A batch that cannot be
 * posted at once (dropped link, revoked grant) is refused with {@link LinkFailedException} before any of
 * its writes is posted. Not thread-safe: one owner thread (the prefill role's duty cycle).
 */
public final class FaultyLink extends ForwardingPeerLink {

    private static final long MIN_DELAY_NANOS = 1_000_000, MAX_DELAY_NANOS = 20_000_000;

    private sealed interface Op permits Put, Flush {
    }

    private record Put(Region region, int[] dst, PageStorage source, int[] src, int count, long firstToken,
                       boolean fail, boolean landed, long releaseAt) implements Op {
    }

    private record Flush(long token) implements Op {
    }

    private record Region(LocalGrants.Grant grant, RemoteRegion inner) implements RemoteRegion {
        @Override
        public int pages() {
            return inner.pages();
        }
    }

    private final LocalGrants grants;
    private final FaultPlan faults;
    private final LinkGate gate;
    private final SplittableRandom random;
    private final ArrayDeque<Op> pending = new ArrayDeque<>();
    private final ArrayDeque<long[]> events = new ArrayDeque<>(); // {token, status} of writes; {token, -1 ok / -2 failed} of flushes
    private final LongHashSet failOnCompletion = new LongHashSet();
    private String dropped;
    private boolean dropDelivered;
    private boolean closed;
    private long injected;

    /**
     * @param grants the grants shared with the decode role's links, or {@code null} when it is another process
     * @param faults what to inject ({@link FaultPlan#NONE} for nothing)
     * @param gate   the test hook, or {@code null}
     * @param linkNumber which link of this role this is (0 first); mixed into the seed
     */
    public FaultyLink(PeerLink delegate, LocalGrants grants, FaultPlan faults, LinkGate gate, int linkNumber) {
        super(delegate);
        this.grants = grants;
        this.faults = Objects.requireNonNull(faults, "faults");
        this.gate = gate;
        this.random = new SplittableRandom(faults.seed() * 0x9E3779B97F4A7C15L + linkNumber); // each reconnected link draws anew
    }

    /** @return faults injected so far on this link */
    public long injectedFaults() {
        return injected;
    }

    // ---- sender side ----

    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        ensureUp();
        if (grants == null) {
            return new Region(null, delegate().attach(regionKey, pages));
        }
        final LocalGrants.Grant g = grants.find(regionKey);
        return new Region(g, delegate().attach(LocalGrants.inner(regionKey), pages));
    }

    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        ensureUp();
        if (!(region instanceof Region r)) {
            throw new IllegalArgumentException("region " + region + " was not attached through this link");
        }
        if (r.grant != null && r.grant.isRevoked()) {
            throw new LinkFailedException(describe() + ": the registration was revoked; nothing of this batch was posted");
        }
        boolean fail = false, landed = false;
        long releaseAt = 0;
        if (faults.active() && random.nextDouble() < faults.rate()) {
            injected++;
            final double kind = random.nextDouble();
            if (kind < 0.10) {
                drop("injected fault: link dropped");
                throw new LinkFailedException(describe() + ": " + dropped + "; nothing of this batch was posted");
            } else if (kind < 0.55) {
                fail = true;
                landed = random.nextBoolean();
            } else {
                releaseAt = System.nanoTime() + MIN_DELAY_NANOS + random.nextLong(MAX_DELAY_NANOS - MIN_DELAY_NANOS);
            }
        }
        final Put put = new Put(r, slice(dst, off, count), source, slice(src, off, count), count, firstToken, fail, landed, releaseAt);
        if (pending.isEmpty() && releaseAt == 0 && (gate == null || !gate.isClosed())) {
            post(put, true);
            return;
        }
        if (gate != null && gate.isClosed()) {
            gate.noteHeld(count);
        }
        pending.add(put);
    }

    @Override
    public void flush(long token) {
        ensureUp();
        if (pending.isEmpty()) {
            delegate().flush(token);
        } else {
            pending.add(new Flush(token));
        }
    }

    @Override
    public void cancelWrites() {
        cancelPending(CANCELED, true);
        if (delegate().isUp()) {
            delegate().cancelWrites();
        }
    }

    /**
     * Posts a write batch to the transport under its grant.
     *
     * @param now whether the sender is calling (refuse by throwing) or a queued batch is released
     *            (report terminal states instead)
     */
    private void post(Put p, boolean now) {
        if (p.fail && !p.landed) {
            report(p, FAILED); // nothing written: an honest failure
            return;
        }
        final LocalGrants.Grant g = p.region.grant;
        final Runnable copy = () -> delegate().putBatch(p.region.inner, p.dst, p.source, p.src, 0, p.count, p.firstToken);
        try {
            final boolean ran = g == null ? run(copy) : g.write(copy);
            if (!ran) {
                if (now) {
                    throw new LinkFailedException(describe() + ": the registration was revoked; nothing of this batch was posted");
                }
                report(p, CANCELED); // revoked while queued: never reached the transport
                return;
            }
        } catch (RuntimeException e) {
            if (now) {
                throw e; // the transport refused the batch before posting any of it
            }
            report(p, FAILED);
            return;
        }
        if (p.fail) {
            for (int i = 0; i < p.count; i++) {
                failOnCompletion.add(p.firstToken + i); // landed, but reported FAILED: it may have landed, as real failures may
            }
        }
    }

    private static boolean run(Runnable r) {
        r.run();
        return true;
    }

    private void report(Put p, int status) {
        for (int i = 0; i < p.count; i++) {
            events.add(new long[] {p.firstToken + i, status});
        }
    }

    /** A write the transport completed: FAILED instead where this link chose to fail a write that landed. */
    @Override
    protected void writeDone(LinkListener listener, long token, int status) {
        super.writeDone(listener, token, failOnCompletion.remove(token) ? FAILED : status);
    }

    /** A run of writes, each seen alone: any of them may be one to fail. */
    @Override
    protected void writesDone(LinkListener listener, long firstToken, int count, int status) {
        for (int i = 0; i < count; i++) {
            writeDone(listener, firstToken + i, status);
        }
    }

    /** Releases queued operations in order, as far as the gate and delays allow. */
    private void release() {
        if (gate != null && gate.isClosed()) {
            return;
        }
        final long now = System.nanoTime();
        for (Op op; (op = pending.peek()) != null; ) {
            if (op instanceof Put p) {
                if (p.releaseAt != 0 && now - p.releaseAt < 0) {
                    return;
                }
                pending.poll();
                if (isUp()) {
                    post(p, false);
                } else {
                    report(p, CANCELED);
                }
            } else {
                pending.poll();
                final Flush f = (Flush) op;
                if (isUp()) {
                    delegate().flush(f.token);
                } else {
                    events.add(new long[] {f.token, -2});
                }
            }
        }
    }

    private void cancelPending(int status, boolean keepFlushes) {
        final ArrayDeque<Op> flushes = new ArrayDeque<>();
        for (Op op; (op = pending.poll()) != null; ) {
            if (op instanceof Put p) {
                report(p, status);
            } else if (keepFlushes) {
                flushes.add(op);
            } else {
                events.add(new long[] {((Flush) op).token, -2});
            }
        }
        pending.addAll(flushes);
    }

    // ---- events ----

    @Override
    public int poll(LinkListener listener, int limit) {
        if (gate != null && gate.takeDrop()) {
            drop("dropped by the test gate");
        }
        release();
        int n = 0;
        while (n < limit && !events.isEmpty()) {
            final long[] e = events.poll();
            if (e[1] < 0) {
                listener.onFlushDone(this, e[0], e[1] == -1);
            } else {
                listener.onWriteDone(this, e[0], (int) e[1]);
            }
            n++;
        }
        if (n < limit) {
            n += super.poll(listener, limit - n);
        }
        if (dropped != null && !dropDelivered && n < limit) {
            dropDelivered = true;
            listener.onLinkFailed(this, dropped);
            n++;
        }
        return n;
    }

    private void drop(String reason) {
        if (dropped != null || closed) {
            return;
        }
        dropped = reason;
        cancelPending(CANCELED, false);
        delegate().close(); // the decode side sees the socket close and fails the link too
    }

    // ---- the rest ----

    @Override
    public String describe() {
        return delegate().describe() + (faults.active() ? "+faults(" + faults.rate() + ")" : "") + (grants == null ? "" : "+grants");
    }

    @Override
    public boolean isUp() {
        return dropped == null && !closed && delegate().isUp();
    }

    private void ensureUp() {
        if (dropped != null) {
            throw new LinkFailedException(describe() + " failed: " + dropped);
        }
        if (closed) {
            throw new LinkFailedException(describe() + " is closed");
        }
    }

    @Override
    public void send(byte[] frame) { // frames sent as buffers come here too (PeerLink's default copy)
        ensureUp();
        super.send(frame);
    }

    @Override
    public boolean tearDown() {
        cancelPending(CANCELED, false);
        return delegate().tearDown();
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        cancelPending(CANCELED, false);
        closed = true;
        delegate().close();
    }

    private static int[] slice(int[] a, int off, int count) {
        final int[] out = new int[count];
        System.arraycopy(a, off, out, 0, count);
        return out;
    }
}
