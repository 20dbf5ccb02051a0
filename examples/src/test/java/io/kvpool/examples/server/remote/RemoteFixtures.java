package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.RoleStatus;

import java.net.URI;
import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * What the tests that drive the whole server (in {@code io.kvpool.examples.server}) take from this package's
 * internals: the router's clients of one role process, the wire format, the client's deadlines. Test code only;
 * none of it is public in the package itself.
 */
public final class RemoteFixtures {

    /** {@link RoleClient#CALL_TIMEOUT} */
    public static final Duration CALL_TIMEOUT = RoleClient.CALL_TIMEOUT;
    /** {@link RoleClient#STATUS_TIMEOUT} */
    public static final Duration STATUS_TIMEOUT = RoleClient.STATUS_TIMEOUT;

    private RemoteFixtures() {
    }

    /** @return the router's client of the prefill role process at {@code uri} */
    public static PrefillService prefill(URI uri, ObjectMapper json) {
        return new RemotePrefill(new RoleClient(PrefillRole.ROLE, uri, json));
    }

    /** @return the router's client of the decode role process at {@code uri} */
    public static DecodeService decode(URI uri, ObjectMapper json, Duration stall) {
        return new RemoteDecode(new RoleClient(DecodeRole.ROLE, uri, json), json, stall);
    }

    /** @return {@code tokens} as a role endpoint's body carries them */
    public static List<String> tokens(List<byte[]> tokens) {
        return RoleJson.tokens(tokens);
    }

    /** @return a role's {@code /internal/status} body, with the identity a role of {@code cfg} announces */
    public static Map<String, Object> statusJson(RoleStatus s, int activeTransfers, boolean ready, ServerConfig cfg, long poolPages,
                                                 long poolMaxContext) {
        final Map<String, Object> m = RoleJson.status(s, activeTransfers, ready);
        m.put("identity", RoleIdentity.of(s.role(), cfg, poolPages, poolMaxContext, null).json());
        return m;
    }
}
