package io.kvpool.examples.server.router;

import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.InJvmRoles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static io.kvpool.examples.server.router.DecodeReservationTest.MAX_TOKENS;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A prompt too long for the context is refused from its length, before the router spends memory tokenizing it. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RouterPromptSizeTest {

    @Test
    void aPromptThatCannotFitIsRefusedBeforeItIsTokenized() throws Exception {
        // 4 MiB of one-letter words: 2M tokens as arrays, tens of MiB, only to be refused 400 context_too_long
        final ServerConfig cfg = ServerTests.small().build();
        final String prompt = "a ".repeat(2 << 20);
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final Router router = new Router(cfg, roles.prefill(), roles.decode());
            router.complete("alice", new Router.Request("a short one", MAX_TOKENS, false), NoSink.INSTANCE); // warm
            final com.sun.management.ThreadMXBean mx = (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
            final long before = mx.getCurrentThreadAllocatedBytes();
            final ApiError e = assertThrows(ApiError.class,
                () -> router.complete("alice", new Router.Request(prompt, 1, false), NoSink.INSTANCE));
            final long allocated = mx.getCurrentThreadAllocatedBytes() - before;
            assertEquals(400, e.status(), e::getMessage);
            assertEquals("context_too_long", e.reason());
            assertEquals((long) (prompt.length() / 8), e.fields().get("prompt_tokens_at_least"), e.fields()::toString);
            assertTrue(allocated < (1 << 20), "refusing it allocated " + allocated + " bytes");
            router.close();
        }
    }
}
