package io.kvpool.transfer.shm;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Test helpers for files judged by their maker's lock or pid ({@link StaleFiles}): other processes that hold or test locks. */
final class FileLockProbe {

    private FileLockProbe() {
    }

    /** {@return the pid of a process that has exited} */
    static long aPidThatExited() throws Exception {
        final Process p = new ProcessBuilder("true").start();
        p.waitFor();
        return p.pid();
    }

    /** A python3 process holding a POSIX (fcntl) lock on {@code file}, as a create in another process would. */
    static Process lockHolder(Path file) throws IOException {
        final Process p;
        try {
            p = new ProcessBuilder("python3", "-c", "import fcntl,sys\nf=open(sys.argv[1],'r+')\nfcntl.lockf(f,fcntl.LOCK_EX)\n"
                + "print('locked',flush=True)\nsys.stdin.read()", file.toString()).redirectErrorStream(true).start();
        } catch (IOException e) {
            assumeTrue(false, "no python3: " + e);
            throw e;
        }
        final String line = new java.io.BufferedReader(new java.io.InputStreamReader(p.getInputStream())).readLine();
        assertEquals("locked", line);
        return p;
    }

    /** @return whether another process holds a lock on {@code file} (asked of a python3 process) */
    static boolean lockedElsewhere(Path file) throws Exception {
        final Process p = new ProcessBuilder("python3", "-c", "import fcntl,sys\nf=open(sys.argv[1],'r+')\n"
            + "try:\n  fcntl.lockf(f,fcntl.LOCK_EX|fcntl.LOCK_NB)\n  print('free')\nexcept OSError:\n  print('held')",
            file.toString()).redirectErrorStream(true).start();
        final String out = new String(p.getInputStream().readAllBytes()).trim();
        p.waitFor();
        assertTrue(out.equals("held") || out.equals("free"), out);
        return out.equals("held");
    }

    /** {@return {@code p}, its last modification put back past {@link StaleFiles#LOCK_TEST_MIN_AGE}} */
    static Path aged(Path p) throws IOException {
        Files.setLastModifiedTime(p, java.nio.file.attribute.FileTime.fromMillis(
            System.currentTimeMillis() - StaleFiles.LOCK_TEST_MIN_AGE.toMillis() - 60_000));
        return p;
    }
}
