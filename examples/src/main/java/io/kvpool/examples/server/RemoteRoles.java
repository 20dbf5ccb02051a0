package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;

import java.util.Objects;

/**
 * The router's {@link Roles} when prefill and decode each run in a process of their own
 * ({@code --role router --prefill-url … --decode-url …}). Nothing is checked at start: a role that is not
 * up yet answers its requests with 503 and shows as down ({@code kvpool_role_up 0}) until it is.
 * Closing closes the clients only; the role processes run on.
 */
public final class RemoteRoles extends RolePair<RemotePrefill, RemoteDecode> {

    private RemoteRoles(RemotePrefill prefill, RemoteDecode decode) {
        super(prefill, decode);
    }

    /** @return clients for the roles at the configuration's {@code --prefill-url} and {@code --decode-url} */
    public static RemoteRoles connect(ServerConfig cfg) {
        Objects.requireNonNull(cfg, "cfg");
        final ObjectMapper json = new ObjectMapper();
        final Topology t = cfg.topology();
        return new RemoteRoles(new RemotePrefill(new RoleClient(PrefillRole.ROLE, t.prefillUrl(), json)),
            new RemoteDecode(new RoleClient(DecodeRole.ROLE, t.decodeUrl(), json), json, cfg.requestTimeout()));
    }

    @Override
    public String toString() {
        return "RemoteRoles[" + prefill + ", " + decode + "]";
    }
}
