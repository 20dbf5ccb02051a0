package io.kvpool.examples.server;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.LinkGate;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What the server tests share: a small, fast configuration and the end-of-test accounting check. */
public final class ServerTests {

    private ServerTests() {
    }

    /**
     * Transfer deadlines for tests that hold a transfer's writes with a {@link LinkGate}: long enough that no
     * deadline, however loaded the machine, ends the transfer before the test lets it go.
     */
    static final Duration HELD = Duration.ofSeconds(60);

    /** Small pools, no token delay, quick heartbeats, an ephemeral port. */
    public static ServerConfig.Builder small() {
        return ServerConfig.builder().port(0).contextTokens(512).prefillPages(64).decodePages(128).tokensPerPage(16)
            .tokenDelay(Duration.ZERO).heartbeat(Duration.ofMillis(20)).transferTimeout(Duration.ofSeconds(5))
            .requestTimeout(Duration.ofSeconds(10)).reconnectDelay(Duration.ofMillis(20));
    }

    /** {@link #small()} with a gate on prefill's writes and {@link #HELD} deadlines. */
    static ServerConfig.Builder held(LinkGate gate) {
        return small().gate(gate).transferTimeout(HELD).requestTimeout(HELD);
    }

    /**
     * Waits for quiescence, then checks both pools: accounting balances, every page is FREE, nothing is
     * reserved, no sequence is open.
     */
    static void assertBalanced(KvServer server) throws InterruptedException {
        assertTrue(server.awaitQuiescence(Duration.ofSeconds(10)), () -> "no quiescence: " + server.roles().prefill() + " "
            + server.roles().decode() + " " + server.counters());
        for (KvPool pool : new KvPool[] {server.prefillPool(), server.decodePool()}) {
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(0, s.inUse(), () -> "pages still in use: " + s);
            assertEquals(s.capacity(), s.free(), () -> "not every page is free: " + s);
            assertEquals(0, s.reserved(), () -> "pages still reserved: " + s);
            assertEquals(0, s.openSequences(), () -> "sequences still open: " + s);
        }
    }
}
