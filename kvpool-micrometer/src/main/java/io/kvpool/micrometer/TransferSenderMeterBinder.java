package io.kvpool.micrometer;

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
 * Binds a {@link TransferSender}'s counters (its {@link SenderMetrics}) to a Micrometer registry: transfers
 * completed, DRAINED confirmations sent, writes posted and failed, forced cancels, duplicate descriptors.
 * The module README lists every meter.
 *
 * <p>Each meter reads one {@link SenderMetrics} getter when the registry asks, from the registry's thread;
 * those getters may be called from any thread (the sender itself is single-threaded, and no meter calls it
 * for anything but {@link TransferSender#metrics()}).
 *
 * <p><b>Lifetime:</b> neither the binder nor its meters keep the sender alive: the binder holds it weakly,
 * and every meter holds it weakly (Micrometer's default for function counters). Once the sender is
 * collected, its counters keep their last value.
 *
 * <p>To bind several senders to one registry, give each distinct common tags: a registry keeps the first
 * meter of a name and tags and ignores a second.
 */
public final class TransferSenderMeterBinder implements MeterBinder {

    private final WeakReference<TransferSender> sender;
    private final Tags tags;

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
    }

    /**
     * Registers the sender's meters. Binding the same sender twice to one registry registers nothing new.
     * Binds nothing if the sender was already collected.
     *
     * @param registry the registry to add the meters to
     * @throws NullPointerException if {@code registry} is null
     */
    @Override
    public void bindTo(MeterRegistry registry) {
        Objects.requireNonNull(registry, "registry");
        final TransferSender s = sender.get();
        if (s == null) {
            return;
        }
        counter(s, "kvpool.transfer.sender.completed", "Transfers completed: every write flushed and the COMPLETION sent",
            SenderMetrics::completed).register(registry);
        counter(s, "kvpool.transfer.sender.drained", "DRAINED confirmations sent for failed or aborted transfers",
            SenderMetrics::drainedSent).register(registry);
        counter(s, "kvpool.transfer.sender.writes.posted", "One-sided page writes posted", SenderMetrics::writesPosted)
            .register(registry);
        counter(s, "kvpool.transfer.sender.writes.failed", "Posted writes that ended FAILED or CANCELED",
            SenderMetrics::writesFailed).register(registry);
        counter(s, "kvpool.transfer.sender.forced.cancels",
            "Times a failing transfer's drain deadline passed and the transport was made to cancel its writes",
            SenderMetrics::forcedCancels).register(registry);
        counter(s, "kvpool.transfer.sender.descriptors.duplicate", "Descriptors received again for a known transfer, ignored",
            SenderMetrics::duplicateDescriptors).register(registry);
        final String cancels = "CANCEL messages (type 7) received from receivers, by outcome (ended: an offer ended, open or "
            + "made after the CANCEL came; ignored: nothing to end, such as an ABORT's echo, a request under way, or an offer that "
            + "was over or never came within the descriptor timeout; retiring: "
            + "the link was retired, a fresh one takes new work)";
        counter(s, "kvpool.transfer.sender.cancels.received", cancels, SenderMetrics::cancelled).tag("outcome", "ended")
            .register(registry);
        counter(s, "kvpool.transfer.sender.cancels.received", cancels, SenderMetrics::cancelsIgnored).tag("outcome", "ignored")
            .register(registry);
        counter(s, "kvpool.transfer.sender.cancels.received", cancels, SenderMetrics::linksRetired).tag("outcome", "retiring")
            .register(registry);
        PeerInfo.bind(registry, s, TransferSender::peerBuilds, e -> e.heartbeatFailures(), tags);
    }

    private FunctionCounter.Builder<TransferSender> counter(TransferSender s, String name, String description,
                                                            ToLongFunction<SenderMetrics> value) {
        return FunctionCounter.builder(name, s, tx -> value.applyAsLong(tx.metrics()))
            .description(description)
            .tags(tags);
    }
}
