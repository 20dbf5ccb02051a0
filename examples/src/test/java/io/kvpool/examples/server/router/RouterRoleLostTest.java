package io.kvpool.examples.server.router;

import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleStatus;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A role lost during the router's call to it (its process gone, frozen past the stall limit): the answer is the
 * same typed 503 as for a role already known down, {@code prefill_unavailable} or {@code decode_unavailable} with
 * {@code Retry-After}, not a generic {@code unavailable}.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RouterRoleLostTest {

    @Test
    void aPrefillLostDuringItsCallIsPrefillUnavailable() {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final PrefillService lost = new PrefillService() {
                @Override
                public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                    throw new RoleLostException("prefill role at http://10.0.0.1:8081/ is unreachable (POST /internal/prefill)");
                }

                @Override
                public void abort(long requestId, String why) {
                }

                @Override
                public RoleStatus status() {
                    return roles.prefill().status();
                }

                @Override
                public int activeTransfers() {
                    return 0;
                }

                @Override
                public void close() {
                }
            };
            final ApiError e = assertThrows(ApiError.class, () -> new Router(cfg, lost, roles.decode())
                .complete("alice", new Router.Request("hello", 2, false), NoSink.INSTANCE));
            assertEquals(503, e.status());
            assertEquals("prefill_unavailable", e.reason(), e::getMessage);
            assertEquals(1, e.retryAfterSeconds());
        }
    }

    @Test
    void aDecodeLostDuringItsCallIsDecodeUnavailable() {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final DecodeService lost = new DecodeService() {
                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    throw new RoleLostException("decode role at http://10.0.0.2:8082/ is unreachable (POST /internal/decode)");
                }

                @Override
                public boolean ready() {
                    return true;
                }

                @Override
                public RoleStatus status() {
                    return roles.decode().status();
                }

                @Override
                public int activeTransfers() {
                    return 0;
                }

                @Override
                public void close() {
                }
            };
            final ApiError e = assertThrows(ApiError.class, () -> new Router(cfg, roles.prefill(), lost)
                .complete("alice", new Router.Request("hello", 2, false), NoSink.INSTANCE));
            assertEquals(503, e.status());
            assertEquals("decode_unavailable", e.reason(), e::getMessage);
            assertEquals(1, e.retryAfterSeconds());
        }
    }
}
