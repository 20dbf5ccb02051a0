package io.kvpool.examples.server;

import io.kvpool.examples.server.config.Topology;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The three-process server the separate-roles tests run against: the decode and prefill roles each in a child
 * JVM ({@link RoleChild}), the router in this JVM ({@link KvServer} with {@link ServerTests#small()} over
 * {@link io.kvpool.examples.server.remote.RemoteRoles}), and a {@link TestClient} on it.
 *
 * <pre>
 *   TestClient ──HTTP──▶ router (this JVM) ──HTTP──▶ decode child ◀──KV link── prefill child
 *                                           └─HTTP──▶ prefill child
 * </pre>
 *
 * Closing closes the router, then the current prefill child, then the decode child (each even if the one
 * before failed); idempotent as its parts are.
 */
final class ThreeProcesses implements AutoCloseable {

    final RoleChild decode;
    /** The prefill child; replaced by {@link #restartPrefill}. */
    RoleChild prefill;
    final KvServer router;
    final TestClient client;
    private final Class<?> main;
    private final Path dir;
    private final String[] prefillArgs;

    private ThreeProcesses(Class<?> main, Path dir, String[] prefillArgs, RoleChild decode, RoleChild prefill, KvServer router) {
        this.main = main;
        this.dir = dir;
        this.prefillArgs = prefillArgs;
        this.decode = decode;
        this.prefill = prefill;
        this.router = router;
        this.client = new TestClient(router);
    }

    /**
     * Starts both children at once (prefill connects, and reconnects, to decode on its own), waits until each
     * serves, then starts the router on their URLs. What started is closed if a later step fails.
     *
     * @param startWait how long each child may take to serve
     */
    static ThreeProcesses start(Path dir, String[] decodeArgs, String[] prefillArgs, Duration startWait) throws Exception {
        return start(KvServerMain.class, dir, decodeArgs, prefillArgs, startWait);
    }

    /** {@link #start(Path, String[], String[], Duration)} with the children run through {@code main} ({@link RoleChild#start(Class, Path, String, String...)}). */
    static ThreeProcesses start(Class<?> main, Path dir, String[] decodeArgs, String[] prefillArgs, Duration startWait) throws Exception {
        RoleChild decode = null;
        RoleChild prefill = null;
        try {
            decode = RoleChild.start(main, dir, "decode", decodeArgs);
            prefill = RoleChild.start(main, dir, "prefill", prefillArgs);
            decode.awaitStarted(startWait);
            prefill.awaitStarted(startWait);
            final KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                .withUrls(prefill.uri(), decode.uri())).build());
            return new ThreeProcesses(main, dir, prefillArgs, decode, prefill, router);
        } catch (Exception | Error e) {
            closeAll(null, prefill, decode);
            throw e;
        }
    }

    /** Starts a new prefill child with the same flags (the same port: the router finds it again) and waits until it serves. */
    RoleChild restartPrefill(Duration startWait) throws Exception {
        prefill = RoleChild.start(main, dir, "prefill", prefillArgs);
        prefill.awaitStarted(startWait);
        // the router's probe still holds the old process's "unreachable" until it reads the new one: a request
        // before that is answered 503 at once, as designed (RoleHealth), unless its 100 ms re-check wins
        Await.until(() -> SeparateRolesTest.call(() -> router.roles().prefill().unavailable() == null), startWait,
            () -> "the router to see the restarted prefill: " + prefill.log());
        return prefill;
    }

    /** Waits until both children report their KV link up. */
    void awaitLinked(Duration wait, String what) throws InterruptedException {
        Await.until(() -> SeparateRolesTest.call(() -> decode.status().path("ready").asBoolean() && prefill.status().path("ready").asBoolean()),
            wait, () -> what + ": " + decode.log() + prefill.log());
    }

    /** Waits until the decode child reports a prefill link up. */
    void awaitDecodeReady(Duration wait) throws InterruptedException {
        Await.until(() -> SeparateRolesTest.call(() -> decode.status().path("ready").asBoolean()), wait, () -> decode.log() + prefill.log());
    }

    /** @return the children's {@code abort_requests} counters now: decode's, then prefill's */
    long[] abortRequests() throws Exception {
        return new long[] {decode.counter("abort_requests"), prefill.counter("abort_requests")};
    }

    /** Waits until each child counted exactly one more abort request than in {@code before} ({@link #abortRequests()}). */
    void awaitAbortedInBoth(long[] before, Duration wait) throws InterruptedException {
        Await.until(() -> SeparateRolesTest.call(() -> decode.counter("abort_requests") == before[0] + 1
                && prefill.counter("abort_requests") == before[1] + 1),
            wait, () -> "both role processes to be told to abort: " + router.roleStatus());
    }

    /** The router reaches quiescence within {@code wait} and both children's pools are clean. */
    void assertClean(Duration wait) throws Exception {
        assertTrue(router.awaitQuiescence(wait), () -> "no quiescence: " + router.roleStatus());
        decode.assertPoolClean();
        prefill.assertPoolClean();
    }

    /** Alice and bob each get their own 5-token completion of {@code "<tenant>'s secret " + where}, plain and streamed. */
    void assertTwoTenantsIsolated(String where) throws Exception {
        for (String tenant : List.of("alice", "bob")) {
            final String prompt = tenant + "'s secret " + where;
            final TestClient.Response plain = client.complete(tenant, prompt, 5, false);
            assertEquals(200, plain.status(), plain::body);
            assertEquals(List.of(), Isolation.violations(tenant, prompt, 5, plain.json()));
            final TestClient.Response stream = client.complete(tenant, prompt, 5, true);
            assertEquals(200, stream.status(), stream::body);
            assertEquals(List.of(), Isolation.violations(tenant, prompt, 5, SeparateRolesTest.joined(stream)));
        }
    }

    @Override
    public void close() {
        closeAll(router, prefill, decode);
    }

    private static void closeAll(KvServer router, RoleChild prefill, RoleChild decode) {
        try {
            if (router != null) {
                router.close();
            }
        } finally {
            for (RoleChild c : new RoleChild[] {prefill, decode}) {
                if (c != null) {
                    c.close();
                }
            }
        }
    }
}
