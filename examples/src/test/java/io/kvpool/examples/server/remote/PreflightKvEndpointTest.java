package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Preflight compares prefill's KV endpoint with decode's: roles that could link but are not linked yet are "KV link
 * down" (preflight waits for the link), roles whose endpoints differ can never be linked to each other.
 */
class PreflightKvEndpointTest {

    private static final ServerConfig CFG = ServerTests.small().build();

    private static RemoteStatus status(String role, String kv, boolean ready) {
        return new RemoteStatus(new RoleStatus(role, new PoolView(role, 0, "", Map.of()), Map.of(), Map.of(), null), 0, ready,
            RoleIdentity.of(role, CFG, 128, CFG.contextTokens(), kv), null);
    }

    @Test
    void rolesOnOneEndpointNotLinkedYetAreOnlyUnlinked() {
        final Preflight p = Preflight.check(CFG, status("prefill", "shm:/d/transfer.sock", false), status("decode", "shm:/d/transfer.sock", false));
        assertEquals(List.of("KV link", "KV link"), p.mismatches().stream().map(RoleIdentity.Mismatch::what).toList());
        assertTrue(p.onlyUnlinked(), p::table);
    }

    @Test
    void rolesOnTwoEndpointsCanNeverLinkEvenWhenEachIsReady() {
        final Preflight p = Preflight.check(CFG, status("prefill", "shm:/a/transfer.sock", true), status("decode", "shm:/b/transfer.sock", true));
        assertEquals(List.of("prefill KV endpoint: shm:/a/transfer.sock, the router expects shm:/b/transfer.sock (where decode listens)"),
            p.mismatches().stream().map(Object::toString).toList());
        assertFalse(p.onlyUnlinked());
        assertTrue(p.table().contains("shm:/a/transfer.sock  ✗"), p::table);
        assertTrue(Preflight.check(CFG, status("prefill", null, true), status("decode", "shm:/b/transfer.sock", true)).ok(),
            "a role of a build that does not report its endpoint is not refused for it");
        final Preflight unlinked = Preflight.check(CFG, status("prefill", "shm:/a/transfer.sock", false),
            status("decode", "shm:/b/transfer.sock", false));
        assertEquals(List.of("KV link", "KV link", "KV endpoint"), unlinked.mismatches().stream().map(RoleIdentity.Mismatch::what).toList());
        assertFalse(unlinked.onlyUnlinked(), "no wait links them: preflight does not wait for it");
    }

    @Test
    void ucxEndpointsMatchOnThePortWhenAHostIsAWildcardOrAName() {
        assertTrue(RoleIdentity.sameKvEndpoint("ucx:10.0.0.2:8090", "ucx:10.0.0.2:8090"));
        assertTrue(RoleIdentity.sameKvEndpoint("ucx:10.0.0.2:8090", "ucx:0.0.0.0:8090"), "decode listens on every address");
        assertTrue(RoleIdentity.sameKvEndpoint("ucx:decode.internal:8090", "ucx:10.0.0.2:8090"), "a name is not resolved");
        assertTrue(RoleIdentity.sameKvEndpoint("ucx:[::1]:8090", "ucx:::1:8090"));
        assertFalse(RoleIdentity.sameKvEndpoint("ucx:10.0.0.2:8090", "ucx:10.0.0.3:8090"));
        assertFalse(RoleIdentity.sameKvEndpoint("ucx:10.0.0.2:8090", "ucx:10.0.0.2:8091"));
        assertFalse(RoleIdentity.sameKvEndpoint("shm:/a/transfer.sock", "ucx:10.0.0.2:8090"));
        assertFalse(RoleIdentity.sameKvEndpoint("shm:/a/transfer.sock", "shm:/b/transfer.sock"));
    }
}
