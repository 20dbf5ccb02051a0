package io.kvpool.examples.server.role;

/**
 * The two roles a router talks to. {@link InJvmRoles} runs both in this JVM; a deployment with roles in
 * other processes supplies its own implementation (remote {@link PrefillService} and
 * {@link DecodeService}) to {@link io.kvpool.examples.server.KvServer#start(ServerConfig, Roles)}, and nothing else changes.
 */
public interface Roles extends AutoCloseable {

    /** @return the prefill role */
    PrefillService prefill();

    /** @return the decode role */
    DecodeService decode();

    /** Closes both roles. Idempotent. */
    @Override
    void close();
}
