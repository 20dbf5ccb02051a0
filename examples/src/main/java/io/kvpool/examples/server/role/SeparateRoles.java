package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.link.DeviceBackend;
import io.kvpool.examples.server.link.FaultyLink;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.examples.server.link.UcxAcceptor;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.ucx.UcxTransport;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;

/**
 * Builds one role for a process of its own ({@code --role prefill} or {@code --role decode}), with the
 * transport between the two processes that {@code --transport} names:
 *
 * <pre>
 *   shm:  decode: KvPool on MappedPageStorage(work-dir/decode.pool) ─ ShmListener(work-dir/transfer.sock)
 *         prefill: ShmTransport.connect(work-dir/transfer.sock) → maps the pool file, writes pages with memcpy
 *   ucx:  decode: KvPool on host memory ─ UcxAcceptor(--kv-address) ─ UcxTransport (tcp)
 *         prefill: TCP to --kv-address → UcxTransport.connect → one-sided puts into decode's registered pages
 *   --device cuda: both pools on device 0 (DevicePageStorage), checksums on the device (DeviceChecksums)
 *         decode: CudaIpcListener(work-dir/transfer.sock) exports its arena (cuIpcGetMemHandle)
 *         prefill: CudaIpcTransport.connect(work-dir/transfer.sock) → opens it, one kernel launch per put batch
 * </pre>
 * Unlike {@link InJvmRoles} there are no shared {@link io.kvpool.examples.server.link.LocalGrants}: a registration cannot be revoked across
 * processes (shm, CUDA IPC), so a quarantine ends only on the transport's teardown proof — for shm and CUDA IPC,
 * the prefill process is gone; for UCX, the link's worker is closed.
 */
public final class SeparateRoles {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");
    /** Longest a UCX worker-address exchange may take. */
    private static final Duration UCX_BOOTSTRAP = Duration.ofSeconds(5);

    private SeparateRoles() {
    }

    /**
     * A decode role and where it takes prefill's links.
     *
     * @param role     the role
     * @param kvListen where prefill connects ({@code shm:<socket>} or {@code ucx:<host>:<port>})
     */
    public record Decode(DecodeRole role, String kvListen) {
    }

    /** @return the transfer socket in {@code dir} */
    public static Path socketPath(Path dir) {
        final Path socket = dir.resolve("transfer.sock");
        if (socket.toString().length() > 100) {
            throw new IllegalArgumentException("socket path " + socket + " is " + socket.toString().length()
                + " characters; a Unix socket path must stay under 108: use a shorter --work-dir");
        }
        return socket;
    }

    /**
     * Builds the decode role of a process of its own.
     *
     * @throws io.kvpool.PoolCapacityException if the pool cannot hold the advertised context
     * @throws IllegalStateException           if another decode role already listens in the work directory
     * @throws UncheckedIOException            if the work directory, pool file or listener cannot be made
     * @throws io.kvpool.transfer.ucx.UcxUnavailableException with {@code --transport ucx} where UCX cannot load
     */
    public static Decode decode(ServerConfig cfg) {
        if (cfg.device() == ServerConfig.Device.CUDA) {
            return decodeCuda(cfg);
        }
        return switch (cfg.topology().transport()) {
            case SHM -> decodeShm(cfg);
            case UCX -> decodeUcx(cfg);
        };
    }

    private static Path workDir(ServerConfig cfg) {
        try {
            return Files.createDirectories(cfg.workDir());
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create the work directory " + cfg.workDir() + ": " + e.getMessage(), e);
        }
    }

    /** Device pools ({@link RoleParts#device()}): the decode pool there, prefill's links through its transport on the work directory's socket. */
    private static Decode decodeCuda(ServerConfig cfg) {
        final Path dir = workDir(cfg);
        final Path socket = socketPath(dir);
        clearStaleSocket(socket);
        final DeviceBackend device = RoleParts.device();
        final KvPool pool = RoleParts.decodePool(cfg, device.decodeStorage(dir));
        LinkSource source = null;
        try {
            final TransferReceiver receiver = RoleParts.receiver(cfg, pool);
            source = device.listen(socket);
            return new Decode(new DecodeRole(pool, receiver, source, null, cfg.tokenDelay(), DecodeRole.reservationTtl(cfg), () -> { }), source.describe());
        } catch (RuntimeException e) {
            if (source != null) {
                source.close();
            }
            pool.close();
            throw e;
        }
    }

    private static Decode decodeShm(ServerConfig cfg) {
        final Path dir = workDir(cfg);
        final Path socket = socketPath(dir);
        final Path poolFile = dir.resolve("decode.pool");
        clearStaleSocket(socket);
        final KvPool pool = RoleParts.decodePool(cfg, (l, n) -> MappedPageStorage.create(poolFile, l, n));
        ShmListener listener = null;
        try {
            final TransferReceiver receiver = RoleParts.receiver(cfg, pool);
            listener = ShmTransport.listen(socket, (MappedPageStorage) pool.storage());
            final DecodeRole role = new DecodeRole(pool, receiver, LinkSource.shm(listener), null, cfg.tokenDelay(), DecodeRole.reservationTtl(cfg),
                () -> InJvmRoles.deleteQuietly(null, socket, poolFile));
            return new Decode(role, "shm:" + socket);
        } catch (RuntimeException e) {
            if (listener != null) {
                listener.close();
            }
            pool.close();
            throw e;
        }
    }

