package io.kvpool.examples.server.link;

import io.kvpool.KvPool;
import io.kvpool.Sequence;

import java.lang.foreign.MemorySegment;

/**
 * How the echo model reaches the bytes of a sequence's page: {@link #DIRECT}ly on host storage (the page
 * itself, no copy), or through copies for storage the host cannot address ({@link CopyingPageIo}: a device
 * pool's {@code readPage}/{@code writePage}, the slow path, fine for an example). Either way the page's
 * handle is checked by the pool first, so a stale handle is refused as on the host path.
 *
 * <pre>
 *   MemorySegment page = io.open(seq, i);   // host layout: page i of seq
 *   … read or change bytes …
 *   io.commit(seq, i, page);                // after a change: no-op for DIRECT, write-back for copies
 * </pre>
 */
public interface PageIo {

    /**
     * @return page {@code i} of {@code seq} in the host page layout: the page itself, or a buffer holding a copy
     * @throws IllegalStateException if the pool refuses the page's handle
     */
    MemorySegment open(Sequence seq, int i);

    /** Makes changes to what {@link #open} returned reach the page. */
    void commit(Sequence seq, int i, MemorySegment page);

    /** Host storage: the page's own bytes ({@link Sequence#page}); nothing to commit. */
    PageIo DIRECT = new PageIo() {
        @Override
        public MemorySegment open(Sequence seq, int i) {
            return seq.page(i);
        }

        @Override
        public void commit(Sequence seq, int i, MemorySegment page) {
        }
    };

    /**
     * @return the device backend's way to {@code pool}'s pages if they are on its device (copies: one instance per
     *         thread), else {@link #DIRECT} for a host-addressable pool
     * @throws IllegalArgumentException if neither reaches them
     */
    static PageIo of(KvPool pool) {
        final PageIo device = DeviceBackend.current().pageIo(pool);
        if (device != null) {
            return device;
        }
        if (pool.storage().isHostAccessible()) {
            return DIRECT;
        }
        throw new IllegalArgumentException("the echo model cannot reach the pages of " + pool.storage()
            + ": neither host-addressable nor on the " + DeviceBackend.current() + " device");
    }
}
