package io.kvpool.examples.load;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.examples.server.KvServer;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The pools after a run, once the server is quiescent (no request in flight, no transfer open): both
 * must balance with every page FREE — nothing OWNED, RECEIVING, DRAINING (held for a drain) or
 * QUARANTINED, nothing reserved, no sequence open. A leaked page, a transfer never drained or a
 * quarantine never released shows up here.
 *
 * @param ok    whether everything held
 * @param lines one line per pool (or the problem), for the report
 */
public record PoolCheck(boolean ok, List<String> lines) {

    public PoolCheck {
        lines = List.copyOf(lines);
    }

    /**
     * Checks a server started in this JVM: waits for quiescence, then {@link KvPool#verifyAccounting()} on
     * both pools (or, if its roles run elsewhere, {@link #remote} on its {@code /metrics}).
     */
    public static PoolCheck of(KvServer server, Duration timeout) throws InterruptedException {
        final KvPool[] pools;
        try {
            pools = new KvPool[] {server.prefillPool(), server.decodePool()};
        } catch (IllegalStateException rolesElsewhere) {
            return remote(server.baseUri(), timeout);
        }
        final List<String> lines = new ArrayList<>();
        boolean ok = server.awaitQuiescence(timeout);
        if (!ok) {
            lines.add("NOT QUIESCENT after " + timeout.toMillis() + " ms: " + server.counters() + " " + server.roles());
        }
        final String[] names = {"prefill", "decode"};
        for (int i = 0; i < pools.length; i++) {
            try {
                final PoolSnapshot s = pools[i].verifyAccounting();
                final boolean clean = s.balanced() && s.idle();
                ok &= clean;
                lines.add(String.format(Locale.ROOT, "%-8s %s: %d/%d pages free, %d owned, %d receiving, %d draining, %d quarantined, %d reserved, "
                        + "%d sequences open", names[i], clean ? "balanced" : "NOT CLEAN", s.free(), s.capacity(), s.owned(), s.receiving(),
                    s.draining(), s.quarantined(), s.reserved(), s.openSequences()));
            } catch (IllegalStateException e) {
                ok = false;
                lines.add(names[i] + " accounting BROKEN: " + e.getMessage());
            }
        }
        return new PoolCheck(ok, lines);
    }

    /**
     * Checks a server elsewhere through {@code GET /metrics}: waits until no request is in flight and no
     * page of any role is in use, or the timeout, and reports what it saw last.
     */
    public static PoolCheck remote(URI base, Duration timeout) throws InterruptedException {
        final long end = System.nanoTime() + timeout.toNanos();
        final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();
        try {
            while (true) {
                final Map<String, Double> m;
                try {
                    // the whole answer within 10 s, its body included (the request's own timeout ends with the headers)
                    m = metrics(http.sendAsync(HttpRequest.newBuilder(base.resolve("/metrics")).timeout(Duration.ofSeconds(10)).GET().build(),
                        HttpResponse.BodyHandlers.ofString()).get(10, TimeUnit.SECONDS).body());
                } catch (ExecutionException | TimeoutException e) {
                    return new PoolCheck(false, List.of("cannot read " + base.resolve("/metrics") + " within 10 s: "
                        + (e instanceof ExecutionException ? e.getCause() : "its answer stalled")));
                }
                final List<String> lines = new ArrayList<>();
                boolean clean = m.getOrDefault("kvpool_requests_in_flight", -1.0) == 0;
                for (String role : new String[] {"prefill", "decode"}) {
                    final String p = "kvpool_pool_pages{role=\"" + role + "\",state=\"";
                    // a role that is down reports every page state as 0: that is "unknown", never "clean"
                    final double up = m.getOrDefault("kvpool_role_up{role=\"" + role + "\"}", 0.0);
                    final double capacity = m.getOrDefault("kvpool_pool_capacity_pages{role=\"" + role + "\"}", 0.0);
                    if (!m.containsKey(p + "free\"}") || up != 1 || capacity <= 0) {
                        clean = false;
                        lines.add(String.format(Locale.ROOT, "%-8s NOT CLEAN (from /metrics): %s", role, !m.containsKey(p + "free\"}") ? "no pool pages reported"
                            : up != 1 ? "the role is down (kvpool_role_up 0)" : "no capacity reported"));
                        continue;
                    }
                    final double free = m.get(p + "free\"}");
                    final double retired = m.getOrDefault(p + "retired\"}", 0.0);
                    final double busy = m.getOrDefault(p + "owned\"}", 0.0) + m.getOrDefault(p + "receiving\"}", 0.0)
                        + m.getOrDefault(p + "draining\"}", 0.0) + m.getOrDefault(p + "quarantined\"}", 0.0);
                    final double reserved = m.getOrDefault("kvpool_pool_reserved_pages{role=\"" + role + "\"}", 0.0);
                    final double open = m.getOrDefault("kvpool_pool_sequences_open{role=\"" + role + "\"}", 0.0);
                    final boolean roleClean = busy == 0 && reserved == 0 && open == 0 && free == capacity - retired;
                    clean &= roleClean;
                    lines.add(String.format(Locale.ROOT, "%-8s %s (from /metrics): %.0f of %.0f pages free, %.0f owned, %.0f receiving, %.0f draining, "
                            + "%.0f quarantined, %.0f reserved, %.0f sequences open", role, roleClean ? "clean" : "NOT CLEAN", free, capacity,
                        m.getOrDefault(p + "owned\"}", 0.0), m.getOrDefault(p + "receiving\"}", 0.0),
                        m.getOrDefault(p + "draining\"}", 0.0), m.getOrDefault(p + "quarantined\"}", 0.0), reserved, open));
                }
                if (clean || System.nanoTime() - end > 0) {
                    return new PoolCheck(clean, lines);
                }
                Thread.sleep(50);
            }
        } finally {
            http.shutdownNow(); // not close(), which would wait for a stalled exchange
        }
    }

    /** @return every sample of a Prometheus text by its name with labels, as written */
    static Map<String, Double> metrics(String text) {
        final Map<String, Double> m = new LinkedHashMap<>();
        for (String line : text.split("\n")) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            final int sp = line.lastIndexOf(' ');
            try {
                m.put(line.substring(0, sp), Double.parseDouble(line.substring(sp + 1)));
            } catch (RuntimeException ignored) {
                // not a sample line
            }
        }
        return m;
    }
}
