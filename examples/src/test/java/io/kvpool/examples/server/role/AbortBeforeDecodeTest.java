package io.kvpool.examples.server.role;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A request aborted after its KV committed but before its decode began (a client that left in between): the
 * decode ends as a {@link CancellationException}, which the decode endpoint logs as routine rather than as a
 * failure, and its KV is released unused.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AbortBeforeDecodeTest {

    @Test
    void anAbortBetweenCommitAndDecodeIsACancellationAndFreesTheKv() throws Exception {
        try (InJvmRoles roles = InJvmRoles.start(ServerTests.small().build(), Duration.ofSeconds(10))) {
            final DecodeCall call = committed(roles, 1, "a prompt that will not be decoded");
            assertTrue(roles.decodePool().snapshot().inUse() > 0, "the committed KV waits for its decode");
            call.abort("the client left");
            // the abort runs on decode's duty thread: once it has, the committed KV is released unused
            Await.until(() -> roles.decodePool().snapshot().inUse() == 0, Duration.ofSeconds(10),
                () -> "decode's pages freed: " + roles.decodePool().snapshot());
            final CancellationException e = assertThrows(CancellationException.class, () -> call.generate(4, t -> { }));
            assertNotNull(e.getMessage());
            assertTrue(e.getMessage().contains("request 1 was aborted before its decode began"), e.getMessage());
            assertEquals(0, roles.decodePool().snapshot().inUse());
        }
    }

    @Test
    void aDecodeRoleClosingBetweenCommitAndDecodeIsACancellationToo() throws Exception {
        // the role's close releases the committed KV: generate must read that as an abort (503 at the router), not as
        // a call with no KV (a bug: 502 role_lost)
        try (InJvmRoles roles = InJvmRoles.start(ServerTests.small().build(), Duration.ofSeconds(10))) {
            final DecodeCall call = committed(roles, 2, "a prompt its role closes under");
            roles.decode().close();
            final CancellationException e = assertThrows(CancellationException.class, () -> call.generate(4, t -> { }));
            assertTrue(e.getMessage().contains("request 2 was aborted before its decode began"), e.getMessage());
        }
    }

    /** Prefills request {@code id} of alice's and starts its decode call; returns the call once its KV committed. */
    private static DecodeCall committed(InJvmRoles roles, long id, String prompt) throws InterruptedException {
        final List<byte[]> tokens = EchoTokenizer.encode(prompt);
        assertNull(roles.prefill().prefill(id, "alice", tokens));
        final DecodeCall call = roles.decode().start(id, "alice", tokens.size(), 4);
        DecodeCall.Admitted admitted;
        while ((admitted = call.awaitAdmission(Duration.ofSeconds(5))) == null) {
            Thread.onSpinWait();
        }
        assertTrue(admitted.admitted(), admitted::toString);
        DecodeCall.TransferOutcome outcome;
        while ((outcome = call.awaitTransfer(Duration.ofSeconds(5))) == null) {
            Thread.onSpinWait();
        }
        assertTrue(outcome.committed(), outcome::toString);
        return call;
    }
}
