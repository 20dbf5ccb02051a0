package io.kvpool.examples.server;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A second prefill process linked to the same decode (blue/green: the replacement started beside the old one) takes
 * none of the first one's requests: the routers in front of either are served, each request from its own prefill.
 * Before instance ids, decode sent every descriptor to its newest link, and the first router's requests timed out.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class BlueGreenPrefillTest {

    @TempDir
    Path dir;

    private static ServerConfig routerOver(RoleServer prefill, RoleServer decode) {
        return ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill.baseUri(), decode.baseUri()))
            .build();
    }

    @Test
    void routersInFrontOfTwoPrefillsLinkedToOneDecodeAreEachServedFromTheirOwn() throws Exception {
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).build());
             RoleServer blue = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
            Await.until(() -> InJvmRoleServers.linkedPrefills(decode) == 1, Duration.ofSeconds(30), () -> "blue linked: " + InJvmRoleServers.status(decode.baseUri()));
            try (RoleServer green = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
                Await.until(() -> InJvmRoleServers.linkedPrefills(decode) == 2, Duration.ofSeconds(30), () -> "green linked: " + InJvmRoleServers.status(decode.baseUri()));
                final String blueId = InJvmRoleServers.status(blue.baseUri()).path("instance").asText();
                final String greenId = InJvmRoleServers.status(green.baseUri()).path("instance").asText();
                try (KvServer overBlue = KvServer.start(routerOver(blue, decode));
                     KvServer overGreen = KvServer.start(routerOver(green, decode))) {
                    for (int i = 0; i < 3; i++) { // the blue router first: the one decode's newest link does not reach
                        served(overBlue, "blue " + i);
                        served(overGreen, "green " + i);
                    }
                }
                assertEquals(3, InJvmRoleServers.transfersCompleted(blue), "blue's transfers: " + blueId);
                assertEquals(3, InJvmRoleServers.transfersCompleted(green), "green's transfers: " + greenId);
            }
        }
    }

    private static void served(KvServer router, String prompt) throws Exception {
        final TestClient.Response r = new TestClient(router).complete("alice", prompt, 2, false);
        assertEquals(200, r.status(), r::body);
        assertEquals(prompt, r.json().path("kvpool").path("kv_text").asText(), r::body);
    }
}
