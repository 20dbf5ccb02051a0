package io.kvpool.examples.server;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.cuda.ipc.SimulatedIpc;
import io.kvpool.examples.server.link.CopyingPageIo;
import io.kvpool.examples.server.link.DeviceBackend;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.examples.server.link.PageIo;
import io.kvpool.examples.server.role.RoleParts;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.PageChecksums;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.spi.PeerLink;

import java.nio.file.Path;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;
import java.util.function.BiFunction;

/**
 * {@code --device cuda} with host memory standing in for the GPU, so that the example's whole device path runs
 * without one: {@link RoleParts} and {@link io.kvpool.examples.server.role.SeparateRoles} take the device branches, the echo model reaches
 * every page through {@link CopyingPageIo} (as on a device pool, though the copies here are host to host), and
 * KV moves over the real CUDA IPC transport and link state machine on kvpool-cuda's host-memory engine
 * ({@link SimulatedIpc}). What it cannot stand in for is the GPU itself — {@code DevicePageStorage}, the
 * checksum kernel, the JCuda engine — which {@link DeviceRolesGpuTest} runs on a device.
 *
 * <pre>
 *                      SimulatedDevice                         (DeviceBackend.CUDA)
 *   prefill storage    HostPageStorage                         (DevicePageStorage)
 *   decode storage     MappedPageStorage work-dir/device.pool  (DevicePageStorage)
 *   checksums          PageChecksums.HOST                      (DeviceChecksums)
 *   page io            CopyingPageIo over hostPage copies      (CopyingPageIo over readPage/writePage)
 *   listen / connect   CUDA IPC, host-memory engine            (CUDA IPC, JCuda engine)
 * </pre>
 */
final class SimulatedDevice implements DeviceBackend {

    /** The decode pool's file in the work directory (a shm decode role's is {@code decode.pool}). */
    static final String POOL_FILE = "device.pool";

    /** The storages this backend made: only their pools' pages are reached through copies. */
    private final Set<PageStorage> mine = Collections.synchronizedSet(Collections.newSetFromMap(new IdentityHashMap<>()));

    /** Runs a role process ({@code KvServerMain}'s arguments) with this backend behind {@code --device cuda}. */
    public static void main(String[] args) throws Exception {
        DeviceBackend.use(new SimulatedDevice());
        KvServerMain.main(args);
    }

    private BiFunction<KvLayout, Integer, PageStorage> remembered(BiFunction<KvLayout, Integer, PageStorage> f) {
        return (l, n) -> {
            final PageStorage s = f.apply(l, n);
            mine.add(s);
            return s;
        };
    }

    @Override
    public BiFunction<KvLayout, Integer, PageStorage> prefillStorage() {
        return remembered(HostPageStorage::allocate);
    }

    @Override
    public BiFunction<KvLayout, Integer, PageStorage> decodeStorage(Path workDir) {
        final Path file = workDir.resolve(POOL_FILE);
        return remembered((l, n) -> MappedPageStorage.create(file, l, n));
    }

    @Override
    public PageChecksums checksums() {
        return PageChecksums.HOST;
    }

    @Override
    public PageIo pageIo(KvPool pool) {
        final PageStorage s = pool.storage();
        if (!mine.contains(s)) {
            return null;
        }
        return new CopyingPageIo(pool.layout(), (slot, buffer) -> buffer.copyFrom(s.hostPage(slot)),
            (slot, buffer) -> s.hostPage(slot).copyFrom(buffer));
    }

    @Override
    public LinkSource listen(Path socket) {
        return LinkSource.cudaIpc(SimulatedIpc.listen(socket));
    }

    @Override
    public PeerLink connect(Path socket) {
        return SimulatedIpc.connect(socket);
    }

    @Override
    public String toString() {
        return "simulated (host memory)";
    }
}
