package io.kvpool;

import java.util.Locale;

/**
 * The startup capacity check: a pool must hold the context the deployment advertises for one request, or
 * refuse to build with both numbers (or clamp, when the builder opted in). Run by {@link KvPoolBuilder#build()}.
 *
 * <pre>
 *   pages        = pages(n), or byteBudget / bytesPerPage                      (1 .. MAX_SLOT + 1)
 *   pool tokens  = min(pages × tokensPerPage, Integer.MAX_VALUE)               (one sequence counts in an int)
 *   context      ≤ pool tokens, else FAIL → PoolCapacityException, CLAMP → context = pool tokens (WARNING)
 * </pre>
 */
final class CapacityCheck {

    private static final System.Logger LOG = System.getLogger("io.kvpool");

    /**
     * The resolved size of a pool.
     *
     * @param pages            pages to build
     * @param maxContextTokens the max context after the check (≤ {@link Integer#MAX_VALUE})
     */
    record Sized(int pages, long maxContextTokens) {
    }

    private CapacityCheck() {
    }

    /**
     * @param pages      pages asked for, or null if not set
     * @param byteBudget bytes to fill with pages, or null if not set
     * @param maxContext the advertised max context, or null if not set
     * @return the pool's size
     * @throws IllegalArgumentException if the size or max context is missing or out of range
     * @throws PoolCapacityException    if the pool cannot hold the context and the policy is {@link ContextPolicy#FAIL}
     */
    static Sized resolve(KvLayout layout, Long pages, Long byteBudget, Long maxContext, ContextPolicy policy) {
        final long bytesPerPage = layout.bytesPerPage();
        final long n;
        if (pages != null) {
            n = pages;
        } else if (byteBudget != null) {
            n = byteBudget / bytesPerPage;
            if (n < 1) {
                throw new IllegalArgumentException("byte budget of " + byteBudget + " bytes holds no page of " + bytesPerPage
                    + " bytes (" + layout + ")");
            }
        } else {
            throw new IllegalArgumentException("set the pool size with pages(n) or byteBudget(bytes)");
        }
        if (n < 1 || n > PageHandle.MAX_SLOT + 1L) {
            throw new IllegalArgumentException("a pool has 1.." + (PageHandle.MAX_SLOT + 1L) + " pages, asked for " + n);
        }
        if (maxContext == null) {
            throw new IllegalArgumentException("set maxContextTokens(n): the context length the deployment advertises");
        }
        final long context = maxContext;
        if (context < 1) {
            throw new IllegalArgumentException("maxContextTokens must be ≥ 1, was " + context);
        }
        final long allTokens = Math.multiplyExact(n, (long) layout.tokensPerPage());
        final long poolTokens = Math.min(allTokens, Integer.MAX_VALUE); // one request is one sequence, which counts in an int
        if (context <= poolTokens) {
            return new Sized((int) n, context);
        }
        final String numbers = String.format(Locale.ROOT,
            "advertised max context of %,d tokens exceeds what this pool can hold for one request: %,d tokens "
                + "(%,d pages × %,d tokens/page, %,d bytes%s)", context, poolTokens, n, layout.tokensPerPage(), n * bytesPerPage,
            allTokens > poolTokens ? String.format(Locale.ROOT, "; a sequence counts at most %,d tokens", Integer.MAX_VALUE) : "");
        if (policy == ContextPolicy.FAIL) {
            final long pagesNeeded = layout.pagesFor(context);
            // more memory helps only up to what one sequence counts and one pool holds
            final String advice = context <= Integer.MAX_VALUE && pagesNeeded <= PageHandle.MAX_SLOT + 1L
                ? String.format(Locale.ROOT, "Lower the advertised context, give the pool more memory (at least %,d bytes), "
                    + "or opt in to ContextPolicy.CLAMP", saturatingMultiply(pagesNeeded, bytesPerPage))
                : String.format(Locale.ROOT, "No pool holds this context: a sequence counts at most %,d tokens and a pool has "
                    + "at most %,d pages. Lower it, or opt in to ContextPolicy.CLAMP", Integer.MAX_VALUE, PageHandle.MAX_SLOT + 1L);
            throw new PoolCapacityException(context, poolTokens, numbers
                + String.format(Locale.ROOT, "; the largest safe context is %,d tokens. ", poolTokens) + advice);
        }
        LOG.log(System.Logger.Level.WARNING, numbers + String.format(Locale.ROOT, "; clamping the max context to %,d tokens", poolTokens));
        return new Sized((int) n, poolTokens);
    }

    /**
     * @return {@code value}
     * @throws IllegalArgumentException if {@code value < min}, naming the setting
     */
    static int atLeast(String setting, int value, int min) {
        if (value < min) {
            throw new IllegalArgumentException(setting + " must be ≥ " + min + ", was " + value);
        }
        return value;
    }

    /** @return {@code a × b} for non-negative operands, or {@link Long#MAX_VALUE} where it would overflow (a hint's size) */
    private static long saturatingMultiply(long a, long b) {
        return Math.multiplyHigh(a, b) != 0 || a * b < 0 ? Long.MAX_VALUE : a * b;
    }
}
