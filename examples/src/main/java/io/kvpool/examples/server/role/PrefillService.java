package io.kvpool.examples.server.role;

import java.util.List;

/**
 * What the router asks of the prefill role. {@link InJvmRoles} has the implementation in this JVM
 * ({@link PrefillRole}); a role in another process implements the same calls over its own channel, and
 * the router does not change.
 *
 * <p>Thread-safe: the router calls it from one thread per request; calls for one request id come from
 * one thread, in order.
 */
public interface PrefillService extends AutoCloseable {

    /**
     * Admits the prompt into the prefill pool, computes its KV (the echo model writes every token's bytes,
     * position and tenant into every layer) and offers it for transfer under {@code requestId}. Returns
     * once admission decided; the transfer runs on the role's own thread, driven by the decode side's
     * descriptor.
     *
     * @param tokens the prompt's tokens ({@link io.kvpool.examples.server.echo.EchoTokenizer})
     * @return {@code null} if admitted, else the typed refusal (nothing of the request is left in the pool)
     * @throws IllegalStateException if the role is closed
     */
    Rejection prefill(long requestId, String tenant, List<byte[]> tokens);

    /**
     * What {@link #computeAndOffer} answered: the refusal, or the instance id of the transfer engine that offered the KV.
     *
     * @param refusal  {@code null} when the request was admitted and offered, else why not
     * @param instance the engine that offered it (0 when refused, or when not known: a role of an older build)
     */
    record Answer(Rejection refusal, long instance) {
    }

    /**
     * As {@link #prefill}, and names the engine that took the request: the router passes that one, not the one its
     * probe read, to decode's start, so a prefill URL that reaches several processes (a balancer) still has decode
     * read the KV where it was offered. This default answers {@link #instance()}, right for a role whose every call
     * reaches one engine; a role in another process reads the engine from the call's own answer.
     *
     * @throws IllegalStateException as {@link #prefill} does
     */
    default Answer computeAndOffer(long requestId, String tenant, List<byte[]> tokens) {
        final Rejection refused = prefill(requestId, tenant, tokens);
        return new Answer(refused, refused == null ? instance() : 0);
    }

    /**
     * Aborts the request's transfer (half of a paired abort): nothing more is written, the decode side is
     * told, and the KV pages are released once every write ended. Idempotent; does nothing to a transfer that
     * already completed. A request not offered yet is remembered for a while, up to a limit (its call may still be on
     * its way): a {@link #prefill} of it that comes then is refused (503) rather than offered to nobody; beyond the
     * limit the late call is offered, and decode's half of the abort ends it.
     */
    void abort(long requestId, String why);

    /**
     * Whether the role can take a request now, as far as the router knows — answered from what it already knows,
     * never by a call that could wait for a role that is down (a role process known down is re-checked for at most
     * {@link io.kvpool.examples.server.remote.RoleHealth#RECHECK_WAIT}).
     *
     * @return why the role cannot take a request now, or {@code null} when it can (or nothing is known yet)
     */
    default String unavailable() throws InterruptedException {
        return null;
    }

    /**
     * As {@link #unavailable()}, waiting no later than {@code untilNanos} ({@link System#nanoTime()}) either: the router
     * gives both roles one deadline.
     *
     * @param untilNanos the latest time to wait until
     * @return why the role cannot take a request now, or {@code null} when it can
     */
    default String unavailable(long untilNanos) throws InterruptedException {
        return unavailable();
    }

    /**
     * The instance id of this prefill's transfer engine: the router passes it with the request's decode calls, and
     * decode starts the transfer on its link to that engine. With several prefill processes linked to one decode, the
     * descriptor then goes to the one that computed the request, never to another that may hold an offer of the same id.
     *
     * @return the id, or 0 when not known (a role in another process not read yet, or of an older build): decode then
     *         takes its newest prefill link while links from one engine are up, and refuses while links from several are
     */
    default long instance() {
        return 0;
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

    /** @return transfers not yet over (0 at quiescence) */
    int activeTransfers();

    /** Closes the role (idempotent): aborts what is in flight and closes its pool. */
    @Override
    void close();
}
