package io.kvpool.examples.server.remote;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

/**
 * What the router knows of one role process's readiness, so that a request for a role known down is answered at
 * once instead of after a call's timeout. A probe reads the role's {@code GET /internal/status} every
 * {@link #PROBE_EVERY}; a call that finds the role unreachable marks it down at once ({@link #lost}).
 *
 * <pre>
 *   unknown (no probe answered yet) ─┐
 *   ready   (status read; for decode: its KV link up) ──▶ the request goes on
 *   down    (unreachable, the wrong role, not matching the router, or decode without a KV link) ──▶ re-checked once, at most {@link #RECHECK_WAIT}:
 *           still down → 503 + Retry-After at once; ready again → the request goes on
 * </pre>
 * The re-check is shared by every request that asks while it runs (one status call, however many requests), and
 * it is what keeps a state a moment old from refusing a role that just came back. When two status reads in a row got
 * no answer for their whole timeout (a frozen process, a partition), the second also fails the calls to the role sent
 * before it began and still waiting ({@link RoleClient#failCallsSentBefore}): a request already under way when its role
 * froze is answered within about two status timeouts and a probe interval (4.2 s), not its call's timeout (10 s). A
 * role that refuses connections (one stopping gracefully finishes the calls it has) or answers late once (a GC pause
 * under 4 s) keeps its calls, and so does one whose calls got an answer (2xx or 4xx) while the second silent read waited:
 * behind a balancer the probe may have reached a dead process while others answer, and a call sent to the dead one then
 * waits for its own timeout, as it would without the probe. Thread-safe.
 */
