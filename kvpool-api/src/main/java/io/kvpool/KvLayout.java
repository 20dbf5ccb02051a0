package io.kvpool;

import java.nio.charset.StandardCharsets;

/**
 * Shape of the KV cache one pool holds: {@code layers × kvHeads × headDim × dtype} for K and again for
 * V, per token, grouped into pages of {@code tokensPerPage} tokens. Every derived size is computed with
 * overflow checks ({@link Math#multiplyExact(long, long)}) when the layout is built, so a layout that
 * exists has sizes that fit in a {@code long} (and a page that fits in an {@code int} number of bytes
 * times {@link #MAX_PAGE_BYTES}).
 *
 * <h2>Bytes of one page on the host (page-major, so one page is one contiguous transfer)</h2>
 * <pre>
 *  page p:  [ layer 0: K | V ][ layer 1: K | V ] ... [ layer L-1: K | V ]
 *  each K or V block:  [ token 0 ][ token 1 ] ... [ token T-1 ]          T = tokensPerPage
 *  each token:         [ head 0 ][ head 1 ] ... [ head H-1 ]              H = kvHeads
 *  each head:          headDim elements of dtype
 *
 *  offset(layer l, kv k (0 = K, 1 = V), token t) = ((2·l + k)·T + t) · bytesPerTokenVector
 * </pre>
 * Device backends may lay pages out differently (per layer, as kvpool-cuda does); they document their own
 * addressing and the pool never assumes contiguity there.
 *
 * <h2>Fingerprint</h2>
 * {@link #fingerprint()} is FNV-1a (64-bit) over the UTF-8 bytes of
 * {@code "kvpool-layout/v" + FORMAT_VERSION + ":" + layers + ":" + kvHeads + ":" + headDim + ":" +
 * dtype.name() + ":" + tokensPerPage}. Two processes whose layouts fingerprint equal agree on every byte
 * offset above. The format version is bumped whenever the byte layout or this algorithm changes, so
 * peers built from different layout code never compare equal.
 *
 * @param layers        number of transformer layers, ≥ 1
 * @param kvHeads       number of KV heads per layer, ≥ 1
 * @param headDim       elements per head, ≥ 1
 * @param dtype         element type
 * @param tokensPerPage tokens per page, ≥ 1
 */
public record KvLayout(int layers, int kvHeads, int headDim, DType dtype, int tokensPerPage) {

    /** Version of the byte layout and fingerprint algorithm described above. */
    public static final int FORMAT_VERSION = 1;

    /** Largest page, in bytes, a layout may describe (1 GiB): a page's bytes are addressed with an {@code int} offset per token vector. */
    public static final long MAX_PAGE_BYTES = 1L << 30;

    /**
     * Validates the shape and that every derived size fits.
     *
     * @throws IllegalArgumentException naming the bad field and its value, or the overflowing product
     */
    public KvLayout {
        positive("layers", layers);
        positive("kvHeads", kvHeads);
        positive("headDim", headDim);
        positive("tokensPerPage", tokensPerPage);
        if (dtype == null) {
            throw new IllegalArgumentException("dtype must not be null");
        }
        final long pageBytes = checkedPageBytes(layers, kvHeads, headDim, dtype, tokensPerPage);
        if (pageBytes > MAX_PAGE_BYTES) {
            throw new IllegalArgumentException("page of " + pageBytes + " bytes exceeds the maximum of " + MAX_PAGE_BYTES
                + " bytes: " + describe(layers, kvHeads, headDim, dtype, tokensPerPage));
        }
    }

    private static long checkedPageBytes(int layers, int kvHeads, int headDim, DType dtype, int tpp) {
        try {
            return Math.multiplyExact(Math.multiplyExact(bytesPerVector(kvHeads, headDim, dtype), 2L * layers), (long) tpp);
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException("layout overflows a long: " + describe(layers, kvHeads, headDim, dtype, tpp), e);
        }
    }

    private static void positive(String name, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(name + " must be ≥ 1, was " + value);
        }
    }

    private static long bytesPerVector(int kvHeads, int headDim, DType dtype) {
        return Math.multiplyExact(Math.multiplyExact((long) kvHeads, (long) headDim), (long) dtype.bytes());
    }

    private static String describe(int layers, int kvHeads, int headDim, DType dtype, int tpp) {
        return layers + " layers × " + kvHeads + " kv heads × " + headDim + " dim × " + dtype + " × " + tpp + " tokens/page";
    }

    /** {@return bytes of one token's K (or V) vector in one layer: {@code kvHeads × headDim × dtype}} */
    public long bytesPerTokenVector() {
        return bytesPerVector(kvHeads, headDim, dtype);
    }

    /** {@return bytes one token occupies across all layers, K and V} */
    public long bytesPerToken() {
        return bytesPerTokenVector() * 2L * layers;
    }

    /** {@return bytes of one page} */
    public long bytesPerPage() {
        return bytesPerToken() * tokensPerPage;
    }

    /**
     * Locates one token's K or V vector of one layer within a host page.
     *
     * @param layer layer index
     * @param kv    0 for K, 1 for V
     * @param token token index within the page
     * @return the byte offset of that token's vector within a host page (see the class comment)
     * @throws IndexOutOfBoundsException if an index is out of range
     */
    public long offset(int layer, int kv, int token) {
        java.util.Objects.checkIndex(layer, layers);
        java.util.Objects.checkIndex(kv, 2);
        java.util.Objects.checkIndex(token, tokensPerPage);
        return ((2L * layer + kv) * tokensPerPage + token) * bytesPerTokenVector();
    }

    /**
     * Counts the pages a number of tokens fills.
     *
     * @param tokens a token count, ≥ 0
     * @return pages needed to hold that many tokens: {@code ceil(tokens / tokensPerPage)}
     * @throws IllegalArgumentException if {@code tokens < 0}
     */
    public long pagesFor(long tokens) {
        if (tokens < 0) {
            throw new IllegalArgumentException("tokens must be ≥ 0, was " + tokens);
        }
        return tokens / tokensPerPage + (tokens % tokensPerPage != 0 ? 1 : 0); // no overflow near Long.MAX_VALUE
    }

    /** {@return the stable fingerprint described in the class comment} */
    public long fingerprint() {
        final String canonical = "kvpool-layout/v" + FORMAT_VERSION + ":" + layers + ":" + kvHeads + ":" + headDim
            + ":" + dtype.name() + ":" + tokensPerPage;
        long h = 0xcbf29ce484222325L;
        for (byte b : canonical.getBytes(StandardCharsets.UTF_8)) {
            h ^= (b & 0xff);
            h *= 0x100000001b3L;
        }
        return h;
    }

    @Override
    public String toString() {
        return describe(layers, kvHeads, headDim, dtype, tokensPerPage) + " (" + bytesPerPage() + " B/page)";
    }
}
