package io.kvpool.micrometer;

import io.kvpool.Admission;
import io.kvpool.transfer.IncomingTransfer;
import io.micrometer.core.instrument.Tags;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.*;

/** The binders' meters scraped by Micrometer's Prometheus registry: the names and labels a dashboard reads. */
class PrometheusScrapeTest {

    /** Every family the four binders produce for one pool pair, as {@code # TYPE} lines. */
    static final Set<String> FAMILIES = new TreeSet<>(List.of(
        "kvpool_pool_pages gauge",
        "kvpool_pool_capacity_pages gauge",
        "kvpool_pool_reserved_pages gauge",
        "kvpool_pool_cached_free_pages gauge",
        "kvpool_pool_prefix_indexed_pages gauge",
        "kvpool_pool_sequences_open gauge",
        "kvpool_pool_reservations_open gauge",
        "kvpool_pool_allocations_total counter",
        "kvpool_pool_prefix_hits_total counter",
        "kvpool_pool_evictions_total counter",
        "kvpool_pool_admissions_rejected_total counter",
        "kvpool_pool_handles_refused_total counter",
        "kvpool_pool_quarantine_events_total counter",
        "kvpool_transfer_started_total counter",
        "kvpool_transfer_committed_total counter",
        "kvpool_transfer_failures_total counter",
        "kvpool_transfer_deferred_releases_total counter",
        "kvpool_transfer_deferred_held_pages gauge",
        "kvpool_transfer_quarantined_pages gauge",
        "kvpool_transfer_quarantine_releases_total counter",
        "kvpool_transfer_released_ranks_total counter",
        "kvpool_transfer_deferred_hold_seconds summary",
        "kvpool_transfer_deferred_hold_max_seconds gauge",
        "kvpool_transfer_acks_ignored_total counter",
        "kvpool_transfer_sender_offers_total counter",
        "kvpool_transfer_sender_completed_total counter",
        "kvpool_transfer_sender_failures_total counter",
        "kvpool_transfer_sender_drained_total counter",
        "kvpool_transfer_sender_writes_posted_total counter",
        "kvpool_transfer_sender_writes_failed_total counter",
        "kvpool_transfer_sender_forced_cancels_total counter",
        "kvpool_transfer_sender_descriptors_duplicate_total counter",
        "kvpool_transfer_sender_descriptors_timeout_total counter",
        "kvpool_transfer_cancels_sent_total counter",
        "kvpool_transfer_allocation_faults_total counter",
        "kvpool_transfer_links_retired_total counter",
        "kvpool_transfer_sender_cancels_received_total counter",
        "kvpool_peer_info gauge",
        "kvpool_peer_links gauge",
        "kvpool_peer_heartbeat_failures_total counter",
        "kvpool_peer_refused_total counter",
        "kvpool_peer_frames_malformed_total counter",
        "kvpool_peer_hellos_duplicate_total counter"));

    @Test
    void aScrapeHasEveryFamilyWithHelpAndTheExpectedNamesLabelsAndValuesInAnyDefaultLocale() {
        final Locale before = Locale.getDefault();
        // Turkish lower-cases I to a dotless ı: checksum_mismatch would become a new series
        Locale.setDefault(Locale.forLanguageTag("tr-TR"));
        try (SimRig rig = new SimRig()) {
            final PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
            new KvPoolMeterBinder(rig.decode, Tags.of("pool", "decode")).bindTo(registry);
            new KvPoolMeterBinder(rig.prefill, Tags.of("pool", "prefill")).bindTo(registry);
            new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode")).bindTo(registry);
            new TransferSenderMeterBinder(rig.sender, Tags.of("pool", "prefill")).bindTo(registry);
            final IncomingTransfer t = rig.transfer(1, 10); // 3 pages
            rig.run(200);
            assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
            t.sequence().close();
            assertEquals(Admission.Decision.REJECTED_CONTEXT_TOO_LONG, rig.decode.admit(1000, 0).decision());

            final String text = registry.scrape();
            final List<String> lines = text.lines().toList();
            assertEquals(FAMILIES, lines.stream().filter(l -> l.startsWith("# TYPE ")).map(l -> l.substring(7))
                .collect(Collectors.toCollection(TreeSet::new)), text);
            for (String family : FAMILIES) {
                final String name = family.substring(0, family.indexOf(' '));
                assertTrue(lines.stream().anyMatch(l -> l.startsWith("# HELP " + name + " ") && l.length() > 9 + name.length()),
                    () -> "no description for " + name + ":\n" + text);
            }
            for (String sample : List.of(
                "kvpool_pool_pages{pool=\"decode\",state=\"free\"} 32.0",
                "kvpool_pool_pages{pool=\"prefill\",state=\"owned\"} 0.0",
                "kvpool_pool_capacity_pages{pool=\"decode\"} 32.0",
                "kvpool_pool_allocations_total{pool=\"decode\"} 3.0",
                "kvpool_pool_admissions_rejected_total{pool=\"decode\",reason=\"context_too_long\"} 1.0",
                "kvpool_pool_admissions_rejected_total{pool=\"prefill\",reason=\"context_too_long\"} 0.0",
                "kvpool_transfer_started_total{pool=\"decode\"} 1.0",
                "kvpool_transfer_committed_total{pool=\"decode\"} 1.0",
                "kvpool_transfer_failures_total{pool=\"decode\",reason=\"checksum_mismatch\"} 0.0",
                "kvpool_transfer_deferred_releases_total{outcome=\"drained\",pool=\"decode\"} 0.0",
                "kvpool_transfer_deferred_hold_seconds_count{pool=\"decode\"} 0",
                "kvpool_transfer_acks_ignored_total{pool=\"decode\",reason=\"stale_generation\"} 0.0",
                "kvpool_transfer_sender_completed_total{pool=\"prefill\"} 1.0",
                "kvpool_transfer_sender_writes_posted_total{pool=\"prefill\"} 3.0",
                "kvpool_transfer_cancels_sent_total{pool=\"decode\"} 0.0",
                "kvpool_transfer_sender_cancels_received_total{outcome=\"ended\",pool=\"prefill\"} 0.0",
                "kvpool_peer_info{build=\"build-1\",pool=\"decode\"} 1",
                "kvpool_peer_info{build=\"build-1\",pool=\"prefill\"} 1",
                "kvpool_peer_links{pool=\"decode\"} 1.0")) {
                assertTrue(lines.contains(sample), () -> "no line " + sample + " in\n" + text);
            }
        } finally {
            Locale.setDefault(before);
        }
    }
}
