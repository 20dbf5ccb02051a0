package io.kvpool.transfer.shm;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;

/**
 * Finds and deletes the files a process left in a shared directory when it died before it could remove them: a pool
 * file's temporary ({@link MappedPageStorage#create}) and a control ring's file before its peer mapped it
 * ({@link ShmRingFile}). Internal.
 *
 * <h2>Names and the rule</h2>
 * Such a file is named {@code <prefix><pid>@<pid namespace>-<anything>} ({@code @0} where {@code /proc} does not
 * name the namespace) and its maker holds a POSIX lock on it for as long as the file is its own. A lock dies with its
 * process, in whatever pid namespace it ran, so a file at least {@link #LOCK_TEST_MIN_AGE} old that no process holds
 * is a dead process's. Where the file system cannot lock, a file of this pid namespace is judged by its pid, and one
 * of another (or an unknown) namespace by its age ({@link #FOREIGN_AGE}). A name without {@code @} (a pool temporary
 * of an older build, which took no lock) is judged by its pid. Files of this very process are never tested: a test
 * opens and closes the file, and closing any descriptor of a file drops every POSIX lock this process holds on it.
 *
 * <p>Threads: any. Best effort: a file that cannot be judged is left.
 */
final class StaleFiles {

    /** {@code @} and this process's pid namespace ({@link Bootstrap#OWN_PID_NAMESPACE}; 0 where unknown). */
    static final String PID_NAMESPACE = "@" + Bootstrap.OWN_PID_NAMESPACE;
    /**
     * A file younger than this is not judged by its lock: its maker takes the lock just after making it. Its age is its
     * last modification.
     */
    static final Duration LOCK_TEST_MIN_AGE = Duration.ofSeconds(10);
    /**
     * Where locks cannot be tested, a file of another pid namespace is left this long: its pid says nothing here, and
     * a create finishes or fails in far less.
     */
    static final Duration FOREIGN_AGE = Duration.ofDays(1);

    private StaleFiles() {
    }

    /** {@return the owner part of a name this process makes: {@code <pid>@<pid namespace>}} */
    static String owner() {
        return ProcessHandle.current().pid() + PID_NAMESPACE;
    }

    /**
     * Deletes the regular files in {@code dir} whose names start with {@code prefix} and whose maker is gone, by the
     * rule above.
     *
     * @param ownNamespace this process's pid namespace as the caller sees it (0: unknown); tests pass another
     * @return how many files were deleted
     */
    static int sweep(Path dir, String prefix, long ownNamespace) {
        final String ownTag = "@" + ownNamespace;
        final long self = ProcessHandle.current().pid();
        int deleted = 0;
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, p -> p.getFileName().toString().startsWith(prefix))) {
            for (Path p : ds) {
                if (!Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
                    continue; // a maker makes a regular file: a FIFO, device or link here is not one (opening a FIFO blocks)
                }
                final String rest = p.getFileName().toString().substring(prefix.length());
                final int dash = rest.indexOf('-');
                final String maker = dash < 0 ? rest : rest.substring(0, dash); // "<pid>" or "<pid>@<namespace>"
                final int at = maker.indexOf('@');
                try {
                    final long pid = Long.parseLong(at < 0 ? maker : maker.substring(0, at));
                    final boolean dead;
                    if (at < 0) {
                        dead = !runs(pid);
                    } else {
                        final String ns = maker.substring(at);
                        if (ns.equals(ownTag) && pid == self) {
                            // this process's own: testing its lock here would release it (POSIX). Also where the
                            // namespace is unknown (@0): a namesake in another such namespace is then left, not deleted
                            continue;
                        }
                        final boolean ourNamespace = ns.equals(ownTag) && ownNamespace != 0;
                        if (!olderThan(p, LOCK_TEST_MIN_AGE)) {
                            continue;
                        }
                        final Boolean held = lockHeld(p);
                        dead = held != null ? !held : ourNamespace ? !runs(pid) : olderThan(p, FOREIGN_AGE);
                    }
                    if (dead && Files.deleteIfExists(p)) {
                        deleted++;
                    }
                } catch (NumberFormatException | IOException ignored) {
                    // not a name this rule reads, or gone meanwhile
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // an unreadable directory: the caller's own create will say so
        }
        return deleted;
    }

    /**
     * @return whether a process holds a lock on {@code p}; {@code null} if this file system cannot tell. Opened for
     *         reading and writing: on Linux that open returns at once also for a FIFO put at {@code p} after the sweep
     *         saw a regular file there, where a write-only open would wait for a reader
     */
    static Boolean lockHeld(Path p) {
        try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ, StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)) {
            try (FileLock lock = ch.tryLock()) {
                return lock == null;
            } catch (OverlappingFileLockException e) {
                return true; // this JVM holds it
            }
        } catch (IOException | UnsupportedOperationException e) {
            return null;
        }
    }

    /**
     * Takes a lock on a file this process just made, through the channel that will stay open while the file is its
     * own. Where the file system cannot lock, sweeps judge by pid or age instead.
     */
    static void lockQuietly(FileChannel ch) {
        try {
            ch.lock();
        } catch (IOException | UnsupportedOperationException e) {
            // a file system without locks: see the class comment
        }
    }

    private static boolean olderThan(Path p, Duration age) throws IOException {
        final long modified = Files.getLastModifiedTime(p, LinkOption.NOFOLLOW_LINKS).toMillis();
        return System.currentTimeMillis() - modified > age.toMillis();
    }

    /** @return whether a live process has {@code pid} (in this process's pid namespace) */
    static boolean runs(long pid) {
        return pid > 0 && ProcessHandle.of(pid).filter(ProcessHandle::isAlive).isPresent();
    }
}
