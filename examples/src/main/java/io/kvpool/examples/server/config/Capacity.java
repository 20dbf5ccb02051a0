package io.kvpool.examples.server.config;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.examples.server.echo.EchoKv;

/**
 * What the pools hold and what the server advertises.
 *
 * @param contextTokens the advertised max context, prompt + max_tokens ({@code --context})
 * @param prefillPages  pages of the prefill pool ({@code --prefill-pages}, or {@code --pages} for both)
 * @param decodePages   pages of the decode pool ({@code --decode-pages}, or {@code --pages} for both)
 * @param tokensPerPage tokens per page of both pools ({@code --tokens-per-page}, 1..4096)
 * @param layers        KV layers ({@code --layers})
 * @param kvHeads       KV heads ({@code --kv-heads})
 * @param headDim       head dimension ({@code --head-dim}); FP16 throughout
 * @param clampContext  whether a router whose roles cannot carry {@code contextTokens} advertises the smallest role's
 *                      largest safe context instead of refusing to start ({@code --clamp-context})
 */
public record Capacity(long contextTokens, int prefillPages, int decodePages, int tokensPerPage, int layers, int kvHeads, int headDim,
                       boolean clampContext) {

    /** Pages one KV transfer descriptor carries: a prompt needing more can never be transferred. */
    public static final int MAX_PAGES_PER_TRANSFER = io.kvpool.transfer.wire.WireFormat.MAX_ARRAY;

    /**
     * @throws IllegalArgumentException naming the first value out of range with the range and the value; for a layout
     *                                  the echo model cannot use; or for a context one transfer descriptor cannot carry
     */
    public Capacity {
        Checks.range("--context", contextTokens, 1, Integer.MAX_VALUE);
        Checks.range("--prefill-pages (or --pages)", prefillPages, 1, 1 << 24);
        Checks.range("--decode-pages (or --pages)", decodePages, 1, 1 << 24);
        Checks.range("--tokens-per-page", tokensPerPage, 1, 4096);
        Checks.range("--layers", layers, 1, 1024);
        Checks.range("--kv-heads", kvHeads, 1, 1024);
        Checks.range("--head-dim", headDim, 1, 65_536);
        final KvLayout layout = new KvLayout(layers, kvHeads, headDim, DType.FP16, tokensPerPage);
        EchoKv.requireFits(layout);
        checkDescriptor(contextTokens, tokensPerPage, layout);
    }

    /** @return the KV layout of both pools: layers × kv heads × head dim × FP16, tokens per page */
    public KvLayout layout() {
        return new KvLayout(layers, kvHeads, headDim, DType.FP16, tokensPerPage);
    }

    /**
     * The advertised context must fit one transfer descriptor: a prompt of up to {@code contextTokens} tokens is admitted,
     * and one that needs more than {@link #MAX_PAGES_PER_TRANSFER} pages could never move from prefill to decode — refused
     * here at startup, with both numbers and what to change, not answered 429 for ever.
     */
    private static void checkDescriptor(long contextTokens, int tokensPerPage, KvLayout layout) {
        final long pages = layout.pagesFor(contextTokens);
        if (pages > MAX_PAGES_PER_TRANSFER) {
            final long carried = (long) MAX_PAGES_PER_TRANSFER * tokensPerPage;
            final long minTokensPerPage = (contextTokens + MAX_PAGES_PER_TRANSFER - 1) / MAX_PAGES_PER_TRANSFER;
            throw new IllegalArgumentException("the advertised context of " + contextTokens + " tokens needs " + pages
                + " pages of " + tokensPerPage + " token(s), but one KV transfer descriptor carries at most " + MAX_PAGES_PER_TRANSFER
                + " pages (" + carried + " tokens at " + tokensPerPage + " per page): a prompt that long could never move from "
                + "prefill to decode; lower --context to ≤ " + carried
                + (minTokensPerPage <= 4096 ? " or raise --tokens-per-page to ≥ " + minTokensPerPage : ""));
        }
    }
}
