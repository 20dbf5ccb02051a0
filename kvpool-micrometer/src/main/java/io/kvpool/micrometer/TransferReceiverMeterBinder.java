package io.kvpool.micrometer;

import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.WriteProof;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.FunctionTimer;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.TimeGauge;
import io.micrometer.core.instrument.binder.MeterBinder;

import java.lang.ref.WeakReference;
import java.util.Locale;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.ToLongFunction;

/**
 * Binds a {@link TransferReceiver}'s metrics (its {@link ReceiverMetrics}) to a Micrometer registry:
 * transfers started, committed and failed by reason, deferred releases by outcome with their hold time,
 * the pages failed transfers hold, and acknowledgements ignored by reason. The module README lists every
 * meter.
 *
 * <p>Each meter reads one {@link ReceiverMetrics} getter when the registry asks, from the registry's
 * thread; those getters may be called from any thread (the receiver itself is single-threaded, and no
 * meter calls it for anything but {@link TransferReceiver#metrics()}, {@link TransferReceiver#peerBuilds()} and
 * {@link TransferReceiver#heartbeatFailures()}, which any thread may read).
 *
 * <p><b>Lifetime:</b> neither the binder nor its meters keep the receiver alive: the binder holds it
 * weakly, and every meter holds it weakly (Micrometer's default, {@code strongReference(false)}). Once
 * the receiver is collected, its gauges read NaN and its counters keep their last value. {@link #close()}
 * removes the binder's meters; close it with the receiver.
 *
 * <p>To bind several receivers to one registry, give each distinct common tags: a registry keeps one meter
 * of a name and tags, so a second binder with the same tags is refused until the first is closed.
 */
public final class TransferReceiverMeterBinder implements MeterBinder, AutoCloseable {

    private final WeakReference<TransferReceiver> receiver;
    private final Tags tags;
    private final BoundMeters bound;

    /**
     * A binder with no common tags.
     *
     * @param receiver the receiver to observe
     * @throws NullPointerException if {@code receiver} is null
     */
    @SuppressWarnings("exports") // io.kvpool.transfer is optional: a caller holding a TransferReceiver reads it
    public TransferReceiverMeterBinder(TransferReceiver receiver) {
        this(receiver, Tags.empty());
    }

    /**
     * A binder whose meters all carry {@code tags}, e.g. {@code Tags.of("pool", "decode")}.
     *
     * @param receiver the receiver to observe
     * @param tags     common tags added to every meter
     * @throws NullPointerException if {@code receiver} or {@code tags} is null
     */
    @SuppressWarnings("exports") // io.kvpool.transfer is optional: a caller holding a TransferReceiver reads it
    public TransferReceiverMeterBinder(TransferReceiver receiver, Iterable<Tag> tags) {
        this.receiver = new WeakReference<>(Objects.requireNonNull(receiver, "receiver"));
        this.tags = Tags.of(Objects.requireNonNull(tags, "tags"));
        this.bound = new BoundMeters("TransferReceiverMeterBinder", this.tags, receiver);
    }

    /**
     * Registers the receiver's meters. Binding this binder twice to one registry, or another binder of the same object with the same tags, registers nothing new. Binds
     * nothing if the receiver was already collected.
     *
     * @param registry the registry to add the meters to
     * @throws NullPointerException  if {@code registry} is null
     * @throws IllegalStateException if this binder is closed, or the registry holds meters of the same names and
     *                               tags observing another object (close their binder first, or give this one
     *                               other tags); nothing of this bind is left registered
     */
    @Override
    public void bindTo(MeterRegistry registry) {
        Objects.requireNonNull(registry, "registry");
        final TransferReceiver r = receiver.get();
        if (r == null) {
            return;
        }
        bound.bind(registry, () -> register(registry, r));
    }

