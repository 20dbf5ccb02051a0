package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.LinkGate;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleStatus;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The prefill role process's internal endpoints (besides {@link RoleEndpoint}'s):
 * <ul>
 *   <li>{@code POST /internal/prefill} {@code {"request_id":7,"tenant":"alice","tokens":["SGVs",…]}} →
 *       {@code {"admitted":true,"instance":"a1b2c3d4e5f60718"}} (the engine that offered the KV) or
 *       {@code {"admitted":false,"rejection":{…}}} (see {@link io.kvpool.examples.server.role.PrefillService#computeAndOffer});
 *       409 ({@value DuplicateRequestException#REASON}) when the id is still in flight here; 503 when the role is closed;</li>
 *   <li><b>test hook</b>, only with {@code -Dkvpool.examples.testHooks=true}: {@code POST /internal/test/gate}
 *       {@code {"closed":true}} holds prefill's page writes ({@link LinkGate}), {@code {"closed":false}} lets them go,
 *       {@code {"drop":true}} drops the KV link while this process lives on; answers {@code {"held":N}}.</li>
 * </ul>
 */
public final class PrefillEndpoint extends RoleEndpoint {

    private final PrefillRole role;
    private final LinkGate gate;

    /** @param gate the test hook's gate, or {@code null} (no test endpoint) */
    public PrefillEndpoint(PrefillRole role, ObjectMapper json, ServerConfig config, LinkGate gate) {
        Objects.requireNonNull(role, "role"); // before the method references below, for the message
        super(PrefillRole.ROLE, json, config, new Readouts(role::pool, role::status, role::activeTransfers, role::linkUp));
        this.role = role;
        this.gate = gate;
    }

    @Override
    void abort(long requestId, String why) {
        try {
            role.abort(requestId, why);
        } catch (IllegalStateException closed) {
            // closing: the role aborts everything itself
        }
    }

    @Override
    boolean route(HttpCall ex, String path) throws ApiError, IOException {
        if (path.equals("/internal/prefill")) {
            Http.method(ex, "POST");
            final JsonNode b = body(ex);
            final long id = requestId(b);
            final String tenant = tenant(b);
            final List<byte[]> tokens = RoleJson.tokens(b.get("tokens"));
            if (tokens.isEmpty()) {
                throw ApiError.badRequest("bad_field", "tokens must hold at least one token (prompt_tokens ≥ 1), was empty");
            }
            final Rejection r;
            try {
                r = role.prefill(id, tenant, tokens);
            } catch (DuplicateRequestException e) {
                throw ApiError.of(e);
            } catch (IllegalStateException e) {
                throw unavailableOr(e, role.isClosed(), "prefill role: " + e.getMessage());
            }
            final Map<String, Object> answer = RoleJson.admission(r);
            final long instance = role.instance();
            if (r == null && instance != 0) { // the engine that holds the offer: behind a balancer the router learns it here
                answer.put("instance", RoleStatus.hex(instance));
            }
            Http.sendJson(ex, json, 200, answer);
            return true;
        }
        if (path.equals("/internal/test/gate") && gate != null) {
            Http.method(ex, "POST");
            final JsonNode b = body(ex);
            if (b.has("closed")) {
                if (RoleJson.bool(b, "closed")) {
                    gate.close();
                } else {
                    gate.open();
                }
            }
            if (b.path("drop").asBoolean(false)) {
                gate.dropLink();
            }
            Http.sendJson(ex, json, 200, Map.of("held", gate.held(), "closed", gate.isClosed()));
            return true;
        }
        return false;
    }
}
