package io.kvpool.examples.server;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.metrics.ServerMetrics;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.server.role.Roles;
import io.kvpool.examples.server.router.Router;

import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Roles that only report a status, set by the test: what a router of role processes sees of them (neither is a
 * {@link io.kvpool.examples.server.role.MeteredRole}, so {@link ServerMetrics} feeds their meters from the status, as for {@link io.kvpool.examples.server.remote.RemoteRoles}).
 */
final class StatusRoles implements Roles {

    final AtomicReference<RoleStatus> prefillStatus;
    final AtomicReference<RoleStatus> decodeStatus;

    StatusRoles(RoleStatus prefill, RoleStatus decode) {
        prefillStatus = new AtomicReference<>(prefill);
        decodeStatus = new AtomicReference<>(decode);
    }

    /** @return the router's {@code /metrics} text for these statuses (a fresh router and registry) */
    static String routerMetrics(RoleStatus prefill, RoleStatus decode, ServerConfig config) {
        final StatusRoles roles = new StatusRoles(prefill, decode);
        try (ServerMetrics m = ServerMetrics.forServer(config, new Router(config, roles.prefill(), roles.decode()), roles)) {
            return m.scrape();
        }
    }

    @Override
    public PrefillService prefill() {
        return new PrefillService() {
            @Override
            public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                throw new UnsupportedOperationException();
            }

            @Override
            public void abort(long requestId, String why) {
            }

            @Override
            public RoleStatus status() {
                return prefillStatus.get();
            }

            @Override
            public int activeTransfers() {
                return 0;
            }

            @Override
            public void close() {
            }
        };
    }

    @Override
    public DecodeService decode() {
        return new DecodeService() {
            @Override
            public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                throw new UnsupportedOperationException();
            }

            @Override
            public boolean ready() {
                return true;
            }

            @Override
            public RoleStatus status() {
                return decodeStatus.get();
            }

            @Override
            public int activeTransfers() {
                return 0;
            }

            @Override
            public void close() {
            }
        };
    }

    @Override
    public void close() {
    }
}
