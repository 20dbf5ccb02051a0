package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** A role reports its KV socket by one spelling, whatever path led to it: preflight compares the two roles' reports. */
class RoleServerKvEndpointTest {

    @TempDir
    Path dir;

    @Test
    void aRelativeAnAbsoluteAndASymlinkedWorkDirNameOneSocketAlike() throws Exception {
        final Path work = Files.createDirectory(dir.resolve("w")).toRealPath();
        final Path link = Files.createSymbolicLink(dir.resolve("link"), work);
        final String canonical = "shm:" + work.resolve("transfer.sock");
        assertEquals(canonical, RoleServer.canonicalKv("shm:" + work.resolve("transfer.sock")));
        assertEquals(canonical, RoleServer.canonicalKv("shm:" + link.resolve("transfer.sock")));
        assertEquals(canonical, RoleServer.canonicalKv("shm:" + work.resolve("../w/./transfer.sock")));
        final Path relative = Path.of("").toAbsolutePath().relativize(work.resolve("transfer.sock"));
        assertEquals(canonical, RoleServer.canonicalKv("shm:" + relative));
        assertEquals("cuda-ipc:" + work.resolve("transfer.sock"), RoleServer.canonicalKv("cuda-ipc:" + link.resolve("transfer.sock")));
        assertEquals("ucx:10.0.0.2:8090", RoleServer.canonicalKv("ucx:10.0.0.2:8090"), "an address stays as given");
        assertEquals("shm:" + dir.toRealPath().resolve("absent/transfer.sock"), RoleServer.canonicalKv("shm:" + dir.resolve("absent/./transfer.sock")));
    }
}
