package io.kvpool.examples.server;

import io.kvpool.examples.server.link.LinkGate;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.RoleFixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** Prefill's link to decode dropped and re-made again and again: decode keeps only the live link among its candidates. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ReconnectTest {

    @Test
    void decodeForgetsEachDeadPrefillLinkSoItsLinksDoNotGrowWithReconnects() throws Exception {
        final LinkGate gate = LinkGate.create(false);
        try (KvServer server = KvServer.start(ServerTests.small().gate(gate).build())) {
            final DecodeRole decode = (DecodeRole) server.roles().decode();
            final TestClient client = new TestClient(server);
            for (int round = 1; round <= 6; round++) {
                final int n = round;
                final long accepted = decode.status().counters().get("links_accepted");
                gate.dropLink();
                Await.until(() -> decode.status().counters().get("links_accepted") > accepted && decode.ready(), Duration.ofSeconds(15),
                    () -> "prefill to reconnect: " + decode);
                Await.until(() -> RoleFixtures.senderLinks(decode) == 1, Duration.ofSeconds(5),
                    () -> RoleFixtures.senderLinks(decode) + " prefill links kept after " + n + " reconnects");
            }
            final TestClient.Response r = client.complete("alice", "still here after six reconnects", 3, false);
            assertEquals(200, r.status(), r::body);
            assertEquals(List.of(), Isolation.violations("alice", "still here after six reconnects", 3, r.json()));
            ServerTests.assertBalanced(server);
        }
    }
}
