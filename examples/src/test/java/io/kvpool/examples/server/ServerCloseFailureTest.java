package io.kvpool.examples.server;

import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Roles;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** A server whose roles fail to close still closes the rest: its HTTP front's threads end. */
class ServerCloseFailureTest {

    @Test
    void aRoleThatFailsToCloseStillStopsTheHttpFront() throws Exception {
        final var config = ServerTests.small().build();
        final InJvmRoles real = InJvmRoles.start(config, Duration.ofSeconds(10));
        final Roles failing = new Roles() {
            @Override
            public PrefillService prefill() {
                return real.prefill();
            }

            @Override
            public DecodeService decode() {
                return real.decode();
            }

            @Override
            public void close() {
                real.close();
                throw new IllegalStateException("injected: a role failed to close");
            }
        };
        final java.util.Set<Thread> before = Thread.getAllStackTraces().keySet();
        final KvServer server = KvServer.start(config, failing);
        final IllegalStateException e = assertThrows(IllegalStateException.class, server::close);
        assertEquals("injected: a role failed to close", e.getMessage());
        final long deadline = System.nanoTime() + 10_000_000_000L;
        java.util.List<String> left;
        do { // the front's event loops (Netty's default names) stop once it is closed
            left = Thread.getAllStackTraces().keySet().stream()
                .filter(t -> !before.contains(t) && t.isAlive() && t.getName().startsWith("multiThreadIoEventLoopGroup"))
                .map(Thread::getName).toList();
            if (!left.isEmpty()) {
                Thread.sleep(20);
            }
        } while (!left.isEmpty() && System.nanoTime() < deadline);
        assertEquals(java.util.List.of(), left, "the HTTP front's threads outlived the server's close");
    }
}
