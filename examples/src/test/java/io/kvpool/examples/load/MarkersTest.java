package io.kvpool.examples.load;

import org.junit.jupiter.api.Test;

import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

class MarkersTest {

    @Test
    void onlyAnotherTenantsWholeMarkerCounts() {
        assertEquals(Set.of(), Markers.foreign("tenant1", "SECRET-tenant1-4 SECRET-tenant1-5"));
        assertEquals(Set.of("SECRET-tenant12-3"), Markers.foreign("tenant1", "SECRET-tenant1-4 SECRET-tenant12-3 ."));
        assertEquals(Set.of("SECRET-tenant1-4"), Markers.foreign("tenant12", "x SECRET-tenant1-4"));
        // a splice of stale tokens ("SECRET-t" + "tenant3-18") names no whole tenant; the next marker does
        assertEquals(Set.of("SECRET-tenant3-18"), Markers.foreign("tenant6", "SECRET-ttenant3-18 SECRET-tenant3-18"));
        assertEquals(Set.of(), Markers.foreign("tenant6", "SECRET-tenant123-1 SECRET-alice-2 tenant3-18"));
        // in JSON: the marker survives escaping
        assertEquals(Set.of("SECRET-tenant2-9"), Markers.foreign("tenant0", "{\"kv_text\":\"SECRET-tenant2-9\\u0000\"}"));
    }

    @Test
    void tenantNamesStayWithinOneToken() {
        assertEquals("tenant99", Markers.tenant(99));
        assertThrows(IllegalArgumentException.class, () -> Markers.tenant(100));
        assertEquals("SECRET-tenant7-12", Markers.of("tenant7", 12));
    }
}
