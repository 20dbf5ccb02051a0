package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleLostException;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The router's {@link PrefillService} for a prefill role in another process, over its internal endpoints
 * ({@link io.kvpool.examples.server.RoleServer}): {@code POST /internal/prefill}, {@code POST /internal/abort},
 * {@code GET /internal/status}. Closing it closes the client only; the process runs on.
 */
final class RemotePrefill extends RemoteRole implements PrefillService {

    RemotePrefill(RoleClient client) {
        this(client, null);
    }

    /** @param verify checks each status the router reads of the role (see {@link RoleHealth}), or {@code null} */
    RemotePrefill(RoleClient client, java.util.function.Function<RemoteStatus, String> verify) {
        super(client, PrefillRole.ROLE, false, verify);
    }

    /**
     * {@inheritDoc}
     *
     * @throws RoleLostException if the process cannot be reached (an {@link IllegalStateException}: the router answers 503)
     */
    @Override
    public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
        return computeAndOffer(requestId, tenant, tokens).refusal();
    }

    /**
     * {@inheritDoc} The engine is the one the process names in its answer ({@code "instance"}): behind a balancer, the
     * process that took this call, whichever the probe read. An answer without one (an older build) names
     * {@link #instance()}.
     */
    @Override
    public Answer computeAndOffer(long requestId, String tenant, List<byte[]> tokens) {
        final Map<String, Object> body = new LinkedHashMap<>();
        body.put("request_id", requestId);
        body.put("tenant", tenant);
        body.put("tokens", RoleJson.tokens(tokens));
        final JsonNode r;
        try {
            r = client.post("internal/prefill", body);
        } catch (RoleLostException e) {
            lostUnlessInterrupted(e); // requests after this one are answered at once until a status read says it is back
            throw e;
        }
        final String what = client.describe() + " answered POST /internal/prefill";
        final Rejection refused = RoleJson.admission(r, what);
        if (refused != null) {
            return new Answer(refused, 0);
        }
        final long by = RoleJson.offeredBy(r, what);
        return new Answer(null, by != 0 ? by : instance());
    }

    /** {@inheritDoc} The instance from the last status the router's probe read of the process. */
    @Override
    public long instance() {
        return super.instance();
    }

    /**
     * Tells the process to abort, without waiting for it: {@link AbortDelivery} retries until the process takes it
     * or is declared gone (a process that is gone has nothing left to abort: its pages died with it).
     */
    @Override
    public void abort(long requestId, String why) {
        aborts.send(requestId, why);
    }

    @Override
    public String toString() {
        return "RemotePrefill[" + client.base() + "]";
    }
}
