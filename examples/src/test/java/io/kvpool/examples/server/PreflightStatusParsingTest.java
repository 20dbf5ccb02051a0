package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.remote.RemoteFixtures;
import io.kvpool.examples.server.remote.RemoteStatus;
import io.kvpool.examples.server.remote.RoleClient;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code preflight} reads each role's status as the router does: a status the router cannot read (a duplicated key,
 * trailing data) is a role the router never serves, so preflight must not pass it.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PreflightStatusParsingTest {

    /** A role's status as a role of {@link ServerTests#small()} answers it, ready, passed through {@code edit}. */
    private static HttpServer role(String role, java.util.function.UnaryOperator<String> edit) throws Exception {
        final String status = new ObjectMapper().writeValueAsString(RemoteFixtures.statusJson(new RoleStatus(role,
            new PoolView(role, 0, "", Map.of()), Map.of(), Map.of()), 0, true, ServerTests.small().build(), 128, 512));
        final byte[] body = edit.apply(status).getBytes(StandardCharsets.UTF_8);
        final HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        s.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(body);
            }
        });
        s.start();
        return s;
    }

    private static URI base(HttpServer s) {
        return URI.create("http://127.0.0.1:" + s.getAddress().getPort() + "/");
    }

    private static int preflight(HttpServer prefill, HttpServer decode, ByteArrayOutputStream out) throws Exception {
        return KvServerMain.run(new String[] {"preflight", "--prefill-url", base(prefill).toString(), "--decode-url",
            base(decode).toString(), "--context", "512"}, new PrintStream(out, true, StandardCharsets.UTF_8),
            new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
    }

    @Test
    void matchingStatusesPass() throws Exception {
        final HttpServer prefill = role("prefill", s -> s), decode = role("decode", s -> s);
        try {
            final ByteArrayOutputStream out = new ByteArrayOutputStream();
            assertEquals(0, preflight(prefill, decode, out), () -> out.toString(StandardCharsets.UTF_8));
        } finally {
            prefill.stop(0);
            decode.stop(0);
        }
    }

    @Test
    void aStatusNamingTwoEnvironmentsFailsPreflightAsTheRouterRefusesIt() throws Exception {
        final String env = "\"environment\":\"example\"";
        final HttpServer prefill = role("prefill", s -> {
            assertTrue(s.contains(env), s);
            return s.replace(env, "\"environment\":\"staging\"," + env); // which one is it? the router's parser refuses it
        });
        final HttpServer decode = role("decode", s -> s);
        try {
            try (RoleClient router = new RoleClient("prefill", base(prefill), Json.strict())) {
                assertFalse(RemoteStatus.read(router, "prefill").status().up(), "the router's own read refuses it");
            }
            final ByteArrayOutputStream out = new ByteArrayOutputStream();
            assertEquals(1, preflight(prefill, decode, out), () -> out.toString(StandardCharsets.UTF_8));
            final String t = out.toString(StandardCharsets.UTF_8);
            assertTrue(t.contains("MISMATCH prefill reachable") && t.contains("environment"), t);
        } finally {
            prefill.stop(0);
            decode.stop(0);
        }
    }

    @Test
    void aStatusWithTrailingDataFailsPreflightAsTheRouterRefusesIt() throws Exception {
        final HttpServer prefill = role("prefill", s -> s), decode = role("decode", s -> s + " {\"ready\":false}");
        try {
            final ByteArrayOutputStream out = new ByteArrayOutputStream();
            assertEquals(1, preflight(prefill, decode, out), () -> out.toString(StandardCharsets.UTF_8));
            assertTrue(out.toString(StandardCharsets.UTF_8).contains("MISMATCH decode reachable"), () -> out.toString(StandardCharsets.UTF_8));
        } finally {
            prefill.stop(0);
            decode.stop(0);
        }
    }
}
