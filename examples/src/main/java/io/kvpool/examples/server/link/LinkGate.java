package io.kvpool.examples.server.link;

import java.time.Duration;

/**
 * <b>Test hook.</b> Holds the prefill side's page writes while closed: a write posted through a closed
 * gate (and everything behind it on the link) stays queued in {@link FaultyLink}, in flight from the
 * sender's point of view, until the gate opens. Lets a test make a client disconnect land in the middle of
 * a transfer deterministically, without sleeps. {@link #dropLink()} makes the link fail on its next poll.
 * Thread-safe.
 */
public final class LinkGate {

    private boolean closed;
    private long held;
    private boolean drop;

    /** @return a gate, closed if {@code closed} */
    public static LinkGate create(boolean closed) {
        final LinkGate g = new LinkGate();
        g.closed = closed;
        return g;
    }

    /** Holds every write posted from now on. */
    public synchronized void close() {
        closed = true;
    }

    /** Lets the held writes go (on the link's next poll) and every later one. */
    public synchronized void open() {
        closed = false;
        notifyAll();
    }

    /** @return whether writes are held */
    public synchronized boolean isClosed() {
        return closed;
    }

    /** @return page writes held so far (counted once each, when held) */
    public synchronized long held() {
        return held;
    }

    /**
     * Waits until at least {@code writes} page writes have been held.
     *
     * @return whether they were, before the timeout
     */
    public synchronized boolean awaitHeld(long writes, Duration timeout) throws InterruptedException {
        final long end = System.nanoTime() + timeout.toNanos();
        while (held < writes) {
            final long left = end - System.nanoTime();
            if (left <= 0) {
                return false;
            }
            wait(Math.max(1, left / 1_000_000));
        }
        return true;
    }

    /** Makes the prefill side's current link fail on its next poll, as if the connection broke. */
    public synchronized void dropLink() {
        drop = true;
    }

    /** @return whether a drop was asked for since the last call */
    synchronized boolean takeDrop() {
        final boolean d = drop;
        drop = false;
        return d;
    }

    synchronized void noteHeld(int writes) {
        held += writes;
        notifyAll();
    }
}
