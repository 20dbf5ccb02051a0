package io.kvpool.micrometer;

import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.SenderMetrics;
import io.kvpool.transfer.TransferSender;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.MeterBinder;

import java.lang.ref.WeakReference;
import java.util.Objects;
import java.util.function.ToLongFunction;

/**
 * Binds a {@link TransferSender}'s counters (its {@link SenderMetrics}) to a Micrometer registry: offers made,
 * transfers completed, offers failed by reason, DRAINED confirmations sent, writes posted and failed, forced cancels, duplicate descriptors.
 * The module README lists every meter.
 *
 * <p>Each meter reads one {@link SenderMetrics} getter when the registry asks, from the registry's thread;
 * those getters may be called from any thread (the sender itself is single-threaded, and no meter calls it
 * for anything but {@link TransferSender#metrics()}, {@link TransferSender#peerBuilds()} and
 * {@link TransferSender#heartbeatFailures()}, which any thread may read).
 *
 * <p><b>Lifetime:</b> neither the binder nor its meters keep the sender alive: the binder holds it weakly,
 * and every meter holds it weakly (Micrometer's default for function counters). Once the sender is
 * collected, its counters keep their last value. {@link #close()} removes the binder's meters; close it
 * with the sender.
 *
 * <p>To bind several senders to one registry, give each distinct common tags: a registry keeps one meter of
 * a name and tags, so a second binder with the same tags is refused until the first is closed.
 */
public final class TransferSenderMeterBinder implements MeterBinder, AutoCloseable {

    private final WeakReference<TransferSender> sender;
    private final Tags tags;
    private final BoundMeters bound;

    /**
     * A binder with no common tags.
     *
     * @param sender the sender to observe
     * @throws NullPointerException if {@code sender} is null
     */
    @SuppressWarnings("exports") // io.kvpool.transfer is optional: a caller holding a TransferSender reads it
    public TransferSenderMeterBinder(TransferSender sender) {
        this(sender, Tags.empty());
    }

    /**
     * A binder whose meters all carry {@code tags}, e.g. {@code Tags.of("pool", "prefill")}.
     *
     * @param sender the sender to observe
     * @param tags   common tags added to every meter
     * @throws NullPointerException if {@code sender} or {@code tags} is null
     */
    @SuppressWarnings("exports") // io.kvpool.transfer is optional: a caller holding a TransferSender reads it
    public TransferSenderMeterBinder(TransferSender sender, Iterable<Tag> tags) {
        this.sender = new WeakReference<>(Objects.requireNonNull(sender, "sender"));
        this.tags = Tags.of(Objects.requireNonNull(tags, "tags"));
        this.bound = new BoundMeters("TransferSenderMeterBinder", this.tags, sender);
    }

    /**
     * Registers the sender's meters. Binding this binder twice to one registry, or another binder of the same object with the same tags, registers nothing new. Binds
     * nothing if the sender was already collected.
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
        final TransferSender s = sender.get();
        if (s == null) {
            return;
        }
        bound.bind(registry, () -> register(registry, s));
    }

    /** Registers every meter of {@code s} (through {@link BoundMeters#add}). */
    private void register(MeterRegistry registry, TransferSender s) {
        counter(registry, s, "kvpool.transfer.sender.offers", "Offers made (their source pages retained)", SenderMetrics::offered);
        counter(registry, s, "kvpool.transfer.sender.completed", "Transfers completed: every write flushed and the COMPLETION sent",
            SenderMetrics::completed);
        for (FailureReason reason : FailureReason.values()) {
            counter(registry, s, "kvpool.transfer.sender.failures", "Offers that ended without completing, by reason (counted once "
                + "their writes ended and their source pages were released)", m -> m.failures(reason), "reason",
                TransferReceiverMeterBinder.label(reason));
        }
        counter(registry, s, "kvpool.transfer.sender.drained", "DRAINED confirmations sent for failed or aborted transfers",
            SenderMetrics::drainedSent);
        counter(registry, s, "kvpool.transfer.sender.writes.posted", "One-sided page writes posted", SenderMetrics::writesPosted);
        counter(registry, s, "kvpool.transfer.sender.writes.failed", "Posted writes that ended FAILED or CANCELED",
            SenderMetrics::writesFailed);
        counter(registry, s, "kvpool.transfer.sender.forced.cancels",
            "Times a failing transfer's drain deadline passed and the transport was made to cancel its writes",
            SenderMetrics::forcedCancels);
        counter(registry, s, "kvpool.transfer.sender.descriptors.duplicate", "Descriptors received again for a known transfer, ignored",
            SenderMetrics::duplicateDescriptors);
        counter(registry, s, "kvpool.transfer.sender.descriptors.timeout", "Offers dropped because no receiver sent their descriptor "
            + "within the descriptor timeout: the request never reached decode, and its pages were held that long", SenderMetrics::descriptorTimeouts);
        final String cancels = "CANCEL messages (type 7) received from receivers, by outcome (ended: an offer ended, open or "
            + "made after the CANCEL came; ignored: nothing to end, such as an ABORT's echo, a request under way, or an offer that "
            + "was over or never came within the descriptor timeout; retiring: "
            + "the link was retired, a fresh one takes new work)";
        counter(registry, s, "kvpool.transfer.sender.cancels.received", cancels, SenderMetrics::cancelled, "outcome", "ended");
        counter(registry, s, "kvpool.transfer.sender.cancels.received", cancels, SenderMetrics::cancelsIgnored, "outcome", "ignored");
        counter(registry, s, "kvpool.transfer.sender.cancels.received", cancels, SenderMetrics::linksRetired, "outcome", "retiring");
        PeerInfo.bind(registry, s, TransferSender::peerBuilds, new PeerInfo.LinkCounts<>(e -> e.heartbeatFailures(), e -> e.refusedPeers(),
            e -> e.malformedFrames(), e -> e.duplicateHellos()), tags, bound);
    }

    /**
     * Removes the meters this binder registered from every registry it bound them to, so that a sender built
     * again can be bound under the same tags. Idempotent; a closed binder cannot bind again.
     */
    @Override
    public void close() {
        bound.close();
    }

    /** Registers a function counter that reads the sender through its weak reference; the function captures no sender. */
    private void counter(MeterRegistry registry, TransferSender s, String name, String description,
                         ToLongFunction<SenderMetrics> value, String... tag) {
        bound.add(registry, FunctionCounter.builder(name, s, tx -> value.applyAsLong(tx.metrics()))
            .description(description)
            .tags(tags)
            .tags(tag)
            .register(registry));
    }
}
