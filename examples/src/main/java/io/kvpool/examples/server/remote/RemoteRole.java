package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.role.RoleStatus;

import java.util.Objects;
import java.util.function.Function;

/**
 * What the router's client of a role in another process does the same for either role: its readiness as the
 * router knows it ({@link RoleHealth}), the delivery of its aborts ({@link AbortDelivery}), its status read over
 * {@code GET /internal/status}, and the close. Closing it closes the client only; the process runs on.
 */
abstract class RemoteRole implements AutoCloseable {

    /**
     * Longest a request waits for the first status read of a role whose engine id it needs (the first requests after
     * the router started): a cold HTTP client on a loaded host took over 100 ms. A request that goes on without the
     * id is refused by a decode with several prefill engines linked, never sent to a guessed one.
     */
    static final java.time.Duration FIRST_READ_WAIT = java.time.Duration.ofSeconds(1);

    /** Status reads this router makes of the role at once, at most: more wait for one to end. */
    static final int STATUS_READS = 3;

    /**
     * Connections the router leaves free at a role for what is not a request's own call: the aborts and give-backs
     * delivered in the background ({@link AbortDelivery#MAX_POSTS} at once), the probe's own client, the status reads
     * of {@code /metrics} and the live page ({@link #STATUS_READS}, however many pages poll), and a margin of 4. The
     * decode streams of aborted requests, still read to their end after their requests left the count, are subtracted
     * as they come ({@link RemoteDecode#maxRequestsInFlight}).
     */
    static final int SPARE_CONNECTIONS = AbortDelivery.MAX_POSTS + 1 + STATUS_READS + 4;

    private final java.util.concurrent.Semaphore statusReads = new java.util.concurrent.Semaphore(STATUS_READS);

    final RoleClient client;
    final RoleHealth health;
    final AbortDelivery aborts;
    private final String role;
    /** The role's --max-connections, from the last status that passed the check; 0 until one reports it. */
    private volatile long maxConnections;
    /** The role's engine instance id from the last status read of it up (0: none yet, or a build that reports none). */
    private volatile long instance;
    /** Whether a status of the role up has been read: {@link #instance} is the role's, not the initial 0. */
    private volatile boolean instanceRead;

    /**
     * @param role       the role's name in its status ({@code prefill} or {@code decode})
     * @param needsPeers whether the role is ready only with a KV link up (see {@link RoleHealth})
     * @param verify     checks each status the router reads of the role, or {@code null}
     */
    RemoteRole(RoleClient client, String role, boolean needsPeers, Function<RemoteStatus, String> verify) {
        this.client = Objects.requireNonNull(client, "client");
        this.role = role;
        this.health = new RoleHealth(client, role, needsPeers, s -> {
            if (s.status().up()) { // before the checks: a role refused now still is the process its links reach
                instance = s.status().instance();
                instanceRead = true;
            }
            final String mismatch = verify == null ? null : verify.apply(s);
            if (mismatch == null && s.identity() != null) {
                maxConnections = s.identity().maxConnections(); // on every reconnect: a restarted role may allow fewer
            }
            return mismatch;
        });
        this.aborts = new AbortDelivery(client, health);
    }

    /**
     * @return why the role is known to be down, or {@code null} if it may be asked (see {@link RoleHealth#unavailable})
     * @throws InterruptedException if interrupted while a re-check of a role known down runs
     */
    public String unavailable() throws InterruptedException {
        return health.unavailable();
    }

    /**
     * As {@link #unavailable()}, waiting no later than {@code untilNanos} ({@link System#nanoTime()}) either.
     *
     * @param untilNanos the latest time to wait until
     * @return why the role is known to be down, or {@code null} if it may be asked
     * @throws InterruptedException if interrupted while a re-check of a role known down runs
     */
    public String unavailable(long untilNanos) throws InterruptedException {
        return health.unavailable(untilNanos);
    }

    /**
     * How many requests the router may have in flight with this role: each holds at most one of the role's
     * connections at a time (a call, or decode's stream), and a role closes connections past its
     * {@code --max-connections} as they arrive, which the router would take for the role lost.
     *
     * @return the role's {@code --max-connections} less {@value #SPARE_CONNECTIONS}, at least 1; unlimited while the
     *         role has not reported it
     */
    public int maxRequestsInFlight() {
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, requestsAllowed(maxConnections)));
    }

    /**
     * @param maxConnections a role's {@code --max-connections}, or 0 when it did not report it
     * @return the requests a router may have in flight with that role ({@value #SPARE_CONNECTIONS} fewer), unbounded
     *         ({@link Long#MAX_VALUE}) when not reported; may be 0 or less for a role that allows too few
     */
    static long requestsAllowed(long maxConnections) {
        return maxConnections <= 0 ? Long.MAX_VALUE : maxConnections - SPARE_CONNECTIONS;
    }

    /**
     * {@return the role's engine instance id from the last status the router's probe read of it, 0 while none has been
     * read or the role reports none} Before the first read of the role up, waits for the probe's read under way, at
     * most {@link #FIRST_READ_WAIT}. A process restarted under the same URL has a new id, learned at the next
     * probe (until then decode refuses the request naming the old one: retryable).
     */
    long instance() {
        if (!instanceRead) { // a request right after the router started: the probe's first read is under way
            try {
                health.check().result().get(FIRST_READ_WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
                // not read: 0, and decode takes its newest prefill link if one engine is linked, else refuses
            }
        }
        return instance;
    }

    /** @return the role's status, read from the process */
    public RoleStatus status() {
        return readStatus().status();
    }

    /** @return the role's transfers in progress, read from the process */
    public int activeTransfers() {
        return readStatus().activeTransfers();
    }

    /**
     * Reads the role's status, at most {@link #STATUS_READS} at once: any number of live pages and scrapes would
     * otherwise open as many connections, past the role's {@code --max-connections}, which closes the excess as they
     * arrive, and a request's call meeting that would take the role for lost.
     */
    RemoteStatus readStatus() {
        try {
            if (!statusReads.tryAcquire(2 * RoleClient.STATUS_TIMEOUT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS)) {
                return new RemoteStatus(RoleStatus.unreachable(role, client.describe() + ": " + STATUS_READS + " status reads "
                    + "of it are under way, none ended in " + 2 * RoleClient.STATUS_TIMEOUT.toMillis() + " ms"), 0, false, null, null);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return new RemoteStatus(RoleStatus.unreachable(role, "interrupted while waiting to read its status"), 0, false, null, null);
        }
        try {
            return RemoteStatus.read(client, role); // bounded: RoleClient.get gives up on an answer that does not finish
        } finally {
            statusReads.release();
        }
    }

    /** @return the delivery of this role's aborts (for tests and metrics) */
    AbortDelivery aborts() {
        return aborts;
    }

    /**
     * A call found the role unreachable: it is known down from now on ({@link RoleHealth#lost}). Not when the calling
     * thread was interrupted (the client re-sets its flag): that says something of this router, not of the role.
     */
    void lostUnlessInterrupted(io.kvpool.examples.server.role.RoleLostException e) {
        if (!Thread.currentThread().isInterrupted()) {
            health.lost(e.getMessage());
        }
    }

    /** @return what the router knows of the role's readiness */
    RoleHealth health() {
        return health;
    }

    /** Stops the health checks, gives pending aborts their chance, then drops the client's connections. */
    @Override
    public void close() {
        health.close();
        try {
            aborts.close(); // what is pending gets its chance first
        } finally {
            client.close();
        }
    }
}
