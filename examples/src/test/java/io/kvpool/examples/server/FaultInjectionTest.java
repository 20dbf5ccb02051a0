package io.kvpool.examples.server;

import io.kvpool.examples.server.link.FaultPlan;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.transfer.ReceiverMetrics;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Injected transfer faults (failed writes that did or did not land, delayed writes, dropped links): a
 * request either completes with exactly its own KV or gets a clear 5xx (or 429/503 while the link
 * reconnects); quarantined pages are released once their registrations are revoked; the pools balance.
 *
 * <p>The clients retry a 429 or 503 (each carries {@code Retry-After}) up to {@value #RETRIES} times, as a
 * real client would: how many requests land in a reconnect window depends on the machine's speed, so the
 * completion count is only a fair liveness check once those answers are retried. Every 429/503 is still
 * checked for a clear message and counted.
 */
class FaultInjectionTest {

    /** Retries of a 429/503 per request; each waits {@link #RETRY_PAUSE_MS} ms, not the full Retry-After. */
    private static final int RETRIES = 20;
    private static final long RETRY_PAUSE_MS = 50;

    @Test
    void underInjectedFaultsEveryAnswerIsIsolatedOrAClearErrorAndThePoolsBalance() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().faults(new FaultPlan(0.3, 7)).build())) {
            final TestClient client = new TestClient(server);
            final List<String> violations = Collections.synchronizedList(new ArrayList<>());
            final AtomicInteger ok = new AtomicInteger(), errors = new AtomicInteger(), retried = new AtomicInteger();
            try (ExecutorService pool = Executors.newFixedThreadPool(3)) {
                final List<Future<?>> fs = new ArrayList<>();
                for (int c = 0; c < 3; c++) {
                    final String tenant = "t" + c;
                    final SplittableRandom rnd = new SplittableRandom(c);
                    fs.add(pool.submit(() -> {
                        for (int i = 0; i < 30; i++) {
                            final String prompt = StressTest.prompt(tenant, i, rnd);
                            TestClient.Response r = client.complete(tenant, prompt, 3, i % 2 == 0);
                            for (int t = 0; t < RETRIES && Set.of(429, 503).contains(r.status()); t++) {
                                assertTrue(r.error().path("message").asText().length() > 10, r::body);
                                assertTrue(r.retryAfter() != null, "no Retry-After on " + r.body());
                                retried.incrementAndGet();
                                Thread.sleep(RETRY_PAUSE_MS);
                                r = client.complete(tenant, prompt, 3, i % 2 == 0);
                            }
                            if (r.status() == 200) {
                                final var body = i % 2 == 0 ? CompletionApiTest.streamed(r) : r.json();
                                if (body.has("kvpool") && !body.get("kvpool").isNull()) {
                                    violations.addAll(Isolation.violations(tenant, prompt, 3, body));
                                    ok.incrementAndGet();
                                } else if (!r.body().contains("\"error\"")) {
                                    violations.add("a stream ended without result or error: " + r.body());
                                } else {
                                    errors.incrementAndGet(); // a streamed request's transfer failed after its headers
                                }
                            } else if (Set.of(429, 502, 503).contains(r.status())) {
                                assertTrue(r.error().path("message").asText().length() > 10, r::body);
                                errors.incrementAndGet();
                            } else {
                                violations.add(r.status() + ": " + r.body());
                            }
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
            final var prefill = server.roleStatus().get(0).counters();
            final ReceiverMetrics m = ((InJvmRoles) server.roles()).receiverMetrics();
            System.out.println("faults: " + ok + " ok, " + errors + " errors, " + retried + " retries; prefill " + prefill + "; quarantine releases "
                + m.quarantineReleases() + ", deferred " + m.deferredRelease(ReceiverMetrics.Outcome.DRAINED) + "/"
                + m.deferredRelease(ReceiverMetrics.Outcome.ERROR) + "/" + m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
            assertTrue(prefill.get("injected_faults") > 0, prefill::toString);
            assertTrue(errors.get() > 0, "faults were injected but no request failed");
            assertTrue(ok.get() > 30, () -> ok + " of 90 completed");
            assertEquals(0, m.quarantinedPages());
        }
    }

    @Test
    void aTransferWhoseWriteFailedIsA503AndTheSameRequestSentAgainCompletes() throws Exception {
        // prefill's write or flush failed: its sender aborts (SENDER_ABORTED); the link serves the next attempt, or its
        // successor does if the link was retired, so the client is told to retry, not that the request failed for good
        try (KvServer server = KvServer.start(ServerTests.small().faults(new FaultPlan(0.3, 7)).build())) {
            final TestClient client = new TestClient(server);
            final SplittableRandom rnd = new SplittableRandom(11);
            TestClient.Response aborted = null;
            String prompt = null;
            for (int i = 0; i < 200 && aborted == null; i++) {
                prompt = StressTest.prompt("t0", i, rnd);
                final TestClient.Response r = client.complete("t0", prompt, 2, false);
                if (r.status() != 200 && r.body().contains("sender_aborted")) {
                    aborted = r;
                }
            }
            final TestClient.Response first = aborted;
            assertTrue(first != null, "200 requests under faults and no transfer aborted by its sender");
            assertEquals(503, first.status(), first::body);
            assertEquals("sender_aborted", first.error().path("reason").asText(), first::body);
            assertEquals("1", first.retryAfter(), first::body);
            TestClient.Response again = client.complete("t0", prompt, 2, false);
            for (int t = 0; t < 5 && again.status() == 503; t++) { // another injected fault may hit the retry too
                again = client.complete("t0", prompt, 2, false);
            }
            final TestClient.Response last = again;
            assertEquals(200, last.status(), last::body);
            assertEquals(List.of(), Isolation.violations("t0", prompt, 2, last.json()));
            ServerTests.assertBalanced(server);
        }
    }
}
