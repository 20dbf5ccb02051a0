package io.kvpool.examples.server.link;

/**
 * Transfer faults injected on the prefill side's link ({@link FaultyLink}): with probability
 * {@code rate}, a batch of page writes is
 * <ul>
 *   <li>failed (45 %): every write of the batch reports FAILED — half the time after its bytes landed,
 *       half the time before anything was written (a failed write may still land);</li>
 *   <li>delayed (45 %): held 1–20 ms before it is posted, and everything behind it on the link with it;</li>
 *   <li>or the link is dropped (10 %): the batch is refused and the link fails; prefill reconnects.</li>
 * </ul>
 * Decisions come from a {@link java.util.SplittableRandom} seeded with {@code seed} and the link's number
 * (a reconnected link draws a new sequence), drawn on the link's owner thread, so each link's sequence of
 * decisions is reproducible.
 *
 * @param rate probability per batch, 0..1
 * @param seed the random seed
 */
public record FaultPlan(double rate, long seed) {

    /** No faults. */
    public static final FaultPlan NONE = new FaultPlan(0, 1);

    public FaultPlan {
        if (!(rate >= 0 && rate <= 1)) {
            throw new IllegalArgumentException("fault rate must be in [0, 1], was " + rate);
        }
    }

    /** @return whether any fault can be injected */
    public boolean active() {
        return rate > 0;
    }
}
