package io.kvpool.examples.server;

import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.load.PoolCheck;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;

import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertFalse;

/** The pool check through /metrics ({@code load --url}) does not call a deployment clean while a role is down. */
class PoolCheckRoleDownTest {

    /**
     * The router's /metrics for a decode process it cannot reach ({@link RoleStatus#unreachable}): kvpool_role_up 0,
     * and every kvpool_pool_pages series of that role 0 (capacity 0). PoolCheck.remote ignores kvpool_role_up and
     * capacity, sees 0 busy pages and reports the unreachable pool "clean".
     */
    @Test
    void aRoleThatIsDownIsNotReportedClean() throws Exception {
        final Map<String, Long> c = new LinkedHashMap<>();
        c.put("capacity", 4L);
        c.put("free", 4L);
        final RoleStatus prefill = new RoleStatus("prefill", new PoolView("prefill", 4, "FFFF", c), Map.of(), Map.of());
        final RoleStatus decode = RoleStatus.unreachable("decode", "decode role at http://127.0.0.1:1/ is unreachable");
        final String text = StatusRoles.routerMetrics(prefill, decode, ServerConfig.builder().build());
        final HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        http.createContext("/metrics", ex -> {
            try (ex) {
                final byte[] b = text.getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
            }
        });
        http.start();
        try {
            final PoolCheck check = PoolCheck.remote(URI.create("http://127.0.0.1:" + http.getAddress().getPort() + "/"), Duration.ofMillis(200));
            assertFalse(check.ok(), "decode is down (kvpool_role_up{role=\"decode\"} 0), yet the pool check says " + check.lines());
        } finally {
            http.stop(0);
        }
    }
}
