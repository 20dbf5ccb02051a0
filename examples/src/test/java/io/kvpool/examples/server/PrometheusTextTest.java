package io.kvpool.examples.server;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import org.junit.jupiter.api.Test;

import java.util.Locale;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The roles' own families, rendered here since the transfer library writes no exposition format: the
 * same names, labels, order and number formats {@code ReceiverMetrics.toPrometheus()} and the prefill role
 * wrote before (the dashboards and the examples' other metrics tests read them).
 */
class PrometheusTextTest {

    static final KvLayout LAYOUT = new KvLayout(2, 1, 4, DType.FP32, 4);

    @Test
    void theDecodeRolesFamiliesKeepTheirNamesLabelsAndOrderInAnyDefaultLocale() {
        final Locale before = Locale.getDefault();
        // Turkish lower-cases I to a dotless ı: checksum_mismatch would become checksum_mısmatch, a new series
        Locale.setDefault(Locale.forLanguageTag("tr-TR"));
        try (KvPool pool = KvPool.builder(LAYOUT).pages(8).maxContextTokens(32).build();
             TransferReceiver rx = TransferReceiver.builder(pool, identity()).build()) {
            assertEquals("""
                # TYPE kvpool_transfers_started_total counter
                kvpool_transfers_started_total 0
                # TYPE kvpool_transfers_committed_total counter
                kvpool_transfers_committed_total 0
                # TYPE kvpool_transfers_failed_total counter
                kvpool_transfers_failed_total{reason="rejected"} 0
                kvpool_transfers_failed_total{reason="length_mismatch"} 0
                kvpool_transfers_failed_total{reason="canary"} 0
                kvpool_transfers_failed_total{reason="checksum_mismatch"} 0
                kvpool_transfers_failed_total{reason="bad_completion"} 0
                kvpool_transfers_failed_total{reason="sender_aborted"} 0
                kvpool_transfers_failed_total{reason="aborted"} 0
                kvpool_transfers_failed_total{reason="timeout"} 0
                kvpool_transfers_failed_total{reason="peer_lost"} 0
                # TYPE kvpool_deferred_release_total counter
                kvpool_deferred_release_total{outcome="drained"} 0
                kvpool_deferred_release_total{outcome="timeout"} 0
                kvpool_deferred_release_total{outcome="error"} 0
                # TYPE kvpool_deferred_release_held_pages gauge
                kvpool_deferred_release_held_pages 0
                # TYPE kvpool_quarantined_pages gauge
                kvpool_quarantined_pages 0
                # TYPE kvpool_deferred_release_seconds summary
                kvpool_deferred_release_seconds_count 0
                kvpool_deferred_release_seconds_sum 0.0
                # TYPE kvpool_deferred_release_seconds_max gauge
                kvpool_deferred_release_seconds_max 0.0
                # TYPE kvpool_acks_ignored_total counter
                kvpool_acks_ignored_total{why="before_registration"} 0
                kvpool_acks_ignored_total{why="stale_generation"} 0
                kvpool_acks_ignored_total{why="duplicate"} 0
                kvpool_acks_ignored_total{why="wrong_peer"} 0
                kvpool_acks_ignored_total{why="inconsistent"} 0
                kvpool_acks_ignored_total{why="late"} 0
                # TYPE kvpool_receiver_active_transfers gauge
                kvpool_receiver_active_transfers 7
                # TYPE kvpool_decode_held_sequences gauge
                kvpool_decode_held_sequences 2
                # TYPE kvpool_receiver_link_up gauge
                kvpool_receiver_link_up 1
                """, PrometheusText.decodeRole(rx.metrics(), 7, 2, true));
        } finally {
            Locale.setDefault(before);
        }
    }

    @Test
    void thePrefillRolesFamiliesKeepTheirNamesAndOrder() {
        try (KvPool pool = KvPool.builder(LAYOUT).pages(8).maxContextTokens(32).build();
             TransferSender tx = TransferSender.builder(pool, identity()).build()) {
            assertEquals("""
                # TYPE kvpool_sender_writes_posted_total counter
                kvpool_sender_writes_posted_total 0
                # TYPE kvpool_sender_writes_failed_total counter
                kvpool_sender_writes_failed_total 0
                # TYPE kvpool_sender_forced_cancels_total counter
                kvpool_sender_forced_cancels_total 0
                # TYPE kvpool_sender_drained_sent_total counter
                kvpool_sender_drained_sent_total 0
                # TYPE kvpool_sender_active_transfers gauge
                kvpool_sender_active_transfers 4
                # TYPE kvpool_sender_link_up gauge
                kvpool_sender_link_up 0
                """, PrometheusText.prefillRole(tx.metrics(), 4, false));
        }
    }

    @Test
    void eachPeerBuildIsOneInfoSampleOfTheRole() {
        // a rollout: the decode role's links reach prefill peers on two builds
        assertEquals("""
            # TYPE kvpool_peer_info gauge
            kvpool_peer_info{role="decode",build="v1.2.0"} 1
            kvpool_peer_info{role="decode",build="v1.3.0 \\"rc\\""} 1
            """, PrometheusText.peerInfo("decode", java.util.Map.of("v1.3.0 \"rc\"", 1, "v1.2.0", 3)));
        assertEquals("", PrometheusText.peerInfo("prefill", java.util.Map.of()), "no link up: no sample");
        try (KvPool pool = KvPool.builder(LAYOUT).pages(8).maxContextTokens(32).build();
             TransferSender tx = TransferSender.builder(pool, identity()).build()) {
            assertEquals(PrometheusText.prefillRole(tx.metrics(), 0, true) + "# TYPE kvpool_peer_info gauge\n"
                + "kvpool_peer_info{role=\"prefill\",build=\"b9\"} 1\n",
                PrometheusText.prefillRole(tx.metrics(), 0, true, java.util.Map.of("b9", 1)));
        }
    }

    private static PeerIdentity identity() {
        return PeerIdentity.of(LAYOUT, "test-model", "test", "build-1");
    }
}
