package io.kvpool.examples.load;

import io.kvpool.examples.server.KvServerMain;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** {@code load} stopped by Ctrl-C closes the server it started: its decode pool file does not stay in /dev/shm (RAM). */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LoadInterruptTest {

    @Test
    void anInterruptedLoadRunLeavesNoPoolFileBehind() throws Exception {
        assumeTrue(Files.isDirectory(Path.of("/proc/self")), "needs /proc to find the child's mapped pool file");
        final Path log = Files.createTempFile("kvpool-load-", ".log");
        final Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx256m",
            "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"), KvServerMain.class.getName(),
            "load", "--duration", "60s", "--clients", "2", "--token-delay-ms", "5")
            .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        Path pool = null;
        try {
            final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (pool == null && System.nanoTime() - end < 0) {
                assertTrue(p.isAlive(), () -> "load exited early: " + read(log));
                if (read(log).contains("load: ")) { // the server is up and the run under way
                    pool = mappedPoolFile(p.pid());
                }
                Thread.sleep(50);
            }
            assertNotNull(pool, () -> "no mapped decode.pool found: " + read(log));
            new ProcessBuilder("kill", "-INT", Long.toString(p.pid())).start().waitFor();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), () -> "load did not exit on SIGINT: " + read(log));
        } finally {
            p.destroyForcibly();
            Files.deleteIfExists(log);
        }
        final boolean left = Files.exists(pool);
        if (left) { // the test's own mess to clean: the pool's directory and what it holds
            try (var files = Files.walk(pool.getParent())) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
        assertFalse(left, "after Ctrl-C, load left " + pool + " behind");
    }

    /** @return the decode pool file the process maps, or null */
    private static Path mappedPoolFile(long pid) throws IOException {
        final List<String> maps = Files.readAllLines(Path.of("/proc/" + pid + "/maps"));
        for (String line : maps) {
            final int i = line.indexOf('/');
            if (i >= 0 && line.endsWith("decode.pool")) {
                return Path.of(line.substring(i));
            }
        }
        return null;
    }

    private static String read(Path p) {
        try {
            return Files.readString(p);
        } catch (IOException e) {
            return e.toString();
        }
    }
}