    /** Registers every meter of {@code r} (through {@link BoundMeters#add}). */
    private void register(MeterRegistry registry, TransferReceiver r) {
        counter(registry, r, "kvpool.transfer.started", "Transfers started, admitted or not", ReceiverMetrics::started);
        counter(registry, r, "kvpool.transfer.committed", "Transfers verified and committed for decode", ReceiverMetrics::committed);
        for (FailureReason reason : FailureReason.values()) {
            counter(registry, r, "kvpool.transfer.failures", "Transfers that did not commit, by reason (rejected: refused at admission)",
                m -> m.failures(reason), "reason", label(reason));
        }
        for (ReceiverMetrics.Outcome outcome : ReceiverMetrics.Outcome.values()) {
            counter(registry, r, "kvpool.transfer.deferred.releases",
                "Failed transfers' holds on their pages that ended, by outcome (drained: freed; timeout, error: quarantined)",
                m -> m.deferredRelease(outcome), "outcome", label(outcome));
        }
        gauge(registry, r, "kvpool.transfer.deferred.held", "Pages failed transfers hold DRAINING or QUARANTINED now",
            ReceiverMetrics::heldPages);
        gauge(registry, r, "kvpool.transfer.quarantined", "Pages failed transfers hold QUARANTINED now", ReceiverMetrics::quarantinedPages);
        counter(registry, r, "kvpool.transfer.quarantine.releases",
            "Quarantined transfers released after the transport proved the peer can no longer write",
            ReceiverMetrics::quarantineReleases);
        for (WriteProof proof : WriteProof.values()) {
            counter(registry, r, "kvpool.transfer.released.ranks",
                "Sender ranks of failed transfers whose pages were freed, by what proved the rank could write no more into them "
                    + "(none: freed unproven, only with a safeguard switched off)",
                m -> m.releasedRanks(proof), "proof", label(proof));
        }
        bound.add(registry, FunctionTimer.builder("kvpool.transfer.deferred.hold", r,
                rx -> rx.metrics().holdsEnded(), rx -> (double) rx.metrics().holdNanosTotal(), TimeUnit.NANOSECONDS)
            .description("How long failed transfers held their pages, for the holds that ended (pages freed)")
            .tags(tags)
            .register(registry));
        bound.add(registry, TimeGauge.builder("kvpool.transfer.deferred.hold.max", r, TimeUnit.NANOSECONDS,
                rx -> (double) rx.metrics().holdNanosMax())
            .strongReference(false)
            .description("The longest hold of a failed transfer's pages that ended so far")
            .tags(tags)
            .register(registry));
        final String ignored = "Acknowledgements (completions, DRAINED) ignored, by reason; none of them released pages";
        ack(registry, r, ignored, "before_registration", ReceiverMetrics::ackBeforeRegistration);
        ack(registry, r, ignored, "stale_generation", ReceiverMetrics::ackStaleGeneration);
        ack(registry, r, ignored, "duplicate", ReceiverMetrics::ackDuplicate);
        ack(registry, r, ignored, "wrong_peer", ReceiverMetrics::ackWrongPeer);
        ack(registry, r, ignored, "inconsistent", ReceiverMetrics::ackInconsistent);
        ack(registry, r, ignored, "late", ReceiverMetrics::ackLate);
        counter(registry, r, "kvpool.transfer.cancels.sent",
            "CANCEL messages (type 7) sent to senders: a request refused before any descriptor left, or a failed transfer's "
                + "senders told by request", ReceiverMetrics::cancelsSent);
        counter(registry, r, "kvpool.transfer.allocation.faults",
            "Requests the decode pool admitted but could not allocate pages for, for another reason than a lack of "
                + "them (its storage failed): start threw, nothing was held", ReceiverMetrics::allocationFaults);
        counter(registry, r, "kvpool.transfer.links.retired",
            "Links retired after an unproven write (no revocable registration): no new transfer on them, torn down once "
                + "those in flight ended", ReceiverMetrics::linksRetired);
        PeerInfo.bind(registry, r, TransferReceiver::peerBuilds, new PeerInfo.LinkCounts<>(e -> e.heartbeatFailures(), e -> e.refusedPeers(),
            e -> e.malformedFrames(), e -> e.duplicateHellos()), tags, bound);
    }

    /**
     * Removes the meters this binder registered from every registry it bound them to, so that a receiver built
     * again can be bound under the same tags. Idempotent; a closed binder cannot bind again.
     */
    @Override
    public void close() {
        bound.close();
    }

    /** @return the tag value of an enum constant: its name in lower case, in every default locale */
    static String label(Enum<?> e) {
        return e.name().toLowerCase(Locale.ROOT);
    }

    private void ack(MeterRegistry registry, TransferReceiver r, String description, String reason,
                     ToLongFunction<ReceiverMetrics> value) {
        counter(registry, r, "kvpool.transfer.acks.ignored", description, value, "reason", reason);
    }

    /** Registers a gauge of pages that reads the receiver through its weak reference; the function captures no receiver. */
    private void gauge(MeterRegistry registry, TransferReceiver r, String name, String description,
                       ToLongFunction<ReceiverMetrics> value) {
        bound.add(registry, Gauge.builder(name, r, rx -> value.applyAsLong(rx.metrics()))
            .strongReference(false)
            .description(description)
            .baseUnit("pages")
            .tags(tags)
            .register(registry));
    }

    /** Registers a function counter that reads the receiver through its weak reference; the function captures no receiver. */
    private void counter(MeterRegistry registry, TransferReceiver r, String name, String description,
                         ToLongFunction<ReceiverMetrics> value, String... tag) {
        bound.add(registry, FunctionCounter.builder(name, r, rx -> value.applyAsLong(rx.metrics()))
            .description(description)
            .tags(tags)
            .tags(tag)
            .register(registry));
    }
}
