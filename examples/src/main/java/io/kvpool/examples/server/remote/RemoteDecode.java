package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleStatus;

import java.time.Duration;
import java.util.Objects;

/**
 * The router's {@link DecodeService} for a decode role in another process: each {@link #start} opens one
 * {@code POST /internal/decode} whose answer streams the request's events back ({@link RemoteDecodeCall});
 * {@code GET /internal/status} for the rest. Closing it drops the client's connections; the process runs on.
 */
final class RemoteDecode implements DecodeService {

    private final RoleClient client;
    private final ObjectMapper json;
    private final Duration stall;
    private final RoleHealth health;
    private final AbortDelivery aborts;

    /** @param stall longest wait for the decode stream's next token before the role counts as lost */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall) {
        this(client, json, stall, null);
    }

    /** @param verify checks each status the router reads of the role (see {@link RoleHealth}), or {@code null} */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall, java.util.function.Function<RemoteStatus, String> verify) {
        this.client = Objects.requireNonNull(client, "client");
        this.json = Objects.requireNonNull(json, "json");
        this.stall = Objects.requireNonNull(stall, "stall");
        this.health = new RoleHealth(client, DecodeRole.ROLE, true, verify);
        this.aborts = new AbortDelivery(client, health);
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
    public String unavailable() throws InterruptedException {
        return health.unavailable();
    }

    /** @return the delivery of this role's aborts (for tests and metrics) */
    AbortDelivery aborts() {
        return aborts;
    }

    /** @return what the router knows of the role's readiness */
    RoleHealth health() {
        return health;
    }

    @Override
    public boolean ready() {
        return RemoteStatus.read(client, DecodeRole.ROLE).ready();
    }

    @Override
    public RoleStatus status() {
        return RemoteStatus.read(client, DecodeRole.ROLE).status();
    }

    @Override
    public int activeTransfers() {
        return RemoteStatus.read(client, DecodeRole.ROLE).activeTransfers();
    }

    @Override
    public void close() {
        health.close();
        try {
            aborts.close();
        } finally {
            client.close();
        }
    }

    @Override
    public String toString() {
        return "RemoteDecode[" + client.base() + "]";
    }
}
