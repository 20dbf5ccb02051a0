package io.kvpool.examples.server.role;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

/**
 * Aborts of requests prefill never saw (paired aborts after transfers that finished, or a flood from outside): each is
 * remembered for a while so that a late call of it is refused, but the memory is bounded and costs no scan per abort.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PrefillEarlyAbortTest {

    @Test
    void aFloodOfAbortsOfUnknownRequestsIsServedPromptlyAndKeptOnlyUpToTheLimit() throws Exception {
        final int n = PrefillRole.MAX_EARLY_ABORTS + 34_464; // 100,000
        try (InJvmRoles roles = InJvmRoles.start(ServerTests.small().build(), Duration.ofSeconds(10))) {
            for (long id = 1; id <= n; id++) {
                roles.prefill().abort(id, "the client left after its transfer finished");
            }
            // a scan of the whole map per abort made this ~5·10⁹ steps on the duty thread: minutes, not seconds
            Await.until(() -> roles.prefill().status().counters().get("abort_requests") == n, Duration.ofSeconds(20),
                () -> "aborts handled: " + roles.prefill().status().counters());
            assertEquals(n - PrefillRole.MAX_EARLY_ABORTS, (long) roles.prefill().status().counters().get("aborts_not_kept"));
            // a kept one still refuses its late call
            assertNotNull(roles.prefill().prefill(7, "alice", List.of(new byte[] {1})), "the call of an aborted request");
        }
    }
}
