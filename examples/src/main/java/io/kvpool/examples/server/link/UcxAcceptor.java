package io.kvpool.examples.server.link;

import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.ucx.UcxLink;
import io.kvpool.transfer.ucx.UcxTransport;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The decode role's {@link LinkSource} for UCX: a TCP listener on {@code --kv-address} over which each
 * prefill process and this side exchange UCX worker addresses ({@link UcxTransport#connect}); the links
 * that come out of it are handed to the decode role's duty thread. The exchange runs on a virtual thread
 * per connection, so a peer that stalls its half holds up nobody else (it fails after {@code timeout}).
 * Owns the transport: {@link #close()} closes it too, which must happen after the receiver closed its
 * links and before the pool whose storage UCX registered is closed (the decode role's order).
 */
public final class UcxAcceptor implements LinkSource {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final UcxTransport ucx;
    private final ServerSocket server;
    private final Duration timeout;
    private final ConcurrentLinkedQueue<UcxLink> ready = new ConcurrentLinkedQueue<>();
    private final AtomicInteger accepted = new AtomicInteger();
    private final Thread acceptor;
    private volatile boolean closed;

    /**
     * Binds {@code host:port} (0: any free port, see {@link #port()}) and starts accepting.
     *
     * @param ucx the transport (owned)
     * @throws UncheckedIOException if the address cannot be bound (the transport is closed then)
     */
    public UcxAcceptor(UcxTransport ucx, String host, int port, Duration timeout) {
        this.ucx = Objects.requireNonNull(ucx, "ucx");
        this.timeout = Objects.requireNonNull(timeout, "timeout");
        try {
            server = new ServerSocket();
            server.setReuseAddress(true);
            server.bind(new InetSocketAddress(host, port));
        } catch (IOException e) {
            ucx.close();
            throw new UncheckedIOException("cannot listen for UCX bootstraps on " + host + ":" + port + ": " + e.getMessage(), e);
        }
        acceptor = Thread.ofPlatform().daemon().name("kvpool-ucx-accept").start(this::acceptLoop);
    }

    /** @return the bound port */
    public int port() {
        return server.getLocalPort();
    }

    private void acceptLoop() {
        while (!closed) {
            final Socket s;
            try {
                s = server.accept();
            } catch (IOException e) {
                if (!closed) {
                    LOG.log(System.Logger.Level.WARNING, "decode: UCX bootstrap listener failed: " + e);
                }
                return;
            }
            final int n = accepted.incrementAndGet();
            Thread.ofVirtual().name("kvpool-ucx-bootstrap-" + n).start(() -> bootstrap(s, n));
        }
    }

    private void bootstrap(Socket s, int n) {
        try (s) {
            final UcxLink link = ucx.connect(s, "decode←prefill-" + n, timeout);
            if (closed) {
                link.close();
                return;
            }
            ready.add(link);
        } catch (IOException | RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "decode: UCX bootstrap with " + s.getRemoteSocketAddress() + " failed: " + e.getMessage());
        }
    }

    @Override
    public PeerLink accept() {
        return ready.poll();
    }

    @Override
    public String describe() {
        return "ucx:" + server.getInetAddress().getHostAddress() + ":" + port();
    }

    /** Stops listening, closes links nobody took, then the transport. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            server.close();
        } catch (IOException ignored) {
            // closing
        }
        try {
            acceptor.join(Duration.ofSeconds(2));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (UcxLink l; (l = ready.poll()) != null; ) {
            l.close();
        }
        ucx.close();
    }
}
