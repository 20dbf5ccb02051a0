package io.kvpool.examples.load;

import io.kvpool.examples.server.echo.EchoTokenizer;

import java.util.SplittableRandom;

/**
 * What the generator sends: a deterministic function from (seed, index) to a {@link Shot}, so a run's
 * requests are the same under the same seed whatever the threads do (only which client sends which
 * request, and when, depends on scheduling).
 *
 * <p>For each index: a tenant uniformly among {@code tenants}; then garbage with probability
 * {@code garbageRatio}, else over capacity with {@code overCapacityRatio} (prompt uniform in
 * {@code overCapacityTokens}), else normal (prompt log-uniform in {@code promptTokens}: many short, some
 * long, as real traffic); {@code max_tokens} uniform in {@code maxTokens}; an abort with {@code abortRatio}
 * (streamed, at admission or after some tokens), else streamed with {@code streamRatio}.
 *
 * @param tenants            tenants {@code tenant0 … tenant<n-1>}
 * @param promptTokens       {min, max} prompt tokens of a normal request (min ≥ 3: one marker)
 * @param maxTokens          {min, max} of {@code max_tokens}
 * @param streamRatio        share of streamed requests among those not aborted
 * @param abortRatio         share of requests the client abandons mid-request or mid-stream
 * @param overCapacityRatio  share of over-capacity requests
 * @param overCapacityTokens {min, max} prompt tokens of an over-capacity request
 * @param garbageRatio       share of bad HTTP input ({@link Garbage})
 * @param maxBodyBytes       the server's body limit (for the huge-body garbage)
 * @param seed               the seed
 */
