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
import io.kvpool.examples.server.role.RoleUnavailableException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static io.kvpool.examples.server.router.DecodeReservationTest.MAX_TOKENS;
import static io.kvpool.examples.server.router.DecodeReservationTest.PROMPT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A role in this JVM that fails a call for a fault of its own (kvpool's faults are {@link IllegalStateException}s) is
 * answered 502 {@code role_error} without Retry-After, as a role process's 500 is; only a role that cannot take calls
 * now ({@link RoleUnavailableException}) is a 503 to retry. Either way decode's reservation is given back.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RouterRoleFaultTest {

    private static PrefillService failing(PrefillService p, RuntimeException e) {
        return new ForwardingPrefill(p) {
            @Override
            public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
                throw e;
            }
        };
    }

    /** @return what a router whose prefill throws {@code e} answers a request */
    private static ApiError answer(ServerConfig cfg, InJvmRoles roles, RuntimeException e) {
        final Router router = new Router(cfg, failing(roles.prefill(), e), roles.decode());
        try {
            return assertThrows(ApiError.class,
                () -> router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE));
        } finally {
            router.close();
        }
    }

    @Test
    void aRolesOwnFaultIsA502AndARoleThatCannotTakeCallsA503() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final ApiError fault = answer(cfg, roles, new IllegalStateException("injected storage fault"));
            assertEquals(502, fault.status(), fault::getMessage);
            assertEquals("role_error", fault.reason());
            assertEquals(0, fault.retryAfterSeconds());
            assertTrue(fault.fields().containsKey("error_id") && !fault.getMessage().contains("injected storage fault"),
                fault::getMessage); // the text goes to the log, under the id

            final ApiError closed = answer(cfg, roles, new RoleUnavailableException("prefill role is closed"));
            assertEquals(503, closed.status(), closed::getMessage);
            assertEquals("prefill_unavailable", closed.reason());
            assertEquals(1, closed.retryAfterSeconds());
            Await.until(() -> roles.decodePool().snapshot().openSequences() == 0, Duration.ofSeconds(10),
                () -> "decode's reservations given back: " + roles.decodePool().snapshot());
        }
    }

    /** @return a decode whose calls report {@code failure} while the router waits for the admission or the transfer */
    private static DecodeService failingWhileAwaited(DecodeService d, boolean atAdmission, IllegalStateException failure) {
        return new ForwardingDecode(d) {
            @Override
            public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                return new ForwardingDecodeCall(super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)) {
                    @Override
                    public Admitted awaitAdmission(Duration timeout) throws InterruptedException {
                        if (atAdmission) {
                            throw failure;
                        }
                        return real.awaitAdmission(timeout);
                    }

                    @Override
                    public TransferOutcome awaitTransfer(Duration timeout) {
                        throw failure;
                    }

                    @Override
                    public Generation generate(int maxTokens, io.kvpool.examples.server.echo.EchoDecoder.TokenSink sink) {
                        throw new AssertionError("no KV committed");
                    }
                };
            }
        };
    }

    @Test
    void aDecodeFaultWhileTheRouterWaitsIsA502AndADecodeClosedUnderTheCallA503() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            for (boolean atAdmission : new boolean[] {true, false}) {
                final String where = atAdmission ? "admission" : "transfer";
                // DecodeCall.await's shapes: a fault of the role, and a role closed under the call
                final ApiError fault = answer(cfg, roles.prefill(), failingWhileAwaited(roles.decode(), atAdmission,
                    new IllegalStateException("decode role: request 1 failed: injected fault")));
                assertEquals(502, fault.status(), where + ": " + fault.getMessage()); // not 503 + Retry-After: retried forever
                assertEquals("role_error", fault.reason(), where);
                assertEquals(0, fault.retryAfterSeconds(), where);
                assertTrue(fault.fields().containsKey("error_id") && !fault.getMessage().contains("injected"), fault::getMessage);

                final ApiError closed = answer(cfg, roles.prefill(), failingWhileAwaited(roles.decode(), atAdmission,
                    new RoleUnavailableException("decode role: request 1 failed: decode role is closed")));
                assertEquals(503, closed.status(), where + ": " + closed.getMessage());
                assertEquals(atAdmission ? "decode_unavailable" : "role_lost", closed.reason(), where);
                assertEquals(1, closed.retryAfterSeconds(), where);
            }
            Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.decodePool().snapshot().inUse() == 0
                && roles.decodePool().snapshot().openSequences() == 0, Duration.ofSeconds(10),
                () -> "every request's pages given back: " + roles.decodePool().snapshot());
        }
    }

    @Test
    void aDecodeFaultDuringGenerationIsA502RoleError() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final ApiError fault = answer(cfg, roles.prefill(), new ForwardingDecode(roles.decode()) {
                @Override
                public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
                    return new ForwardingDecodeCall(super.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)) {
                        @Override
                        public Generation generate(int maxTokens, io.kvpool.examples.server.echo.EchoDecoder.TokenSink sink) {
                            throw new IllegalStateException("decode role: injected fault while generating");
                        }
                    };
                }
            });
            assertEquals(502, fault.status(), fault::getMessage);
            assertEquals("role_error", fault.reason());
            assertEquals(0, fault.retryAfterSeconds());
            assertTrue(fault.fields().containsKey("error_id") && !fault.getMessage().contains("injected"), fault::getMessage);
            Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.decodePool().snapshot().inUse() == 0
                && roles.decodePool().snapshot().openSequences() == 0, Duration.ofSeconds(10),
                () -> "the committed sequence given back: " + roles.decodePool().snapshot());
        }
    }

    /** @return what a router over these roles answers a request */
    private static ApiError answer(ServerConfig cfg, PrefillService prefill, DecodeService decode) {
        final Router router = new Router(cfg, prefill, decode);
        try {
            return assertThrows(ApiError.class,
                () -> router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE));
        } finally {
            router.close();
        }
    }
}
