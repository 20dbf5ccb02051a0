package io.kvpool.examples.server.router;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A router that closes while a request is on its way (still with prefill, or between prefill and decode, where
 * close()'s sweep of the requests at decode cannot see it): the request ends as the server's abort, 503
 * {@code server_closing}, not as a role's failure, and leaves nothing in either pool: no page, no reservation.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RouterCloseTest {

    @Test
    void aRequestStillWithPrefillWhenTheRouterClosesEndsAs503ServerClosing() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final HeldPrefill held = new HeldPrefill(roles.prefill());
            final Router router = new Router(cfg, held, roles.decode());
            final CompletableFuture<Object> result = completeOnItsOwnThread(router, "held with prefill");
            assertTrue(held.entered.await(10, TimeUnit.SECONDS), "the request never reached prefill");
            router.close();
            held.release.countDown();
            final Object r = result.get(20, TimeUnit.SECONDS);
            assertClosingRefusal(r);
            awaitNothingLeft(roles);
        }
    }

    @Test
    void aRequestTheRouterClosesUnderIsAbortedAtPrefillOnce() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final HeldPrefill held = new HeldPrefill(roles.prefill());
            final Router router = new Router(cfg, held, roles.decode());
            final CompletableFuture<Object> result = completeOnItsOwnThread(router, "held with prefill");
            assertTrue(held.entered.await(10, TimeUnit.SECONDS), "the request never reached prefill");
            router.close(); // the paired abort goes out now
            held.release.countDown(); // then the request ends on its own thread
            assertClosingRefusal(result.get(20, TimeUnit.SECONDS));
            assertEquals(1, held.aborts.get(), "prefill was told to abort the request this many times");
            awaitNothingLeft(roles);
        }
    }

    @Test
    void aRequestBlockedInACallToAStuckRoleEndsAs503ServerClosingWhenTheRouterCloses() throws Exception {
        // a role process that does not answer holds the request thread in its HTTP call (up to the call timeout):
        // close() must end that call now, so that the client reads the server's 503 before the server stops
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final CountDownLatch entered = new CountDownLatch(1);
            final PrefillService stuck = new ForwardingPrefill(roles.prefill()) {
                @Override
                public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                    entered.countDown();
                    try {
                        Thread.sleep(30_000); // what RoleClient's HTTP call does with a stuck role: waits, interruptibly
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new io.kvpool.examples.server.role.RoleLostException("prefill: interrupted while waiting", e);
                    }
                    return super.prefill(requestId, tenant, tokens);
                }
            };
            final Router router = new Router(cfg, stuck, roles.decode());
            final CompletableFuture<Object> result = completeOnItsOwnThread(router, "stuck at prefill");
            assertTrue(entered.await(10, TimeUnit.SECONDS), "the request never reached prefill");
            router.close();
            final Object r = result.get(5, TimeUnit.SECONDS);
            assertClosingRefusal(r);
            awaitNothingLeft(roles);
        }
    }

    @Test
    void aRequestBetweenItsRoleCallsWhenTheRouterClosesMakesNoFurtherCall() throws Exception {
        // close() interrupts the role calls in progress; a request between two of them must not start the next one
        // (to a role that may be stuck or closing): it ends at once, as the server's shutdown
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final AtomicReference<Router> router = new AtomicReference<>();
            final java.util.concurrent.atomic.AtomicBoolean decodeStarted = new java.util.concurrent.atomic.AtomicBoolean();
            final PrefillService closingAfter = new ForwardingPrefill(roles.prefill()) {
                @Override
                public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                    final Rejection r = super.prefill(requestId, tenant, tokens);
                    router.get().close(); // as the call returns: its interrupt is cleared, the next call not begun
                    return r;
                }
            };
            final DecodeService stuckAtStart = new ForwardingDecode(roles.decode()) {
                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    decodeStarted.set(true);
                    try {
                        Thread.sleep(30_000); // a stuck role: close() swept the calls before this one began
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    throw new IllegalStateException("decode role is closed");
                }
            };
            router.set(new Router(cfg, closingAfter, stuckAtStart));
            final CompletableFuture<Object> result = completeOnItsOwnThread(router.get(), "between prefill and decode");
            assertClosingRefusal(result.get(5, TimeUnit.SECONDS));
            assertFalse(decodeStarted.get(), "a call to decode began after the router closed");
            awaitNothingLeft(roles);
        }
    }

    @Test
    void aRequestWhoseDecodeClosesWithTheRouterEndsAs503ServerClosing() throws Exception {
        assertServerClosing(true);
    }

    @Test
    void aRequestWhoseReservationMeetsADecodeClosedWithTheRouterEndsAs503ServerClosing() throws Exception {
        assertServerClosing(false);
    }

    /**
     * The router closes while a request is on its way to decode, and the decode role, closed with the server, refuses
     * the call: at the decode call ({@code atStart}) or at the reservation before prefill.
     */
    private static void assertServerClosing(boolean atStart) throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final AtomicReference<Router> router = new AtomicReference<>();
            final DecodeService closing = new ForwardingDecode(roles.decode()) { // closed with the router
                @Override
                public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
                    throws InterruptedException {
                    if (atStart) {
                        return super.reserve(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
                    }
                    router.get().close();
                    throw new IllegalStateException("decode role is closed"); // what a role closed with the server says
                }

                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    router.get().close();
                    throw new IllegalStateException("decode role is closed");
                }
            };
            router.set(new Router(cfg, roles.prefill(), closing));
            assertClosingRefusal(assertThrows(ApiError.class, () -> router.get().complete("alice",
                new Router.Request("closed at decode", 3, false), NoSink.INSTANCE)));
            awaitNothingLeft(roles);
        }
    }

    @Test
    void aRouterClosingRightAfterTheCommitEndsTheRequestAs503ServerClosing() throws Exception {
        final Object r = abortedRightAfterCommit(true, NoSink.INSTANCE);
        assertClosingRefusal(r);
    }

    @Test
    void aClientLeavingRightAfterTheCommitEndsTheRequestAsClientGone() throws Exception {
        final java.util.concurrent.atomic.AtomicBoolean gone = new java.util.concurrent.atomic.AtomicBoolean();
        final Router.Sink leaving = NoSink.leavingWhen(gone::get);
        final Object r = abortedRightAfterCommit(false, leaving, () -> gone.set(true));
        assertTrue(r instanceof Router.ClientGone, "expected the client's abort, got " + r);
    }

    private static Object abortedRightAfterCommit(boolean closeRouter, Router.Sink sink) throws Exception {
        return abortedRightAfterCommit(closeRouter, sink, () -> { });
    }

    /**
     * The KV commits, and as the router's generate call begins, before it takes the sequence, the call is aborted: by
     * the router's close ({@code closeRouter}) or, as the client's own abort does, at decode once {@code leave} has
     * run. The abort wins: generate finds no committed sequence.
     *
     * @return how {@link Router#complete} ended: its result or what it threw
     */
    private static Object abortedRightAfterCommit(boolean closeRouter, Router.Sink sink, Runnable leave) throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final AtomicReference<Router> router = new AtomicReference<>();
            final DecodeService abortingAtCommit = new ForwardingDecode(roles.decode()) {
                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    return new ForwardingDecodeCall(super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)) {
                        @Override
                        public Generation generate(int maxTokens, io.kvpool.examples.server.echo.EchoDecoder.TokenSink s)
                            throws java.io.IOException, InterruptedException {
                            // after every check the router makes between the commit and this call
                            leave.run();
                            if (closeRouter) {
                                router.get().close();
                            } else {
                                real.abort("the client closed the connection");
                            }
                            // the abort runs on decode's duty thread: let it release the committed sequence first
                            Await.until(() -> roles.decodePool().snapshot().openSequences() == 0, Duration.ofSeconds(10),
                                () -> "the abort's release: " + roles.decodePool().snapshot());
                            return real.generate(maxTokens, s);
                        }
                    };
                }
            };
            router.set(new Router(cfg, roles.prefill(), abortingAtCommit));
            Object r;
            try {
                r = router.get().complete("alice", new Router.Request("aborted at commit", 3, false), sink);
            } catch (Exception e) {
                r = e;
            }
            awaitNothingLeft(roles);
            return r;
        }
    }

    /**
     * Runs a request of alice's through {@code router} on a thread of its own (a stuck one must not hold the common
     * pool). @return its outcome: the answer, or what it threw
     */
    private static CompletableFuture<Object> completeOnItsOwnThread(Router router, String prompt) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return router.complete("alice", new Router.Request(prompt, 3, false), NoSink.INSTANCE);
            } catch (Exception e) {
                return e;
            }
        }, task -> Thread.ofPlatform().daemon().start(task));
    }

    /** Asserts that {@code r} is the router's refusal of a request it was closing under: 503 {@code server_closing}. */
    private static void assertClosingRefusal(Object r) {
        assertTrue(r instanceof ApiError, "expected a refusal, got " + r);
        final ApiError e = (ApiError) r;
        assertEquals(503, e.status(), e::getMessage);
        assertTrue(e.body().toString().contains("server_closing"), () -> e.body().toString());
    }

    private static void awaitNothingLeft(InJvmRoles roles) throws InterruptedException {
        Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.decodePool().snapshot().inUse() == 0
                && roles.prefillPool().snapshot().inUse() == 0 && roles.decodePool().snapshot().openSequences() == 0
                && roles.decodePool().snapshot().reserved() == 0, Duration.ofSeconds(10),
            () -> "pools after: prefill " + roles.prefillPool().snapshot() + ", decode " + roles.decodePool().snapshot());
    }
}
