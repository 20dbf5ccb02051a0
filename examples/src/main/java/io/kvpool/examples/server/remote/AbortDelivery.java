package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;
import io.kvpool.examples.server.role.RoleStatus;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;

/**
 * The router's half of a paired abort to a role process, delivered without making the client wait: {@link #send}
 * returns at once, and a virtual thread posts {@code POST /internal/abort}, retrying (50 ms, doubling to 1 s) until
 * the role takes it (any 2xx), refuses it for good (a 4xx), or is declared gone — it has
 * not taken it for {@link #GIVE_UP} (a role process gone that long lost what it held with it; one that was only
 * cut off has long dropped the request itself: its transfer deadlines are shorter). At most {@link #MAX_POSTS} posts
 * are under way at once, so the aborts that piled up while a role was gone reach it paced when it is back, not all
 * in the same second. A role that failed the call (a 5xx) is retried like one that is away: its failure may pass.
 * The decode role's give-backs of reservations ({@code POST /internal/unreserve}) go the same way, sharing the limit
 * and the counts, retried at least as long as decode holds a reservation (twice the request timeout, which may be
 * longer than {@link #GIVE_UP}). Thread-safe.
 */
final class AbortDelivery implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    /** How long an abort is retried before its role is declared gone (as long as a role remembers an early abort). */
    static final Duration GIVE_UP = Duration.ofNanos(PrefillRole.REMEMBER_ABORTS_NANOS);
    private static final long FIRST_RETRY_MS = 50;
    private static final long MAX_RETRY_MS = 1_000;
    /** Most abort posts under way to the role at once. */
    static final int MAX_POSTS = 8;
    /** How long {@link #close(Duration)} waits for the last tries it asked for (each one call). */
    private static final long LAST_TRY_WAIT_MS = 1_000;
    /** How often a deliverer waiting for a turn looks whether close asked for the last tries. */
    private static final long TURN_POLL_MS = 20;

    private final RoleClient client;
    private final RoleHealth health;
    private final AtomicInteger pending = new AtomicInteger();
    private final LongAdder delivered = new LongAdder();
    private final LongAdder retries = new LongAdder();
    private final LongAdder abandoned = new LongAdder();
    private final java.util.concurrent.Semaphore posts = new java.util.concurrent.Semaphore(MAX_POSTS);
    /** Opened by close: deliverers waiting for a turn or between tries go for their last try at once. */
    private final CountDownLatch closing = new CountDownLatch(1);
    /** Streams of aborted calls still open (read to their end or dropped after {@link RemoteDecodeCall#DROP_AFTER}). */
    private final AtomicInteger streamsClosing = new AtomicInteger();

    /** @param health told when the role is found unreachable, or {@code null} */
    AbortDelivery(RoleClient client, RoleHealth health) {
        this.client = Objects.requireNonNull(client, "client");
        this.health = health;
    }

    /**
     * Runs {@code drop} after {@code delay} and counts the aborted call's stream as closing until then, or until the
     * returned {@link Closing} ends first (the stream was read to its end): it holds a connection of the role though its
     * request left the router's count ({@link #streamsClosing()}).
     */
    Closing dropLater(Duration delay, Runnable drop) {
        streamsClosing.incrementAndGet();
        final Closing c = new Closing();
        java.util.concurrent.CompletableFuture.delayedExecutor(delay.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS)
            .execute(() -> {
                try {
                    drop.run();
                } finally {
                    c.end();
                }
            });
        return c;
    }

    /** A stream counted in {@link #streamsClosing()} until it ends or is dropped, whichever comes first. Thread-safe. */
    final class Closing {
        private final java.util.concurrent.atomic.AtomicBoolean over = new java.util.concurrent.atomic.AtomicBoolean();

        /** The stream holds no connection of the role any more: no longer counted. Idempotent. */
        void end() {
            if (over.compareAndSet(false, true)) {
                streamsClosing.decrementAndGet();
            }
        }
    }

    /** @return streams of aborted calls that may still hold a connection of the role ({@link #dropLater}) */
    int streamsClosing() {
        return streamsClosing.get();
    }

    /** Queues the abort of {@code requestId} ({@code POST /internal/abort}); returns at once. */
    void send(long requestId, String why) {
        send("internal/abort", requestId, why);
    }

    /**
     * Queues a post of {@code {"request_id":…,"why":…}} to {@code path}, delivered as an abort is (the decode role's
     * {@code internal/unreserve} goes this way too); returns at once.
     */
    void send(String path, long requestId, String why) {
        send(path, requestId, why, GIVE_UP);
    }

    /**
     * {@link #send(String, long, String)}, retried for up to {@code giveUp} instead of {@link #GIVE_UP}: for a post
     * whose effect a role keeps longer (a reservation, which it holds for twice the request timeout).
     */
    void send(String path, long requestId, String why, Duration giveUp) {
        send(path, requestId, why, 0, giveUp);
    }

    /**
     * {@link #send(String, long, String, Duration)} with {@code "prefill_instance"} in the body when {@code prefillInstance}
     * is not 0 (a decode give-back naming the engine that holds the offer).
     */
    void send(String path, long requestId, String why, long prefillInstance, Duration giveUp) {
        final Map<String, Object> body = prefillInstance == 0 ? Map.of("request_id", requestId, "why", why)
            : Map.of("request_id", requestId, "why", why, "prefill_instance", RoleStatus.hex(prefillInstance));
        pending.incrementAndGet();
        Thread.ofVirtual().name("kvpool-abort-" + requestId).start(() -> {
            try {
                deliver(path, requestId, body, giveUp);
            } catch (InterruptedException e) { // nobody interrupts deliverers but a JVM going down
                abandoned.increment();
                LOG.log(System.Logger.Level.WARNING, "POST /" + path + " of request " + requestId + " not delivered: interrupted");
            } finally {
                pending.decrementAndGet();
            }
        });
    }

    private void deliver(String path, long requestId, Map<String, Object> body, Duration giveUp) throws InterruptedException {
        final long giveUpAt = System.nanoTime() + giveUp.toNanos();
        long wait = FIRST_RETRY_MS;
        while (true) {
            final boolean permit = awaitTurn();
            final boolean last = closing.getCount() == 0; // a try begun once close asked for the last ones is the last
            try {
                client.postAccepted(path, body); // the role's 2xx is all a delivery needs
                delivered.increment();
                return;
            } catch (RuntimeException e) {
                if (e instanceof RoleRefusedException r && r.status() / 100 == 4) { // it will never take this abort
                    abandoned.increment();
                    LOG.log(System.Logger.Level.WARNING, "POST /" + path + " of request " + requestId + " refused: " + e.getMessage());
                    return;
                }
                if (e instanceof RoleLostException && health != null) {
                    health.lost(e.getMessage());
                }
                if (last || System.nanoTime() - giveUpAt >= 0) {
                    abandoned.increment();
                    LOG.log(System.Logger.Level.WARNING, "POST /" + path + " of request " + requestId + " not delivered"
                        + (last ? " before the router closed" : " within " + giveUp.toMillis() + " ms: the role is declared gone") + ": " + e.getMessage());
                    return;
                }
                retries.increment();
            } finally {
                if (permit) {
                    posts.release();
                }
            }
            awaitClosing(wait);
            wait = Math.min(MAX_RETRY_MS, wait * 2);
        }
    }

    /**
     * Waits for one of the {@link #MAX_POSTS} turns. Not interruptible by close: close opens {@code closing}, and a
     * deliverer waiting then goes without a turn, since the router is stopping and its client closes next.
     *
     * @return whether a turn was taken (release it after the post)
     * @throws InterruptedException if interrupted: the delivery is given up
     */
    private boolean awaitTurn() throws InterruptedException {
        while (closing.getCount() > 0) {
            if (posts.tryAcquire(TURN_POLL_MS, TimeUnit.MILLISECONDS)) {
                return true;
            }
        }
        return false;
    }

    /** Sleeps {@code ms}, or less if close asks for the last tries. */
    private void awaitClosing(long ms) throws InterruptedException {
        closing.await(ms, TimeUnit.MILLISECONDS);
    }

    /** @return aborts not yet delivered nor given up */
    int pending() {
        return pending.get();
    }

    /** @return aborts the role took */
    long delivered() {
        return delivered.sum();
    }

    /** @return attempts that failed and were retried */
    long retries() {
        return retries.sum();
    }

    /** @return aborts given up on (refused, role declared gone, router closed) */
    long abandoned() {
        return abandoned.sum();
    }

    /**
     * Waits up to {@code drain} for what is pending, then has each abort still pending try once more at once, without
     * waiting for a turn, and waits up to a second for those tries. The caller closes the client when this returns: a
     * last try still under way then fails, and like every last try that fails it is given up (logged, counted).
     */
    void close(Duration drain) {
        awaitPending(System.nanoTime() + drain.toNanos());
        closing.countDown();
        awaitPending(System.nanoTime() + LAST_TRY_WAIT_MS * 1_000_000L);
    }

    private void awaitPending(long until) {
        while (pending.get() > 0 && System.nanoTime() - until < 0) {
            try {
                Thread.sleep(10);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    @Override
    public void close() {
        close(Duration.ofSeconds(2));
    }
}
