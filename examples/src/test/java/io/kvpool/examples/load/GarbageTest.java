package io.kvpool.examples.load;

import io.kvpool.PoolSnapshot;
import io.kvpool.examples.server.KvServer;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Every kind of bad input the load generator sends, once each — among them a body over the limit sent
 * chunked, without {@code Content-Length}, which the server must count itself — gets exactly its 4xx and
 * reason and leaves both pools as they were.
 */
class GarbageTest {

    @Test
    void everyBadInputGetsItsStatusAndReasonAndChangesNothing() throws Exception {
        try (KvServer server = KvServer.start(LoadGeneratorTest.small().build());
             CompletionClient client = new CompletionClient(server.baseUri(), Duration.ofSeconds(30), server.config().maxBodyBytes())) {
            assertEquals(true, PoolCheck.of(server, Duration.ofSeconds(5)).ok(), "clean before");
            final PoolSnapshot prefill = server.prefillPool().snapshot();
            final PoolSnapshot decode = server.decodePool().snapshot();
            for (Garbage g : Garbage.values()) {
                final Shot s = new Shot(g.ordinal(), "tenant1", Shot.Kind.GARBAGE, Markers.of("tenant1", g.ordinal()), 0, 4, false, -1, g);
                final Outcome o = client.send(s);
                assertEquals(Outcome.Kind.GARBAGE_REFUSED, o.kind(), o::toString);
                assertEquals(g.status(), o.status(), o::toString);
                assertEquals(g.reason(), o.reason(), o::toString);
                assertEquals(Set.of(), o.foreignMarkers());
            }
            assertEquals(prefill, server.prefillPool().snapshot(), "bad input changed the prefill pool");
            assertEquals(decode, server.decodePool().snapshot(), "bad input changed the decode pool");
            assertEquals(0L, server.counters().get("requests"), "bad input reached the router");
        }
    }

    /**
     * Bodies far over the limit with their {@code Content-Length}: each is answered 413, never with a
     * connection reset. Before the server drained such bodies, 2 of 40 bodies of 2–16 MiB got "connection
     * reset" / "header parser received no bytes" instead of their 413.
     */
    @Test
    void hugeBodiesAreAnswered413NotReset() throws Exception {
        try (KvServer server = KvServer.start(LoadGeneratorTest.small().build())) {
            final java.net.http.HttpClient http = java.net.http.HttpClient.newHttpClient();
            final byte[] huge = new byte[8 << 20];
            java.util.Arrays.fill(huge, (byte) ' ');
            for (int i = 0; i < 24; i++) {
                final java.net.http.HttpResponse<String> r = http.send(java.net.http.HttpRequest.newBuilder(server.baseUri().resolve("v1/completions"))
                        .header("Authorization", "Bearer sk-tenant1").header("Content-Type", "application/json")
                        .POST(java.net.http.HttpRequest.BodyPublishers.ofByteArray(huge, 0, (2 << 20) + (i % 4) * (2 << 20))).build(),
                    java.net.http.HttpResponse.BodyHandlers.ofString());
                assertEquals(413, r.statusCode(), r::body);
            }
            assertEquals(0L, server.counters().get("requests"), "bad input reached the router");
        }
    }
}
