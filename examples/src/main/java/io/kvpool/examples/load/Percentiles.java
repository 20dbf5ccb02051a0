package io.kvpool.examples.load;

import java.util.Locale;
import java.util.Arrays;

/** Latency percentiles from a sorted copy of every sample (exact; a run holds at most a few million). */
public final class Percentiles {

    private final long[] sorted;

    /** @param nanos the samples (copied) */
    public Percentiles(long[] nanos) {
        this.sorted = nanos.clone();
        Arrays.sort(sorted);
    }

    /** @return the number of samples */
    public int count() {
        return sorted.length;
    }

    /**
     * @param p in [0, 100]
     * @return the nearest-rank percentile (the smallest sample with at least p % of samples ≤ it), or -1 with no samples
     */
    public long percentile(double p) {
        if (sorted.length == 0) {
            return -1;
        }
        final int rank = (int) Math.ceil(p / 100 * sorted.length);
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))];
    }

    /** @return the largest sample, or -1 */
    public long max() {
        return sorted.length == 0 ? -1 : sorted[sorted.length - 1];
    }

    /** @return {@code p50 p90 p99 max} in milliseconds, right-aligned, and the count */
    public String row() {
        if (sorted.length == 0) {
            return String.format(Locale.ROOT, "%9s %9s %9s %9s %9d", "-", "-", "-", "-", 0);
        }
        return String.format(Locale.ROOT, "%9.2f %9.2f %9.2f %9.2f %9d", ms(percentile(50)), ms(percentile(90)), ms(percentile(99)), ms(max()),
            sorted.length);
    }

    private static double ms(long nanos) {
        return nanos / 1e6;
    }
}
