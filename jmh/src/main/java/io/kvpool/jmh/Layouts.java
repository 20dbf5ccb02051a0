package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvLayout;

/** The page layouts the benchmarks use. */
final class Layouts {

    /**
     * For bookkeeping benchmarks, where page bytes are never touched (fill NONE): 1 layer × 1 KV head ×
     * 8 dim × FP16 × 16 tokens/page = 512 B/page, so thousands of pages cost little host memory. The
     * 16 tokens/page is realistic (vLLM's default block size), and that is all the bookkeeping depends on.
     * A realistic model page (32 layers × 8 heads × 128 dim × FP16 × 16 tokens) would be 2 MiB.
     */
    static final KvLayout BOOKKEEPING = new KvLayout(1, 1, 8, DType.FP16, 16);

    /** For the canary-fill variant: 1 layer × 4 KV heads × 64 dim × FP16 × 16 tokens/page = 16 KiB/page. */
    static final KvLayout PAGE_16K = new KvLayout(1, 4, 64, DType.FP16, 16);

    static {
        if (BOOKKEEPING.bytesPerPage() != 512 || PAGE_16K.bytesPerPage() != 16 * 1024) {
            throw new AssertionError(BOOKKEEPING + " / " + PAGE_16K);
        }
    }

    private Layouts() {
    }
}
