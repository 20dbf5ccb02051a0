package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Which failures of a call mark a role down in the router's health: only a role it could not reach. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleFailureHealthTest {

    @Test
    void aRoleThatFailsACallWithA500StaysReady() throws Exception {
        final HttpServer role = stub(500);
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", base(role), new ObjectMapper()))) {
            Await.until(() -> prefill.health().state() != null, Duration.ofSeconds(10), () -> "the first probe");
            final RoleRefusedException e = assertThrows(RoleRefusedException.class,
                () -> prefill.prefill(1, "alice", List.of(new byte[] {1})));
            assertEquals(500, e.status());
            assertTrue(prefill.health().state().ready(), () -> "a role that answered is up: " + prefill.health().state());
        } finally {
            role.stop(0);
        }
    }

    @Test
    void aRoleThatCannotBeReachedIsMarkedDownAtOnce() throws Exception {
        final HttpServer role = stub(500);
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", base(role), new ObjectMapper()))) {
            Await.until(() -> prefill.health().state() != null && prefill.health().state().ready(), Duration.ofSeconds(10),
                () -> "the first probe");
            role.stop(0);
            assertThrows(RoleLostException.class, () -> prefill.prefill(1, "alice", List.of(new byte[] {1})));
            assertFalse(prefill.health().state().ready(), () -> "the control: a lost role is down: " + prefill.health().state());
        }
    }

    private static URI base(HttpServer s) {
        return URI.create("http://127.0.0.1:" + s.getAddress().getPort() + "/");
    }

    /** A prefill role whose status reads ready and matching, and which answers every other call {@code failure}. */
    private static HttpServer stub(int failure) throws Exception {
        final HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        s.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
        s.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            final byte[] b;
            final int status;
            if (ex.getRequestURI().getPath().equals("/internal/status")) {
                status = 200;
                b = new ObjectMapper().writeValueAsBytes(RemoteFixtures.statusJson(new RoleStatus("prefill",
                    new PoolView("prefill", 0, "", Map.of()), Map.of(), Map.of()), 0, true, ServerTests.small().build(), 128, 512));
            } else {
                status = failure;
                b = "{\"error\":{\"type\":\"server_error\",\"reason\":\"internal\",\"message\":\"storage fault\"}}"
                    .getBytes(StandardCharsets.UTF_8);
            }
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(status, b.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(b);
            }
        });
        s.start();
        return s;
    }
}
