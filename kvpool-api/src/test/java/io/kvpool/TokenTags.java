package io.kvpool;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Writes and reads a tag into every vector (every layer, K and V) of a token, so tests can tell whose
 * data a page holds. A tag is a {@code long} repeated over the vector.
 */
final class TokenTags {
    private static final ValueLayout.OfLong L = ValueLayout.JAVA_LONG_UNALIGNED;

    private TokenTags() {
    }

    static long tag(long owner, int position) {
        return (owner << 32) | (position & 0xFFFFFFFFL) | 0x4000_0000_0000_0000L;
    }

    /** Writes {@code tag} into token {@code tokenInPage} of the page. */
    static void write(MemorySegment page, KvLayout layout, int tokenInPage, long tag) {
        final long vec = layout.bytesPerTokenVector();
        for (int l = 0; l < layout.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                final long base = layout.offset(l, kv, tokenInPage);
                for (long o = 0; o + 8 <= vec; o += 8) {
                    page.set(L, base + o, tag ^ (l * 2L + kv));
                }
            }
        }
    }

    /** @return the tag of the token if every vector agrees on one, else {@code Long.MIN_VALUE} */
    static long read(MemorySegment page, KvLayout layout, int tokenInPage) {
        final long vec = layout.bytesPerTokenVector();
        long tag = page.get(L, layout.offset(0, 0, tokenInPage));
        for (int l = 0; l < layout.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                final long base = layout.offset(l, kv, tokenInPage);
                for (long o = 0; o + 8 <= vec; o += 8) {
                    if ((page.get(L, base + o) ^ (l * 2L + kv)) != tag) {
                        return Long.MIN_VALUE;
                    }
                }
            }
        }
        return tag;
    }

    /** Writes tags for tokens {@code [from, to)} of a sequence. */
    static void writeSequence(Sequence s, long owner, int from, int to) {
        final KvLayout layout = s.pool().layout();
        final int tpp = layout.tokensPerPage();
        for (int t = from; t < to; t++) {
            write(s.page(t / tpp), layout, t % tpp, tag(owner, t));
        }
    }

    /** @return the tag of token {@code t} of a sequence */
    static long readSequence(Sequence s, int t) {
        final KvLayout layout = s.pool().layout();
        final int tpp = layout.tokensPerPage();
        return read(s.page(t / tpp), layout, t % tpp);
    }
}
