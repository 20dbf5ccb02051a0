/**
 * kvpool's transfer protocol: moving a request's KV from a prefill pool to a decode pool with a drain
 * handshake, quarantine, integrity checks and a peer handshake, over an in-JVM simulation, shared memory
 * or UCX.
 *
 * <p>Exported: the engines ({@code io.kvpool.transfer}), the transport SPI and the three transports.
 * {@code io.kvpool.transfer.wire}, the frame codec, is exported to kvpool-cuda only, whose CUDA IPC link
 * speaks the same frames.
 */
// io.kvpool.cuda is compiled after this module; agrona and jucx are automatic modules (no descriptor)
@SuppressWarnings({"module", "requires-automatic"})
module io.kvpool.transfer {
    requires transitive io.kvpool;
    requires org.agrona;
    requires static jucx; // optional: the UCX transport only

    exports io.kvpool.transfer;
    exports io.kvpool.transfer.spi;
    exports io.kvpool.transfer.sim;
    exports io.kvpool.transfer.shm;
    exports io.kvpool.transfer.ucx;
    exports io.kvpool.transfer.wire to io.kvpool.cuda;
}
