package io.kvpool.cuda.ipc;

import io.kvpool.transfer.shm.ShmLink;
import io.kvpool.transfer.shm.ShmListener;

import java.nio.file.Path;
import java.util.Objects;
import java.util.Set;
import java.util.function.Supplier;

/**
 * The decode side's end of the CUDA IPC transport: a Unix domain socket (the shared-memory transport's
 * control-only {@link ShmListener}) that accepts prefill links without blocking
 * ({@link CudaIpcTransport#listen}). Not thread-safe: one owner thread calls {@link #accept}.
 */
public final class CudaIpcListener implements AutoCloseable {

    private final ShmListener control;
    private final Supplier<IpcEngine> engines;
    private final Set<CudaIpcLink.Unsafe> unsafe;

    CudaIpcListener(ShmListener control, Supplier<IpcEngine> engines, Set<CudaIpcLink.Unsafe> unsafe) {
        this.control = Objects.requireNonNull(control, "control");
        this.engines = Objects.requireNonNull(engines, "engines");
        this.unsafe = Set.copyOf(unsafe);
    }

    /**
     * Accepts waiting connections and advances their bootstrap. Never blocks.
     *
     * @return a link whose peer's pid is known (and is a live process this side can see), or {@code null}
     *         if none is ready yet; a peer whose bootstrap is invalid is dropped ({@link #lastRejection()})
     * @throws IllegalStateException if the listener is closed
     */
    public CudaIpcLink accept() {
        final ShmLink l = control.accept();
        return l == null ? null : new CudaIpcLink(l, engines, unsafe);
    }

    /** {@return why the last peer was dropped during its bootstrap, or {@code null}} */
    public String lastRejection() {
        return control.lastRejection();
    }

    /** {@return the socket path} */
    public Path socketPath() {
        return control.socketPath();
    }

    /** Stops listening and deletes the socket file. Idempotent. Accepted links stay open. */
    @Override
    public void close() {
        control.close();
    }
}
