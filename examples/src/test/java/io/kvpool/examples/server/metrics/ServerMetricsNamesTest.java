package io.kvpool.examples.server.metrics;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The live counters' names: the Prometheus name less {@code kvpool_} and {@code _total}. */
class ServerMetricsNamesTest {

    @Test
    void liveNamesDropThePrefixAndUseUnderscores() {
        assertEquals("requests_timed_out", ServerMetrics.liveName("kvpool.requests.timed.out"));
    }
}
