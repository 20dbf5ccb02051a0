package io.kvpool.examples.server;

import io.kvpool.examples.server.role.RoleStatus;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Eight tenants at once, each sending 50 requests of random sizes, streamed or not, a quarter of them
 * abandoned at a random moment (right after sending, once admitted, or after the first token). Every
 * completed response must hold exactly its own tenant's text; at the end both pools balance with every
 * page free and every request is accounted for.
 */
class StressTest {

    static final int CLIENTS = 8;
    static final int REQUESTS = Integer.getInteger("kvpool.server.stress.requests", 50);

    @Test
    void manyTenantsWithRandomAbortsSeeOnlyTheirOwnKvAndThePoolsBalance() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().tokenDelay(Duration.ofMillis(1)).build())) {
            final TestClient client = new TestClient(server);
            final List<String> violations = Collections.synchronizedList(new ArrayList<>());
            final AtomicInteger completed = new AtomicInteger(), abandoned = new AtomicInteger(), retried = new AtomicInteger();
            try (ExecutorService pool = Executors.newFixedThreadPool(CLIENTS)) {
                final List<Future<?>> fs = new ArrayList<>();
                for (int c = 0; c < CLIENTS; c++) {
                    final String tenant = "tenant-" + c;
                    final SplittableRandom rnd = new SplittableRandom(1000 + c);
                    fs.add(pool.submit(() -> {
                        for (int i = 0; i < REQUESTS; i++) {
                            final String prompt = prompt(tenant, i, rnd);
                            final int max = rnd.nextInt(16);
                            final boolean stream = rnd.nextBoolean();
                            if (rnd.nextInt(4) == 0) {
                                abandon(client, tenant, prompt, max, rnd.nextInt(3));
                                abandoned.incrementAndGet();
                                continue;
                            }
                            TestClient.Response r = client.complete(tenant, prompt, max, stream);
                            while (r.status() == 429) {
                                retried.incrementAndGet();
                                r = client.complete(tenant, prompt, max, stream);
                            }
                            if (r.status() != 200) {
                                violations.add(tenant + " request " + i + ": " + r.status() + " " + r.body());
                                continue;
                            }
                            violations.addAll(Isolation.violations(tenant, prompt, max, stream ? CompletionApiTest.streamed(r) : r.json()));
                            completed.incrementAndGet();
                        }
                        return null;
                    }));
                }
                for (Future<?> f : fs) {
                    f.get();
                }
            }
            assertEquals(List.of(), violations);
            ServerTests.assertBalanced(server);
            final var counters = server.counters();
            assertEquals(CLIENTS * REQUESTS + retried.get(), counters.get("requests"), counters::toString);
            // every request is accounted for exactly once; an abandoned one either aborted, or finished before
            // the server wrote anything that could fail, or was refused
            assertEquals(counters.get("requests"), counters.get("completed") + counters.get("aborted") + counters.get("rejected")
                + counters.get("failed") + counters.get("timed_out"), counters::toString);
            assertTrue(counters.get("completed") >= completed.get() && counters.get("aborted") <= abandoned.get(), counters::toString);
            assertEquals(0, counters.get("failed") + counters.get("timed_out"), counters::toString);
            assertTrue(completed.get() > CLIENTS * REQUESTS / 2, () -> completed + " completed");
            System.out.println("stress: " + completed + " completed (all isolated), " + abandoned + " abandoned, " + retried
                + " retried after 429; " + counters + "; roles " + server.roleStatus().stream().map(RoleStatus::counters).toList());
        }
    }

    /** A prompt full of the tenant's own markers: any foreign token in a response is visible. */
    static String prompt(String tenant, int i, SplittableRandom rnd) {
        final StringBuilder sb = new StringBuilder(tenant).append(" request ").append(i).append(':');
        for (int w = rnd.nextInt(1, 60); w > 0; w--) {
            sb.append(' ').append(tenant.charAt(tenant.length() - 1)).append("-secret").append(rnd.nextInt(100));
        }
        return sb.toString();
    }

    /** Sends a request on a raw connection and vanishes: at once (0), once admitted (1), or after the first token (2). */
    private static void abandon(TestClient client, String tenant, String prompt, int max, int when) throws IOException {
        try (Socket s = client.openRaw(tenant, prompt, Math.max(max, 4), true)) {
            if (when >= 1) {
                // until admitted (or the first token), or an error answer (429: nothing to abandon)
                TestClient.readUntil(s, when == 1 ? "admitted" : "\"text\":", "\"error\"");
            }
        } catch (IOException e) {
            // the server finished first: fine
        }
    }
}
