package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.storage.PageStorage;

/**
 * How a {@link TransferSender} or {@link TransferReceiver} computes the position-keyed checksums
 * ({@link KvChecksum}) of a run of one request's pages: {@link #HOST} (the default) runs {@link KvChecksum#of}
 * on each host page; a device pool plugs in a batch implementation (kvpool-cuda's {@code DeviceChecksums}:
 * one kernel launch for the whole run) through {@link TransferSender.Builder#checksums(PageChecksums)} and
 * {@link TransferReceiver.Builder#checksums(PageChecksums)}.
 *
 * <p>Whatever computes them, the values must be exactly {@link KvChecksum#of}'s for the same bytes: a sender
 * and a receiver with different implementations (a host prefill pool, a device decode pool) compare them.
 */
public interface PageChecksums {

    /** {@link KvChecksum#of} on each page's host bytes ({@link KvPool#page}); needs host-accessible storage. */
    PageChecksums HOST = new PageChecksums() {
        @Override
        public boolean supports(PageStorage storage) {
            return storage.isHostAccessible();
        }

        @Override
        public void compute(KvPool pool, long[] handles, int from, int to, long requestId, int tokenCount, int[] out) {
            for (int p = from; p < to; p++) {
                out[p - from] = KvChecksum.of(pool.layout(), pool.page(handles[p]), requestId, p, tokenCount);
            }
        }

        @Override
        public String toString() {
            return "PageChecksums.HOST";
        }
    };

    /**
     * Tells whether this checksummer can read a storage's pages; a sender or receiver checks it when built.
     *
     * @param storage a pool's storage
     * @return whether {@link #compute} can read that storage's pages
     */
    boolean supports(PageStorage storage);

    /**
     * Computes {@code out[p - from] = KvChecksum.of(pool.layout(), page of handles[p], requestId, p, tokenCount)}
     * for {@code from ≤ p < to}: {@code handles} is indexed by logical page, so {@code p} is each page's logical
     * index in the request. Each handle is checked as {@link KvPool#page} checks it (current, OWNED or RECEIVING).
     *
     * @param pool       the pool the handles belong to
     * @param handles    the request's page handles, by logical page
     * @param from       first logical page
     * @param to         end (exclusive), {@code ≤ handles.length} and every page inside the request's tokens
     * @param requestId  the request the KV belongs to
     * @param tokenCount the request's total tokens
     * @param out        receives {@code to - from} checksums from index 0
     */
    void compute(KvPool pool, long[] handles, int from, int to, long requestId, int tokenCount, int[] out);
}
