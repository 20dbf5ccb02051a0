package io.kvpool.transfer.sim;

/**
 * What a {@link SimNetwork} does wrong, and how often. Probabilities are per write or per control frame.
 * {@link #NONE} is a perfect network with small random delays.
 *
 * @param minWriteDelayNanos  a write lands at least this long after it is posted
 * @param maxWriteDelayNanos  and at most this long (uniform; writes overtake each other)
 * @param writeFail           a write completes FAILED; half of those land anyway (a failed write may have landed)
 * @param lostWrite           a write completes OK, its flush succeeds, and it never lands (a transport bug,
 *                            see docs/dependencies.md, "UCX from Java")
 * @param misdirectedWrite    a write lands in another page of the same registration (the checksum's case)
 * @param corruptedWrite      a write lands with one byte flipped
 * @param stragglerWrite      a write lands very late: between {@code stragglerMinNanos} and {@code stragglerMaxNanos}
 *                            after posting, and its completion waits as long (a frozen peer)
 * @param stragglerMinNanos   see {@code stragglerWrite}
 * @param stragglerMaxNanos   see {@code stragglerWrite}
 * @param frameLoss           a control frame is lost
 * @param frameDuplicate      a control frame is delivered twice: beyond what a {@link io.kvpool.transfer.spi.PeerLink}
 *                            promises (each frame at most once), to show the engines survive it. One effect is
 *                            known: a duplicated CANCEL, stored as coming before its offer, ends the request's next
 *                            offer if one comes within the sender's descriptor timeout.
 * @param maxFrameDelayNanos  control frames take up to this long (in order per direction)
 * @param lateLanding         a write (not a straggler) completes at the usual time, OK or FAILED as drawn, and lands
 *                            between {@code lateLandingMinNanos} and {@code lateLandingMaxNanos} after posting: the
 *                            transport said it ended long before its bytes arrive, as a one-sided RDMA write's local
 *                            completion can. A flush on its end still answers only after it lands (a flush proves
 *                            delivery); a write that ended FAILED or CANCELED proves nothing and may land after
 *                            anything its sender did since
 * @param lateLandingMinNanos see {@code lateLanding}
 * @param lateLandingMaxNanos see {@code lateLanding}
 */
public record SimFaults(long minWriteDelayNanos, long maxWriteDelayNanos, double writeFail, double lostWrite,
                        double misdirectedWrite, double corruptedWrite, double stragglerWrite, long stragglerMinNanos,
                        long stragglerMaxNanos, double frameLoss, double frameDuplicate, long maxFrameDelayNanos,
                        double lateLanding, long lateLandingMinNanos, long lateLandingMaxNanos) {

    /** A perfect network: writes land within 1–50 µs, frames within 20 µs. */
    public static final SimFaults NONE = new SimFaults(1_000, 50_000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20_000, 0, 0, 0);

    /** Validates ranges. */
    public SimFaults {
        if (minWriteDelayNanos < 0 || maxWriteDelayNanos < minWriteDelayNanos || stragglerMaxNanos < stragglerMinNanos
            || maxFrameDelayNanos < 0 || lateLandingMinNanos < 0 || lateLandingMaxNanos < lateLandingMinNanos) {
            throw new IllegalArgumentException("bad delays: " + this);
        }
        for (double p : new double[] {writeFail, lostWrite, misdirectedWrite, corruptedWrite, stragglerWrite, frameLoss, frameDuplicate,
            lateLanding}) {
            if (p < 0 || p > 1) {
                throw new IllegalArgumentException("probabilities must be in [0, 1]: " + this);
            }
        }
    }

    /**
     * {@return a copy with these write-fault probabilities}
     *
     * @param fail        probability that a write completes FAILED ({@link #writeFail()})
     * @param lost        probability that a write completes OK and never lands ({@link #lostWrite()})
     * @param misdirected probability that a write lands in another page ({@link #misdirectedWrite()})
     * @param corrupted   probability that a write lands with one byte flipped ({@link #corruptedWrite()})
     * @throws IllegalArgumentException if a probability is outside [0, 1]
     */
    public SimFaults withWrites(double fail, double lost, double misdirected, double corrupted) {
        return new SimFaults(minWriteDelayNanos, maxWriteDelayNanos, fail, lost, misdirected, corrupted, stragglerWrite,
            stragglerMinNanos, stragglerMaxNanos, frameLoss, frameDuplicate, maxFrameDelayNanos, lateLanding, lateLandingMinNanos,
            lateLandingMaxNanos);
    }

    /**
     * {@return a copy with stragglers}
     *
     * @param p        probability that a write lands very late ({@link #stragglerWrite()})
     * @param minNanos least time from posting to a straggler's landing and completion
     * @param maxNanos most time from posting to a straggler's landing and completion
     * @throws IllegalArgumentException if {@code p} is outside [0, 1] or {@code maxNanos < minNanos}
     */
    public SimFaults withStragglers(double p, long minNanos, long maxNanos) {
        return new SimFaults(minWriteDelayNanos, maxWriteDelayNanos, writeFail, lostWrite, misdirectedWrite, corruptedWrite, p,
            minNanos, maxNanos, frameLoss, frameDuplicate, maxFrameDelayNanos, lateLanding, lateLandingMinNanos, lateLandingMaxNanos);
    }

    /**
     * {@return a copy with these control-frame faults}
     *
     * @param loss      probability that a control frame is lost
     * @param duplicate probability that a control frame is delivered twice
     * @throws IllegalArgumentException if a probability is outside [0, 1]
     */
    public SimFaults withFrames(double loss, double duplicate) {
        return new SimFaults(minWriteDelayNanos, maxWriteDelayNanos, writeFail, lostWrite, misdirectedWrite, corruptedWrite,
            stragglerWrite, stragglerMinNanos, stragglerMaxNanos, loss, duplicate, maxFrameDelayNanos, lateLanding, lateLandingMinNanos,
            lateLandingMaxNanos);
    }

    /**
     * {@return a copy with late landings}
     *
     * @param p        probability that a write completes at the usual time and lands late ({@link #lateLanding()})
     * @param minNanos least time from posting to a late write's landing
     * @param maxNanos most time from posting to a late write's landing
     * @throws IllegalArgumentException if {@code p} is outside [0, 1], {@code minNanos < 0} or {@code maxNanos < minNanos}
     */
    public SimFaults withLateLandings(double p, long minNanos, long maxNanos) {
        return new SimFaults(minWriteDelayNanos, maxWriteDelayNanos, writeFail, lostWrite, misdirectedWrite, corruptedWrite,
            stragglerWrite, stragglerMinNanos, stragglerMaxNanos, frameLoss, frameDuplicate, maxFrameDelayNanos, p, minNanos, maxNanos);
    }
}
