package io.kvpool.examples.load;

import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;

import java.util.List;
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
        // other tokens, or cut off at the end of an aborted stream
        assertEquals(Set.of("tenant3-18", "SECRET-tenant3-18"), Markers.foreign("tenant6", "SECRET-ttenant3-18 SECRET-tenant3-18"));
        assertEquals(Set.of("tenant3-18"), Markers.foreign("tenant6", "SECRET-tenantx-1 SECRET-alice-2 tenant3-18"));
        assertEquals(Set.of("SECRET-tenant3"), Markers.foreign("tenant7", "SECRET-tenant7-11 SECRET-tenant3-"));
        assertEquals(Set.of(), Markers.foreign("tenant7", "SECRET-tenant7-11 SECRET-tenant7-"));
        // in JSON: the marker survives escaping
        assertEquals(Set.of("SECRET-tenant2-9"), Markers.foreign("tenant0", "{\"kv_text\":\"SECRET-tenant2-9\\u0000\"}"));
    }

    @Test
    void aNameSplicedBeforeADigitTokenIsStillSeen() {
        // the tokenizer's cuts that make a splice possible: a two-digit name is a token of its own, a one-digit name
        // keeps its '-', and the digits after either may be a token of another page
        assertEquals(List.of(" SECRET-", "tenant12", "-7"), tokens(" SECRET-tenant12-7"));
        assertEquals(List.of(" SECRET-", "tenant3-", "17"), tokens(" SECRET-tenant3-17"));
        assertEquals(List.of("SECRET-t", "enant3-1", "7"), tokens("SECRET-tenant3-17")); // a prompt's first word
        // tenant12's token, then a page of another prompt that starts with a digit token
        assertEquals(Set.of("SECRET-tenant12"), Markers.foreign("tenant0", "SECRET-tenant0-5 SECRET-tenant1217 SECRET-"));
        assertEquals(Set.of("tenant12"), Markers.foreign("tenant1", "tenant1-4 tenant123"));
        assertEquals(Set.of("tenant3-17"), Markers.foreign("tenant12", "tenant12-1 tenant3-17"));
        // a one-digit name that no digit follows: in the JSON the server sends, a quote does
        assertEquals(Set.of("tenant2"), Markers.foreign("tenant1", "\"kv_tenants\":[\"tenant1\",\"tenant2\"]"));
        assertEquals(Set.of(), Markers.foreign("tenant1", "\"kv_tenants\":[\"tenant1\"]"));
        // the run's own tenant, spliced the same ways, is never another's
        assertEquals(Set.of(), Markers.foreign("tenant12", "SECRET-tenant1217 SECRET-tenant12-7 tenant12"));
        assertEquals(Set.of(), Markers.foreign("tenant3", "SECRET-tenant3-17 tenant3-"));
    }

    private static List<String> tokens(String text) {
        return EchoTokenizer.encode(text).stream().map(EchoTokenizer::text).toList();
    }

    @Test
    void tenantNamesStayWithinOneToken() {
        assertEquals("tenant99", Markers.tenant(99));
        assertThrows(IllegalArgumentException.class, () -> Markers.tenant(100));
        assertEquals("SECRET-tenant7-12", Markers.of("tenant7", 12));
    }
}
