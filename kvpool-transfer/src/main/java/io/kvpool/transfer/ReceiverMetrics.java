package io.kvpool.transfer;

import java.util.EnumMap;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Counters and gauges of a {@link TransferReceiver}. Written by the receiver's thread, readable from any
 * thread (e.g. a metrics endpoint or a Micrometer binder). Each value is read on its own, so a set of reads
 * is not one atomic cut. The library writes no exposition format: kvpool-micrometer binds these values to
 * any Micrometer registry (the example server serves them through Micrometer's Prometheus registry).
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
    final EnumMap<WriteProof, LongAdder> releasedRanks = new EnumMap<>(WriteProof.class);
    final LongAdder linksRetired = new LongAdder();
    final LongAdder cancelsSent = new LongAdder();
    final LongAdder allocationFaults = new LongAdder();
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
        for (WriteProof p : WriteProof.values()) {
            releasedRanks.put(p, new LongAdder());
        }
    }

    void holdEnded(long nanos) {
        holdsEnded.increment();
        holdNanosTotal.add(nanos);
        holdNanosMax.accumulateAndGet(nanos, Math::max);
    }

    /**
     * Transfers started with {@link TransferReceiver#start}, admitted or not: each call that returned a transfer. A
     * call that throws is not counted: one refused for its arguments, one whose pool failed to allocate
     * ({@link #allocationFaults()}), or one whose pool was closed under it.
     *
     * @return the count so far
     */
    public long started() {
        return started.sum();
    }

    /**
     * Transfers verified and committed for decode.
     *
     * @return the count so far
     */
    public long committed() {
        return committed.sum();
    }

    /**
     * Transfers that failed, or were rejected at admission, for one reason.
     *
     * @param reason the reason
     * @return the count so far
     * @throws NullPointerException if {@code reason} is null
     */
    public long failures(FailureReason reason) {
        return failures.get(Objects.requireNonNull(reason, "reason")).sum();
    }

    /**
     * Deferred releases (a failed transfer's hold on its pages) that ended one way.
     *
     * @param outcome how they ended
     * @return the count so far
     * @throws NullPointerException if {@code outcome} is null
     */
    public long deferredRelease(Outcome outcome) {
        return deferredRelease.get(Objects.requireNonNull(outcome, "outcome")).sum();
    }

    /**
     * A gauge: pages failed transfers hold DRAINING or QUARANTINED now.
     *
     * @return the pages now
     */
    public long heldPages() {
        return heldPages.get();
    }

    /**
     * A gauge: of the {@link #heldPages() held pages}, those QUARANTINED now.
     *
     * @return the pages now
     */
    public long quarantinedPages() {
        return quarantinedPages.get();
    }

    /**
     * Quarantined transfers released after the transport proved the peer can no longer write.
     *
     * @return the count so far
     */
    public long quarantineReleases() {
        return quarantineReleases.sum();
    }

    /**
     * CANCEL messages sent to senders: a request rejected before any descriptor left, or a failed transfer's
     * senders told by request (a sender whose descriptor was lost still ends its offer). Links of protocol
     * version 1 get none.
     *
     * @return the count so far
     */
    public long cancelsSent() {
        return cancelsSent.sum();
    }

    /**
     * Calls of {@link TransferReceiver#start} that threw because the pool admitted the request but failed to
     * allocate its pages for another reason than a lack of them (the storage failed to fill a page). Each is a
     * fault to investigate, not a refusal.
     *
     * @return the count so far
     */
    public long allocationFaults() {
        return allocationFaults.sum();
    }

    /**
     * Sender ranks of failed transfers whose pages were freed, by what proved each rank could write nothing more
     * into them: one per rank of each freed transfer. {@link WriteProof#NONE} counts ranks whose pages were freed
     * while their writes could still land, and stays 0 unless {@link TransferSafeguard#DRAIN_WAIT} or
     * {@link TransferSafeguard#QUARANTINE_ON_TIMEOUT} is switched off: a deployment check can assert it.
     *
     * @param proof the proof
     * @return the count so far
     * @throws NullPointerException if {@code proof} is null
     */
    public long releasedRanks(WriteProof proof) {
        return releasedRanks.get(Objects.requireNonNull(proof, "proof")).sum();
    }

    /**
     * Links retired rather than torn down at once: a write on each was unproven and it could not revoke one
     * registration, so it took no new transfer and was torn down once those in flight on it ended.
     *
     * @return the count so far
     */
    public long linksRetired() {
        return linksRetired.sum();
    }

    /**
     * Holds that ended: a failed transfer's pages freed, after a drain or a release from quarantine.
     *
     * @return the count so far
     */
    public long holdsEnded() {
        return holdsEnded.sum();
    }

    /**
     * The time the {@link #holdsEnded() ended holds} lasted, added up.
     *
     * @return nanoseconds so far
     */
    public long holdNanosTotal() {
        return holdNanosTotal.sum();
    }

    /**
     * The longest hold that ended so far.
     *
     * @return nanoseconds, 0 before the first hold ended
     */
    public long holdNanosMax() {
        return holdNanosMax.get();
    }

    /**
     * Acknowledgements (completions, DRAINED) ignored because their transfer was not registered yet.
     *
     * @return the count so far
     */
    public long ackBeforeRegistration() {
        return ackBeforeRegistration.sum();
    }

    /**
     * Acknowledgements ignored because they carried an older generation of the transfer slot.
     *
     * @return the count so far
     */
    public long ackStaleGeneration() {
        return ackStaleGeneration.sum();
    }

    /**
     * Acknowledgements ignored because the same sender had already acknowledged.
     *
     * @return the count so far
     */
    public long ackDuplicate() {
        return ackDuplicate.sum();
    }

    /**
     * Acknowledgements ignored because they came from a link that is not that rank's sender.
     *
     * @return the count so far
     */
    public long ackWrongPeer() {
        return ackWrongPeer.sum();
    }

    /**
     * Acknowledgements ignored because they contradict themselves: a negative count or rank, or a DRAINED
     * whose posted is not succeeded + failed.
     *
     * @return the count so far
     */
    public long ackInconsistent() {
        return ackInconsistent.sum();
    }

    /**
     * Acknowledgements that came too late to count: after their transfer was released, unproven after it left
     * RECEIVING, or from the suspect sender of a quarantined transfer. They never release anything. (A proven ack
     * from a sender that is not a suspect still confirms it in a quarantine: not counted here.)
     *
     * @return the count so far
     */
    public long ackLate() {
        return ackLate.sum();
    }

    /** @return every value by name, for logs and test messages */
    @Override
    public String toString() {
        return "ReceiverMetrics[started=" + started() + ", committed=" + committed() + ", failures=" + failures
            + ", deferredRelease=" + deferredRelease + ", heldPages=" + heldPages() + ", quarantinedPages=" + quarantinedPages()
            + ", quarantineReleases=" + quarantineReleases() + ", releasedRanks=" + releasedRanks + ", linksRetired=" + linksRetired() + ", cancelsSent=" + cancelsSent() + ", allocationFaults=" + allocationFaults() + ", holdsEnded=" + holdsEnded() + ", holdNanosTotal=" + holdNanosTotal()
            + ", holdNanosMax=" + holdNanosMax() + ", ackBeforeRegistration=" + ackBeforeRegistration() + ", ackStaleGeneration="
            + ackStaleGeneration() + ", ackDuplicate=" + ackDuplicate() + ", ackWrongPeer=" + ackWrongPeer() + ", ackInconsistent="
            + ackInconsistent() + ", ackLate=" + ackLate() + "]";
    }
}
