package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;

import java.time.Duration;
import java.util.Objects;

/**
 * The router's {@link DecodeService} for a decode role in another process: each {@link #start} opens one
 * {@code POST /internal/decode} whose answer streams the request's events back ({@link RemoteDecodeCall}), after
 * a {@code POST /internal/reserve} ({@link #reserve}); {@code GET /internal/status} for the rest. Closing it drops
 * the client's connections; the process runs on.
 */
final class RemoteDecode extends RemoteRole implements DecodeService {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final ObjectMapper json;
    private final Duration stall;
    private final Duration silence;
    /** How long a process that answered 404 to a reservation is not asked again (it may be upgraded meanwhile). */
    static final Duration ASK_AGAIN = Duration.ofSeconds(30);
    /** Until when this process is not asked for reservations: it answered 404 (a build before them). */
    private volatile long noReservationsUntil = System.nanoTime();
    private final java.util.concurrent.atomic.AtomicBoolean logged404 = new java.util.concurrent.atomic.AtomicBoolean();
    /**
     * Ids the process may hold a reservation for: it answered "reserved", or the call got no answer (it may have
     * reserved anyway). A decode call or a give-back ends each; only these are given back.
     */
    private final java.util.Set<Long> mayHold = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /** @param stall longest wait for the decode stream's next token before the role counts as lost */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall) {
        this(client, json, stall, RemoteDecodeCall.defaultSilence(stall), null);
    }

    /**
     * @param silence longest silence of a call's stream before its KV committed (the process writes a line every
     *                {@code --heartbeat-ms} meanwhile) before the call counts as lost
     * @param verify  checks each status the router reads of the role (see {@link RoleHealth}), or {@code null}
     */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall, Duration silence,
                 java.util.function.Function<RemoteStatus, String> verify) {
        super(checked(client, json, stall), DecodeRole.ROLE, true, verify);
        this.json = json;
        this.stall = stall;
        this.silence = Objects.requireNonNull(silence, "silence");
    }

    /** Checks the arguments before the base class starts the role's health checks. @return {@code client} */
    private static RoleClient checked(RoleClient client, ObjectMapper json, Duration stall) {
        Objects.requireNonNull(json, "json");
        Objects.requireNonNull(stall, "stall");
        return client;
    }

    /**
     * {@inheritDoc} Less the streams of aborted calls still open: each holds one of the role's connections for up to
     * {@link RemoteDecodeCall#DROP_AFTER} after its request left the router's count.
     */
    @Override
    public int maxRequestsInFlight() {
        final int cap = super.maxRequestsInFlight();
        return cap == Integer.MAX_VALUE ? cap : Math.max(1, cap - aborts.streamsClosing());
    }

    /**
     * {@inheritDoc} Opens the request's stream; returns once the decode process registered the call (its answer's
     * headers), so an {@link DecodeCall#abort} that follows always finds it. The instance goes in the call's body
     * ({@code prefill_instance}); a decode of a build before it reads no such field and takes its newest prefill link.
     *
     * @throws RoleLostException     if the process cannot be reached (the router answers 503)
     * @throws IllegalStateException if it refuses the call (closed)
     */
    @Override
    public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
        try {
            final DecodeCall call = RemoteDecodeCall.open(client, json, aborts, requestId, tenant, promptTokens, maxNewTokens,
                prefillInstance, stall, silence);
            mayHold.remove(requestId); // the call took the reservation (or admitted without one)
            return call;
        } catch (RoleLostException e) { // the call may never have reached the process: the id stays to be given back
            lostUnlessInterrupted(e);
            throw e;
        } // a refused call leaves the id too: its reservation, if any, is still held there
    }

    /**
     * {@inheritDoc} A decode process of a build without reservations (404) is not asked again for
     * {@link #ASK_AGAIN} (a rollout may upgrade it meanwhile): it admits at {@link #start}, as before. The first 404
     * is logged.
     *
     * @throws RoleLostException     if the process cannot be reached (the router answers 503)
     * @throws RoleRefusedException  if it refuses the call itself (another 4xx) or fails it (a 5xx but 503)
     * @throws io.kvpool.examples.server.role.DuplicateRequestException if the id is decoding there (409: another
     *                               router's request under a reused id)
     * @throws IllegalStateException if it is closing, or answers what is not a reservation's answer
     */
    @Override
    public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
        if (System.nanoTime() - noReservationsUntil < 0) {
            return null;
        }
        final JsonNode r;
        mayHold.add(requestId);
        try {
            r = client.post("internal/reserve", RoleJson.decodeRequest(requestId, tenant, promptTokens, maxNewTokens, prefillInstance));
        } catch (RoleLostException e) { // no answer: it may have reserved, so the id stays to be given back
            lostUnlessInterrupted(e);
            throw e;
        } catch (RoleRefusedException | io.kvpool.examples.server.role.DuplicateRequestException e) { // refused: nothing reserved
            mayHold.remove(requestId);
            if (!(e instanceof RoleRefusedException refused) || refused.status() != 404) {
                throw e;
            }
            noReservationsUntil = System.nanoTime() + ASK_AGAIN.toNanos();
            if (logged404.compareAndSet(false, true)) {
                LOG.log(System.Logger.Level.WARNING, client.describe() + " does not take reservations (a build before them): "
                    + "it admits at the decode call, after prefill computed; asked again every " + ASK_AGAIN.toSeconds() + " s");
            }
            return null;
        }
        // an answer that is not an admission's throws, and the id stays to be given back in case
        final Rejection refused = RoleJson.admission(r, client.describe() + " answered POST /internal/reserve");
        if (refused != null) {
            mayHold.remove(requestId);
        }
        return refused;
    }

    /**
     * Gives the reservation back ({@code POST /internal/unreserve}, delivered in the background as aborts are:
     * {@link AbortDelivery}). Sent for a request whose reserve call the process answered "reserved", or whose call
     * failed without an answer (the process may have reserved it); not for one it refused or did not reserve (a build
     * before reservations). A give-back naming a prefill engine is sent to any process that takes reservations, also
     * when the reservation went back already or was refused: the process then only tells that engine to end its offer.
     */
    @Override
    public void unreserve(long requestId, String why, long prefillInstance) {
        // one give-back per reservation; one that names the offering engine goes out also after it: the router gives a
        // leaving client's reservation back at once, and learns that engine only later, from prefill's answer
        // (a build before reservations has no give-back to send it to)
        if (mayHold.remove(requestId) || (prefillInstance != 0 && System.nanoTime() - noReservationsUntil >= 0)) {
            aborts.send("internal/unreserve", requestId, why, prefillInstance, unreserveGiveUp());
        }
    }

    /**
     * @return how long a give-back is retried: as long as an abort, and at least as long as the decode process holds a
     *         reservation nobody takes ({@link DecodeRole#reservationTtl(Duration)} of the request timeout), which it
     *         would otherwise keep promised after the router gave up on telling it
     */
    Duration unreserveGiveUp() {
        final Duration ttl = DecodeRole.reservationTtl(stall); // the stall is the router's request timeout
        return ttl.compareTo(AbortDelivery.GIVE_UP) > 0 ? ttl : AbortDelivery.GIVE_UP;
    }

    @Override
    public boolean ready() {
        return readStatus().ready();
    }

    @Override
    public String toString() {
        return "RemoteDecode[" + client.base() + "]";
    }
}
