package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.RolePair;

import java.time.Duration;
import java.util.Objects;

/**
 * The router's {@link io.kvpool.examples.server.role.Roles} when prefill and decode each run in a process of their own
 * ({@code --role router --prefill-url … --decode-url …}). The roles that are up are checked at start
 * ({@link #preflight}); a role that is not up yet answers its requests with 503 and shows as down
 * ({@code kvpool_role_up 0}) until it is, and is checked then.
 * Closing closes the clients only; the role processes run on.
 */
public final class RemoteRoles extends RolePair<RemotePrefill, RemoteDecode> {

    private RemoteRoles(RemotePrefill prefill, RemoteDecode decode) {
        super(prefill, decode);
    }

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    /**
     * @return clients for the roles at the configuration's {@code --prefill-url} and {@code --decode-url}; each status
     *         the router reads of a role (on every reconnect) is checked against {@code cfg} ({@link Preflight}): a role
     *         that does not match is answered as unavailable, naming the mismatch
     */
    public static RemoteRoles connect(ServerConfig cfg) {
        Objects.requireNonNull(cfg, "cfg");
        final ObjectMapper json = Json.strict();
        final Topology t = cfg.topology();
        final RoleIdentity expected = RoleIdentity.expected(cfg);
        final java.util.Map<String, String> buildsSeen = new java.util.concurrent.ConcurrentHashMap<>();
        final java.util.Map<String, RemoteStatus> latest = new java.util.concurrent.ConcurrentHashMap<>(); // by role
        final java.util.function.Function<RemoteStatus, String> verify = s -> {
            final java.util.List<RoleIdentity.Mismatch> m = new java.util.ArrayList<>(
                Preflight.mismatches(s, expected, cfg.contextTokens(), cfg.strictBuild()));
            latest.put(s.status().role(), s);
            if (m.isEmpty()) { // as at start: roles each linked elsewhere, checked against the other role's last status
                final RoleIdentity.Mismatch crossed = Preflight.linkedElsewhere(latest.get(PrefillRole.ROLE), latest.get(DecodeRole.ROLE));
                if (crossed != null) {
                    m.add(crossed);
                }
            }
            if (m.isEmpty() && s.status().role().equals(DecodeRole.ROLE)) {
                // decode's links all from other prefill processes: decode is what cannot serve this router's requests.
                // Checked on decode's reads only, so that a prefill restarted under its URL is not marked down until
                // decode's next read shows the new link
                final RoleIdentity.Mismatch notLinked = Preflight.notLinkedTo(latest.get(PrefillRole.ROLE), s);
                if (notLinked != null) {
                    m.add(notLinked);
                }
            }
            final RoleIdentity id = s.identity();
            if (m.isEmpty() && id != null && !id.build().equals(expected.build())
                && !id.build().equals(buildsSeen.put(s.status().role(), id.build()))) {
                // once per role and build, not per probe: a rolling upgrade is a state, not an event per request
                LOG.log(System.Logger.Level.INFO, "router: " + s.status().role() + " runs build " + id.build() + ", the router "
                    + expected.build() + ": served (--strict-build would refuse it)");
            }
            return m.isEmpty() ? null : s.status().role() + " role does not match the router: " + m;
        };
        return new RemoteRoles(new RemotePrefill(new RoleClient(PrefillRole.ROLE, t.prefillUrl(), json), verify),
            new RemoteDecode(new RoleClient(DecodeRole.ROLE, t.decodeUrl(), json), json, cfg.requestTimeout(),
                silence(cfg), verify));
    }

    /** {@link RemoteDecodeCall#silence} for this router's heartbeat and request timeout. */
    static Duration silence(ServerConfig cfg) {
        return RemoteDecodeCall.silence(cfg.heartbeat(), cfg.requestTimeout());
    }

    /**
     * The router's startup check: reads each role's identity and capacity and refuses a deployment that does not
     * match — another environment, model or layout (or build, with {@code --strict-build}), or a role whose largest safe context is smaller than
     * {@code --context} — naming each role's numbers. With {@code --clamp-context}, a deployment whose only mismatch
     * is the context starts advertising the smallest role's largest safe context instead. A role not up yet is
     * checked when it comes ({@link #connect}).
     *
     * @return {@code cfg}, or with {@code --clamp-context} the configuration with the context it may advertise
     * @throws IllegalStateException with the table of what does not match
     */
    public static ServerConfig preflight(ServerConfig cfg) {
        final ObjectMapper json = Json.strict();
        final Preflight f;
        try (RoleClient p = new RoleClient(PrefillRole.ROLE, cfg.topology().prefillUrl(), json);
             RoleClient d = new RoleClient(DecodeRole.ROLE, cfg.topology().decodeUrl(), json)) {
            f = Preflight.check(cfg, RemoteStatus.read(p, PrefillRole.ROLE), RemoteStatus.read(d, DecodeRole.ROLE));
        }
        // a role not up yet, or roles not linked yet, are checked when they come; a miswired URL is not "not up yet", nor
        // are roles each linked elsewhere (shared-memory sockets that differ while both are linked: every request would
        // time out). Two UCX addresses may differ and still meet (NAT, another address of the host): logged, not refused
        final boolean unlinked = f.mismatches().stream().anyMatch(m -> m.what().equals(Preflight.KV_LINK));
        final java.util.List<RoleIdentity.Mismatch> wrong = f.mismatches().stream()
            .filter(m -> !m.what().equals("reachable") && !m.what().equals(Preflight.KV_LINK) && !m.what().equals(Preflight.KV_PEER)
                && !(m.what().equals(Preflight.KV_ENDPOINT) && (unlinked || m.actual().startsWith("ucx:")))).toList();
        if (wrong.size() < f.mismatches().size()) {
            LOG.log(System.Logger.Level.WARNING, "router: a role, or the KV link between them, is not up yet, or their KV "
                + "endpoints differ; it is checked when requests come:\n" + f.table());
        }
        if (wrong.isEmpty()) {
            return cfg;
        }
        if (cfg.clampContext() && wrong.stream().allMatch(RoleIdentity.Mismatch::contextOnly)) {
            final long c = f.smallestSafeContext();
            LOG.log(System.Logger.Level.WARNING, "router: --clamp-context: advertising " + c + " tokens instead of --context "
                + cfg.contextTokens() + ":\n" + f.table());
            return cfg.toBuilder().contextTokens(c).build();
        }
        throw new IllegalStateException("the roles do not match this router" + (wrong.stream().allMatch(RoleIdentity.Mismatch::contextOnly)
            ? " (lower --context, give the roles larger pools, or start the router with --clamp-context to advertise "
            + f.smallestSafeContext() + " tokens)" : "") + ":\n" + f.table());
    }

    @Override
    public String toString() {
        return "RemoteRoles[" + prefill + ", " + decode + "]";
    }
}
