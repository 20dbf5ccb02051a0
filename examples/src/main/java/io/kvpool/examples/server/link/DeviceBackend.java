package io.kvpool.examples.server.link;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.cuda.DeviceChecksums;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.cuda.ipc.CudaIpcTransport;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.PageChecksums;
import io.kvpool.transfer.spi.PeerLink;

import java.nio.file.Path;
import java.util.function.BiFunction;

/**
 * Everything {@code --device cuda} takes from kvpool-cuda, in one place: where each role's pages live, who
 * computes page checksums, how the echo model reaches a page, and the KV link between the role processes.
 *
 * <pre>
 *                      CUDA (the only production backend)
 *   prefill storage    DevicePageStorage on device 0
 *   decode storage     DevicePageStorage on device 0 (its arena exported by cuIpcGetMemHandle)
 *   checksums          DeviceChecksums: one kernel launch per run of pages
 *   page io            CopyingPageIo over readPage/writePage
 *   listen / connect   CudaIpcTransport on the work directory's socket
 * </pre>
 *
 * The server's wiring ({@link io.kvpool.examples.server.role.RoleParts}, {@link io.kvpool.examples.server.role.SeparateRoles}, {@link PageIo#of}) goes through
 * {@link #current()} and never names kvpool-cuda's classes itself, so the tests can run the whole
 * {@code --device cuda} path, in separate processes, on a host-memory stand-in for the GPU (the example's tests
 * have a {@code SimulatedDevice}); {@link #CUDA} is what runs everywhere else.
 */
public interface DeviceBackend {

    /** @return the prefill pool's storage factory */
    BiFunction<KvLayout, Integer, PageStorage> prefillStorage();

    /** @return the decode pool's storage factory; its pages are what prefill's links write into */
    BiFunction<KvLayout, Integer, PageStorage> decodeStorage(Path workDir);

    /** @return who checksums pages on both sides */
    PageChecksums checksums();

    /** @return how the echo model reaches {@code pool}'s pages, or {@code null} if the pool's storage is not this backend's */
    PageIo pageIo(KvPool pool);

    /**
     * Binds decode's KV listener on {@code socket}.
     *
     * @throws java.io.UncheckedIOException if the socket cannot be bound
     */
    LinkSource listen(Path socket);

    /**
     * Connects prefill to decode's listener.
     *
     * @throws io.kvpool.transfer.spi.LinkFailedException if nothing listens there
     */
    PeerLink connect(Path socket);

    /** @return the backend of {@code --device cuda}: {@link #CUDA} unless a test replaced it with {@link #use} */
    static DeviceBackend current() {
        return CurrentDevice.get();
    }

    /**
     * Replaces the backend of {@code --device cuda} for this process — for the example's tests only, which run
     * the device path without a GPU; set before the roles are built.
     */
    static void use(DeviceBackend backend) {
        CurrentDevice.set(backend);
    }

    /** The GPU: pools on device 0, checksums by kernel, KV between the role processes by CUDA IPC. */
    DeviceBackend CUDA = new DeviceBackend() {
        @Override
        public BiFunction<KvLayout, Integer, PageStorage> prefillStorage() {
            return DevicePageStorage::allocate;
        }

        @Override
        public BiFunction<KvLayout, Integer, PageStorage> decodeStorage(Path workDir) {
            return DevicePageStorage::allocate;
        }

        @Override
        public PageChecksums checksums() {
            return DeviceChecksums.INSTANCE; // the page checksums by one kernel launch per run of pages
        }

        @Override
        public PageIo pageIo(KvPool pool) {
            return pool.storage() instanceof DevicePageStorage d ? new CopyingPageIo(pool.layout(), d::readPage, d::writePage) : null;
        }

        @Override
        public LinkSource listen(Path socket) {
            return LinkSource.cudaIpc(CudaIpcTransport.listen(socket));
        }

        @Override
        public PeerLink connect(Path socket) {
            return CudaIpcTransport.connect(socket);
        }

        @Override
        public String toString() {
            return "cuda";
        }
    };
}
