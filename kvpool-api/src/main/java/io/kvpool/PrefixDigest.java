package io.kvpool;

/**
 * The 128-bit prefix digest of a page: SHA-256 over (the previous page's digest, salt, the page's token ids),
 * truncated (see {@link PrefixCache}). A value: compared by its two halves.
 *
 * @param hi the first 8 bytes of the SHA-256 output, little-endian
 * @param lo the next 8 bytes
 */
record PrefixDigest(long hi, long lo) {

    /** The digest of the empty prefix: the parent of a sequence's first page. */
    static final PrefixDigest ROOT = new PrefixDigest(0L, 0L);
}
