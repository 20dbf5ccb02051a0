package io.kvpool.transfer.testkit;

import io.kvpool.transfer.*;
import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Synthetic KV for transfer tests: every 16-byte token vector holds {@code (requestId, position)} where
 * position = layer·2^48 | kv·2^40 | token, so a reader can tell its own KV from another request's
 * ("foreign"), from the canary, and from misplaced or missing KV. Public for the tests of the
 * transports' packages (e.g. the shm two-process protocol test).
 */
public final class Kv {
    private Kv() {
    }

    /** 2 layers × 1 head × 4 × FP32, 4 tokens per page: 16-byte vectors, 256-byte pages. */
    public static final KvLayout LAYOUT = new KvLayout(2, 1, 4, DType.FP32, 4);
    public static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED;

    public static KvPool pool(int pages) {
        return KvPool.builder(LAYOUT).pages(pages).maxContextTokens(pages * 4L).build();
    }

    public static PeerIdentity identity() {
        return PeerIdentity.of(LAYOUT, "test-model@r1", "test", "build-1");
    }

    public static long position(int layer, int kv, int token) {
        return ((long) layer << 48) | ((long) kv << 40) | token;
    }

    /** Writes request {@code requestId}'s KV into every valid token of the sequence. */
    public static void write(Sequence seq, long requestId) {
        write(seq, requestId, seq.tokenCount());
    }

    /** Writes the first {@code tokens} tokens only (the rest keep what they hold, e.g. the canary). */
    public static void write(Sequence seq, long requestId, int tokens) {
        final int tpp = LAYOUT.tokensPerPage();
        for (int token = 0; token < tokens; token++) {
            final MemorySegment page = seq.page(token / tpp);
            for (int layer = 0; layer < LAYOUT.layers(); layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    final long off = LAYOUT.offset(layer, kv, token % tpp);
                    page.set(LONG, off, requestId);
                    page.set(LONG, off + 8, position(layer, kv, token));
                }
            }
        }
    }

    /** What a reader found in a sequence's KV. */
    public enum Finding {
        OK, FOREIGN, CANARY, MISPLACED
    }

    /** The first problem in tokens [0, tokens) of the sequence, or OK. */
    public static Finding check(Sequence seq, long requestId, int tokens) {
        final int tpp = LAYOUT.tokensPerPage();
        for (int token = 0; token < tokens; token++) {
            final Finding f = check(seq.page(token / tpp), requestId, token);
            if (f != Finding.OK) {
                return f;
            }
        }
        return Finding.OK;
    }

    /** Checks every vector of one token of one page. */
    public static Finding check(MemorySegment page, long requestId, int token) {
        final int tpp = LAYOUT.tokensPerPage();
        for (int layer = 0; layer < LAYOUT.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                final long off = LAYOUT.offset(layer, kv, token % tpp);
                final long owner = page.get(LONG, off);
                final long pos = page.get(LONG, off + 8);
                if (owner == PageStorage.CANARY) {
                    return Finding.CANARY;
                }
                if (owner != requestId) {
                    return owner > 0 && owner < (1L << 40) ? Finding.FOREIGN : Finding.MISPLACED;
                }
                if (pos != position(layer, kv, token)) {
                    return Finding.MISPLACED;
                }
            }
        }
        return Finding.OK;
    }
}
