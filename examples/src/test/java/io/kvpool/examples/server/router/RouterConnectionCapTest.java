package io.kvpool.examples.server.router;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.InJvmRoles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static io.kvpool.examples.server.router.DecodeReservationTest.MAX_TOKENS;
import static io.kvpool.examples.server.router.DecodeReservationTest.PROMPT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A role takes only so many connections (its {@code --max-connections}), and each request in flight holds one of them:
 * the router takes no more requests in flight than the roles allow, and answers the next 503 {@code roles_busy} with
 * Retry-After, instead of calling a role that would close the connection on arrival and be taken for lost.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RouterConnectionCapTest {

    @Test
    void aRequestPastWhatTheRolesConnectionsAllowIsA503ToRetryAndTheOthersAreServed() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final HeldPrefill twoAtATime = new HeldPrefill(roles.prefill(), 2) { // the first two held; a third, let in, is not
                @Override
                public int maxRequestsInFlight() {
                    return 2;
                }
            };
            final CountDownLatch computing = twoAtATime.entered, done = twoAtATime.release;
            final Router router = new Router(cfg, twoAtATime, roles.decode());
            final Thread[] held = new Thread[2];
            final Exception[] failed = new Exception[2];
            for (int i = 0; i < 2; i++) {
                final int k = i;
                held[i] = Thread.ofVirtual().start(() -> {
                    try {
                        router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE);
                    } catch (Exception e) {
                        failed[k] = e;
                    }
                });
            }
            assertTrue(computing.await(10, TimeUnit.SECONDS), "both requests reached prefill");
            final ApiError busy = assertThrows(ApiError.class,
                () -> router.complete("bob", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE));
            assertEquals(503, busy.status(), busy::getMessage);
            assertEquals("roles_busy", busy.reason(), busy::getMessage);
            assertEquals(1, busy.retryAfterSeconds());
            assertEquals(2L, busy.fields().get("max_requests_in_flight"), busy.fields()::toString);
            assertEquals(2L, busy.fields().get("requests_in_flight"), busy.fields()::toString);
            done.countDown();
            for (Thread t : held) {
                t.join(10_000);
            }
            assertEquals(null, failed[0]);
            assertEquals(null, failed[1]);
            router.complete("carol", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE); // room again
            router.close();
        }
    }
}
