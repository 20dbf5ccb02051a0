package io.kvpool.examples.server;

import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.SenderMetrics;

import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code GET /metrics} in the Prometheus text format: the router's counters, each role's pool (label
 * {@code role}), each role's own counters, and the transfer engines' metrics (the decode side's
 * {@link io.kvpool.transfer.ReceiverMetrics}: transfers started / committed / failed by reason — checksum
 * and canary failures among them —, deferred releases by outcome with hold times, ignored
 * acknowledgements) and the prefill side's {@link io.kvpool.transfer.SenderMetrics}. Every family is declared
 * once. The libraries write no exposition format: every line of it is written here.
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
        // each role names its peers' builds (kvpool_peer_info); one family may be declared once: gather them last
        final StringBuilder peerInfo = new StringBuilder();
        for (RoleStatus s : roles) {
            final String prom = s.prometheus();
            if (!prom.contains(PEER_INFO)) {
                b.append(prom);
                continue;
            }
            for (String line : prom.split("\n")) {
                if (line.startsWith(PEER_INFO + "{")) {
                    peerInfo.append(line).append('\n');
                } else if (!line.equals(PEER_INFO_TYPE)) {
                    b.append(line).append('\n');
                }
            }
        }
        if (!peerInfo.isEmpty()) {
            b.append(PEER_INFO_TYPE).append('\n').append(peerInfo);
        }
    }

    private static final String PEER_INFO = "kvpool_peer_info";
    private static final String PEER_INFO_TYPE = "# TYPE " + PEER_INFO + " gauge";

    /**
     * The decode role's own families: its {@link ReceiverMetrics}, then the role's gauges.
     *
     * @param m               the receiver's metrics
     * @param activeTransfers transfers the receiver has not finished
     * @param heldSequences   committed sequences decode holds
     * @param linkUp          whether the prefill link is up
     * @return the families, one sample per line
     */
    static String decodeRole(ReceiverMetrics m, int activeTransfers, int heldSequences, boolean linkUp) {
        final StringBuilder b = new StringBuilder(2048);
        receiver(b, m);
        b.append("# TYPE kvpool_receiver_active_transfers gauge\nkvpool_receiver_active_transfers ").append(activeTransfers)
            .append("\n# TYPE kvpool_decode_held_sequences gauge\nkvpool_decode_held_sequences ").append(heldSequences)
            .append("\n# TYPE kvpool_receiver_link_up gauge\nkvpool_receiver_link_up ").append(linkUp ? 1 : 0).append('\n');
        return b.toString();
    }

    /**
     * The decode role's families ({@link #decodeRole(ReceiverMetrics, int, int, boolean)}), then
     * {@code kvpool_peer_info{role="decode",build=…} 1} for each build its UP links' peers run.
     *
     * @param peerBuilds the receiver's {@code peerBuilds()}
     */
    static String decodeRole(ReceiverMetrics m, int activeTransfers, int heldSequences, boolean linkUp, Map<String, Integer> peerBuilds) {
        return decodeRole(m, activeTransfers, heldSequences, linkUp) + peerInfo("decode", peerBuilds);
    }

    /**
     * The prefill role's families ({@link #prefillRole(SenderMetrics, int, boolean)}), then
     * {@code kvpool_peer_info{role="prefill",build=…} 1} for each build its UP links' peers run.
     *
     * @param peerBuilds the sender's {@code peerBuilds()}
     */
    static String prefillRole(SenderMetrics m, int activeTransfers, boolean linkUp, Map<String, Integer> peerBuilds) {
        return prefillRole(m, activeTransfers, linkUp) + peerInfo("prefill", peerBuilds);
    }

    /** The peers' builds, one sample per build (a rollout shows two), sorted; nothing when no link is up. */
    static String peerInfo(String role, Map<String, Integer> peerBuilds) {
        if (peerBuilds.isEmpty()) {
            return "";
        }
        final StringBuilder b = new StringBuilder("# TYPE kvpool_peer_info gauge\n");
        for (String build : new java.util.TreeSet<>(peerBuilds.keySet())) {
            b.append("kvpool_peer_info{role=\"").append(role).append("\",build=\"").append(labelValue(build)).append("\"} 1\n");
        }
        return b.toString();
    }

    /** A label value in the text format: backslash, double quote and line feed escaped. */
    static String labelValue(String v) {
        return v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n");
    }

    /**
     * The prefill role's own families: its sender's counters, then the role's gauges.
     *
     * @param m               the sender's metrics
     * @param activeTransfers transfers the sender has not finished
     * @param linkUp          whether the decode link is up
     * @return the families, one sample per line
     */
    static String prefillRole(SenderMetrics m, int activeTransfers, boolean linkUp) {
        return "# TYPE kvpool_sender_writes_posted_total counter\nkvpool_sender_writes_posted_total " + m.writesPosted()
            + "\n# TYPE kvpool_sender_writes_failed_total counter\nkvpool_sender_writes_failed_total " + m.writesFailed()
            + "\n# TYPE kvpool_sender_forced_cancels_total counter\nkvpool_sender_forced_cancels_total " + m.forcedCancels()
            + "\n# TYPE kvpool_sender_drained_sent_total counter\nkvpool_sender_drained_sent_total " + m.drainedSent()
            + "\n# TYPE kvpool_sender_active_transfers gauge\nkvpool_sender_active_transfers " + activeTransfers
            + "\n# TYPE kvpool_sender_link_up gauge\nkvpool_sender_link_up " + (linkUp ? 1 : 0) + "\n";
    }

    /** Every counter and gauge of a receiver, names prefixed {@code kvpool_} (the text ReceiverMetrics once wrote itself). */
    static void receiver(StringBuilder b, ReceiverMetrics m) {
        b.append("# TYPE kvpool_transfers_started_total counter\nkvpool_transfers_started_total ").append(m.started()).append('\n');
        b.append("# TYPE kvpool_transfers_committed_total counter\nkvpool_transfers_committed_total ").append(m.committed()).append('\n');
        b.append("# TYPE kvpool_transfers_failed_total counter\n");
        for (FailureReason r : FailureReason.values()) {
            b.append("kvpool_transfers_failed_total{reason=\"").append(r.name().toLowerCase(Locale.ROOT)).append("\"} ")
                .append(m.failures(r)).append('\n');
        }
        b.append("# TYPE kvpool_deferred_release_total counter\n");
        for (ReceiverMetrics.Outcome o : ReceiverMetrics.Outcome.values()) {
            b.append("kvpool_deferred_release_total{outcome=\"").append(o.name().toLowerCase(Locale.ROOT)).append("\"} ")
                .append(m.deferredRelease(o)).append('\n');
        }
        b.append("# TYPE kvpool_deferred_release_held_pages gauge\nkvpool_deferred_release_held_pages ").append(m.heldPages()).append('\n');
        b.append("# TYPE kvpool_quarantined_pages gauge\nkvpool_quarantined_pages ").append(m.quarantinedPages()).append('\n');
        b.append("# TYPE kvpool_deferred_release_seconds summary\nkvpool_deferred_release_seconds_count ").append(m.holdsEnded())
            .append("\nkvpool_deferred_release_seconds_sum ").append(m.holdNanosTotal() / 1e9)
            .append("\n# TYPE kvpool_deferred_release_seconds_max gauge\nkvpool_deferred_release_seconds_max ").append(m.holdNanosMax() / 1e9)
            .append('\n');
        b.append("# TYPE kvpool_acks_ignored_total counter\n");
        ack(b, "before_registration", m.ackBeforeRegistration());
        ack(b, "stale_generation", m.ackStaleGeneration());
        ack(b, "duplicate", m.ackDuplicate());
        ack(b, "wrong_peer", m.ackWrongPeer());
        ack(b, "inconsistent", m.ackInconsistent());
        ack(b, "late", m.ackLate());
    }

    private static void ack(StringBuilder b, String why, long n) {
        b.append("kvpool_acks_ignored_total{why=\"").append(why).append("\"} ").append(n).append('\n');
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
