package io.kvpool.examples.server.role;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** A call's failure keeps its kind across the thread hop: the router answers an unavailable role 503 and a faulty one 502. */
class DecodeCallAwaitTest {

    private static IllegalStateException failedWith(RuntimeException cause) {
        final CompletableFuture<String> f = new CompletableFuture<>();
        f.completeExceptionally(cause);
        return assertThrows(IllegalStateException.class, () -> DecodeCall.await(f, Duration.ofSeconds(1), "request 7"));
    }

    @Test
    void aRoleClosedUnderTheCallStaysUnavailable_andAFaultDoesNot() throws Exception {
        final RoleUnavailableException closed = new RoleUnavailableException("decode role is closed");
        final IllegalStateException unavailable = failedWith(closed);
        assertEquals(RoleUnavailableException.class, unavailable.getClass());
        assertSame(closed, unavailable.getCause());
        assertEquals("request 7 failed: decode role is closed", unavailable.getMessage());

        final IllegalStateException fault = failedWith(new IllegalArgumentException("a bug"));
        assertFalse(fault instanceof RoleUnavailableException, fault.toString());
        assertEquals(IllegalArgumentException.class, fault.getCause().getClass());

        assertNull(DecodeCall.await(new CompletableFuture<>(), Duration.ofMillis(1), "request 8"), "not done yet");
    }
}
