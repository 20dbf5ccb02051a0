package io.kvpool.examples.server.role;

import io.kvpool.ContextPolicy;
import io.kvpool.KvPool;
import io.kvpool.KvPoolBuilder;
import io.kvpool.Safeguard;
import io.kvpool.examples.server.config.Deployment;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.DeviceBackend;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSafeguard;
import io.kvpool.transfer.TransferSender;

import java.util.EnumSet;
import java.util.function.BiFunction;

/**
 * The pools and transfer engines of the two roles, built the same way whether the roles share a JVM
 * ({@link InJvmRoles}) or each runs in its own process ({@link SeparateRoles}): the startup capacity check,
 * the {@code --unsafe-…} switches each side takes, the deadlines and the identity both sides announce; with
 * {@code --device cuda} the pools, checksums and page access of the {@link #device()} backend (the GPU through
 * kvpool-cuda: {@link DeviceBackend#CUDA}).
 */
public final class RoleParts {

    /** This jar's build, as both sides announce it without {@code --build-tag}: {@link Deployment#JAR_BUILD}. */
    public static final String BUILD = Deployment.JAR_BUILD;
    /** The model id both sides announce in their HELLO unless {@code --model} names another. */
    public static final String MODEL_ID = Deployment.DEFAULT_MODEL;
    /** The environment both sides announce unless {@code --environment} names another. */
    public static final String ENVIRONMENT = ServerConfig.DEFAULT_ENVIRONMENT;

    private RoleParts() {
    }

    /** @return the backend of {@code --device cuda}: the GPU, or in this example's tests a host-memory stand-in */
    static DeviceBackend device() {
        return DeviceBackend.current();
    }

    /** @return the identity both sides announce: layout, model, environment, build */
    static PeerIdentity identity(ServerConfig cfg) {
        return PeerIdentity.of(cfg.layout(), cfg.model(), cfg.environment(), cfg.build());
    }

    /**
     * The prefill pool: too small for the advertised context, it refuses to start (both numbers) — unless the
     * incident's placeholder switch is on, which clamps instead.
     *
     * @throws io.kvpool.PoolCapacityException if it cannot hold the advertised context
     */
    static KvPool prefillPool(ServerConfig cfg) {
        final EnumSet<Safeguard> off = cfg.unsafePool().isEmpty() ? EnumSet.noneOf(Safeguard.class) : EnumSet.copyOf(cfg.unsafePool());
        if (cfg.unsafePlaceholderOnOverflow()) {
            off.add(Safeguard.ADMISSION_REJECTION);
        }
        final KvPoolBuilder b = KvPool.builder(cfg.layout()).pages(cfg.prefillPages()).maxContextTokens(cfg.contextTokens())
            .contextPolicy(cfg.unsafePlaceholderOnOverflow() ? ContextPolicy.CLAMP : ContextPolicy.FAIL)
            .unsafeDisable(off.toArray(new Safeguard[0]));
        if (cfg.device() == ServerConfig.Device.CUDA) {
            b.storage(device().prefillStorage());
        }
        return b.build();
    }

    /**
     * The decode pool on the given storage ({@code null}: host memory).
     *
     * @throws io.kvpool.PoolCapacityException if it cannot hold the advertised context
     */
    static KvPool decodePool(ServerConfig cfg, BiFunction<io.kvpool.KvLayout, Integer, PageStorage> storage) {
        final KvPoolBuilder b = KvPool.builder(cfg.layout()).pages(cfg.decodePages()).maxContextTokens(cfg.contextTokens())
            .unsafeDisable(cfg.unsafePool().toArray(new Safeguard[0]));
        if (storage != null) {
            b.storage(storage);
        }
        return b.build();
    }

    /** @return the decode side's engine on {@code pool} */
    static TransferReceiver receiver(ServerConfig cfg, KvPool pool) {
        final TransferReceiver.Builder b = TransferReceiver.builder(pool, identity(cfg))
            .completionTimeout(cfg.transferTimeout()).drainTimeout(cfg.transferTimeout()).heartbeat(cfg.kvHeartbeat())
            .strictBuild(cfg.strictBuild())
            .unsafeDisable(cfg.unsafeTransfer().stream().filter(s -> !s.isSenderSide()).toArray(TransferSafeguard[]::new));
        if (cfg.device() == ServerConfig.Device.CUDA) {
            b.checksums(device().checksums());
        }
        return b.build();
    }

    /** @return the prefill side's engine on {@code pool} */
    static TransferSender sender(ServerConfig cfg, KvPool pool) {
        final TransferSender.Builder b = TransferSender.builder(pool, identity(cfg))
            .drainDeadline(cfg.transferTimeout()).descriptorTimeout(cfg.transferTimeout()).heartbeat(cfg.kvHeartbeat())
            .strictBuild(cfg.strictBuild())
            .unsafeDisable(cfg.unsafeTransfer().stream().filter(TransferSafeguard::isSenderSide).toArray(TransferSafeguard[]::new));
        if (cfg.device() == ServerConfig.Device.CUDA) {
            b.checksums(device().checksums());
        }
        return b.build();
    }
}
