package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.link.FaultyLink;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.examples.server.link.LocalGrants;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.stream.Stream;

/**
 * The prefill and decode roles in this JVM, each with its own pool and transfer engine on its own
 * thread, linked through the shared-memory transport exactly as two processes would be (a Unix socket
 * for control frames; the decode pool in a mapped file that prefill writes) — with a {@link LocalGrants}
 * table shared by both ends so that revoking a registration is proven here (see there).
 *
 * <pre>
 *   PrefillRole: KvPool (host) ─ TransferSender ─ FaultyLink ─ ShmLink ──unix socket──┐
 *   DecodeRole:  KvPool (MappedPageStorage: work-dir/decode.pool) ─ TransferReceiver ─ GrantingLink ─ ShmListener
 * </pre>
 */
public final class InJvmRoles extends RolePair<PrefillRole, DecodeRole> {

    /** The model id both sides announce in their HELLO. */
    public static final String MODEL_ID = RoleParts.MODEL_ID;
    /** The environment both sides announce. */
    public static final String ENVIRONMENT = RoleParts.ENVIRONMENT;

    private InJvmRoles(PrefillRole prefill, DecodeRole decode) {
        super(prefill, decode);
    }

    /**
     * Builds both pools (each runs the startup capacity check), both engines and the link, and waits up to
     * {@code linkTimeout} for the link's handshake.
     *
     * @throws io.kvpool.PoolCapacityException if a pool cannot hold the advertised context (names both numbers)
     * @throws IllegalStateException           if the link does not come up in time
     * @throws IllegalArgumentException        for a configuration this class cannot run ({@code --device cuda}: separate processes)
     */
    public static InJvmRoles start(ServerConfig cfg, Duration linkTimeout) {
        if (cfg.device() != ServerConfig.Device.HOST) {
            throw new IllegalArgumentException("--device " + cfg.device().name().toLowerCase(java.util.Locale.ROOT)
                + " needs the roles in separate processes: a process cannot open its own CUDA IPC handle");
        }
        if (cfg.topology().role() != Topology.Role.ALL) {
            throw new IllegalArgumentException("InJvmRoles runs both roles in this JVM; the configuration asks for --role "
                + cfg.topology().role().flag() + " (see SeparateRoles / RoleServer)");
        }
        // the prefill pool first: a pool too small for the advertised context stops everything here
        final KvPool prefillPool = RoleParts.prefillPool(cfg);
        Path dir = null;
        final boolean own = cfg.workDir() == null;
        KvPool decodePool = null;
        ShmListener listener = null;
        DecodeRole decode = null;
        try {
            dir = own ? Files.createTempDirectory(tempRoot(), "kvpool-server") : Files.createDirectories(cfg.workDir());
            final Path poolFile = dir.resolve("decode.pool");
            final Path socket = SeparateRoles.socketPath(dir);
            // before the pool file is made anew: a server still running in this directory keeps its pool and socket
            SeparateRoles.clearStaleSocket(socket);
            decodePool = RoleParts.decodePool(cfg, (l, n) -> MappedPageStorage.create(poolFile, l, n));
            final TransferReceiver receiver = RoleParts.receiver(cfg, decodePool);
            listener = ShmTransport.listen(socket, (MappedPageStorage) decodePool.storage());
            final LocalGrants grants = new LocalGrants();
            final Path cleanupDir = own ? dir : null;
            decode = new DecodeRole(decodePool, receiver, LinkSource.shm(listener), grants, cfg.tokenDelay(), DecodeRole.reservationTtl(cfg),
                () -> deleteQuietly(cleanupDir, socket, poolFile));
            final TransferSender sender = RoleParts.sender(cfg, prefillPool);
            final java.util.concurrent.atomic.AtomicInteger linkNumber = new java.util.concurrent.atomic.AtomicInteger();
            final PrefillRole prefill = new PrefillRole(prefillPool, sender,
                () -> new FaultyLink(ShmTransport.connect(socket), grants, cfg.faults(), cfg.gate(), linkNumber.getAndIncrement()),
                cfg.reconnectDelay(), cfg.transferTimeout());
            final InJvmRoles roles = new InJvmRoles(prefill, decode);
            roles.awaitLinked(linkTimeout);
            return roles;
        } catch (IOException e) {
            closeQuietly(decode, prefillPool, decodePool, listener);
            throw new UncheckedIOException("cannot create the server's work directory: " + e.getMessage(), e);
        } catch (RuntimeException e) {
            closeQuietly(decode, prefillPool, decodePool, listener);
            if (own && dir != null) {
                deleteQuietly(dir);
            }
            throw e;
        }
    }

    static Path tempRoot() {
        final Path shm = Path.of("/dev/shm");
        return Files.isDirectory(shm) && Files.isWritable(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir"));
    }

    private void awaitLinked(Duration timeout) {
        final long end = System.nanoTime() + timeout.toNanos();
        while (!(prefill.linkUp() && decode.ready())) {
            if (System.nanoTime() - end > 0) {
                close();
                throw new IllegalStateException("the prefill→decode link did not come up within " + timeout.toMillis() + " ms: "
                    + prefill + ", " + decode);
            }
            try {
                Thread.sleep(1);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                close();
                throw new IllegalStateException("interrupted while waiting for the prefill→decode link", e);
            }
        }
    }

    /** @return the prefill role's pool (for accounting checks) */
    public KvPool prefillPool() {
        return prefill.pool();
    }

    /** @return the decode role's pool (for accounting checks) */
    public KvPool decodePool() {
        return decode.pool();
    }

    /** @return the decode side's transfer metrics */
    public io.kvpool.transfer.ReceiverMetrics receiverMetrics() {
        return decode.metrics();
    }

    private static void closeQuietly(AutoCloseable... cs) {
        for (AutoCloseable c : cs) {
            if (c != null) {
                try {
                    c.close();
                } catch (Exception ignored) {
                    // failing already
                }
            }
        }
    }

    static void deleteQuietly(Path dir, Path... files) {
        try {
            for (Path f : files) {
                Files.deleteIfExists(f);
            }
            if (dir != null && Files.isDirectory(dir)) {
                try (Stream<Path> s = Files.walk(dir)) {
                    s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // best effort
        }
    }
}
