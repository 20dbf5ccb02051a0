package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The router's {@link PrefillService} for a prefill role in another process, over its internal endpoints
 * ({@link RoleServer}): {@code POST /internal/prefill}, {@code POST /internal/abort},
 * {@code GET /internal/status}. Closing it closes the client only; the process runs on.
 */
final class RemotePrefill implements PrefillService {

    private final RoleClient client;

    RemotePrefill(RoleClient client) {
        this.client = Objects.requireNonNull(client, "client");
    }

    /**
     * {@inheritDoc}
     *
     * @throws RoleLostException if the process cannot be reached (an {@link IllegalStateException}: the router answers 503)
     */
    @Override
    public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
        final Map<String, Object> body = new LinkedHashMap<>();
        body.put("request_id", requestId);
        body.put("tenant", tenant);
        body.put("tokens", RoleJson.tokens(tokens));
        final JsonNode r = client.post("internal/prefill", body);
        try {
            return RoleJson.bool(r, "admitted") ? null : RoleJson.rejection(RoleJson.field(r, "rejection"));
        } catch (IllegalArgumentException e) {
            throw new IllegalStateException(client.describe() + " answered POST /internal/prefill with " + r + ": " + e.getMessage(), e);
        }
    }

    /** Tells the process to abort; a process that is gone has nothing left to abort (its pages died with it). */
    @Override
    public void abort(long requestId, String why) {
        client.postQuietly("internal/abort", Map.of("request_id", requestId, "why", why));
    }

    @Override
    public RoleStatus status() {
        return RemoteStatus.read(client, PrefillRole.ROLE).status();
    }

    @Override
    public int activeTransfers() {
        return RemoteStatus.read(client, PrefillRole.ROLE).activeTransfers();
    }

    @Override
    public void close() {
        client.close();
    }

    @Override
    public String toString() {
        return "RemotePrefill[" + client.base() + "]";
    }
}
