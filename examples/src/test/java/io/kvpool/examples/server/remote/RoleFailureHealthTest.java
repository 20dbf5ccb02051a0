package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Which failures of a call mark a role down in the router's health: only a role it could not reach. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleFailureHealthTest {

    @Test
    void aRoleThatFailsACallWithA500StaysReady() throws Exception {
        final StubRole role = stub(500);
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", role.base(), new ObjectMapper()))) {
            Await.until(() -> prefill.health().state() != null, Duration.ofSeconds(10), () -> "the first probe");
            final RoleRefusedException e = assertThrows(RoleRefusedException.class,
                () -> prefill.prefill(1, "alice", List.of(new byte[] {1})));
            assertEquals(500, e.status());
            assertTrue(prefill.health().state().ready(), () -> "a role that answered is up: " + prefill.health().state());
        } finally {
            role.close();
        }
    }

    @Test
    void aRoleThatCannotBeReachedIsMarkedDownAtOnce() throws Exception {
        final StubRole role = stub(500);
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", role.base(), new ObjectMapper()))) {
            Await.until(() -> prefill.health().state() != null && prefill.health().state().ready(), Duration.ofSeconds(10),
                () -> "the first probe");
            role.close();
            assertThrows(RoleLostException.class, () -> prefill.prefill(1, "alice", List.of(new byte[] {1})));
            assertFalse(prefill.health().state().ready(), () -> "the control: a lost role is down: " + prefill.health().state());
        }
    }

    /** A prefill role whose every call but its status is answered {@code failure}. */
    private static StubRole stub(int failure) {
        return StubRole.start("prefill", path -> StubRole.Reply.error(failure, path));
    }
}
