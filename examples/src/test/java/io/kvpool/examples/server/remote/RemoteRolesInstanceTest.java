package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.role.RoleStatus;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The router's side of the engine ids, over role processes of the test's making: it names its prefill's engine in
 * decode's calls, and answers decode down, naming both, while decode's links all come from other prefills.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RemoteRolesInstanceTest {

    private static final long PREFILL = 0xA1B2C3D4E5F60718L;
    private static final long OTHER = 0x0000000000001234L;

    private static ServerConfig routerOver(StubRole prefill, StubRole decode) {
        return ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill.base(), decode.base()))
            .build();
    }

    private static String down(RemoteRoles roles) {
        try {
            return roles.decode().unavailable();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    @Test
    void theRouterNamesItsPrefillsEngineInBothDecodeCalls() throws Exception {
        try (StubRole prefill = StubRole.start("prefill", PREFILL, List.of(7L), path -> StubRole.Reply.NO_CONTENT);
             StubRole decode = StubRole.start("decode", 7L, List.of(OTHER, PREFILL), path -> new StubRole.Reply(200, "{\"admitted\":true}"));
             RemoteRoles roles = RemoteRoles.connect(routerOver(prefill, decode))) {
            final long named = roles.prefill().instance(); // the first read, waited for
            assertEquals(PREFILL, named);
            assertNull(roles.decode().reserve(5, "alice", 4, 2, named));
            assertEquals(List.of("/internal/reserve {\"request_id\":5,\"tenant\":\"alice\",\"prompt_tokens\":4,\"max_new_tokens\":2,"
                + "\"prefill_instance\":\"a1b2c3d4e5f60718\"}"), decode.calls());
            assertNull(roles.decode().unavailable(), "decode holds a link from the router's prefill");
        }
    }

    @Test
    void aDecodeLinkedOnlyFromOtherPrefillsIsAnsweredDownNamingBoth() throws Exception {
        try (StubRole prefill = StubRole.start("prefill", PREFILL, List.of(7L), path -> StubRole.Reply.NO_CONTENT);
             StubRole decode = StubRole.start("decode", 7L, List.of(OTHER), path -> StubRole.Reply.NO_CONTENT);
             RemoteRoles roles = RemoteRoles.connect(routerOver(prefill, decode))) {
            assertEquals(PREFILL, roles.prefill().instance());
            Await.until(() -> down(roles) != null, Duration.ofSeconds(10), () -> "decode never answered down");
            final String why = roles.decode().unavailable();
            assertTrue(why.contains("engine instance") && why.contains(RoleStatus.hex(PREFILL)) && why.contains(RoleStatus.hex(OTHER)),
                why);
            assertNull(roles.prefill().unavailable(), "prefill is not what cannot serve: decode is");
        }
    }

    @Test
    void aPrefillAnswerNamesTheEngineThatTookTheOfferAndAnOlderOneTheProbedEngine() throws Exception {
        final java.util.concurrent.atomic.AtomicReference<String> answer = new java.util.concurrent.atomic.AtomicReference<>(
            "{\"admitted\":true,\"instance\":\"0000000000001234\"}");
        try (StubRole prefill = StubRole.start("prefill", PREFILL, List.of(7L), path -> new StubRole.Reply(200, answer.get()));
             StubRole decode = StubRole.start("decode", 7L, List.of(OTHER, PREFILL), path -> StubRole.Reply.NO_CONTENT);
             RemoteRoles roles = RemoteRoles.connect(routerOver(prefill, decode))) {
            assertEquals(PREFILL, roles.prefill().instance(), "the probe's read");
            final List<byte[]> tokens = List.of(new byte[] {1}, new byte[] {2});
            assertEquals(new io.kvpool.examples.server.role.PrefillService.Answer(null, OTHER),
                roles.prefill().computeAndOffer(3, "alice", tokens), "behind a balancer: the engine that answered");
            answer.set("{\"admitted\":true}"); // a prefill of a build before the answer named its engine
            assertEquals(new io.kvpool.examples.server.role.PrefillService.Answer(null, PREFILL),
                roles.prefill().computeAndOffer(4, "alice", tokens));
            answer.set("{\"admitted\":true,\"instance\":\"12\"}");
            final IllegalStateException bad = assertThrows(IllegalStateException.class,
                () -> roles.prefill().computeAndOffer(5, "alice", tokens));
            assertTrue(bad.getMessage().contains("16 hex digits"), bad.getMessage());
        }
    }
}
