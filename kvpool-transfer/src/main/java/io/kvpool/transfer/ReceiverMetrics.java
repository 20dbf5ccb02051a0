package io.kvpool.transfer;

import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Counters and gauges of a {@link TransferReceiver}. Written by the receiver's thread, readable from any
 * thread (e.g. a metrics endpoint). {@link #toPrometheus()} renders them in the Prometheus text format.
 */
public final class ReceiverMetrics {

    /** How a deferred release (a failed transfer's hold on its pages) ended. */
    public enum Outcome {
        /** Every expected sender confirmed its writes ended; the pages were freed. */
        DRAINED,
        /** No confirmation by the deadline: the pages were quarantined. */
        TIMEOUT,
        /** A sender's link failed or was refused before it confirmed: the pages were quarantined. */
        ERROR
    }

    final LongAdder started = new LongAdder();
    final LongAdder committed = new LongAdder();
    final EnumMap<FailureReason, LongAdder> failures = new EnumMap<>(FailureReason.class);
    final EnumMap<Outcome, LongAdder> deferredRelease = new EnumMap<>(Outcome.class);
    final AtomicLong heldPages = new AtomicLong();
    final AtomicLong quarantinedPages = new AtomicLong();
    final LongAdder quarantineReleases = new LongAdder();
    final LongAdder holdNanosTotal = new LongAdder();
    final AtomicLong holdNanosMax = new AtomicLong();
    final LongAdder holdsEnded = new LongAdder();
    final LongAdder ackBeforeRegistration = new LongAdder();
    final LongAdder ackStaleGeneration = new LongAdder();
    final LongAdder ackDuplicate = new LongAdder();
    final LongAdder ackWrongPeer = new LongAdder();
    final LongAdder ackInconsistent = new LongAdder();
    final LongAdder ackLate = new LongAdder();

    ReceiverMetrics() {
        for (FailureReason r : FailureReason.values()) {
            failures.put(r, new LongAdder());
        }
        for (Outcome o : Outcome.values()) {
            deferredRelease.put(o, new LongAdder());
        }
    }

    void holdEnded(long nanos) {
        holdsEnded.increment();
        holdNanosTotal.add(nanos);
        holdNanosMax.accumulateAndGet(nanos, Math::max);
    }

    /** @return transfers started (admitted or not) */
    public long started() {
        return started.sum();
    }

    /** @return transfers committed for decode */
    public long committed() {
        return committed.sum();
    }

    /** @return transfers that failed for that reason */
    public long failures(FailureReason reason) {
        return failures.get(reason).sum();
    }

    /** @return {@code deferred_release_total{outcome}}: deferred releases that ended that way */
    public long deferredRelease(Outcome outcome) {
        return deferredRelease.get(outcome).sum();
    }

    /** @return gauge: pages held DRAINING or QUARANTINED by failed transfers now */
    public long heldPages() {
        return heldPages.get();
    }

    /** @return gauge: of those, pages QUARANTINED now */
    public long quarantinedPages() {
        return quarantinedPages.get();
    }

    /** @return quarantined transfers released after the transport proved the peer can no longer write */
    public long quarantineReleases() {
        return quarantineReleases.sum();
    }

    /** @return holds that ended (pages freed), and the total and longest hold in nanoseconds */
    public long holdsEnded() {
        return holdsEnded.sum();
    }

    /** @return total nanoseconds pages of ended holds were held */
    public long holdNanosTotal() {
        return holdNanosTotal.sum();
    }

    /** @return the longest hold so far, in nanoseconds */
    public long holdNanosMax() {
        return holdNanosMax.get();
    }

    /** @return acknowledgements (completions, DRAINED) ignored because their transfer was not registered yet */
    public long ackBeforeRegistration() {
        return ackBeforeRegistration.sum();
    }

    /** @return acknowledgements ignored because they carried an older generation of the transfer slot */
    public long ackStaleGeneration() {
        return ackStaleGeneration.sum();
    }

    /** @return acknowledgements ignored because the same sender had already acknowledged */
    public long ackDuplicate() {
        return ackDuplicate.sum();
    }

    /** @return acknowledgements ignored because they came from a link that is not that rank's sender */
    public long ackWrongPeer() {
        return ackWrongPeer.sum();
    }

    /** @return DRAINED acknowledgements ignored because their counts do not add up (posted ≠ succeeded + failed) */
    public long ackInconsistent() {
        return ackInconsistent.sum();
    }

    /** @return acknowledgements that arrived after the transfer was quarantined or released (never release anything) */
    public long ackLate() {
        return ackLate.sum();
    }

    /** @return every counter and gauge in the Prometheus text exposition format, names prefixed {@code kvpool_} */
    public String toPrometheus() {
        final StringBuilder b = new StringBuilder(1024);
        b.append("# TYPE kvpool_transfers_started_total counter\nkvpool_transfers_started_total ").append(started()).append('\n');
        b.append("# TYPE kvpool_transfers_committed_total counter\nkvpool_transfers_committed_total ").append(committed()).append('\n');
        b.append("# TYPE kvpool_transfers_failed_total counter\n");
        for (Map.Entry<FailureReason, LongAdder> e : failures.entrySet()) {
            b.append("kvpool_transfers_failed_total{reason=\"").append(e.getKey().name().toLowerCase()).append("\"} ")
                .append(e.getValue().sum()).append('\n');
        }
        b.append("# TYPE kvpool_deferred_release_total counter\n");
        for (Map.Entry<Outcome, LongAdder> e : deferredRelease.entrySet()) {
            b.append("kvpool_deferred_release_total{outcome=\"").append(e.getKey().name().toLowerCase()).append("\"} ")
                .append(e.getValue().sum()).append('\n');
        }
        b.append("# TYPE kvpool_deferred_release_held_pages gauge\nkvpool_deferred_release_held_pages ").append(heldPages()).append('\n');
        b.append("# TYPE kvpool_quarantined_pages gauge\nkvpool_quarantined_pages ").append(quarantinedPages()).append('\n');
        b.append("# TYPE kvpool_deferred_release_seconds summary\nkvpool_deferred_release_seconds_count ").append(holdsEnded())
            .append("\nkvpool_deferred_release_seconds_sum ").append(holdNanosTotal() / 1e9)
            .append("\n# TYPE kvpool_deferred_release_seconds_max gauge\nkvpool_deferred_release_seconds_max ").append(holdNanosMax() / 1e9).append('\n');
        b.append("# TYPE kvpool_acks_ignored_total counter\n");
        ack(b, "before_registration", ackBeforeRegistration());
        ack(b, "stale_generation", ackStaleGeneration());
        ack(b, "duplicate", ackDuplicate());
        ack(b, "wrong_peer", ackWrongPeer());
        ack(b, "inconsistent", ackInconsistent());
        ack(b, "late", ackLate());
        return b.toString();
    }

    private static void ack(StringBuilder b, String why, long n) {
        b.append("kvpool_acks_ignored_total{why=\"").append(why).append("\"} ").append(n).append('\n');
    }
}
