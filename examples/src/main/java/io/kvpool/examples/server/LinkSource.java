package io.kvpool.examples.server;

import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.spi.PeerLink;

import java.util.Objects;

/**
 * Where the decode role's links from prefill come from: a shared-memory listener ({@link #shm}) or a UCX
 * acceptor ({@link UcxAcceptor}). Polled on the decode role's duty thread.
 */
interface LinkSource extends AutoCloseable {

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

    /** @return the listener as a link source */
    static LinkSource shm(ShmListener listener) {
        Objects.requireNonNull(listener, "listener");
        return new LinkSource() {
            @Override
            public PeerLink accept() {
                return listener.accept();
            }

            @Override
            public String describe() {
                return "shm:" + listener.socketPath();
            }

            @Override
            public void close() {
                listener.close();
            }
        };
    }
}
