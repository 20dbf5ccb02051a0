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
        // a whole foreign tenant name is proof on its own (its token came from that tenant's KV): spliced after
        // other tokens, or cut off at the end of an aborted stream; a longer name is not a tenant of this run
        assertEquals(Set.of("tenant3-18", "SECRET-tenant3-18"), Markers.foreign("tenant6", "SECRET-ttenant3-18 SECRET-tenant3-18"));
        assertEquals(Set.of("tenant3-18"), Markers.foreign("tenant6", "SECRET-tenant123-1 SECRET-alice-2 tenant3-18"));
        assertEquals(Set.of("SECRET-tenant3"), Markers.foreign("tenant7", "SECRET-tenant7-11 SECRET-tenant3-"));
        assertEquals(Set.of(), Markers.foreign("tenant7", "SECRET-tenant7-11 SECRET-tenant7-"));
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
