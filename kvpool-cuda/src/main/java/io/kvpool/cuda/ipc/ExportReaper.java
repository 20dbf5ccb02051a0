package io.kvpool.cuda.ipc;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.function.BooleanSupplier;

/**
 * Ends the exports of links that closed while their peer process lived, once it is gone: a closed pool's arena stays
 * allocated until then ({@link io.kvpool.cuda.DeviceIpc.ExportLease}), and after its close nobody else asks the link.
 * One daemon thread checks every waiting link each period, and exits when none waits.
 *
 * <p>Thread-safe. The proof is asked from the reaper's thread; {@link #watch} publishes what it reads.
 */
final class ExportReaper {

    private static final System.Logger LOG = System.getLogger("io.kvpool.cuda");

    /** The reaper of every {@link CudaIpcLink}: checks once a second. */
    static final ExportReaper SHARED = new ExportReaper(Duration.ofSeconds(1), true);

    private record Waiting(BooleanSupplier peerGone, List<IpcEngine.Export> exports, String link) {
    }

    private final long periodMillis;
    private final boolean ownThread;
    private final List<Waiting> waiting = new ArrayList<>(); // guarded by this
    private Thread thread;                                   // guarded by this; null while none waits

    /**
     * @param period    how often the thread checks
     * @param ownThread whether a thread checks; without one only {@link #checkNow()} does (tests)
     */
    ExportReaper(Duration period, boolean ownThread) {
        this.periodMillis = Math.max(1, period.toMillis());
        this.ownThread = ownThread;
    }

    /**
     * Ends {@code exports} once {@code peerGone} holds (checked each period, on the reaper's thread).
     *
     * @param peerGone the link's teardown proof; must be callable from another thread once the link is closed
     * @param link     the link, for the log
     */
    synchronized void watch(BooleanSupplier peerGone, Collection<IpcEngine.Export> exports, String link) {
        waiting.add(new Waiting(Objects.requireNonNull(peerGone, "peerGone"), List.copyOf(exports), link));
        if (ownThread && thread == null) {
            thread = startThread();
        }
    }

    /** Starts a checking thread (caller holds the lock and records it). */
    private Thread startThread() {
        return Thread.ofVirtual().name("kvpool-cuda-export-reaper").start(this::run);
    }

    /** {@return the links still waiting for their peer to be gone} */
    synchronized int waiting() {
        return waiting.size();
    }

    /** Checks every waiting link once, ending the exports of those whose peer is gone; {@return how many still wait} */
    int checkNow() {
        final List<Waiting> now;
        synchronized (this) {
            now = List.copyOf(waiting);
        }
        for (Waiting w : now) {
            boolean gone;
            try {
                gone = w.peerGone().getAsBoolean();
            } catch (RuntimeException | Error e) { // unknown: keep waiting, the safe side; the thread must live on for the others
                LOG.log(System.Logger.Level.DEBUG, () -> "export reaper: asking whether " + w.link() + "'s peer is gone failed: " + e);
                gone = false;
            }
            if (!gone) {
                continue;
            }
            for (IpcEngine.Export e : w.exports()) {
                try {
                    e.end();
                } catch (RuntimeException | Error failure) { // one storage's failure must not keep the others' arenas
                    LOG.log(System.Logger.Level.WARNING, "export reaper: ending an export of " + w.link() + " failed: " + failure);
                }
            }
            LOG.log(System.Logger.Level.INFO, () -> w.link() + ": its peer process is gone; its " + w.exports().size()
                + " export(s) ended (a closed pool frees its arena now)");
            synchronized (this) {
                waiting.removeIf(x -> x == w);
            }
        }
        synchronized (this) {
            return waiting.size();
        }
    }

    private void run() {
        try {
            while (true) {
                try {
                    Thread.sleep(periodMillis);
                } catch (InterruptedException e) {
                    // nobody interrupts this thread on purpose: go on checking, the exports still wait
                }
                checkNow();
                synchronized (this) {
                    if (waiting.isEmpty()) {
                        thread = null; // a later watch() starts another
                        return;
                    }
                }
            }
        } finally {
            synchronized (this) { // left by a throw (a failing log, say): the links still waiting get a new thread
                if (thread == Thread.currentThread()) {
                    thread = waiting.isEmpty() ? null : startThread();
                }
            }
        }
    }

    /** {@return whether a thread is checking now} (tests) */
    synchronized boolean running() {
        return thread != null;
    }
}
