package io.kvpool;

import io.kvpool.storage.FillMode;

/** Small pools for tests. */
final class TestPools {
    /** A cache salt for tests with one tenant (0 is refused as a salt). */
    static final long SALT = 0x5A17L;
    /** 2 layers × 2 heads × 4 dim × FP16 × 4 tokens/page: 16-byte vectors, 256-byte pages. */
    static final KvLayout SMALL = new KvLayout(2, 2, 4, DType.FP16, 4);

    private TestPools() {
    }

    static KvPool pool(int pages) {
        return KvPool.builder(SMALL).pages(pages).maxContextTokens((long) pages * SMALL.tokensPerPage()).build();
    }

    static KvPoolBuilder builder(int pages) {
        return KvPool.builder(SMALL).pages(pages).maxContextTokens((long) pages * SMALL.tokensPerPage()).fillMode(FillMode.CANARY);
    }
}
