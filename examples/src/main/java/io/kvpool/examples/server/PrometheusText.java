package io.kvpool.examples.server;

import java.util.List;
import java.util.Map;

/**
 * {@code GET /metrics} in the Prometheus text format: the router's counters, each role's pool (label
 * {@code role}), each role's own counters, and the transfer engines' metrics (the decode side's
 * {@link io.kvpool.transfer.ReceiverMetrics}: transfers started / committed / failed by reason — checksum
 * and canary failures among them —, deferred releases by outcome with hold times, ignored
 * acknowledgements). Every family is declared once.
 */
final class PrometheusText {

    private static final String[] STATES = {"free", "owned", "receiving", "draining", "quarantined", "retired"};

    private PrometheusText() {
    }

    static String render(RouterCounters r, List<RoleStatus> roles, ServerConfig config) {
        final StringBuilder b = new StringBuilder(8192);
        counter(b, "kvpool_requests_total", "completion requests received", r.requests.sum());
        counter(b, "kvpool_requests_completed_total", "completions answered in full", r.completed.sum());
        counter(b, "kvpool_requests_aborted_total", "requests whose client went away; both roles aborted them", r.aborted.sum());
        counter(b, "kvpool_requests_timed_out_total", "requests that waited longer than the request timeout", r.timedOut.sum());
        gauge(b, "kvpool_requests_in_flight", "requests being served now", r.inFlight.get());
        family(b, "kvpool_requests_rejected_total", "counter", "requests refused before any KV moved, by role and reason");
        for (Map.Entry<String, Long> e : r.rejected().entrySet()) {
            final String[] rr = e.getKey().split("/", 2);
            b.append("kvpool_requests_rejected_total{role=\"").append(rr[0]).append("\",reason=\"").append(rr[1]).append("\"} ")
                .append(e.getValue()).append('\n');
        }
        family(b, "kvpool_requests_failed_total", "requests whose KV transfer did not commit, by reason");
        for (Map.Entry<String, Long> e : r.failed().entrySet()) {
            b.append("kvpool_requests_failed_total{reason=\"").append(e.getKey()).append("\"} ").append(e.getValue()).append('\n');
        }
        family(b, "kvpool_http_errors_total", "counter", "error responses by status");
        for (Map.Entry<Integer, Long> e : r.errors().entrySet()) {
            b.append("kvpool_http_errors_total{status=\"").append(e.getKey()).append("\"} ").append(e.getValue()).append('\n');
        }
        roles(b, roles, config);
        return b.toString();
    }

    /**
     * The roles' part alone: what a role process serves on its own {@code /metrics} (the router's merges
     * every role's into one text).
     */
    static String renderRoles(List<RoleStatus> roles, ServerConfig config) {
        final StringBuilder b = new StringBuilder(4096);
        roles(b, roles, config);
        return b.toString();
    }

    private static void roles(StringBuilder b, List<RoleStatus> roles, ServerConfig config) {
        family(b, "kvpool_role_up", "gauge", "1 if the role's status could be read (0: a role process the router cannot reach)");
        for (RoleStatus s : roles) {
            b.append("kvpool_role_up{role=\"").append(s.role()).append("\"} ").append(s.up() ? 1 : 0).append('\n');
        }
        family(b, "kvpool_pool_pages", "gauge", "pages by state");
        for (RoleStatus s : roles) {
            for (String state : STATES) {
                b.append("kvpool_pool_pages{role=\"").append(s.role()).append("\",state=\"").append(state).append("\"} ")
                    .append(s.pool().counters().getOrDefault(state, 0L)).append('\n');
            }
        }
        poolFamily(b, roles, "kvpool_pool_capacity_pages", "gauge", "pages the pool was built with", "capacity");
        poolFamily(b, roles, "kvpool_pool_reserved_pages", "gauge", "pages reserved for admitted requests", "reserved");
        poolFamily(b, roles, "kvpool_pool_open_sequences", "gauge", "sequences not yet closed", "openSequences");
        poolFamily(b, roles, "kvpool_pool_allocations_total", "counter", "times a page left FREE", "allocations");
        poolFamily(b, roles, "kvpool_pool_stale_handles_refused_total", "counter", "operations refused for a stale or invalid handle",
            "staleHandlesRefused");
        poolFamily(b, roles, "kvpool_pool_quarantine_events_total", "counter", "pages that entered QUARANTINED", "quarantineEvents");
        family(b, "kvpool_pool_rejections_total", "counter", "admissions the pool refused, by reason");
        for (RoleStatus s : roles) {
            rejection(b, s, "context_too_long", "rejectedContextTooLong");
            rejection(b, s, "exceeds_pool", "rejectedExceedsPool");
            rejection(b, s, "retry_later", "retryLater");
        }
        family(b, "kvpool_role_events_total", "counter", "what each role did, by event");
        for (RoleStatus s : roles) {
            for (Map.Entry<String, Long> e : s.counters().entrySet()) {
                b.append("kvpool_role_events_total{role=\"").append(s.role()).append("\",event=\"").append(e.getKey()).append("\"} ")
                    .append(e.getValue()).append('\n');
            }
        }
        family(b, "kvpool_unsafe_switch", "gauge", "safeguards switched OFF (incident replay only): 1 each");
        for (String f : config.unsafeSwitches()) {
            b.append("kvpool_unsafe_switch{name=\"").append(f.substring(2)).append("\"} 1\n");
        }
        for (RoleStatus s : roles) {
            b.append(s.prometheus());
        }
    }

    private static void rejection(StringBuilder b, RoleStatus s, String reason, String field) {
        b.append("kvpool_pool_rejections_total{role=\"").append(s.role()).append("\",reason=\"").append(reason).append("\"} ")
            .append(s.pool().counters().getOrDefault(field, 0L)).append('\n');
    }

    private static void poolFamily(StringBuilder b, List<RoleStatus> roles, String name, String type, String help, String field) {
        family(b, name, type, help);
        for (RoleStatus s : roles) {
            b.append(name).append("{role=\"").append(s.role()).append("\"} ").append(s.pool().counters().getOrDefault(field, 0L)).append('\n');
        }
    }

    private static void counter(StringBuilder b, String name, String help, long v) {
        family(b, name, "counter", help);
        b.append(name).append(' ').append(v).append('\n');
    }

    private static void gauge(StringBuilder b, String name, String help, long v) {
        family(b, name, "gauge", help);
        b.append(name).append(' ').append(v).append('\n');
    }

    private static void family(StringBuilder b, String name, String help) {
        family(b, name, "counter", help);
    }

    private static void family(StringBuilder b, String name, String type, String help) {
        b.append("# HELP ").append(name).append(' ').append(help).append("\n# TYPE ").append(name).append(' ').append(type).append('\n');
    }
}
