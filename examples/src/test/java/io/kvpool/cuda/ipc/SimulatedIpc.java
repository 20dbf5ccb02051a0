package io.kvpool.cuda.ipc;

import java.nio.file.Path;
import java.util.Set;

/**
 * The real {@link CudaIpcTransport} (control socket, bootstrap, {@link CudaIpcLink}'s state machine, the
 * peer-process-gone teardown proof) with kvpool-cuda's host-memory engine in place of the GPU: the decode
 * side's pool is a {@link io.kvpool.transfer.shm.MappedPageStorage} file that the prefill process's engine
 * maps, as {@code cuIpcOpenMemHandle} maps a device arena. For the example's tests only; it lives in this
 * package because the engine seam is package-private.
 */
public final class SimulatedIpc {

    private SimulatedIpc() {
    }

    /** @return a listener as {@link CudaIpcTransport#listen(Path)} binds, on the host-memory engine */
    public static CudaIpcListener listen(Path socket) {
        return CudaIpcTransport.listen(socket, SimulatedIpc::engine, Set.of());
    }

    /** @return a link as {@link CudaIpcTransport#connect(Path)} makes, on the host-memory engine */
    public static CudaIpcLink connect(Path socket) {
        return CudaIpcTransport.connect(socket, SimulatedIpc::engine);
    }

    private static IpcEngine engine() {
        final FakeIpcEngine e = new FakeIpcEngine();
        e.autoRun = true; // a fast device: a batch's copy runs when its completion is first queried
        return e;
    }
}
