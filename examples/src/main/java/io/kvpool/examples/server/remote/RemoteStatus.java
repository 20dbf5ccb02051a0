package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.role.RoleRefusedException;
import io.kvpool.examples.server.role.RoleStatus;

/**
 * A role process's {@code GET /internal/status}, read by the router: its {@link RoleStatus} (or
 * {@linkplain RoleStatus#unreachable unreachable} with the reason), its transfers in flight, whether
 * its KV link is up, and who it is ({@link RoleIdentity}).
 *
 * @param status          the status
 * @param activeTransfers transfers not yet over (0 when unreachable: nothing the router can wait for)
 * @param ready           whether the role takes requests: its KV link is up, and it is not stopping
 *                        ({@link RoleStatus#draining()} says so)
 * @param identity        its identity and capacity, or {@code null} when unreachable or not reported
 * @param wrongUrl        what serves the URL instead of the role asked for, when no wait can make it that role: another
 *                        role, or a server or path that refuses the status call with a 4xx (the status is then
 *                        unreachable); else {@code null}
 */
public record RemoteStatus(RoleStatus status, int activeTransfers, boolean ready, RoleIdentity identity, String wrongUrl) {

    /** @return the role's status, or an unreachable one naming what failed; never throws */
    public static RemoteStatus read(RoleClient client, String role) {
        try {
            final JsonNode n = client.get("internal/status");
            final RoleStatus s = RoleJson.status(n);
            if (!s.role().equals(role)) { // a wrong URL, or another role restarted on that port: not the role asked for
                return new RemoteStatus(RoleStatus.unreachable(role, client.describe() + " is the " + s.role() + " role, not the " + role + " role"),
                    0, false, null, "the " + s.role() + " role");
            }
            final JsonNode id = n.get("identity");
            return new RemoteStatus(s, (int) RoleJson.number(n, "active_transfers"), RoleJson.bool(n, "ready"),
                id == null || id.isNull() ? null : RoleIdentity.read(id), null);
        } catch (RoleRefusedException e) {
            // a role answers its status to anyone: a 4xx is another server, or a path that is not the role's
            return new RemoteStatus(RoleStatus.unreachable(role, e.getMessage()), 0, false, null,
                e.status() / 100 == 4 ? "a server that answers " + e.status() : null);
        } catch (RuntimeException e) {
            return new RemoteStatus(RoleStatus.unreachable(role, e.getMessage()), 0, false, null, null);
        }
    }
}
