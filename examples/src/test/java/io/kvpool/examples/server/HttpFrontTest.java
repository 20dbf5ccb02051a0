package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** {@link HttpFront}: a server whose setup fails after the bind leaves its port free (KvServer and RoleServer start through it). */
class HttpFrontTest {

    @Test
    void aFailureWhileMountingLeavesNoPortBound() throws Exception {
        final int port;
        try (ServerSocket probe = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        final IllegalStateException e = assertThrows(IllegalStateException.class, () -> HttpFront.start("127.0.0.1", port, h -> {
            h.createContext("/", ex -> ex.close());
            throw new IllegalStateException("injected: mounting failed");
        }));
        assertEquals("injected: mounting failed", e.getMessage());
        try (ServerSocket again = new ServerSocket(port, 50, InetAddress.getLoopbackAddress())) {
            assertEquals(port, again.getLocalPort(), "the port is free again");
        }
        final HttpFront ok = HttpFront.start("127.0.0.1", port, h -> h.createContext("/", ex -> ex.close()));
        try {
            assertEquals("http://127.0.0.1:" + port + "/", ok.baseUri().toString());
        } finally {
            ok.stopListening();
            ok.stopThreads();
        }
    }
}
