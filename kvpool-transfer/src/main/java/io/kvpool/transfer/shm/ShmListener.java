package io.kvpool.transfer.shm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;

/**
 * The receiver's end of the shared-memory transport: a Unix domain socket that accepts sender links
 * without blocking ({@link ShmTransport#listen}). Not thread-safe: one owner thread calls {@link #accept}.
 */
public final class ShmListener implements AutoCloseable {

    private final Path socketPath;
    /** The socket file's key (device and inode) once bound, or {@code null} where the file system has none. */
    private Object socketFile;
    private final MappedPageStorage pool;
    private final ServerSocketChannel server;
    /** A connection still in its bootstrap, and when it was accepted ({@code System.nanoTime}). */
    private record Pending(ShmLink link, long since) {
    }

    private final List<Pending> pending = new ArrayList<>();
    /** How long a connection may take to send its bootstrap before it is dropped (tests shorten it). */
    long bootstrapTimeoutNanos = java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
    /**
     * Where control rings are created for peers that speak them: the socket's own directory, which every peer that
     * reaches the socket can reach too (a private /dev/shm in a container would not be); {@code null} keeps frames on
     * the socket (tests).
     */
    Path ringDirectory;
    private String lastRejection;
    private boolean closed;

    /** Takes the next waiting connection, or {@code null} if none waits. */
    interface Acceptor {
        SocketChannel accept() throws IOException;
    }

    /** The server socket's accept (tests make it fail). */
    Acceptor acceptor;

    /** A step of the listener's set-up that may fail (tests make the one after the bind fail). */
    interface SetUpStep {
        void run() throws IOException;
    }

    /** @param pool the pool file exposed to every peer, or {@code null} for control frames only ({@link ShmTransport#listen(Path)}) */
    ShmListener(Path socketPath, MappedPageStorage pool) {
        this(socketPath, pool, () -> { });
    }

    /**
     * As {@link #ShmListener(Path, MappedPageStorage)}; {@code afterBind} runs right after the bind. If a step after
     * the bind fails, the socket is closed and the file the bind created is deleted: a failed listen leaves nothing.
     */
    ShmListener(Path socketPath, MappedPageStorage pool, SetUpStep afterBind) {
        this.socketPath = Objects.requireNonNull(socketPath, "socketPath");
        this.pool = pool;
        this.ringDirectory = socketPath.toAbsolutePath().getParent();
        if (pool != null && !pool.isOwner()) {
            throw new IllegalArgumentException("a listener exposes the pool file it created; " + pool + " is a mapping of another's");
        }
        try {
            server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
            boolean bound = false;
            try {
                server.bind(UnixDomainSocketAddress.of(socketPath));
                bound = true;
                socketFile = fileKey(socketPath); // the file the bind made: close() deletes that one only
                afterBind.run();
                server.configureBlocking(false);
            } catch (IOException | RuntimeException | Error e) {
                if (bound) { // while the socket is open, as close() does: a successor's file is never deleted
                    try {
                        deleteOwnSocketFile();
                    } catch (IOException | RuntimeException deleting) {
                        e.addSuppressed(deleting);
                    }
                }
                try {
                    server.close();
                } catch (IOException | RuntimeException closing) {
                    e.addSuppressed(closing);
                }
                throw e;
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot listen on unix socket " + socketPath + ": " + e.getMessage(), e);
        }
        acceptor = server::accept;
    }

    /**
     * Accepts waiting connections and advances their bootstrap exchange. Never blocks.
     *
     * @return a link whose peer has sent its bootstrap (pid known, our pool file announced to it), or
     *         {@code null} if none is ready yet; a peer whose bootstrap is invalid is dropped (see
     *         {@link #lastRejection()})
     * @throws IllegalStateException if the listener is closed
     */
    public ShmLink accept() {
        if (closed) {
            throw new IllegalStateException("shm listener on " + socketPath + " is closed");
        }
        // first the connections already here: an accept that fails (no file descriptor left) must not stop them from
        // being handed out or timed out, which frees descriptors
        final ShmLink ready = advancePending();
        if (ready != null) {
            return ready;
        }
        try {
            for (SocketChannel c; (c = acceptor.accept()) != null; ) {
                try {
                    c.configureBlocking(false);
                    pending.add(new Pending(new ShmLink(c, socketPath.toString(), pool, false, ringDirectory), System.nanoTime()));
                } catch (IOException | RuntimeException | Error e) {
                    closeQuietly(c, e); // accepted but not kept: its descriptor must not leak
                    throw e;
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("accept on unix socket " + socketPath + " failed: " + e.getMessage(), e);
        }
        return advancePending();
    }

    /** Closes a channel this listener gives up on; a failure to close is added to {@code cause}. */
    private static void closeQuietly(SocketChannel c, Throwable cause) {
        try {
            c.close();
        } catch (IOException | RuntimeException e) {
            cause.addSuppressed(e);
        }
    }

    /**
     * Advances each connection's bootstrap: drops one that failed or timed out.
     *
     * @return the first that is ready (removed from the waiting ones), or {@code null}
     */
    private ShmLink advancePending() {
        final long now = System.nanoTime();
        for (Iterator<Pending> it = pending.iterator(); it.hasNext(); ) {
            final Pending p = it.next();
            final ShmLink link = p.link();
            link.progress();
            if (link.failureReason() != null) {
                it.remove();
                lastRejection = link.failureReason();
                link.close();
            } else if (link.isReady()) {
                it.remove();
                return link;
            } else if (now - p.since() > bootstrapTimeoutNanos) {
                // a connection that never says who it is would hold its socket here for ever
                it.remove();
                lastRejection = link.describe() + ": no bootstrap within " + bootstrapTimeoutNanos / 1_000_000 + " ms";
                link.close();
            }
        }
        return null;
    }

    /** {@return why the last peer was dropped during its bootstrap, or {@code null}} */
    public String lastRejection() {
        return lastRejection;
    }

    /** {@return the socket path} */
    public Path socketPath() {
        return socketPath;
    }

    /** Stops listening, drops connections still in their bootstrap and deletes the socket file. Idempotent. Accepted links stay open. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        pending.forEach(p -> p.link().close());
        pending.clear();
        try {
            deleteOwnSocketFile();
        } catch (IOException ignored) {
            // gone already, or best effort
        }
        try {
            server.close();
        } catch (IOException ignored) {
            // closing
        }
    }

    /**
     * Deletes the socket file if it is still the one this listener's bind made. A successor listening at the same path
     * (a restarted receiver that cleared it) keeps its own. Call it while the socket is still open, so that the file's
     * inode cannot have been reused by the successor's.
     */
    private void deleteOwnSocketFile() throws IOException {
        final Object now = fileKey(socketPath);
        if (socketFile == null || socketFile.equals(now)) {
            Files.deleteIfExists(socketPath);
        }
    }

    /** @return the file's key (device and inode), {@code null} where the file system gives none */
    private static Object fileKey(Path file) throws IOException {
        return Files.readAttributes(file, java.nio.file.attribute.BasicFileAttributes.class,
            java.nio.file.LinkOption.NOFOLLOW_LINKS).fileKey();
    }
}
