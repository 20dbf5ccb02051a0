package io.kvpool.cuda;

import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.KvChecksum;
import io.kvpool.transfer.PageChecksums;

/**
 * {@link PageChecksums} for device pools: a run of a request's pages is checksummed by ONE
 * {@code kvpool_page_checksums} launch ({@link DevicePageStorage#checksums}), with exactly
 * {@link KvChecksum#of}'s values, so a device decode pool can verify what a host (or device) prefill pool
 * sent. Storages the host can read fall back to {@link PageChecksums#HOST}. Plug it in with
 * {@code TransferReceiver.builder(pool, identity).checksums(DeviceChecksums.INSTANCE)} (and the same on
 * {@code TransferSender.Builder}).
 *
 * <p>Each handle is validated with {@link KvPool#validate} first (current, OWNED or RECEIVING, as
 * {@link KvPool#page} requires); a refused one throws {@link IllegalStateException} naming it and the
 * refusal, and nothing is launched. Thread-safe (the storage serialises its calls).
 */
public final class DeviceChecksums implements PageChecksums {

    /** The instance (stateless). */
    public static final DeviceChecksums INSTANCE = new DeviceChecksums();

    private DeviceChecksums() {
    }

    @Override
    public boolean supports(PageStorage storage) {
        return storage instanceof DevicePageStorage || HOST.supports(storage);
    }

    @Override
    public void compute(KvPool pool, long[] handles, int from, int to, long requestId, int tokenCount, int[] out) {
        if (!(pool.storage() instanceof DevicePageStorage device)) {
            HOST.compute(pool, handles, from, to, requestId, tokenCount, out);
            return;
        }
        final int n = to - from;
        final int[] slots = new int[n];
        for (int p = from; p < to; p++) {
            final long v = pool.validate(handles[p]);
            if (v < 0) {
                throw new IllegalStateException("page " + p + " of request " + requestId + ": the pool refuses " + PageHandle.toString(handles[p])
                    + " (" + refusal(v) + "); no checksum computed");
            }
            slots[p - from] = (int) v;
        }
        device.checksums(slots, 0, ChecksumKeys.ofRequest(pool.layout(), requestId, from, n, tokenCount), out, 0);
    }

    private static String refusal(long code) {
        return code == PageHandle.STALE ? "stale handle"
            : code == PageHandle.INVALID ? "not a page handle"
            : code == PageHandle.FOREIGN ? "a handle of another pool"
            : code == PageHandle.ILLEGAL_STATE ? "page is neither OWNED nor RECEIVING"
            : "code " + code;
    }

    @Override
    public String toString() {
        return "DeviceChecksums";
    }
}