final class RoleHealth implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    /** How often the probe reads the role's status. */
    static final Duration PROBE_EVERY = Duration.ofMillis(200);
    /** Longest a request waits for the re-check of a role known down (the goal for a fast 503). */
    static final Duration RECHECK_WAIT = Duration.ofMillis(100);

    /** One reading, as of {@code atNanos} ({@link System#nanoTime()}): {@code why} is {@code null} when the role can take requests. */
    record State(String why, long atNanos) {
        boolean ready() {
            return why == null;
        }
    }

    private final RoleClient client; // its own: probes neither wait behind calls nor ride their connections
    private final RoleClient calls;
    private final String role;
    private final boolean needsLink;
    private final java.util.function.Function<RemoteStatus, String> verify;
    private final long recheckWaitNanos;
    /** A status read under way, and when it began. */
    record Check(CompletableFuture<State> result, long startedAt) {
    }

    private final AtomicReference<Check> checking = new AtomicReference<>();
    /** The newest reading (null: unknown). A status read replaces only a reading older than the read's start. */
    private final AtomicReference<State> state = new AtomicReference<>();
    /** Whether the last status read got no answer for its whole timeout (reads run one at a time: {@link #checking}). */
    private volatile boolean lastReadSilent;
    private volatile boolean closed;
    private final Thread probe;

    /**
     * @param calls     the client the router calls the role with (the probe uses one of its own, to the same URL)
     * @param needsLink whether the role is ready only with its KV link up (decode: it can take a transfer only then)
     */
    RoleHealth(RoleClient calls, String role, boolean needsLink) {
        this(calls, role, needsLink, null);
    }

    /**
     * @param verify checks every status read from the role (its identity and capacity, on every reconnect): why it
     *               does not match the router, or {@code null}; {@code null} for no check
     */
    RoleHealth(RoleClient calls, String role, boolean needsLink, java.util.function.Function<RemoteStatus, String> verify) {
        this(calls, role, needsLink, verify, RECHECK_WAIT);
    }

    /** @param recheckWait longest a request waits for a re-check ({@link #RECHECK_WAIT}; a test may wait longer) */
    RoleHealth(RoleClient calls, String role, boolean needsLink, java.util.function.Function<RemoteStatus, String> verify,
               Duration recheckWait) {
        this.recheckWaitNanos = recheckWait.toNanos();
        this.verify = verify;
        this.calls = calls;
        // the calls' parser (the router's is strict): a status the router's own reads refuse is not a role that is up
        this.client = new RoleClient(Objects.requireNonNull(role, "role"), calls.base(), calls.json());
        this.role = Objects.requireNonNull(role, "role");
        this.needsLink = needsLink;
        this.probe = Thread.ofVirtual().name("kvpool-probe-" + role).start(this::probeLoop);
    }

    private void probeLoop() {
        while (!closed) {
            try {
                check().result().get();
                Thread.sleep(PROBE_EVERY);
            } catch (InterruptedException e) {
                return;
            } catch (ExecutionException e) {
                LOG.log(System.Logger.Level.DEBUG, role + " probe failed: " + e.getCause());
            }
        }
    }

    /** Starts a status read, or joins the one running (package-private: a test waits for the read under way). */
    Check check() {
        while (true) {
            final Check running = checking.get();
            if (running != null) {
                return running;
            }
            final Check check = new Check(new CompletableFuture<>(), System.nanoTime());
            final CompletableFuture<State> mine = check.result();
            if (checking.compareAndSet(null, check)) {
                Thread.ofVirtual().name("kvpool-check-" + role).start(() -> {
                    try {
                        final State s = read(check.startedAt());
                        if (!closed) {
                            // a role found lost while this read ran stays down: the read may have been answered first
                            state.getAndUpdate(old -> old == null || old.atNanos() - check.startedAt() <= 0 ? s : old);
                        }
                        mine.complete(s);
                    } catch (Throwable t) {
                        mine.completeExceptionally(t);
                    } finally {
                        checking.compareAndSet(check, null);
                    }
                });
                return check;
            }
        }
    }

    /** @param startedAt when the read began: the time its reading stands for */
    private State read(long startedAt) {
        final RemoteStatus s = RemoteStatus.read(client, role);
        final String why;
        final String mismatch;
        // no answer for the read's whole timeout, twice in a row: the process is frozen or cut off
        final boolean silent = !s.status().up() && System.nanoTime() - startedAt >= RoleClient.STATUS_TIMEOUT.toNanos();
        final boolean previousSilent = lastReadSilent;
        lastReadSilent = silent;
        // and no call answered while this read waited: behind a balancer another process may be answering them (the
        // window starts after the first silent read timed out, so an answer given just before a freeze does not count)
        final boolean silentTwice = silent && previousSilent && !calls.answeredSince(startedAt);
        if (!s.status().up()) {
            why = s.status().down();
            // the calls sent before this read wait on a frozen process in vain: fail them now, not after their own
            // timeout (10 s)
            final int cut = silentTwice && !closed ? calls.failCallsSentBefore(startedAt, why) : 0;
            if (cut > 0) {
                LOG.log(System.Logger.Level.WARNING, role + " role gave no answer to two status reads in a row, nor to any call: failed the "
                    + cut + " call(s) to it still waiting for an answer: " + why);
            }
        } else if (verify != null && (mismatch = verify.apply(s)) != null) {
            why = mismatch; // a role that came back as another build, environment or layout, or with a smaller pool
        } else if (needsLink && !s.ready()) {
            why = client.describe() + (s.status().draining() ? ": the process is stopping and takes no new request; retry later"
                : ": no prefill link is up; retry later");
        } else {
            why = null;
        }
        return new State(why, startedAt);
    }

    /**
     * @return why the role cannot take a request now, or {@code null} when it can (or nothing is known yet);
     *         waits at most {@link #RECHECK_WAIT}, and only for a role known down whose re-check began less than
     *         that long ago (a role that does not answer its re-check is not waited for again by every request)
     */
    String unavailable() throws InterruptedException {
        return unavailable(System.nanoTime() + recheckWaitNanos);
    }

    /**
     * As {@link #unavailable()}, waiting no later than {@code untilNanos} either: a caller that checks two roles gives
     * both one deadline, so that two re-checks take {@link #RECHECK_WAIT} together, not each.
     *
     * @param untilNanos the latest {@link System#nanoTime()} to wait until
     */
    String unavailable(long untilNanos) throws InterruptedException {
        final State s = state.get();
        if (s == null || s.ready()) {
            return null;
        }
        final Check c = check();
        final long now = System.nanoTime();
        final long left = Math.min(recheckWaitNanos - (now - c.startedAt()), untilNanos - now);
        if (left <= 0) {
            return s.why();
        }
        try {
            c.result().get(left, TimeUnit.NANOSECONDS);
            // the merged reading, not the read's own: a read begun before a newer loss does not undo it
            return state.get().why();
        } catch (TimeoutException e) {
            return s.why(); // the re-check is still waiting on the role: what we knew stands
        } catch (ExecutionException e) {
            return s.why();
        }
    }

    /** A call found the role unreachable: known down from now until a status read begun later says otherwise. */
    void lost(String why) {
        if (!closed) {
            state.set(new State(Objects.requireNonNull(why, "why"), System.nanoTime()));
        }
    }

    /** @return the last reading, or {@code null} before the first */
    State state() {
        return state.get();
    }

    @Override
    public void close() {
        closed = true;
        probe.interrupt();
        client.close();
    }
}
