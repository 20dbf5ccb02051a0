package io.kvpool.examples.load;

import io.kvpool.Admission;
import io.kvpool.examples.server.KvServer;
import io.kvpool.examples.server.config.ServerConfig;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A short load run against a server in this JVM: many concurrent clients, streams, aborts, over-capacity
 * requests and bad input. Zero foreign markers, every completion built from exactly its own prompt,
 * every bad input answered with its 4xx, and at quiescence both pools balanced with every page free.
 */
class LoadGeneratorTest {

    /** Small pools, a 1 ms model step, quick heartbeats (so aborted streams are noticed), a small body limit. */
    static ServerConfig.Builder small() {
        return ServerConfig.builder().port(0).contextTokens(1024).prefillPages(128).decodePages(256).tokenDelay(Duration.ofMillis(1))
            .heartbeat(Duration.ofMillis(20)).reconnectDelay(Duration.ofMillis(20)).maxBodyBytes(64 * 1024);
    }

    @Test
    void aShortRunLeaksNothingAndLeavesThePoolsBalanced() throws Exception {
        try (KvServer server = KvServer.start(small().build())) {
            final Mix mix = new Mix(12, new int[] {4, 200}, new int[] {0, 12}, 0.5, 0.1, 0.05, new int[] {1025, 1300}, 0.05,
                server.config().maxBodyBytes(), 5);
            final LoadGenerator.Result r;
            try (CompletionClient client = new CompletionClient(server.baseUri(), Duration.ofSeconds(30), server.config().maxBodyBytes())) {
                r = LoadGenerator.run(client, mix, 16, 400, null);
            }
            final PoolCheck pools = PoolCheck.of(server, Duration.ofSeconds(10));
            final String why = r.outcomes().stream().filter(o -> o.kind() == Outcome.Kind.UNEXPECTED || o.leaked() || o.kvMismatch())
                .limit(5).toList() + " " + pools + " " + server.counters();
            assertEquals(400, r.outcomes().size());
            assertEquals(0, r.leaked(), why);
            assertEquals(0, r.kvMismatches(), why);
            assertEquals(0, r.count(Outcome.Kind.UNEXPECTED), why);
            assertTrue(pools.ok(), why);
            assertTrue(LoadReport.clean(r, pools));

            // the mix happened, and every request the server parsed reached its router exactly once
            final long garbage = r.outcomes().stream().filter(o -> o.shot().kind() == Shot.Kind.GARBAGE).count();
            assertTrue(garbage > 0 && garbage == r.count(Outcome.Kind.GARBAGE_REFUSED), why);
            assertEquals(400 - garbage, server.counters().get("requests"), why);
            assertTrue(r.count(Outcome.Kind.ABORTED) > 0 && server.counters().get("aborted") > 0, why);
            assertTrue(r.count(Outcome.Kind.REJECTED) > 0 && r.count(Outcome.Kind.COMPLETED) > 200, why);
            final List<Outcome> completed = r.outcomes().stream().filter(o -> o.kind() == Outcome.Kind.COMPLETED).toList();
            assertTrue(completed.stream().allMatch(o -> o.completionTokens() == o.shot().maxTokens()), why);
            assertTrue(completed.stream().filter(o -> o.shot().stream()).allMatch(o -> (o.ttftNanos() > 0) == (o.shot().maxTokens() > 0)), why);

            final java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            LoadReport.print(r, mix, pools, new java.io.PrintStream(out, true, java.nio.charset.StandardCharsets.UTF_8));
            final String report = out.toString(java.nio.charset.StandardCharsets.UTF_8);
            assertTrue(report.contains("time to first token") && report.contains("completions/s") && report.contains("verdict: clean"), report);
        }
    }

    @Test
    void aDurationBoundStopsTheRun() throws Exception {
        try (KvServer server = KvServer.start(small().build());
             CompletionClient client = new CompletionClient(server.baseUri(), Duration.ofSeconds(30), 1 << 16)) {
            final Mix mix = new Mix(2, new int[] {4, 8}, new int[] {0, 2}, 0, 0, 0, new int[] {2000, 2000}, 0, 1 << 16, 1);
            final long t0 = System.nanoTime();
            final LoadGenerator.Result r = LoadGenerator.run(client, mix, 4, 0, Duration.ofMillis(300));
            assertTrue(System.nanoTime() - t0 < 10_000_000_000L);
            assertTrue(r.outcomes().size() > 4 && r.count(Outcome.Kind.COMPLETED) == r.outcomes().size(), r.outcomes()::toString);
            assertTrue(PoolCheck.of(server, Duration.ofSeconds(10)).ok());
        }
    }

    /** The pool check can fail: a sequence left open in a pool is reported, in this JVM and through /metrics. */
    @Test
    void thePoolCheckCatchesAPageStillHeld() throws Exception {
        try (KvServer server = KvServer.start(small().build())) {
            final Admission a = server.decodePool().admit(40, 0);
            a.sequence().append(40); // 3 pages OWNED, never released
            try {
                final PoolCheck here = PoolCheck.of(server, Duration.ofSeconds(1));
                assertFalse(here.ok(), here::toString);
                assertTrue(here.lines().stream().anyMatch(l -> l.startsWith("decode") && l.contains("NOT CLEAN") && l.contains("3 owned")),
                    here::toString);
                final PoolCheck remote = PoolCheck.remote(server.baseUri(), Duration.ofMillis(200));
                assertFalse(remote.ok(), remote::toString);
                assertTrue(remote.lines().stream().anyMatch(l -> l.startsWith("decode") && l.contains("NOT CLEAN")), remote::toString);
            } finally {
                a.sequence().close();
            }
            final List<String> lines = PoolCheck.remote(server.baseUri(), Duration.ofSeconds(5)).lines();
            assertTrue(PoolCheck.of(server, Duration.ofSeconds(5)).ok() && lines.stream().allMatch(l -> l.contains("clean")), lines::toString);
        }
    }
}
