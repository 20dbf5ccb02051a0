package io.kvpool.examples.server.router;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleUnavailableException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Every request the router counts has exactly one outcome among completed, aborted, rejected, failed and timed out. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RouterCountersTest {

    @Test
    void everyRefusedRequestIsCountedOnce() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final boolean[] duplicateAt = new boolean[3]; // {decode's reserve, prefill, decode's start}
            final Router router = new Router(cfg, new ForwardingPrefill(roles.prefill()) {
                @Override
                public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                    if (duplicateAt[1]) {
                        throw new DuplicateRequestException("request " + requestId + " is in flight already");
                    }
                    return super.prefill(requestId, tenant, tokens);
                }
            }, new ForwardingDecode(roles.decode()) {
                @Override
                public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
                    throws InterruptedException {
                    if (duplicateAt[0]) {
                        throw new DuplicateRequestException("request " + requestId + " is decoding already");
                    }
                    return super.reserve(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
                }

                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    if (duplicateAt[2]) {
                        throw new DuplicateRequestException("request " + requestId + " is decoding already");
                    }
                    return super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
                }
            });
            router.complete("alice", new Router.Request("a prompt", 2, false), NoSink.INSTANCE);
            assertAccounted(router.counters(), 1);
            assertEquals(400, refused(router, "").status());
            assertAccounted(router.counters(), 2);
            duplicateAt[0] = true;
            assertEquals(503, refused(router, "a prompt").status());
            assertAccounted(router.counters(), 3);
            duplicateAt[0] = false;
            duplicateAt[1] = true;
            assertEquals(503, refused(router, "a prompt").status());
            assertAccounted(router.counters(), 4);
            duplicateAt[1] = false;
            duplicateAt[2] = true; // decode is up and says so: not counted as decode unavailable
            assertEquals(503, refused(router, "a prompt").status());
            assertAccounted(router.counters(), 5);
            assertEquals(2.0, router.counters().registry().find(RouterCounters.REJECTED).tags("role", "decode",
                "reason", "duplicate_request_id").counter().count(), "both of decode's duplicate refusals, by their reason");
            assertNull(router.counters().registry().find(RouterCounters.REJECTED).tags("role", "decode", "reason", "unavailable")
                .counter(), "decode was never unavailable");
            duplicateAt[2] = false;
            Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.decodePool().snapshot().reserved() == 0,
                Duration.ofSeconds(10), () -> "the refused request's offer and reservation: " + roles.decodePool().snapshot());
            router.close();
            assertEquals(503, refused(router, "a prompt").status());
            assertAccounted(router.counters(), 6);
        }
    }

    @Test
    void aDecodeCallThatFailsWhileTheRouterWaitsIsAnsweredAndCountedNot500() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final boolean[] failAdmission = {true};
            final Router router = new Router(cfg, roles.prefill(), new ForwardingDecode(roles.decode()) {
                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    return new ForwardingDecodeCall(super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)) {
                        // as DecodeCall.await reports a call whose role was closed under it
                        @Override
                        public Admitted awaitAdmission(Duration timeout) throws InterruptedException {
                            if (failAdmission[0]) {
                                throw new RoleUnavailableException("decode role: request " + requestId + " failed: closed");
                            }
                            return real.awaitAdmission(timeout);
                        }

                        @Override
                        public TransferOutcome awaitTransfer(Duration timeout) {
                            throw new RoleUnavailableException("decode role: request " + requestId + " failed: closed");
                        }

                        @Override
                        public Generation generate(int maxTokens, io.kvpool.examples.server.echo.EchoDecoder.TokenSink sink) {
                            throw new AssertionError("no KV committed");
                        }
                    };
                }
            });
            final ApiError beforeAdmission = refused(router, "a prompt");
            assertEquals(503, beforeAdmission.status(), beforeAdmission::getMessage);
            assertEquals("decode_unavailable", beforeAdmission.reason());
            assertAccounted(router.counters(), 1);
            failAdmission[0] = false;
            final ApiError beforeCommit = refused(router, "a prompt");
            assertEquals(503, beforeCommit.status(), beforeCommit::getMessage);
            assertEquals("role_lost", beforeCommit.reason());
            assertAccounted(router.counters(), 2);
            Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.decodePool().snapshot().inUse() == 0
                && roles.decodePool().snapshot().reserved() == 0, Duration.ofSeconds(10), () -> "both requests' pages given back: "
                + roles.decodePool().snapshot());
            router.close();
        }
    }

    @Test
    void aClientThatLeavesAfterItsAnswerAbortsNothing() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final Router router = new Router(cfg, roles.prefill(), roles.decode());
            final java.util.concurrent.atomic.AtomicReference<Runnable> hook = new java.util.concurrent.atomic.AtomicReference<>();
            router.complete("alice", new Router.Request("a prompt", 2, false), new Router.Sink() {
                @Override
                public void token(String text) {
                }

                @Override
                public void heartbeat() {
                }

                @Override
                public void admitted(long requestId) {
                }

                @Override
                public void onClientGone(Runnable action) {
                    hook.set(action);
                }
            });
            final long before = roles.decode().status().counters().getOrDefault("abort_requests", 0L);
            hook.get().run(); // the client closes its connection once it has read its answer
            // an abort is taken on decode's duty thread, in order: a reservation answered after it was submitted shows
            // the duty thread has taken it, if there was one
            assertNull(roles.decode().reserve(990_001, "barrier", 1, 0));
            roles.decode().unreserve(990_001, "the barrier's");
            assertEquals(before, (long) roles.decode().status().counters().getOrDefault("abort_requests", 0L),
                "decode was asked to abort a request it had finished");
            router.close();
        }
    }

    /** Where {@link #failingRoles} fails a request: the order in which the router reaches each place. */
    private enum FailAt { KNOWN_DOWN_CHECK, DECODE_RESERVE, PREFILL, DECODE_START, COMMITTED_TRANSFER }

    /**
     * @return a router over {@code roles} whose request fails at {@code at[0]} with what {@code failure} gives (a
     *         RuntimeException or an InterruptedException), as a role or decode call would throw it
     */
    private static Router failingRoles(ServerConfig cfg, InJvmRoles roles, FailAt[] at, java.util.function.Supplier<Exception> failure) {
        return new Router(cfg, new ForwardingPrefill(roles.prefill()) {
            @Override
            public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                if (at[0] == FailAt.PREFILL) {
                    throw (RuntimeException) failure.get();
                }
                return super.prefill(requestId, tenant, tokens);
            }
        }, new ForwardingDecode(roles.decode()) {
            @Override
            public String unavailable(long untilNanos) throws InterruptedException {
                if (at[0] == FailAt.KNOWN_DOWN_CHECK) {
                    throw sneaky(failure.get());
                }
                return super.unavailable(untilNanos);
            }

            @Override
            public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
                throws InterruptedException {
                if (at[0] == FailAt.DECODE_RESERVE) {
                    throw sneaky(failure.get());
                }
                return super.reserve(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
            }

            @Override
            public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                if (at[0] == FailAt.DECODE_START) { // prefill holds the offer, decode the reservation
                    throw (RuntimeException) failure.get();
                }
                return new ForwardingDecodeCall(super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)) {
                    @Override
                    public TransferOutcome awaitTransfer(Duration timeout) throws InterruptedException {
                        if (at[0] != FailAt.COMMITTED_TRANSFER) {
                            return real.awaitTransfer(timeout);
                        }
                        TransferOutcome o;
                        while ((o = real.awaitTransfer(timeout)) == null) {
                            Thread.onSpinWait();
                        }
                        assertTrue(o.committed(), o::toString); // decode holds the committed sequence: only an abort frees it
                        throw sneaky(failure.get());
                    }
                };
            }
        });
    }

    /** @return {@code e} thrown as is, checked or not */
    @SuppressWarnings("unchecked")
    private static <E extends Exception> E sneaky(Exception e) throws E {
        throw (E) e;
    }

    @Test
    void anUnexpectedExceptionIsAnswered500InternalErrorAndCountedOnce() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final FailAt[] at = new FailAt[1];
            final Router router = failingRoles(cfg, roles, at, () -> new UnsupportedOperationException("injected bug, tenant bob"));
            long requests = 0;
            for (FailAt where : FailAt.values()) {
                at[0] = where;
                final ApiError e = refused(router, "a prompt");
                assertEquals(500, e.status(), () -> where + ": " + e.body());
                assertEquals("server_error", e.type(), where::name);
                assertEquals("internal_error", e.reason(), where::name);
                assertEquals(0, e.retryAfterSeconds(), where::name);
                assertTrue(e.fields().containsKey("error_id"), () -> where + ": " + e.body());
                assertEquals(where != FailAt.KNOWN_DOWN_CHECK, e.fields().containsKey("request_id"), () -> where + ": " + e.body());
                assertFalse(e.getMessage().contains("injected"), () -> where + ": the exception's text goes to the log: " + e.body());
                assertAccounted(router.counters(), ++requests);
                awaitNothingLeft(roles, where); // the paired abort reached both roles
            }
            assertEquals(FailAt.values().length, router.counters().registry().find(RouterCounters.FAILED)
                .tags("reason", "internal_error").counter().count(), "each as a failure for its reason");
            at[0] = null;
            router.complete("alice", new Router.Request("a prompt", 2, false), NoSink.INSTANCE); // nothing stuck
            assertAccounted(router.counters(), ++requests);
            router.close();
        }
    }

    @Test
    void anInterruptWhileTheRouterIsOpenIsAnswered503ServerClosingAndCountedOnce() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final FailAt[] at = new FailAt[1];
            final Router router = failingRoles(cfg, roles, at, () -> new InterruptedException("the request's thread is stopped"));
            long requests = 0;
            for (FailAt where : new FailAt[] {FailAt.KNOWN_DOWN_CHECK, FailAt.DECODE_RESERVE, FailAt.COMMITTED_TRANSFER}) {
                at[0] = where;
                final ApiError e;
                try {
                    e = refused(router, "a prompt");
                } finally {
                    Thread.interrupted(); // the test's thread goes on either way
                }
                assertEquals(503, e.status(), () -> where + ": " + e.body());
                // before the request drew its id, as the router's own refusal when it is closed
                assertEquals(where == FailAt.KNOWN_DOWN_CHECK ? "unavailable" : "server_closing", e.reason(), where::name);
                assertEquals(1, e.retryAfterSeconds(), where::name);
                assertEquals(where != FailAt.KNOWN_DOWN_CHECK, e.fields().containsKey("request_id"), () -> where + ": " + e.body());
                assertAccounted(router.counters(), ++requests);
                awaitNothingLeft(roles, where);
            }
            assertEquals(1.0, router.counters().registry().find(RouterCounters.REJECTED).tags("role", "router",
                "reason", "server_closing").counter().count());
            assertEquals(2.0, router.counters().registry().find(RouterCounters.FAILED).tags("reason", "server_closing").counter().count());
            at[0] = null;
            router.complete("alice", new Router.Request("a prompt", 2, false), NoSink.INSTANCE);
            assertAccounted(router.counters(), ++requests);
            router.close();
        }
    }

    @Test
    void anInterruptedRequestKeepsItsThreadsInterruptStatus() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final Router router = failingRoles(cfg, roles, new FailAt[] {FailAt.COMMITTED_TRANSFER},
                () -> new InterruptedException("the request's thread is stopped"));
            final boolean interrupted;
            try {
                refused(router, "a prompt");
            } finally {
                interrupted = Thread.interrupted();
            }
            assertTrue(interrupted, "whoever interrupted the thread still sees it, once the request is answered");
            awaitNothingLeft(roles, FailAt.COMMITTED_TRANSFER);
            router.close();
        }
    }

    @Test
    void anAbortTheRouterDidNotSendIsAnswered503RoleLostAndCountedOnce() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final Router router = new Router(cfg, roles.prefill(), new ForwardingDecode(roles.decode()) {
                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    return new ForwardingDecodeCall(super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)) {
                        @Override
                        public Generation generate(int maxTokens, io.kvpool.examples.server.echo.EchoDecoder.TokenSink s)
                            throws java.io.IOException, InterruptedException {
                            // decode drops the committed KV itself (as its close does), with client and router still there
                            real.abort("decode dropped the request");
                            Await.until(() -> roles.decodePool().snapshot().openSequences() == 0, Duration.ofSeconds(10),
                                () -> "the abort's release: " + roles.decodePool().snapshot());
                            return real.generate(maxTokens, s);
                        }
                    };
                }
            });
            final ApiError e = refused(router, "a prompt");
            assertEquals(503, e.status(), () -> e.body().toString());
            assertEquals("service_unavailable", e.type());
            assertEquals("role_lost", e.reason());
            assertEquals(1, e.retryAfterSeconds());
            assertTrue(e.fields().containsKey("request_id"), () -> e.body().toString());
            assertAccounted(router.counters(), 1);
            assertEquals(1.0, router.counters().registry().find(RouterCounters.FAILED).tags("reason", "role_lost").counter().count());
            awaitNothingLeft(roles, "after the abort");
            router.close();
        }
    }

    private static void awaitNothingLeft(InJvmRoles roles, Object after) throws InterruptedException {
        Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.decodePool().snapshot().inUse() == 0
                && roles.prefillPool().snapshot().inUse() == 0 && roles.decodePool().snapshot().openSequences() == 0
                && roles.decodePool().snapshot().reserved() == 0, Duration.ofSeconds(10),
            () -> after + ": pools after: prefill " + roles.prefillPool().snapshot() + ", decode " + roles.decodePool().snapshot());
    }

    private static ApiError refused(Router router, String prompt) {
        return assertThrows(ApiError.class, () -> router.complete("alice", new Router.Request(prompt, 2, false), NoSink.INSTANCE));
    }

    private static void assertAccounted(RouterCounters c, long requests) {
        final String all = "requests " + c.requests.count() + ", completed " + c.completed.count() + ", aborted " + c.aborted.count()
            + ", rejected " + c.rejectedTotal() + ", failed " + c.failedTotal() + ", timed out " + c.timedOut.count();
        assertEquals(requests, (long) c.requests.count(), all);
        assertEquals(requests, (long) (c.completed.count() + c.aborted.count() + c.timedOut.count()) + c.rejectedTotal() + c.failedTotal(),
            all);
    }
}
