package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.http.HttpLimits;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The calls a role is still answering are not failed by its health checks: the probe fails calls only after two
 * status reads in a row got no answer at all ({@link RoleHealth}). A role that stops taking connections to finish the
 * calls it has, or stalls once for longer than a status timeout, answers them. (FailFastTest shows the frozen role's
 * calls failed early.)
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleHealthCallsTest {

    /** While {@link System#nanoTime()} is before this, the whole fake role stalls (a GC pause). */
    private volatile long stallUntil;
    /** While set, the status endpoint answers nothing (a dead process behind a balancer that the probe reaches). */
    private volatile boolean statusSilent;
    /** Each call's own delay, by its path's last segment; others use the role's. */
    private final Map<String, Long> callMsByPath = new java.util.concurrent.ConcurrentHashMap<>();

    /** A prefill role that answers its status at once and each other call after {@code callMs}. */
    private HttpFront role(long callMs) throws Exception {
        final byte[] status = new ObjectMapper().writeValueAsBytes(RemoteFixtures.statusJson(new RoleStatus("prefill",
            new PoolView("prefill", 0, "", Map.of()), Map.of(), Map.of()).withInstances(0, null), 0, true,
            ServerTests.small().build(), 128, 512));
        return HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, call -> {
            while (System.nanoTime() - stallUntil < 0) {
                Thread.sleep(5);
            }
            if (call.path().equals("/internal/status")) {
                while (statusSilent) {
                    Thread.sleep(5);
                }
                call.respond(200, "application/json", status);
            } else {
                Thread.sleep(callMsByPath.getOrDefault(call.path(), callMs));
                call.respond(200, "application/json", "{\"admitted\":true}".getBytes(StandardCharsets.UTF_8));
            }
        });
    }

    private static Object call(RoleClient calls) {
        return call(calls, "internal/prefill");
    }

    private static Object call(RoleClient calls, String path) {
        try {
            return calls.post(path, Map.of("x", 1));
        } catch (RuntimeException e) {
            return e;
        }
    }

    private static void awaitReady(RoleHealth health) throws InterruptedException {
        final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (health.state() == null || !health.state().ready()) {
            assertTrue(System.nanoTime() - end < 0, "the probe never read the fake role ready");
            Thread.sleep(10);
        }
    }

    @Test
    void aRoleThatStopsTakingConnectionsAnswersTheCallsItHas() throws Exception {
        final HttpFront role = role(1_500);
        try (RoleClient calls = new RoleClient("prefill", role.baseUri(), new ObjectMapper());
             RoleHealth health = new RoleHealth(calls, "prefill", false)) {
            awaitReady(health);
            final CompletableFuture<Object> answer = CompletableFuture.supplyAsync(() -> call(calls));
            Thread.sleep(100);
            Thread.ofVirtual().start(() -> role.stopListening(Duration.ofSeconds(10))); // refuses the probe's connections
            final Object r = answer.get(20, TimeUnit.SECONDS);
            assertTrue(r instanceof com.fasterxml.jackson.databind.JsonNode, () -> "the call was failed: " + r);
        } finally {
            role.close();
        }
    }

    @Test
    void aRoleThatStallsOnceForLongerThanAStatusTimeoutAnswersTheCallsItHas() throws Exception {
        final HttpFront role = role(0);
        try (RoleClient calls = new RoleClient("prefill", role.baseUri(), new ObjectMapper());
             RoleHealth health = new RoleHealth(calls, "prefill", false)) {
            awaitReady(health);
            stallUntil = System.nanoTime() + RoleClient.STATUS_TIMEOUT.toNanos() + 600_000_000L;
            final long t0 = System.nanoTime();
            final Object r = call(calls);
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(r instanceof com.fasterxml.jackson.databind.JsonNode, () -> "the call was failed after " + ms + " ms: " + r);
            assertEquals(true, ((com.fasterxml.jackson.databind.JsonNode) r).path("admitted").asBoolean());
        } finally {
            role.close();
        }
    }

    @Test
    void behindABalancerASilentProcessDoesNotFailTheCallsAnotherAnswers() throws Exception {
        // the probe reaches a dead process (its status reads get no answer) while calls reach a live one that answers
        // them: a slow call sent before the silence is answered, not failed ~4.2 s into it as a frozen role's would be
        final HttpFront role = role(0);
        callMsByPath.put("/internal/slow", 6_000L); // past the two silent reads (~4.2 s), within the call timeout (10 s)
        try (RoleClient calls = new RoleClient("prefill", role.baseUri(), new ObjectMapper());
             RoleHealth health = new RoleHealth(calls, "prefill", false)) {
            awaitReady(health);
            final CompletableFuture<Object> slow = CompletableFuture.supplyAsync(() -> call(calls, "internal/slow"));
            Thread.sleep(100);
            statusSilent = true;
            final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(7);
            while (!slow.isDone() && System.nanoTime() - end < 0) {
                final Object fast = call(calls); // the other process keeps answering calls
                assertTrue(fast instanceof com.fasterxml.jackson.databind.JsonNode, () -> "a call the live process answers failed: " + fast);
                Thread.sleep(200);
            }
            final Object r = slow.get(20, TimeUnit.SECONDS);
            assertTrue(r instanceof com.fasterxml.jackson.databind.JsonNode, () -> "the slow call was failed: " + r);
            assertTrue(health.state() != null && !health.state().ready(), "the probe's reads were silent: the role reads down");
        } finally {
            statusSilent = false;
            role.close();
        }
    }
}
