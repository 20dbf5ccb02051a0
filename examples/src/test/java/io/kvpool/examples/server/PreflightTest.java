package io.kvpool.examples.server;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The deployment pre-check: each role reports its identity and capacity; the router refuses to start
 * over roles that do not match it (naming each role's numbers; {@code --clamp-context} advertises the smallest
 * role's largest safe context instead), re-checks a role that comes back, and {@code preflight} checks a running
 * deployment, exiting non-zero with a table of what does not match.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PreflightTest {

    @TempDir
    Path dir;

    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private final ByteArrayOutputStream err = new ByteArrayOutputStream();

    private int run(String... args) throws Exception {
        return KvServerMain.run(args, new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
    }

    private String out() {
        return out.toString(StandardCharsets.UTF_8);
    }

    /** @return the exit code of {@code preflight} over both roles with {@code --context 512} */
    private int preflight(InJvmRoleServers roles) throws Exception {
        return run("preflight", "--prefill-url", roles.prefill.baseUri().toString(), "--decode-url", roles.decode.baseUri().toString(),
            "--context", "512");
    }

    /** Waits up to 15 s for the router to answer a completion 503 with a body that contains every one of {@code words}. */
    private static void awaitRefusal(KvServer router, String what, String... words) throws InterruptedException {
        final TestClient client = new TestClient(router);
        final String[] last = {""};
        Await.until(() -> {
            try {
                final TestClient.Response r = client.complete("alice", "hello", 2, false);
                last[0] = r.status() + " " + r.body();
                return r.status() == 503 && java.util.Arrays.stream(words).allMatch(r.body()::contains);
            } catch (Exception e) {
                return false;
            }
        }, Duration.ofSeconds(15), () -> what + "; last answer: " + last[0]);
    }

    private static ServerConfig routerOver(RoleServer prefill, RoleServer decode, boolean clamp) {
        return ServerTests.small().clampContext(clamp)
            .topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill.baseUri(), decode.baseUri())).build();
    }

    @Test
    void aMatchingDeploymentPassesAndTheRouterStarts() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), Duration.ofSeconds(30))) {
            assertEquals(0, preflight(roles), this::out);
            assertTrue(out().contains("every role matches") && out().endsWith("OK\n"), out());
            assertTrue(out().contains("largest safe context   512 (advertised)"), out());
            assertTrue(out().contains("KV link"), out());
            final var id = InJvmRoleServers.status(roles.decode.baseUri()).path("identity");
            assertEquals("decode", id.path("role").asText(), id::toString);
            assertEquals("example", id.path("environment").asText(), id::toString);
            assertEquals(128, id.path("pool_pages").asLong(), id::toString);
            assertEquals(512, id.path("max_safe_context_tokens").asLong(), id::toString);
            assertEquals(roles.decode.kvLink(), id.path("kv").asText(), id::toString);
            assertEquals(roles.decode.kvLink(), InJvmRoleServers.status(roles.prefill.baseUri()).path("identity").path("kv").asText(),
                "prefill links to where decode listens");
            try (KvServer router = KvServer.start(routerOver(roles.prefill, roles.decode, false))) {
                assertEquals(512, router.config().contextTokens());
                assertEquals(200, new TestClient(router).complete("alice", "hello", 2, false).status());
            }
        }
    }

    @Test
    void rolesThatTakeFewerConnectionsThanTheRouterCapItsRequestsInFlight() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir).maxConnections(20), Duration.ofSeconds(30))) {
            assertEquals(0, preflight(roles), this::out);
            assertTrue(out().contains("max connections") && out().contains("1024 (clients)"), out());
            assertTrue(out().contains("the router takes at most 4 requests in flight"), out());
            assertEquals(20, InJvmRoleServers.status(roles.decode.baseUri()).path("identity").path("max_connections").asLong());
            try (KvServer router = KvServer.start(routerOver(roles.prefill, roles.decode, false))) {
                Await.until(() -> router.roles().decode().maxRequestsInFlight() == 4
                        && router.roles().prefill().maxRequestsInFlight() == 4, Duration.ofSeconds(10),
                    () -> "the router to read the roles' connections: " + router.roles().decode().maxRequestsInFlight());
                assertEquals(200, new TestClient(router).complete("alice", "hello", 2, false).status());
            }
        }
    }

    @Test
    void rolesThatTakeNoMoreConnectionsThanTheRouterKeepsSpareFailPreflight() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir).maxConnections(16), Duration.ofSeconds(30))) {
            assertEquals(1, preflight(roles), this::out);
            assertTrue(out().contains("MISMATCH decode max connections: 16, the router expects > 16"), out());
            assertTrue(out().contains("MISMATCH prefill max connections: 16"), out());
        }
    }

    @Test
    void swappedRoleUrlsStopTheRouterAndFailPreflight() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), Duration.ofSeconds(30))) {
            // no wait makes a miswired URL the role asked for: refused, not "not up yet"
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> KvServer.start(routerOver(roles.decode, roles.prefill, false)));
            assertTrue(e.getMessage().contains("MISMATCH prefill role: the decode role answers at its URL (")
                && e.getMessage().contains(roles.decode.baseUri().toString()) && e.getMessage().contains("the router expects prefill"),
                e::getMessage);
            assertTrue(e.getMessage().contains("MISMATCH decode role: the prefill role answers at its URL"), e::getMessage);
            assertEquals(1, run("preflight", "--prefill-url", roles.decode.baseUri().toString(), "--decode-url",
                roles.prefill.baseUri().toString(), "--context", "512"), this::out);
            assertTrue(out().endsWith("FAILED: 2 mismatch(es)\n"), out());
        }
    }

    @Test
    void aRoleUrlWithAPathTheRoleDoesNotServeStopsTheRouter() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), Duration.ofSeconds(30))) {
            // the decode role answers 404 under /x/: a wrong URL, which no wait mends, not a role that is not up yet
            final java.net.URI wrong = roles.decode.baseUri().resolve("x/");
            final ServerConfig cfg = routerOver(roles.prefill, roles.decode, false).toBuilder()
                .topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(roles.prefill.baseUri(), wrong)).build();
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> KvServer.start(cfg));
            assertTrue(e.getMessage().contains("MISMATCH decode role: a server that answers 404 answers at its URL (")
                && e.getMessage().contains(wrong.toString()), e::getMessage);
            assertEquals(1, run("preflight", "--prefill-url", roles.prefill.baseUri().toString(), "--decode-url", wrong.toString(),
                "--context", "512"), this::out);
            assertTrue(out().contains("MISMATCH decode role: a server that answers 404"), out());
        }
    }

    @Test
    void rolesOfTwoDeploymentsEachLinkedElsewhereFailPreflightAndStopTheRouter() throws Exception {
        // two healthy deployments side by side: each role is linked, and ready, to its own partner; the prefill of one
        // and the decode of the other can never be linked to each other (a router over them timed out every request)
        final Path a = Files.createDirectory(dir.resolve("a")), b = Files.createDirectory(dir.resolve("b"));
        try (InJvmRoleServers one = InJvmRoleServers.start(ServerTests.small().workDir(a), Duration.ofSeconds(30));
             InJvmRoleServers two = InJvmRoleServers.start(ServerTests.small().workDir(b), Duration.ofSeconds(30))) {
            assertEquals(1, run("preflight", "--prefill-url", one.prefill.baseUri().toString(), "--decode-url",
                two.decode.baseUri().toString(), "--context", "512"), this::out);
            final String t = out();
            assertTrue(t.contains("MISMATCH prefill KV endpoint: " + one.prefill.kvLink() + ", the router expects "
                + two.decode.kvLink() + " (where decode listens)"), t);
            assertTrue(t.endsWith("FAILED: 1 mismatch(es)\n"), t);
            final IllegalStateException refused = assertThrows(IllegalStateException.class,
                () -> KvServer.start(routerOver(one.prefill, two.decode, false)).close());
            assertTrue(refused.getMessage().contains("KV endpoint"), refused::getMessage);
        }
    }

    @Test
    void rolesEachLinkedElsewhereThatComeAfterTheRouterAreRefusedNamingTheirEndpoints() throws Exception {
        // the router starts first; then its decode comes up linked from another prefill, and its prefill linked to
        // another decode: as at start, every request would time out, so each is answered 503 naming the endpoints
        final Path a = Files.createDirectory(dir.resolve("a")), b = Files.createDirectory(dir.resolve("b"));
        final int prefillPort = FixedPort.belowEphemeralRange(), decodePort = FixedPort.belowEphemeralRange();
        final ServerConfig cfg = ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(
            URI.create("http://127.0.0.1:" + prefillPort + "/"), URI.create("http://127.0.0.1:" + decodePort + "/"))).build();
        try (KvServer router = KvServer.start(cfg);
             RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(a).port(decodePort).build());
             RoleServer otherPrefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(a).build());
             RoleServer otherDecode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(b).build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(b).port(prefillPort).build())) {
            Await.until(() -> InJvmRoleServers.status(decode.baseUri()).path("ready").asBoolean()
                && InJvmRoleServers.status(prefill.baseUri()).path("ready").asBoolean(), Duration.ofSeconds(30), () -> "each linked elsewhere");
            awaitRefusal(router, "the router to refuse roles each linked elsewhere", "KV endpoint", prefill.kvLink(), decode.kvLink());
        }
    }

    @Test
    void rolesInAnotherWorkDirEachFailPreflightOnTheirKvEndpoints() throws Exception {
        // another work dir each: prefill never finds decode's transfer socket, and no wait makes it
        final Path a = Files.createDirectory(dir.resolve("a")), b = Files.createDirectory(dir.resolve("b"));
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(a).build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(b).build())) {
            assertEquals(1, run("preflight", "--prefill-url", prefill.baseUri().toString(), "--decode-url", decode.baseUri().toString(),
                "--context", "512"), this::out);
            final String t = out();
            assertTrue(t.contains("MISMATCH prefill KV endpoint: " + prefill.kvLink() + ", the router expects " + decode.kvLink()), t);
            assertTrue(t.contains(prefill.kvLink() + "  ✗"), t);
            assertTrue(t.contains("MISMATCH decode KV link: down (the roles are not linked"), t);
            assertTrue(t.endsWith("FAILED: 3 mismatch(es)\n"), t);
            try (KvServer router = KvServer.start(routerOver(prefill, decode, false))) { // not linked: 503s as requests come
                assertEquals(512, router.config().contextTokens());
            }
        }
    }

    @Test
    void aSmallerPoolOrAnotherEnvironmentFailsWithATableAndTheRouterRefusesToStart() throws Exception {
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).contextTokens(256).decodePages(16).build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).environment("staging").build())) {
            assertEquals(1, run("preflight", "--prefill-url", prefill.baseUri().toString(), "--decode-url", decode.baseUri().toString(),
                "--context", "512"), this::out);
            final String t = out();
            assertTrue(t.contains("MISMATCH prefill environment: staging, the router expects example"), t);
            assertTrue(t.contains("MISMATCH decode largest safe context: 256 tokens (16 pages, --context 256), the router expects ≥ 512 tokens (advertised)"), t);
            assertTrue(t.contains("staging  ✗") && t.contains("256  ✗"), t);
            assertTrue(t.endsWith("FAILED: 2 mismatch(es)\n"), t);

            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> KvServer.start(routerOver(prefill, decode, true)));
            assertTrue(e.getMessage().contains("the roles do not match this router") && e.getMessage().contains("staging"), e::getMessage);
            err.reset();
            assertEquals(1, run("--role", "router", "--port", "0", "--prefill-url", prefill.baseUri().toString(), "--decode-url",
                decode.baseUri().toString(), "--context", "512"));
            assertTrue(err.toString(StandardCharsets.UTF_8).contains("refusing to start: the roles do not match this router"), err::toString);
        }
    }

    @Test
    void aRoleThatCannotCarryTheContextStopsTheRouterUnlessItMayClamp() throws Exception {
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).contextTokens(256).decodePages(16).build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> KvServer.start(routerOver(prefill, decode, false)));
            assertTrue(e.getMessage().contains("start the router with --clamp-context to advertise 256 tokens"), e::getMessage);
            assertTrue(e.getMessage().contains("decode largest safe context: 256 tokens (16 pages, --context 256)"), e::getMessage);
            try (KvServer router = KvServer.start(routerOver(prefill, decode, true))) {
                assertEquals(256, router.config().contextTokens(), "clamped to the smallest role's largest safe context");
            }
        }
    }

    @Test
    void aRoleThatComesBackAsAnotherEnvironmentIsRefusedNamingTheMismatch() throws Exception {
        final int port = FixedPort.belowEphemeralRange();
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).build())) {
            RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).port(port).build());
            try (KvServer router = KvServer.start(routerOver(prefill, decode, false))) {
                Await.until(() -> InJvmRoleServers.status(decode.baseUri()).path("ready").asBoolean(), Duration.ofSeconds(30), () -> "linked");
                assertEquals(200, new TestClient(router).complete("alice", "hello", 2, false).status());
                prefill.close();
                prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).port(port).environment("staging").build());
                awaitRefusal(router, "the router to refuse the prefill that came back as staging",
                    "prefill role does not match the router", "staging");
            } finally {
                prefill.close();
            }
        }
    }

    @Test
    void aRoleOfAnotherBuildIsServedAndShownUnlessTheRouterIsStrict() throws Exception {
        // one work dir: prefill finds decode's transfer socket there
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).buildTag("next").build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
            final String next = ServerTests.small().buildTag("next").build().build(), ours = ServerTests.small().build().build();
            assertTrue(next.endsWith("+next") && !next.equals(ours), next + " vs " + ours);
            assertEquals(0, run("preflight", "--prefill-url", prefill.baseUri().toString(), "--decode-url", decode.baseUri().toString(),
                "--context", "512"), this::out);
            final String t = out();
            assertTrue(t.contains(next + "  ≠"), t);
            assertTrue(t.contains("note: decode runs another build (" + next + ", the router " + ours + "): served"), t);
            assertTrue(t.contains("every role matches") && t.endsWith("OK\n"), t);

            // the KV link across the two builds comes up, and the router serves over it
            try (KvServer router = KvServer.start(routerOver(prefill, decode, false))) {
                Await.until(() -> InJvmRoleServers.status(decode.baseUri()).path("ready").asBoolean(), Duration.ofSeconds(30), () -> "linked");
                assertEquals(200, new TestClient(router).complete("alice", "hello", 2, false).status());
            }

            out.reset();
            assertEquals(1, run("preflight", "--prefill-url", prefill.baseUri().toString(), "--decode-url", decode.baseUri().toString(),
                "--context", "512", "--strict-build"), this::out);
            assertTrue(out().contains("MISMATCH decode build: " + next + ", the router expects " + ours), out());
            assertTrue(out().contains(next + "  ✗"), out());
            final ServerConfig strict = routerOver(prefill, decode, false).toBuilder().strictBuild(true).build();
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> KvServer.start(strict));
            assertTrue(e.getMessage().contains("decode build: " + next), e::getMessage);
        }
    }

    @Test
    void aRoleOfAnotherModelIsRefusedNamingBoth() throws Exception {
        final Path a = Files.createDirectory(dir.resolve("a")), b = Files.createDirectory(dir.resolve("b"));
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(a).build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(b).model("other-model@2").build())) {
            assertEquals(1, run("preflight", "--prefill-url", prefill.baseUri().toString(), "--decode-url", decode.baseUri().toString(),
                "--context", "512"), this::out);
            assertTrue(out().contains("MISMATCH prefill model: other-model@2, the router expects kvpool-echo@1"), out());
            assertTrue(out().contains("other-model@2  ✗"), out());
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> KvServer.start(routerOver(prefill, decode, false)));
            assertTrue(e.getMessage().contains("prefill model: other-model@2"), e::getMessage);
        }
    }
}
