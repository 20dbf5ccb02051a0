package io.kvpool.cuda.ipc;

import io.kvpool.transfer.shm.ShmTransport;
import io.kvpool.transfer.spi.LinkFailedException;

import java.nio.file.Path;
import java.util.Objects;
import java.util.Set;
import java.util.function.Supplier;

/**
 * The CUDA IPC transport: {@link CudaIpcLink}s between a prefill and a decode process on one node whose
 * pools are {@link io.kvpool.cuda.DevicePageStorage}s. The decode side {@link #listen listens} on a Unix
 * domain socket; a prefill side {@link #connect connects}; page writes go from the prefill GPU arena into
 * the decode arena, which the prefill process opens through CUDA IPC.
 *
 * <pre>{@code
 * // decode
 * KvPool pool = KvPool.builder(layout).pages(n).storage(DevicePageStorage::allocate).build();
 * TransferReceiver rx = TransferReceiver.builder(pool, me).checksums(DeviceChecksums.INSTANCE).build();
 * CudaIpcListener listener = CudaIpcTransport.listen(socket);
 * CudaIpcLink link = listener.accept();             // null until a prefill's bootstrap arrived; never blocks
 * int prefill0 = rx.addPeer(link);
 * // prefill
 * TransferSender tx = TransferSender.builder(prefillPool, me).checksums(DeviceChecksums.INSTANCE).build();
 * tx.addPeer(CudaIpcTransport.connect(socket));
 * }</pre>
 * Both pools must live on the same device (this process's primary context of it). Page checksums are computed on
 * the device ({@link io.kvpool.cuda.DeviceChecksums}: the same values as the host's {@code KvChecksum}).
 *
 * <p>Ordering: a put batch runs on the link's own non-blocking stream, so the prefill pages must be
 * complete on the device when they are offered (the stream that computed them synchronized, as every
 * {@link io.kvpool.cuda.DevicePageStorage} call is). On the decode side, the destination pages were
 * prepared by synchronous storage calls before their descriptor left, and the decode side reads them only
 * after the COMPLETION frame, which the prefill sends after a flush saw every batch's event complete.
 */
public final class CudaIpcTransport {
    private CudaIpcTransport() {
    }

    /**
     * Binds a Unix domain socket (the path must not exist yet) for prefill processes to connect to.
     *
     * @param socketPath where to bind
     * @return the listener, which accepts each prefill process as a {@link CudaIpcLink}
     * @throws java.io.UncheckedIOException if the socket cannot be bound
     */
    public static CudaIpcListener listen(Path socketPath) {
        return listen(socketPath, JCudaIpcEngine::new, Set.of());
    }

    /**
     * Connects to a decode process's listener. The bootstrap (pids) completes in {@link CudaIpcLink#poll};
     * frames sent before are queued.
     *
     * @param socketPath the decode process's listening socket
     * @return the link to that process
     * @throws LinkFailedException if nothing listens there
     */
    public static CudaIpcLink connect(Path socketPath) {
        return connect(socketPath, JCudaIpcEngine::new);
    }

    /** With another engine (tests: a host-memory one) and test-only rule breakers (normally none). */
    static CudaIpcListener listen(Path socketPath, Supplier<IpcEngine> engines, Set<CudaIpcLink.Unsafe> unsafe) {
        Objects.requireNonNull(socketPath, "socketPath");
        return new CudaIpcListener(ShmTransport.listen(socketPath), engines, unsafe);
    }

    /** With another engine (tests: a host-memory one). */
    static CudaIpcLink connect(Path socketPath, Supplier<IpcEngine> engines) {
        return new CudaIpcLink(ShmTransport.connect(Objects.requireNonNull(socketPath, "socketPath")), engines, Set.of());
    }
}
