package io.kvpool.transfer;

import io.kvpool.KvLayout;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

/**
 * Per-page KV checksums keyed by <em>logical position</em>, never by slot, so they survive relocation
 * (a page copied, offloaded, or transferred into another pool's slot has the same checksum).
 *
 * <h2>Definition (a GPU kernel must produce the same value)</h2>
 * For logical page {@code p} of request {@code r} holding tokens {@code [t0, t0 + n)} with
 * {@code t0 = p · tokensPerPage}, {@code n = min(tokensPerPage, tokenCount − t0)}:
 * <pre>
 *   checksum(r, p) = CRC32C( r as i64 LE ‖ t0 as i32 LE ‖ n as i32 LE
 *                            ‖ for layer in 0..layers-1, for kv in K,V:
 *                                 the n·bytesPerTokenVector bytes at KvLayout.offset(layer, kv, 0) )
 * </pre>
 * Only the valid tokens are covered (a last page's tail is not), and every layer in order, so a page
 * written into the wrong logical position, a token from another request, a missing layer or a partial
 * page all change the value. CRC32C is the JDK's intrinsic (hardware CRC32 instructions).
 */
public final class KvChecksum {
    private KvChecksum() {
    }

    /**
     * Checksums one page's valid tokens, keyed by request and logical position. Thread-safe.
     *
     * @param layout     the page layout
     * @param page       the page's bytes (host layout)
     * @param requestId  the request the KV belongs to
     * @param pageIndex  the page's logical index in the request
     * @param tokenCount the request's total tokens
     * @return the checksum of that page
     * @throws IllegalArgumentException if {@code pageIndex} is outside the request's pages
     */
    public static int of(KvLayout layout, MemorySegment page, long requestId, int pageIndex, int tokenCount) {
        final int tpp = layout.tokensPerPage();
        final long t0 = (long) pageIndex * tpp;
        if (pageIndex < 0 || t0 >= tokenCount) {
            throw new IllegalArgumentException("page " + pageIndex + " is outside a " + tokenCount + "-token request ("
                + tpp + " tokens per page)");
        }
        final int n = (int) Math.min(tpp, tokenCount - t0);
        final CRC32C crc = new CRC32C();
        final ByteBuffer header = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);
        header.putLong(requestId).putInt((int) t0).putInt(n).flip();
        crc.update(header);
        final long vectorBytes = layout.bytesPerTokenVector() * n;
        for (int layer = 0; layer < layout.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                crc.update(page.asSlice(layout.offset(layer, kv, 0), vectorBytes).asByteBuffer());
            }
        }
        return (int) crc.getValue();
    }
}
