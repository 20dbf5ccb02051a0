package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Preflight and the router's probes check that decode holds a KV link from the router's own prefill engine, by the
 * instance ids the roles report: a decode whose links all come from other prefill processes could not serve one of
 * this router's requests. Statuses without ids (a build before them) pass, as before.
 */
class PreflightInstanceTest {

    private static final ServerConfig CFG = ServerTests.small().build();
    private static final long PREFILL = 0xA1B2C3D4E5F60718L;
    private static final long OTHER = 0x0000000000001234L;

    private static RemoteStatus status(String role, long instance, List<Long> linked) {
        return new RemoteStatus(new RoleStatus(role, new PoolView(role, 0, "", Map.of()), Map.of(), Map.of(), null, instance, linked),
            0, true, RoleIdentity.of(role, CFG, 128, CFG.contextTokens(), "shm:/d/transfer.sock"), null);
    }

    @Test
    void aDecodeLinkedOnlyFromOtherPrefillsIsAMismatchNamingBoth() {
        final Preflight p = Preflight.check(CFG, status("prefill", PREFILL, List.of(7L)), status("decode", 7, List.of(OTHER)));
        assertEquals(List.of("decode engine instance: links from [0000000000001234], the router expects a link from "
            + "prefill instance a1b2c3d4e5f60718"), p.mismatches().stream().map(Object::toString).toList());
        assertTrue(p.onlyUnlinked(), "the link may come yet: preflight waits for it");
        assertTrue(p.table().contains("from [0000000000001234]  ✗"), p::table);
        assertTrue(p.table().contains("a1b2c3d4e5f60718"), p::table);
    }

    @Test
    void aDecodeLinkedFromTheRoutersPrefillAmongOthersMatches() {
        assertTrue(Preflight.check(CFG, status("prefill", PREFILL, List.of(7L)), status("decode", 7, List.of(OTHER, PREFILL))).ok());
        assertNull(Preflight.notLinkedTo(status("prefill", PREFILL, null), status("decode", 7, List.of(PREFILL))));
    }

    @Test
    void rolesThatReportNoInstanceIdsAreNotRefusedForThem() {
        assertTrue(Preflight.check(CFG, status("prefill", 0, null), status("decode", 7, List.of(OTHER))).ok(), "an older prefill");
        assertTrue(Preflight.check(CFG, status("prefill", PREFILL, null), status("decode", 0, null)).ok(), "an older decode");
        assertNull(Preflight.notLinkedTo(null, status("decode", 7, List.of(OTHER))), "prefill not read yet");
    }

    @Test
    void theStatusJsonCarriesTheInstanceIdsBothWays() {
        final RoleStatus s = status("decode", PREFILL, List.of(OTHER, 7L)).status();
        final Map<String, Object> json = RoleJson.status(s, 0, true);
        assertEquals("a1b2c3d4e5f60718", json.get("instance"));
        assertEquals(List.of("0000000000001234", "0000000000000007"), json.get("linked_instances"));
        final RoleStatus back = RoleJson.status(io.kvpool.examples.server.api.Json.strict().valueToTree(json));
        assertEquals(PREFILL, back.instance());
        assertEquals(List.of(OTHER, 7L), back.linked());
        final RoleStatus none = RoleJson.status(io.kvpool.examples.server.api.Json.strict().valueToTree(
            RoleJson.status(new RoleStatus("decode", new PoolView("decode", 0, "", Map.of()), Map.of(), Map.of()), 0, true)));
        assertEquals(0, none.instance());
        assertNull(none.linked(), "not reported: not an empty list");
    }
}
