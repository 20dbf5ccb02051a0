package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.RoleLostException;

import java.time.Duration;
import java.util.Objects;

/**
 * The router's {@link DecodeService} for a decode role in another process: each {@link #start} opens one
 * {@code POST /internal/decode} whose answer streams the request's events back ({@link RemoteDecodeCall});
 * {@code GET /internal/status} for the rest. Closing it drops the client's connections; the process runs on.
 */
final class RemoteDecode extends RemoteRole implements DecodeService {

    private final ObjectMapper json;
    private final Duration stall;

    /** @param stall longest wait for the decode stream's next token before the role counts as lost */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall) {
        this(client, json, stall, null);
    }

    /** @param verify checks each status the router reads of the role (see {@link RoleHealth}), or {@code null} */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall, java.util.function.Function<RemoteStatus, String> verify) {
        super(checked(client, json, stall), DecodeRole.ROLE, true, verify);
        this.json = json;
        this.stall = stall;
    }

    /** Checks the arguments before the base class starts the role's health checks. @return {@code client} */
    private static RoleClient checked(RoleClient client, ObjectMapper json, Duration stall) {
        Objects.requireNonNull(json, "json");
        Objects.requireNonNull(stall, "stall");
        return client;
    }

    /**
     * Opens the request's stream; returns once the decode process registered the call (its answer's headers),
     * so an {@link DecodeCall#abort} that follows always finds it.
     *
     * @throws RoleLostException     if the process cannot be reached (the router answers 503)
     * @throws IllegalStateException if it refuses the call (closed)
     */
    @Override
    public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens) {
        try {
            return RemoteDecodeCall.open(client, json, aborts, requestId, tenant, promptTokens, maxNewTokens, stall);
        } catch (RoleLostException e) {
            health.lost(e.getMessage());
            throw e;
        }
    }

    @Override
    public boolean ready() {
        return RemoteStatus.read(client, DecodeRole.ROLE).ready();
    }

    @Override
    public String toString() {
        return "RemoteDecode[" + client.base() + "]";
    }
}
