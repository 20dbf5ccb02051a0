package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A one-JVM server on a fixed {@code --work-dir} starts again over the socket a killed one left behind, and refuses
 * to start beside one that still runs there, without touching that one's pool file.
 */
class WorkDirRestartTest {

    @TempDir
    Path dir;

    @Test
    void aServerRestartsOverTheStaleSocketOfOneThatDied() throws Exception {
        final Path socket = dir.resolve("transfer.sock");
        try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            dead.bind(UnixDomainSocketAddress.of(socket)); // what a server killed with -9 leaves: the file, no listener
        }
        assertTrue(Files.exists(socket));
        try (KvServer server = KvServer.start(ServerTests.small().workDir(dir).build())) {
            assertTrue(server.awaitQuiescence(Duration.ofSeconds(5)));
        }
    }

    @Test
    void aSecondServerOnALiveWorkDirIsRefusedAndLeavesTheFirstsPoolFile() throws Exception {
        try (KvServer first = KvServer.start(ServerTests.small().workDir(dir).build())) {
            final Path pool = dir.resolve("decode.pool");
            final Object identity = Files.readAttributes(pool, java.nio.file.attribute.BasicFileAttributes.class).fileKey();
            final RuntimeException e = assertThrows(RuntimeException.class,
                () -> KvServer.start(ServerTests.small().workDir(dir).build()).close());
            assertTrue(String.valueOf(e.getMessage()).contains("already listens on"), e::toString);
            assertEquals(identity, Files.readAttributes(pool, java.nio.file.attribute.BasicFileAttributes.class).fileKey(),
                "the running server's pool file was not made anew");
            assertTrue(first.awaitQuiescence(Duration.ofSeconds(5)));
        }
    }
}
