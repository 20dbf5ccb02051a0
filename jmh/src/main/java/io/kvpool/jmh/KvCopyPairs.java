package io.kvpool.jmh;

import java.util.Arrays;
import java.util.Locale;

/**
 * {@link KvCopyBenchmark}'s operations timed in alternation, for a machine that others share: each round runs
 * the baseline and then every other operation once, so a burst of foreign load hits all of them alike, and
 * the ratio is taken per round (baseline time ÷ operation time; above 1 means faster than the baseline) and
 * reported as the median over the rounds. JMH measures one operation after another, so on a loaded machine
 * its ratios compare different minutes.
 *
 * <pre>java -cp jmh/target/benchmarks.jar io.kvpool.jmh.KvCopyPairs [rounds, default 60]</pre>
 */
public final class KvCopyPairs {

    private KvCopyPairs() {
    }

    /**
     * Runs the rounds and prints one line per operation.
     *
     * @param args the number of measured rounds (after 10 warm-up rounds), 60 if absent
     */
    public static void main(String[] args) {
        final int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 60;
        final KvCopyBenchmark b = new KvCopyBenchmark();
        b.setUp();
        final String[] names = {"baseline_copy_in", "kvpool_copy_in", "kvpool_copy_in_per_layer", "reference_same_blocks"};
        final Runnable[] ops = {b::baseline_copy_in, b::kvpool_copy_in, b::kvpool_copy_in_per_layer, b::reference_same_blocks};
        final double[][] ms = new double[ops.length][rounds];
        for (int r = -10; r < rounds; r++) {
            for (int i = 0; i < ops.length; i++) {
                final long t0 = System.nanoTime();
                ops[i].run();
                final long dt = System.nanoTime() - t0;
                if (r >= 0) {
                    ms[i][r] = dt / 1e6;
                }
            }
        }
        b.tearDown();
        for (int i = 0; i < ops.length; i++) {
            final double[] ratio = new double[rounds];
            for (int r = 0; r < rounds; r++) {
                ratio[r] = ms[0][r] / ms[i][r];
            }
            final double[] t = ms[i].clone();
            Arrays.sort(t);
            Arrays.sort(ratio);
            System.out.printf(Locale.ROOT, "%-26s median %7.2f ms/op (p10 %7.2f, p90 %7.2f)   baseline ÷ this: median %.3f (p10 %.3f, p90 %.3f)%n",
                names[i], t[rounds / 2], t[rounds / 10], t[rounds * 9 / 10], ratio[rounds / 2], ratio[rounds / 10], ratio[rounds * 9 / 10]);
        }
    }
}
