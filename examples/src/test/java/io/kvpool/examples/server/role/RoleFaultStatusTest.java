package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.remote.PrefillEndpoint;
import io.kvpool.examples.server.remote.RoleEndpoint;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.testkit.ForwardingStorage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.MemorySegment;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A role's endpoint answers 503 with Retry-After only when the role cannot take calls now (closed or busy); a call the
 * role took and failed for a fault of its own is a 500, which the router answers 502 {@code role_error}
 * ({@code RefusalsTest}), without Retry-After: kvpool's own faults are {@link IllegalStateException}s too.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleFaultStatusTest {

    @Test
    void aPrefillFaultIsA500AndAClosedPrefillA503() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        final AtomicBoolean fault = new AtomicBoolean();
        final KvPool pool = KvPool.builder(cfg.layout()).pages(cfg.prefillPages()).maxContextTokens(cfg.contextTokens())
            .storage((l, n) -> new FaultOnAccess(HostPageStorage.allocate(l, n), fault)).build();
        final HttpClient client = HttpClient.newHttpClient();
        try (PrefillRole prefill = new PrefillRole(pool, RoleParts.sender(cfg, pool), () -> {
            throw new LinkFailedException("no decode in this test");
        }, Duration.ofSeconds(10), Duration.ofSeconds(10));
             HttpFront front = HttpFront.start("127.0.0.1", 0, Http.limits(cfg, RoleEndpoint.maxBody(cfg)),
                 new PrefillEndpoint(prefill, Json.strict(), cfg, null))) {
            fault.set(true);
            HttpResponse<String> r = prefill(client, front.baseUri(), 7);
            assertEquals(500, r.statusCode(), r::body);
            assertTrue(r.headers().firstValue("Retry-After").isEmpty(), r::body);
            assertTrue(r.body().contains("\"error_id\":\"") && !r.body().contains("injected storage fault"), r::body); // text: log only
            fault.set(false);
            prefill.close();
            r = prefill(client, front.baseUri(), 8);
            assertEquals(503, r.statusCode(), r::body);
            assertEquals("1", r.headers().firstValue("Retry-After").orElse(null), r::body);
        }
    }

    private static HttpResponse<String> prefill(HttpClient client, URI base, long id) throws Exception {
        return client.send(HttpRequest.newBuilder(base.resolve("/internal/prefill"))
            .POST(HttpRequest.BodyPublishers.ofString("{\"request_id\":" + id + ",\"tenant\":\"alice\",\"tokens\":[\"AQ==\",\"Ag==\"]}"))
            .header("Content-Type", "application/json").build(), HttpResponse.BodyHandlers.ofString());
    }

    /** Host storage whose page access fails as kvpool's own faults do (an IllegalStateException) while set. */
    private static final class FaultOnAccess extends ForwardingStorage {
        private final AtomicBoolean fault;

        FaultOnAccess(PageStorage inner, AtomicBoolean fault) {
            super(inner);
            this.fault = fault;
        }

        @Override
        public MemorySegment hostPage(int page) {
            if (fault.get()) {
                throw new IllegalStateException("injected storage fault on page " + page);
            }
            return super.hostPage(page);
        }
    }
}