public record Mix(int tenants, int[] promptTokens, int[] maxTokens, double streamRatio, double abortRatio, double overCapacityRatio,
                  int[] overCapacityTokens, double garbageRatio, int maxBodyBytes, long seed) {

    /** Fewest tokens a prompt can have: one marker. */
    public static final int MIN_PROMPT_TOKENS = 3;

    public Mix {
        if (tenants < 1 || tenants > Markers.MAX_TENANTS) {
            throw new IllegalArgumentException("tenants must be in [1, " + Markers.MAX_TENANTS + "], was " + tenants);
        }
        promptTokens = range("prompt tokens", promptTokens, MIN_PROMPT_TOKENS);
        maxTokens = range("max tokens", maxTokens, 0);
        overCapacityTokens = range("over-capacity tokens", overCapacityTokens, MIN_PROMPT_TOKENS);
        if (streamRatio < 0 || streamRatio > 1 || abortRatio < 0 || overCapacityRatio < 0 || garbageRatio < 0
            || abortRatio + overCapacityRatio + garbageRatio > 1) {
            throw new IllegalArgumentException("ratios must be in [0, 1] and abort + over-capacity + garbage ≤ 1: stream " + streamRatio
                + ", abort " + abortRatio + ", over-capacity " + overCapacityRatio + ", garbage " + garbageRatio);
        }
    }

    private static int[] range(String name, int[] r, int lowest) {
        if (r == null || r.length != 2 || r[0] < lowest || r[0] > r[1]) {
            throw new IllegalArgumentException(name + " must be {min, max} with " + lowest + " ≤ min ≤ max, was "
                + (r == null ? null : java.util.Arrays.toString(r)));
        }
        return r.clone();
    }

    /** @return the request with this index */
    public Shot shot(long index) {
        final SplittableRandom r = new SplittableRandom(fmix64(fmix64(seed) + fmix64(index ^ 0x5DEECE66DL)));
        final String tenant = Markers.tenant(r.nextInt(tenants));
        final double u = r.nextDouble();
        final boolean abort = r.nextDouble() < abortRatio / Math.max(1e-9, 1 - garbageRatio - overCapacityRatio);
        final double streamDraw = r.nextDouble();
        int max = between(r, maxTokens);
        if (u < garbageRatio) {
            final Garbage g = Garbage.values()[r.nextInt(Garbage.values().length)];
            return new Shot(index, tenant, Shot.Kind.GARBAGE, Markers.of(tenant, index), 0, 4, false, -1, g);
        }
        if (u < garbageRatio + overCapacityRatio) {
            final String prompt = prompt(tenant, index, between(r, overCapacityTokens));
            return new Shot(index, tenant, Shot.Kind.OVER_CAPACITY, prompt, EchoTokenizer.encode(prompt).size(), max,
                streamDraw < streamRatio, -1, null);
        }
        final int lo = promptTokens[0], hi = promptTokens[1];
        final int tokens = (int) Math.min(hi, Math.round(lo * Math.pow((double) hi / lo, r.nextDouble())));
        final String prompt = prompt(tenant, index, tokens);
        final int n = EchoTokenizer.encode(prompt).size();
        if (abort) {
            max = Math.max(max, 2);
            return new Shot(index, tenant, Shot.Kind.NORMAL, prompt, n, max, true, r.nextInt(max), null);
        }
        return new Shot(index, tenant, Shot.Kind.NORMAL, prompt, n, max, streamDraw < streamRatio, -1, null);
    }

    /** MurmurHash3's 64-bit finalizer: nearby seeds and indexes give unrelated random streams. */
    private static long fmix64(long k) {
        k ^= k >>> 33;
        k *= 0xff51afd7ed558ccdL;
        k ^= k >>> 33;
        k *= 0xc4ceb9fe1a85ec53L;
        return k ^ (k >>> 33);
    }

    private static int between(SplittableRandom r, int[] range) {
        return range[0] == range[1] ? range[0] : r.nextInt(range[0], range[1] + 1);
    }

    /**
     * @return a prompt of exactly {@code tokens} tokens (at least {@value #MIN_PROMPT_TOKENS}) made of the
     *         tenant's marker for this request, padded with {@code " ."}
     */
    static String prompt(String tenant, long index, int tokens) {
        final String marker = Markers.of(tenant, index);
        final int first = EchoTokenizer.encode(marker).size();
        final int each = EchoTokenizer.encode(" " + marker).size(); // a word after a space starts its own tokens
        final StringBuilder sb = new StringBuilder(tokens * 8).append(marker);
        int n = first;
        for (; n + each <= tokens; n += each) {
            sb.append(' ').append(marker);
        }
        for (; n < tokens; n++) {
            sb.append(" .");
        }
        return sb.toString();
    }

    /** @return a copy of {min, max} prompt tokens of a normal request */
    @Override
    public int[] promptTokens() {
        return promptTokens.clone();
    }

    /** @return a copy of {min, max} of {@code max_tokens} */
    @Override
    public int[] maxTokens() {
        return maxTokens.clone();
    }

    /** @return a copy of {min, max} prompt tokens of an over-capacity request */
    @Override
    public int[] overCapacityTokens() {
        return overCapacityTokens.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Mix m && tenants == m.tenants && java.util.Arrays.equals(promptTokens, m.promptTokens)
            && java.util.Arrays.equals(maxTokens, m.maxTokens) && Double.compare(streamRatio, m.streamRatio) == 0
            && Double.compare(abortRatio, m.abortRatio) == 0 && Double.compare(overCapacityRatio, m.overCapacityRatio) == 0
            && java.util.Arrays.equals(overCapacityTokens, m.overCapacityTokens) && Double.compare(garbageRatio, m.garbageRatio) == 0
            && maxBodyBytes == m.maxBodyBytes && seed == m.seed;
    }

    @Override
    public int hashCode() {
        return java.util.Objects.hash(tenants, java.util.Arrays.hashCode(promptTokens), java.util.Arrays.hashCode(maxTokens), streamRatio,
            abortRatio, overCapacityRatio, java.util.Arrays.hashCode(overCapacityTokens), garbageRatio, maxBodyBytes, seed);
    }

    @Override
    public String toString() {
        return "Mix[" + tenants + " tenants, prompt " + promptTokens[0] + "-" + promptTokens[1] + " tokens, max_tokens " + maxTokens[0]
            + "-" + maxTokens[1] + ", stream " + streamRatio + ", abort " + abortRatio + ", over-capacity " + overCapacityRatio + " ("
            + overCapacityTokens[0] + "-" + overCapacityTokens[1] + " tokens), garbage " + garbageRatio + ", seed " + seed + "]";
    }
}
