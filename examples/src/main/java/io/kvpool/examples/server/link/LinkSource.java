package io.kvpool.examples.server.link;

import io.kvpool.cuda.ipc.CudaIpcListener;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.spi.PeerLink;

import java.util.Objects;
import java.util.function.Supplier;

/**
 * Where the decode role's links from prefill come from: a shared-memory listener ({@link #shm}), a CUDA IPC
 * listener ({@link #cudaIpc}) or a UCX acceptor ({@link UcxAcceptor}). Polled on the decode role's duty thread.
 */
public interface LinkSource extends AutoCloseable {

    /**
     * Never blocks.
     *
     * @return a link whose transport bootstrap finished (ready for the transfer handshake), or {@code null}
     */
    PeerLink accept();

    /** @return where links arrive, for messages */
    String describe();

    /** Stops accepting; links already accepted stay open (their owner closes them). Idempotent. */
    @Override
    void close();

    /** @return the shared-memory listener as a link source */
    static LinkSource shm(ShmListener listener) {
        Objects.requireNonNull(listener, "listener");
        return of("shm:" + listener.socketPath(), listener::accept, listener::close);
    }

    /** @return the CUDA IPC listener as a link source */
    static LinkSource cudaIpc(CudaIpcListener listener) {
        Objects.requireNonNull(listener, "listener");
        return of("cuda-ipc:" + listener.socketPath(), listener::accept, listener::close);
    }

    private static LinkSource of(String where, Supplier<PeerLink> accept, Runnable close) {
        return new LinkSource() {
            @Override
            public PeerLink accept() {
                return accept.get();
            }

            @Override
            public String describe() {
                return where;
            }

            @Override
            public void close() {
                close.run();
            }
        };
    }
}
