package io.kvpool.transfer.shm;

import io.kvpool.transfer.spi.LinkFailedException;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.util.Objects;
import java.util.function.Function;

/**
 * The shared-memory transport: {@link ShmLink}s between processes on one host. The receiver (decode)
 * keeps its pool in a {@link MappedPageStorage} and {@link #listen listens} on a Unix domain socket;
 * a sender (prefill) {@link #connect connects}, learns the pool file's path in the bootstrap exchange,
 * maps it and writes pages with plain memory copies. Control frames go through two rings in a file the listener
 * creates next to the socket for each link ({@link ShmLink}); where it cannot, they stay on the socket.
 *
 * <pre>{@code
 * // receiver
 * KvPool pool = KvPool.builder(layout).pages(n).storage((l, p) -> MappedPageStorage.create(file, l, p)).build();
 * ShmListener listener = ShmTransport.listen(socket, (MappedPageStorage) pool.storage());
 * ShmLink link = listener.accept();           // null until a sender's bootstrap arrived; never blocks
 * // sender
 * ShmLink link = ShmTransport.connect(socket); // hand it to TransferSender.addPeer at once: its duty cycle polls it
 * }</pre>
 */
public final class ShmTransport {
    private ShmTransport() {
    }

    /**
     * Binds a Unix domain socket (the path must not exist yet) that exposes {@code pool} to the peers
     * that connect.
     *
     * @param socketPath where to bind
     * @param pool       the receiver pool's storage, created by {@link MappedPageStorage#create}
     * @return the listener
     * @throws java.io.UncheckedIOException if the socket cannot be bound
     */
    public static ShmListener listen(Path socketPath, MappedPageStorage pool) {
        return new ShmListener(socketPath, pool);
    }

    /**
     * Binds a Unix domain socket for links that carry control frames only: this side exposes no pool
     * file (its accepted links' {@link ShmLink#register} refuses). For transports that move the pages
     * another way but reuse this framing, the bootstrap's pid check and {@link ShmLink#peerProcessGone()}
     * (the CUDA IPC transport of {@code kvpool-cuda}).
     *
     * @param socketPath where to bind (must not exist yet)
     * @return the listener
     * @throws java.io.UncheckedIOException if the socket cannot be bound
     */
    public static ShmListener listen(Path socketPath) {
        return new ShmListener(socketPath, null);
    }

    /**
     * Connects as a sender that exposes no pool of its own. Never blocks: the connection does not wait for the
     * listener to accept, and the bootstrap exchange completes in {@link ShmLink#poll} ({@link ShmLink#isReady()}).
     *
     * @param socketPath the receiver's socket
     * @return the link
     * @throws LinkFailedException if nothing listens there, or the listener's backlog of connections it has not
     *                             accepted yet is full
     */
    public static ShmLink connect(Path socketPath) {
        return connect(socketPath, null);
    }

    /**
     * Connects, optionally exposing a pool of this side to the peer too.
     *
     * @param socketPath the peer's socket
     * @param localPool  this side's pool (created by {@link MappedPageStorage#create}), or {@code null}
     * @return the link
     * @throws LinkFailedException as {@link #connect(Path)} does
     */
    public static ShmLink connect(Path socketPath, MappedPageStorage localPool) {
        Objects.requireNonNull(socketPath, "socketPath");
        return connectWith(socketPath, ch -> new ShmLink(ch, socketPath.toString(), localPool, true));
    }

    /**
     * Connects and hands the channel to {@code link}. The channel is closed if the connect or {@code link} fails:
     * what {@code link} throws is rethrown as it is, after the close.
     */
    static ShmLink connectWith(Path socketPath, Function<SocketChannel, ShmLink> link) {
        SocketChannel ch = null;
        try {
            ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            // non-blocking first: a unix-socket connect then completes at once or fails, EAGAIN when the listener's
            // backlog is full (a blocking one would wait for an accept that may never come, stalling the caller)
            ch.configureBlocking(false);
            if (!ch.connect(UnixDomainSocketAddress.of(socketPath))) {
                throw new IOException("the connect did not complete at once");
            }
            return link.apply(ch);
        } catch (IOException e) {
            closeAfter(ch, e);
            throw new LinkFailedException("cannot connect to shm listener at " + socketPath + ": " + e, e);
        } catch (RuntimeException | Error e) { // a link that cannot be made (its bootstrap refused): no socket stays open
            closeAfter(ch, e);
            throw e;
        }
    }

    /** Closes {@code ch} (if any) of a connect that failed with {@code failure}, adding a failed close to it. */
    private static void closeAfter(SocketChannel ch, Throwable failure) {
        if (ch != null) {
            try {
                ch.close();
            } catch (IOException | RuntimeException closing) {
                failure.addSuppressed(closing);
            }
        }
    }
}
