package io.kvpool.cuda;

import io.kvpool.KvLayout;
import io.kvpool.transfer.KvChecksum;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * The keys of a batch of position-keyed page checksums ({@link KvChecksum}): what
 * {@link DevicePageStorage#checksums} hashes in front of each page's KV. For every page, exactly the 16
 * bytes {@link KvChecksum} feeds CRC32C first, in the direct buffer the kernel reads:
 * <pre>
 *   key i at byte 16·i:   0 i64 requestId · 8 i32 firstToken (t0 = pageIndex · tokensPerPage) · 12 i32 validTokens
 *                         (min(tokensPerPage, tokenCount − t0)), all little-endian
 * </pre>
 * Keys are checked as {@link KvChecksum#of} checks them (same message), so a key the host would refuse
 * never reaches the device. Not thread-safe; reusable after {@link #clear()}.
 */
public final class ChecksumKeys {

    /** Bytes of one key. */
    public static final int BYTES = 16;

    private final KvLayout layout;
    private final ByteBuffer keys;
    private int size;

    /**
     * Creates an empty set of keys with room for {@code capacity} keys in direct memory.
     *
     * @param layout   the layout of the pages to be checksummed (its tokens per page)
     * @param capacity the most keys this holds, ≥ 0
     * @throws NullPointerException     if {@code layout} is null
     * @throws IllegalArgumentException if {@code capacity < 0}
     */
    public ChecksumKeys(KvLayout layout, int capacity) {
        this.layout = Objects.requireNonNull(layout, "layout");
        if (capacity < 0) {
            throw new IllegalArgumentException("capacity must be ≥ 0, was " + capacity);
        }
        this.keys = ByteBuffer.allocateDirect(Math.multiplyExact(BYTES, Math.max(1, capacity))).order(ByteOrder.LITTLE_ENDIAN);
        this.keys.limit(BYTES * capacity);
    }

    /**
     * Keys for the logical pages {@code firstPageIndex .. firstPageIndex + pages − 1} of one request (what a
     * transfer checksums).
     *
     * @param layout         the layout of the pages to be checksummed
     * @param requestId      the request the KV belongs to
     * @param firstPageIndex the logical index of the first page
     * @param pages          the number of pages, ≥ 0
     * @param tokenCount     the request's total tokens
     * @return keys for exactly those pages, in order
     * @throws IllegalArgumentException if {@code pages < 0} or a page is outside the request
     */
    public static ChecksumKeys ofRequest(KvLayout layout, long requestId, int firstPageIndex, int pages, int tokenCount) {
        final ChecksumKeys k = new ChecksumKeys(layout, pages);
        for (int i = 0; i < pages; i++) {
            k.add(requestId, firstPageIndex + i, tokenCount);
        }
        return k;
    }

    /**
     * Appends the key of logical page {@code pageIndex} of a {@code tokenCount}-token request.
     *
     * @param requestId  the request the KV belongs to
     * @param pageIndex  the page's logical index in the request
     * @param tokenCount the request's total tokens
     * @return this
     * @throws IllegalArgumentException if the page is outside the request (as {@link KvChecksum#of})
     * @throws IllegalStateException    if the keys are full
     */
    public ChecksumKeys add(long requestId, int pageIndex, int tokenCount) {
        final int tpp = layout.tokensPerPage();
        final long t0 = (long) pageIndex * tpp;
        if (pageIndex < 0 || t0 >= tokenCount) {
            throw new IllegalArgumentException("page " + pageIndex + " is outside a " + tokenCount + "-token request ("
                + tpp + " tokens per page)");
        }
        if (size == capacity()) {
            throw new IllegalStateException("checksum keys are full (" + size + ")");
        }
        final int at = BYTES * size;
        keys.putLong(at, requestId).putInt(at + 8, (int) t0).putInt(at + 12, (int) Math.min(tpp, tokenCount - t0));
        size++;
        return this;
    }

    /** Forgets every key (the capacity stays). */
    public void clear() {
        size = 0;
    }

    /** {@return how many keys were added} */
    public int size() {
        return size;
    }

    /** {@return the most keys this holds} */
    public int capacity() {
        return keys.limit() / BYTES;
    }

    /** {@return the layout the keys were made for} */
    public KvLayout layout() {
        return layout;
    }

    /**
     * {@return key {@code i}'s request id}
     *
     * @param i the key's index, {@code 0 ≤ i < size()}
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     */
    public long requestId(int i) {
        return keys.getLong(BYTES * Objects.checkIndex(i, size));
    }

    /**
     * {@return key {@code i}'s first token ({@code pageIndex · tokensPerPage})}
     *
     * @param i the key's index, {@code 0 ≤ i < size()}
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     */
    public int firstToken(int i) {
        return keys.getInt(BYTES * Objects.checkIndex(i, size) + 8);
    }

    /**
     * {@return key {@code i}'s valid tokens (the last page of a request may hold fewer than a page)}
     *
     * @param i the key's index, {@code 0 ≤ i < size()}
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     */
    public int validTokens(int i) {
        return keys.getInt(BYTES * Objects.checkIndex(i, size) + 12);
    }

    /** @return the first {@code 16 · size()} bytes, as the kernel reads them (a view; do not modify) */
    ByteBuffer buffer() {
        return keys.duplicate().order(ByteOrder.LITTLE_ENDIAN).position(0).limit(BYTES * size);
    }
}
