package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;

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

    /** @param stall longest wait for the decode stream's next token before the role counts as lost */
    RemoteDecode(RoleClient client, ObjectMapper json, Duration stall) {
        this.client = Objects.requireNonNull(client, "client");
        this.json = Objects.requireNonNull(json, "json");
        this.stall = Objects.requireNonNull(stall, "stall");
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
        return RemoteDecodeCall.open(client, json, requestId, tenant, promptTokens, maxNewTokens, stall);
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
        client.close();
    }

    @Override
    public String toString() {
        return "RemoteDecode[" + client.base() + "]";
    }
}
