package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.config.ServerConfig;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Who a role process is and what it can carry, as its {@code GET /internal/status} reports it (field
 * {@code identity}) and the router checks it at startup, on every reconnect, and {@code preflight} checks a
 * running deployment: its environment, model and KV layout must be the router's, and its build too under
 * {@code --strict-build} (by default another build is served: a rolling upgrade); its largest safe context must
 * cover the context the router advertises.
 *
 * @param role              "prefill", "decode" (or "router" for what the router expects)
 * @param build             the build ({@link ServerConfig#build()})
 * @param environment       {@code --environment}
 * @param model             the model id both sides of a transfer announce
 * @param layout            the KV layout, as text
 * @param layoutFingerprint the layout's fingerprint (what the transfer handshake compares)
 * @param poolPages         pages of the role's pool (0 for the router)
 * @param contextTokens     the role's own {@code --context}
 * @param maxSafeContext    the largest context the role can carry: its pool's max context, and no more than one
 *                          transfer descriptor carries
 * @param maxConnections    the role's {@code --max-connections}: HTTP connections it keeps open at once, more are
 *                          closed as they arrive; 0 when the role did not report it (an older build)
 * @param kv                the KV endpoint: where decode takes prefill's links, where prefill links to
 *                          ({@code shm:<socket>}, {@code cuda-ipc:<socket>}, {@code ucx:<host>:<port>}); {@code null}
 *                          when not reported (an older build, or the router's expectation)
 */
record RoleIdentity(String role, String build, String environment, String model, String layout, long layoutFingerprint,
                    long poolPages, long contextTokens, long maxSafeContext, long maxConnections, String kv) {

    RoleIdentity {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(build, "build");
        Objects.requireNonNull(environment, "environment");
        Objects.requireNonNull(model, "model");
        Objects.requireNonNull(layout, "layout");
    }

    /** @return a role's identity: the configuration it runs, its pool's pages and max context */
    static RoleIdentity of(String role, ServerConfig cfg, long poolPages, long poolMaxContext, String kv) {
        final long carried = (long) ServerConfig.MAX_PAGES_PER_TRANSFER * cfg.layout().tokensPerPage();
        return new RoleIdentity(role, cfg.build(), cfg.environment(), cfg.model(), cfg.layout().toString(), cfg.layout().fingerprint(),
            poolPages, cfg.contextTokens(), Math.min(poolMaxContext, carried), cfg.maxConnections(), kv);
    }

    /** @return what a router with this configuration expects of its roles */
    static RoleIdentity expected(ServerConfig cfg) {
        return of("router", cfg, 0, cfg.contextTokens(), null);
    }

    /**
     * Whether prefill's KV endpoint can be the one decode listens at. Equal texts are; for UCX, the same port and the same
     * host, or a host that is a wildcard or a name on either side (a name is not resolved here: the router runs this
     * on every reconnect). Anything else (two sockets, another port, two addresses) is not: the roles cannot be linked
     * to each other, though each may be linked to a role of another deployment.
     *
     * @return whether they may match; {@code true} when either is not reported
     */
    static boolean sameKvEndpoint(String prefill, String decode) {
        if (prefill == null || decode == null || prefill.equals(decode)) {
            return true;
        }
        if (!prefill.startsWith("ucx:") || !decode.startsWith("ucx:")) {
            return false;
        }
        final String p = prefill.substring(4), d = decode.substring(4);
        final int pc = p.lastIndexOf(':'), dc = d.lastIndexOf(':');
        if (pc < 0 || dc < 0 || !p.substring(pc + 1).equals(d.substring(dc + 1))) {
            return false;
        }
        final String ph = unbracket(p.substring(0, pc)), dh = unbracket(d.substring(0, dc));
        return ph.equals(dh) || wildcardOrName(ph) || wildcardOrName(dh);
    }

    private static String unbracket(String host) {
        return host.startsWith("[") && host.endsWith("]") ? host.substring(1, host.length() - 1) : host;
    }

    private static boolean wildcardOrName(String host) {
        if (host.isEmpty() || host.equals("0.0.0.0") || host.equals("::") || host.equals("*")) {
            return true;
        }
        return !host.contains(":") && !host.matches("[0-9.]+"); // not an IPv6 or IPv4 literal: a name
    }

    Map<String, Object> json() {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("role", role);
        m.put("build", build);
        m.put("environment", environment);
        m.put("model", model);
        m.put("layout", layout);
        m.put("layout_fingerprint", layoutFingerprint);
        m.put("pool_pages", poolPages);
        m.put("context_tokens", contextTokens);
        m.put("max_safe_context_tokens", maxSafeContext);
        m.put("max_connections", maxConnections);
        if (kv != null) {
            m.put("kv", kv);
        }
        return m;
    }

    static RoleIdentity read(JsonNode n) {
        return new RoleIdentity(RoleJson.text(n, "role"), RoleJson.text(n, "build"), RoleJson.text(n, "environment"),
            RoleJson.text(n, "model"), RoleJson.text(n, "layout"), RoleJson.number(n, "layout_fingerprint"),
            RoleJson.number(n, "pool_pages"), RoleJson.number(n, "context_tokens"), RoleJson.number(n, "max_safe_context_tokens"),
            n.has("max_connections") ? RoleJson.number(n, "max_connections") : 0, // a build before it reads as unknown
            n.has("kv") ? RoleJson.text(n, "kv") : null);
    }

    /**
     * One way a role differs from what the router expects.
     *
     * @param role     the role
     * @param what     the property ("environment", "largest safe context" …)
     * @param expected what the router expects
     * @param actual   what the role reported
     */
    record Mismatch(String role, String what, String expected, String actual) {
        /** @return whether only the context differs (what {@code --clamp-context} may resolve) */
        boolean contextOnly() {
            return what.equals("largest safe context");
        }

        @Override
        public String toString() {
            return role + " " + what + ": " + actual + ", the router expects " + expected;
        }
    }

    /**
     * @param expected    what the router expects
     * @param advertised  the context the router advertises
     * @param strictBuild whether another build is a mismatch ({@code --strict-build}); by default it is not
     * @return how this role differs from {@code expected}
     */
    List<Mismatch> against(RoleIdentity expected, long advertised, boolean strictBuild) {
        final List<Mismatch> out = new ArrayList<>();
        if (strictBuild && !build.equals(expected.build)) {
            out.add(new Mismatch(role, "build", expected.build, build));
        }
        if (!environment.equals(expected.environment)) {
            out.add(new Mismatch(role, "environment", expected.environment, environment));
        }
        if (!model.equals(expected.model)) {
            out.add(new Mismatch(role, "model", expected.model, model));
        }
        if (layoutFingerprint != expected.layoutFingerprint) {
            out.add(new Mismatch(role, "layout", expected.layout, layout));
        }
        if (maxConnections > 0 && maxConnections <= RemoteRole.SPARE_CONNECTIONS) {
            out.add(new Mismatch(role, "max connections", "> " + RemoteRole.SPARE_CONNECTIONS + " (the router keeps "
                + RemoteRole.SPARE_CONNECTIONS + " for its probes, status reads and aborts)", Long.toString(maxConnections)));
        }
        if (maxSafeContext < advertised) {
            out.add(new Mismatch(role, "largest safe context", "≥ " + advertised + " tokens (advertised)",
                maxSafeContext + " tokens (" + poolPages + " pages, --context " + contextTokens + ")"));
        }
        return out;
    }
}
