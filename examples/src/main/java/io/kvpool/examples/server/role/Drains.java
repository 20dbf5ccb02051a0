package io.kvpool.examples.server.role;

/**
 * A role that can stop taking new requests while it finishes those it promised: the first half of a graceful stop
 * ({@link io.kvpool.examples.server.RoleServer#shutdown}), during which the role's endpoints keep listening, so that
 * the promised requests' calls, give-backs and aborts still reach it.
 */
public interface Drains {

    /**
     * From now on the role refuses new requests (as unavailable: another process of the role may take them) and reads
     * not ready, so that a router stops sending them; the requests it promised go on. Idempotent; any thread.
     */
    void beginDrain();

    /** {@return the requests the role still owes work: promised, receiving their KV or decoding; any thread} */
    int pendingWork();
}
