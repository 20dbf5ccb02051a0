package io.kvpool.examples.server;

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
 */
class FaultInjectionTest {

    @Test
    void underInjectedFaultsEveryAnswerIsIsolatedOrAClearErrorAndThePoolsBalance() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().faults(new FaultPlan(0.3, 7)).build())) {
            final TestClient client = new TestClient(server);
            final List<String> violations = Collections.synchronizedList(new ArrayList<>());
            final AtomicInteger ok = new AtomicInteger(), errors = new AtomicInteger();
            try (ExecutorService pool = Executors.newFixedThreadPool(3)) {
                final List<Future<?>> fs = new ArrayList<>();
                for (int c = 0; c < 3; c++) {
                    final String tenant = "t" + c;
                    final SplittableRandom rnd = new SplittableRandom(c);
                    fs.add(pool.submit(() -> {
                        for (int i = 0; i < 30; i++) {
                            final String prompt = StressTest.prompt(tenant, i, rnd);
                            final TestClient.Response r = client.complete(tenant, prompt, 3, i % 2 == 0);
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
            System.out.println("faults: " + ok + " ok, " + errors + " errors; prefill " + prefill + "; quarantine releases "
                + m.quarantineReleases() + ", deferred " + m.deferredRelease(ReceiverMetrics.Outcome.DRAINED) + "/"
                + m.deferredRelease(ReceiverMetrics.Outcome.ERROR) + "/" + m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
            assertTrue(prefill.get("injected_faults") > 0, prefill::toString);
            assertTrue(errors.get() > 0, "faults were injected but no request failed");
            assertTrue(ok.get() > 30, () -> ok + " of 90 completed");
            assertEquals(0, m.quarantinedPages());
        }
    }
}