    /** A socket file left by a decode process that died is removed; one that still answers stops this one. */
    static void clearStaleSocket(Path socket) {
        if (!Files.exists(socket)) {
            return;
        }
        try (SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(socket));
            throw new IllegalStateException("another decode role already listens on " + socket + "; give this one another --work-dir");
        } catch (IOException nobody) {
            try {
                Files.deleteIfExists(socket);
                LOG.log(System.Logger.Level.INFO, "decode: removed the stale transfer socket " + socket + " (" + nobody.getMessage() + ")");
            } catch (IOException e) {
                throw new UncheckedIOException("cannot remove the stale transfer socket " + socket + ": " + e.getMessage(), e);
            }
        }
    }

    private static Decode decodeUcx(ServerConfig cfg) {
        final KvPool pool = RoleParts.decodePool(cfg, null);
        UcxAcceptor acceptor = null;
        try {
            final TransferReceiver receiver = RoleParts.receiver(cfg, pool);
            acceptor = new UcxAcceptor(UcxTransport.open("decode", cfg.ucxKeepalive()), cfg.topology().kvHost(), cfg.topology().kvPort(), UCX_BOOTSTRAP);
            final DecodeRole role = new DecodeRole(pool, receiver, acceptor, null, cfg.tokenDelay(), DecodeRole.reservationTtl(cfg), () -> { });
            return new Decode(role, "ucx:" + cfg.topology().kvHost() + ":" + acceptor.port());
        } catch (RuntimeException e) {
            if (acceptor != null) {
                acceptor.close();
            }
            pool.close();
            throw e;
        }
    }

    /**
     * Builds the prefill role of a process of its own; it connects to decode (off its duty thread), and again
     * after every lost link, so decode may start before or after it.
     *
     * @throws io.kvpool.PoolCapacityException if the pool cannot hold the advertised context
     * @throws io.kvpool.transfer.ucx.UcxUnavailableException with {@code --transport ucx} where UCX cannot load
     */
    public static PrefillRole prefill(ServerConfig cfg) {
        final KvPool pool = RoleParts.prefillPool(cfg);
        UcxTransport ucx = null;
        try {
            final TransferSender sender = RoleParts.sender(cfg, pool);
            final AtomicInteger links = new AtomicInteger();
            final Supplier<PeerLink> connector;
            if (cfg.device() == ServerConfig.Device.CUDA) {
                final Path socket = socketPath(cfg.workDir());
                final DeviceBackend device = RoleParts.device();
                connector = () -> new FaultyLink(device.connect(socket), null, cfg.faults(), cfg.gate(), links.getAndIncrement());
            } else if (cfg.topology().transport() == Topology.Transport.SHM) {
                final Path socket = socketPath(cfg.workDir());
                connector = () -> new FaultyLink(ShmTransport.connect(socket), null, cfg.faults(), cfg.gate(), links.getAndIncrement());
            } else {
                final UcxTransport transport = ucx = UcxTransport.open("prefill", cfg.ucxKeepalive());
                final InetSocketAddress decode = new InetSocketAddress(cfg.topology().kvHost(), cfg.topology().kvPort());
                connector = () -> new FaultyLink(connectUcx(transport, decode, links.get(), cfg.kvConnectTimeout()), null,
                    cfg.faults(), cfg.gate(), links.getAndIncrement());
            }
            return new PrefillRole(pool, sender, connector, cfg.reconnectDelay(), cfg.transferTimeout(), ucx);
        } catch (RuntimeException e) {
            if (ucx != null) {
                ucx.close();
            }
            pool.close();
            throw e;
        }
    }

    /**
     * The TCP connect to decode's bootstrap listener gives up after {@code connectTimeout}, short: an attempt made
     * while the path is cut must not still be waiting for a SYN retransmission (1 s, then 3 s, 7 s …) when the path
     * heals; the next attempt, {@code --reconnect-ms} later, sends a fresh SYN.
     */
    private static PeerLink connectUcx(UcxTransport ucx, InetSocketAddress decode, int n, Duration connectTimeout) {
        try (Socket s = new Socket()) {
            s.connect(decode, (int) connectTimeout.toMillis());
            return ucx.connect(s, "prefill-" + n + "→decode", UCX_BOOTSTRAP);
        } catch (IOException e) {
            throw new LinkFailedException("cannot reach decode's UCX bootstrap listener at " + decode + ": " + e.getMessage(), e);
        }
    }
}
