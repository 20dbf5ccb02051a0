package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.RoleUnavailableException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * How a decode process's stream ends a call before admission: a process closed under the call ({@code "unavailable":true})
 * is a refusal to retry (503), while its own fault, or a line this router cannot read (another build, a broken one),
 * fails the wait, which the router answers 502 {@code role_error} without Retry-After (RouterRoleFaultTest).
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RemoteDecodeErrorEventTest {

    /** Starts a call on a decode process that streams {@code line} and ends; @return the call, admission pending */
    private static <T> T onStream(String line, CallCheck<T> check) throws Exception {
        try (StubRole decode = StubRole.start("decode", path -> path.equals("/internal/decode")
                ? new StubRole.Reply(200, "{\"event\":\"waiting\",\"heartbeat_ms\":200}\n" + line + "\n") : StubRole.Reply.NO_CONTENT);
             RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
                 Duration.ofSeconds(5))) {
            return check.on(d.start(7, "alice", 5, 8));
        }
    }

    private interface CallCheck<T> {
        T on(DecodeCall c) throws Exception;
    }

    private static DecodeCall.Admitted admission(DecodeCall c) throws InterruptedException {
        DecodeCall.Admitted a;
        while ((a = c.awaitAdmission(Duration.ofMillis(200))) == null) {
            Thread.onSpinWait();
        }
        return a;
    }

    private static IllegalStateException fault(String line) throws Exception {
        return onStream(line, c -> {
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> admission(c), line);
            assertFalse(e instanceof RoleUnavailableException, e.toString());
            // the transfer's wait fails the same way: no "retry" there either
            assertThrows(IllegalStateException.class, () -> c.awaitTransfer(Duration.ofSeconds(5)), line);
            return e;
        });
    }

    @Test
    void aDecodeFaultBeforeAdmissionFailsTheWait_notARefusalToRetry() throws Exception {
        final IllegalStateException e = fault("{\"event\":\"error\",\"message\":\"internal error 0123456789abcdef: see the log\"}");
        assertTrue(e.getMessage().contains("failed request 7") && e.getMessage().contains("0123456789abcdef"), e.getMessage());
    }

    @Test
    void aLineThisRouterCannotReadIsAFault_notARefusalToRetry() throws Exception {
        fault("{\"event\":\"rejected\",\"rejection\":{\"role\":\"decode\",\"reason\":\"SOME_NEW_REASON\",\"message\":\"m\","
            + "\"numbers\":{}}}"); // a decode of a newer build
        fault("{\"event\":\"no_such_event\"}");
    }

    @Test
    void aLineCutShortIsALostStream_aRefusalToRetry() throws Exception {
        final ApiError e = onStream("{\"event\":\"adm", c -> { // a process that died mid-line
            final DecodeCall.Admitted a = admission(c);
            assertFalse(a.admitted());
            return ApiError.of(a.rejection());
        });
        assertEquals(503, e.status(), e::getMessage);
        assertEquals("decode_unavailable", e.reason());
    }

    @Test
    void aDecodeClosedUnderTheCallIsARefusalToRetry() throws Exception {
        final ApiError e = onStream("{\"event\":\"error\",\"message\":\"decode role is closed\",\"unavailable\":true}", c -> {
            final DecodeCall.Admitted a = admission(c);
            assertFalse(a.admitted());
            return ApiError.of(a.rejection());
        });
        assertEquals(503, e.status(), e::getMessage);
        assertEquals("decode_unavailable", e.reason());
        assertEquals(1, e.retryAfterSeconds());
    }
}
