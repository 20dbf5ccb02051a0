package io.kvpool.transfer;

import java.util.EnumMap;
import java.util.Objects;
import java.util.concurrent.atomic.LongAdder;

/**
 * Counters of a {@link TransferSender}. Written by the sender's thread, readable from any thread (e.g. a
 * metrics endpoint or a Micrometer binder). Every value only grows; each is read on its own, so a set of
 * reads is not one atomic cut. Obtain it with {@link TransferSender#metrics()}.
 *
 * <p>Offers balance: read on the sender's thread, {@code offered() == completed() + Σ failures(reason) +
 * activeTransfers()}, every offer counted once, when it ends.
 */
public final class SenderMetrics {

    final LongAdder offered = new LongAdder();
    final EnumMap<FailureReason, LongAdder> failures = new EnumMap<>(FailureReason.class);
    final LongAdder completed = new LongAdder();
    final LongAdder drainedSent = new LongAdder();
    final LongAdder writesPosted = new LongAdder();
    final LongAdder writesFailed = new LongAdder();
    final LongAdder forcedCancels = new LongAdder();
    final LongAdder duplicateDescriptors = new LongAdder();
    final LongAdder cancelled = new LongAdder();
    final LongAdder cancelsIgnored = new LongAdder();
    final LongAdder linksRetired = new LongAdder();

    SenderMetrics() {
        for (FailureReason r : FailureReason.values()) {
            failures.put(r, new LongAdder());
        }
    }

    /**
     * Offers made: each {@link TransferSender#offer} call that returned a transfer (its pages retained). A call that
     * throws is not counted.
     *
     * @return the count so far
     */
    public long offered() {
        return offered.sum();
    }

    /**
     * Offers that ended without completing, for one reason: refused or cancelled by the receiver, aborted, timed
     * out waiting for a descriptor, lost with their link, or ended by the sender's close. Counted when the offer
     * ends (its writes terminal, its source pages released).
     *
     * @param reason the reason
     * @return the count so far
     * @throws NullPointerException if {@code reason} is null
     */
    public long failures(FailureReason reason) {
        return failures.get(Objects.requireNonNull(reason, "reason")).sum();
    }

    /** Counts an offer that ended without completing. */
    void failed(FailureReason reason) {
        failures.get(reason).increment();
    }

    /**
     * Offers a receiver's CANCEL ended (it rejected or aborted the request) while they waited for a descriptor:
     * released at once, nothing was posted. A CANCEL that came before its offer ends the offer when it comes, within
     * the descriptor timeout.
     *
     * @return the count so far
     */
    public long cancelled() {
        return cancelled.sum();
    }

    /**
     * CANCELs that ended nothing: the echo of an ABORT that ended the attempt, a request under way or over (another
     * attempt's), a descriptor waiting for its offer, another receiver's request, too many kept, a request not
     * offered within the descriptor timeout after the CANCEL came, or a link's retirement on a link not up (retired
     * already).
     *
     * @return the count so far
     */
    public long cancelsIgnored() {
        return cancelsIgnored.sum();
    }

    /**
     * Links the receiver retired (a CANCEL of reason RETIRING): they take no new transfer, finish those in flight,
     * and are torn down by the receiver; the owner opens a fresh link ({@link Peer.State#RETIRING}).
     *
     * @return the count so far
     */
    public long linksRetired() {
        return linksRetired.sum();
    }

    /**
     * Offers dropped because no descriptor came for them within the descriptor timeout: decode never asked for the
     * request (it went to another prefill instance, decode gave up before starting it, or its CANCEL was lost). Their
     * source pages were held until then and released. The same count as {@code failures(TIMEOUT)}.
     *
     * @return the count so far
     */
    public long descriptorTimeouts() {
        return failures(FailureReason.TIMEOUT); // the one way an offer times out at the sender
    }

    /**
     * Transfers this sender completed: every write of its share flushed and the COMPLETION sent.
     *
     * @return the count so far
     */
    public long completed() {
        return completed.sum();
    }

    /**
     * DRAINED confirmations this sender sent for failed or aborted transfers.
     *
     * @return the count so far
     */
    public long drainedSent() {
        return drainedSent.sum();
    }

    /**
     * One-sided page writes this sender posted.
     *
     * @return the count so far
     */
    public long writesPosted() {
        return writesPosted.sum();
    }

    /**
     * Posted writes that ended FAILED or CANCELED (a subset of {@link #writesPosted()}).
     *
     * @return the count so far
     */
    public long writesFailed() {
        return writesFailed.sum();
    }

    /**
     * Times a failing transfer's drain deadline passed and the sender made the transport force-cancel its writes.
     *
     * @return the count so far
     */
    public long forcedCancels() {
        return forcedCancels.sum();
    }

    /**
     * Descriptors received again for a transfer already known (duplicated frames); each was ignored.
     *
     * @return the count so far
     */
    public long duplicateDescriptors() {
        return duplicateDescriptors.sum();
    }

    /** @return every counter by name, for logs and test messages */
    @Override
    public String toString() {
        return "SenderMetrics[offered=" + offered() + ", completed=" + completed() + ", failures=" + failures + ", drainedSent=" + drainedSent()
            + ", writesPosted=" + writesPosted()
            + ", writesFailed=" + writesFailed() + ", forcedCancels=" + forcedCancels() + ", duplicateDescriptors="
            + duplicateDescriptors() + ", cancelled=" + cancelled() + ", cancelsIgnored=" + cancelsIgnored() + ", linksRetired="
            + linksRetired() + ", descriptorTimeouts=" + descriptorTimeouts() + "]";
    }
}
