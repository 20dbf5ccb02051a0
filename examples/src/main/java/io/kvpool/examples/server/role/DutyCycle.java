package io.kvpool.examples.server.role;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.BackoffIdleStrategy;

import java.util.Objects;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.locks.LockSupport;
import java.util.function.IntSupplier;

/**
 * One transfer engine's thread: an Agrona {@link Agent} whose duty cycle runs the commands other threads
 * {@link #submit} (through a thread-safe queue: HTTP threads never touch the engine) and then the
 * engine's own work. Nothing in a duty cycle blocks; when there is no work the thread backs off (spin,
 * yield, then park up to {@value #MAX_PARK_MICROS} µs), and a submit wakes it.
 *
 * <pre>
 *   HTTP thread ──submit(cmd)──▶ [ConcurrentLinkedQueue] ──▶ duty cycle: run cmds · work() · idle
 * </pre>
 */
final class DutyCycle implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");
    private static final long MAX_PARK_MICROS = 500;

    private final String name;
    private final ConcurrentLinkedQueue<Runnable> commands = new ConcurrentLinkedQueue<>();
    private final AgentRunner runner;
    private final Thread thread;
    private final Runnable afterCheck;
    private volatile boolean closed;
    private final java.util.concurrent.atomic.LongAdder failures = new java.util.concurrent.atomic.LongAdder();
    private long nextFailureLog = System.nanoTime(); // the duty thread's

    /**
     * Starts the thread.
     *
     * @param name    the thread's and the agent's name
     * @param work    the engine's duty cycle ({@code doWork()}); returns work done
     * @param onClose run on the duty thread when it stops (close the engine there)
     */
    DutyCycle(String name, IntSupplier work, Runnable onClose) {
        this(name, work, onClose, () -> {
        });
    }

    /**
     * @param afterCheck <b>test hook</b>: runs in {@link #submit} between its closed check and its enqueue (a test
     *                   widens the race with {@link #close} there); a no-op otherwise
     */
    DutyCycle(String name, IntSupplier work, Runnable onClose, Runnable afterCheck) {
        this.name = Objects.requireNonNull(name, "name");
        this.afterCheck = Objects.requireNonNull(afterCheck, "afterCheck");
        final Agent agent = new Agent() {
            @Override
            public int doWork() {
                int n = 0;
                for (Runnable c; (c = commands.poll()) != null; n++) {
                    runGuarded(c, "a command");
                }
                try {
                    return n + work.getAsInt();
                } catch (Throwable t) { // an Error too: let out, it would end the thread while the role still looks up
                    failed(t, "the engine's work");
                    return n; // no work counted: a failure that repeats every cycle backs off as idle cycles do
                }
            }

            @Override
            public void onClose() {
                try {
                    for (Runnable c; (c = commands.poll()) != null; ) {
                        runGuarded(c, "a command at close"); // commands submitted before close still run (they complete their callers)
                    }
                } finally {
                    onClose.run();
                }
            }

            @Override
            public String roleName() {
                return name;
            }
        };
        this.runner = new AgentRunner(new BackoffIdleStrategy(20, 20, 1_000, MAX_PARK_MICROS * 1_000),
            e -> LOG.log(System.Logger.Level.ERROR, name + ": duty cycle failed", e), null, agent);
        this.thread = AgentRunner.startOnThread(runner, r -> {
            final Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        });
    }

    /** Runs a command; what it throws, an Error included, is logged and counted, and the cycle goes on. */
    private void runGuarded(Runnable c, String what) {
        try {
            c.run();
        } catch (Throwable t) {
            failed(t, what);
        }
    }

    private void failed(Throwable t, String what) {
        failures.increment();
        final long now = System.nanoTime();
        if (now - nextFailureLog >= 0) { // at most one line (with its stack) every 10 s: a failure may repeat every cycle
            nextFailureLog = now + 10_000_000_000L;
            LOG.log(System.Logger.Level.ERROR, name + ": " + what + " failed (" + failures.sum() + " failures so far, logged "
                + "at most every 10 s); the duty cycle goes on", t);
        }
    }

    /** @return how many commands and work calls have thrown so far (each logged at ERROR) */
    long failures() {
        return failures.sum();
    }

    /**
     * Runs {@code command} on the duty thread, in submission order. A submit that races {@link #close} either
     * runs its command (on the duty thread, or on the closing thread against the closed engine) or throws —
     * never neither: a command enqueued after close drained the queue is taken back out, and the submit throws.
     * <pre>
     *   submit: check closed ─ add ─ closed now? ─ remove it: throw   (close: closed = true ─ stop the thread ─ drain)
     *                                            └ already taken: close's drain or the duty thread runs it
     * </pre>
     * ({@code closed} is written before close drains and read after the add; both are volatile/CAS, so a
     * submit that reads {@code closed == false} after its add is ordered before the drain, which then sees it.)
     *
     * @throws RoleUnavailableException if the cycle is closed (the command will not run)
     */
    void submit(Runnable command) {
        Objects.requireNonNull(command, "command");
        if (closed) {
            throw new RoleUnavailableException(name + " is closed");
        }
        afterCheck.run();
        final Runnable entry = command::run; // its own identity: remove() takes back this submit's entry, no other
        commands.add(entry);
        if (closed && commands.remove(entry)) {
            throw new RoleUnavailableException(name + " is closed");
        }
        LockSupport.unpark(thread);
    }

    /** @return whether the calling thread is the duty thread */
    boolean onDutyThread() {
        return Thread.currentThread() == thread;
    }

    /** Stops the thread after its current cycle; {@code onClose} runs there. Idempotent; waits for the thread. */
    @Override
    public void close() {
        closed = true;
        runner.close();
        for (Runnable c; (c = commands.poll()) != null; ) {
            try {
                c.run(); // raced with close: runs here, against a closed engine, so it completes its caller
            } catch (Throwable e) {
                LOG.log(System.Logger.Level.DEBUG, name + ": command after close failed", e);
            }
        }
    }
}
