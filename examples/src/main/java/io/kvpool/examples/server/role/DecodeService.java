package io.kvpool.examples.server.role;

/**
 * What the router asks of the decode role. {@link InJvmRoles} has the implementation in this JVM
 * ({@link DecodeRole}); a role in another process implements the same calls over its own channel, and
 * the router does not change.
 */
public interface DecodeService extends AutoCloseable {

    /**
     * Starts receiving a request's KV from the prefill role: the pages {@link #reserve} promised it (or, without a
     * reservation, the decode pool admits {@code promptTokens + maxNewTokens} now) are pinned and the descriptor sent.
     * Never blocks; the outcome is read from the call.
     *
     * <p>The transfer goes over the KV link to one prefill engine: the one that computed the request
     * ({@link PrefillService#instance()}). A role with no such link up refuses the request (503, retryable: the link may
     * come).
     *
     * @param promptTokens    the tokens decode expects (the router's count of the prompt)
     * @param prefillInstance the prefill engine's instance id, or 0 for none named (decode then takes its newest prefill
     *                        link while links from one engine are up, and refuses while links from several are)
     * @throws IllegalStateException if the role is closed
     */
    DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance);

    /** {@return {@link #start(long, String, int, int, long)} naming no prefill engine} */
    default DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens) {
        return start(requestId, tenant, promptTokens, maxNewTokens, 0);
    }

    /**
     * Admits a request before prefill computes it, so that prefill computes nothing for a decode with no room: the
     * pages stay promised to {@code requestId} until {@link #start} takes them, {@link #unreserve} gives them back,
     * or the reservation expires (twice the server's request timeout). Waits for the admission only.
     *
     * <p>Refused also when no KV link to the prefill engine that will compute the request is up, so that prefill computes
     * nothing decode could not receive.
     *
     * @param prefillInstance the prefill engine's instance id, or 0 for none named (as for {@link #start})
     * @return {@code null} when reserved, or when this role does not reserve (it then admits at {@link #start}); else
     *         the typed refusal (no room now, too long, no prefill link)
     * @throws IllegalStateException if the role is closed or cannot be reached (a {@link RoleLostException})
     */
    default Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
        throws InterruptedException {
        return null;
    }

    /** {@return {@link #reserve(long, String, int, int, long)} naming no prefill engine} */
    default Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens) throws InterruptedException {
        return reserve(requestId, tenant, promptTokens, maxNewTokens, 0);
    }

    /**
     * Gives back what {@link #reserve} holds for {@code requestId} if {@link #start} has not taken it. A reserve of that
     * id that arrives later may be refused (the decode role remembers such ids for a while). Never blocks; idempotent.
     */
    default void unreserve(long requestId, String why) {
        unreserve(requestId, why, 0);
    }

    /**
     * As {@link #unreserve(long, String)}, and tells the prefill engine {@code prefillInstance} (when it is linked
     * here) that decode will not take the request, so it ends its offer now instead of at its descriptor timeout: for
     * a request whose prefill answered (naming that engine) and that ended before decode's start. Behind a balancer
     * the router's own abort may reach another prefill process; decode's link reaches the one that holds the offer.
     *
     * @param prefillInstance the engine that offered the request ({@link PrefillService.Answer#instance()}), or 0
     */
    default void unreserve(long requestId, String why, long prefillInstance) {
    }

    /** @return whether a prefill link is up, i.e. {@link #start} can admit now */
    boolean ready();

    /**
     * Whether the role can take a transfer now ({@link #ready()}), as far as the router knows, without a call that
     * could wait for a role that is down (see {@link PrefillService#unavailable()}). The router asks before it has
     * prefill compute anything: a decode known unable to take a transfer (down, no prefill link) gets no prefill, and
     * one without room refuses the {@link #reserve} that comes next.
     *
     * @return why the role cannot take a transfer now, or {@code null} when it can
     */
    default String unavailable() throws InterruptedException {
        return ready() ? null : "decode: no prefill link is up; retry later";
    }

    /**
     * As {@link #unavailable()}, waiting no later than {@code untilNanos} ({@link System#nanoTime()}) either: the router
     * gives both roles one deadline.
     *
     * @param untilNanos the latest time to wait until
     * @return why the role cannot take a transfer now, or {@code null} when it can
     */
    default String unavailable(long untilNanos) throws InterruptedException {
        return unavailable();
    }

    /** @return the pool view, counters and metrics */
    RoleStatus status();

    /**
     * {@return how many requests a router may have in flight with this role at once} A role in another process
     * takes only so many connections; a role in this JVM has no such limit.
     */
    default int maxRequestsInFlight() {
        return Integer.MAX_VALUE;
    }

    /** @return transfers not yet in a final state (0 at quiescence), plus committed sequences not yet closed */
    int activeTransfers();

    /** Closes the role (idempotent): fails what is in flight and closes its pool. */
    @Override
    void close();
}
