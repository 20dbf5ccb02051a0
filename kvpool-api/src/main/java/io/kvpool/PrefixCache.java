package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.security.DigestException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;

/**
 * The index of published full pages: prefix digest → slot, plus, per slot, the full key that a lookup compares
 * before sharing — the exact prefix before the page, the salt and the page's token ids — so neither a chance
 * collision nor a forged one can hand one prefix's KV to another. Entries outlive their references: an
 * unreferenced published page is FREE but stays indexed (and in {@link FreePages}' LRU) until the allocator
 * evicts it.
 *
 * <p><b>Pages are found, and their prefixes compared, by a cryptographic digest.</b> Each page's prefix digest is
 * SHA-256, truncated to 128 bits, chained over (the digest of the page before, salt, token ids). The index is keyed
 * by its first 64 bits, and a page records the digest of the prefix before it, which a lookup compares with the
 * digest of the prompt's own pages before it, extended page by page as they match. The 64-bit
 * {@link PrefixHash} is used for neither: its mixer is invertible, so a second preimage of a page's chain hash
 * takes milliseconds. Comparing the parent's chain hash let an adversary sharing a salt publish a different first
 * page under the same hash, then a second page that a victim's prompt would attach, its KV computed after the
 * adversary's text; keying the index by the chain hash let that forged page hold the hash's entry, so the genuine
 * page was never indexed and nobody shared it again. A digest key cannot be aimed at: a second preimage of 64 bits
 * of SHA-256 is 2^64 work.
 *
 * <pre>
 *   digest(root) = 0                      digest(page i) = SHA-256(digest(page i-1) ‖ salt ‖ ids of page i)[0..16)
 *   publish page i:  index[hi(digest(page i))] = slot, key = (digest(page i-1), salt, ids) — unless the slot or the
 *                    entry is taken (an equal page; or, at odds of 2^-64 a pair, another one)
 *   lookup page i:   index[hi(digest(page i))] → slot whose key is exactly (digest of the prompt's pages before i, salt, ids)
 * </pre>
 * Not thread-safe: every method is called under the pool lock, except {@link #isPublished}, which
 * {@link PrefixSharing} reads without it after a volatile read of the page's state word (see there why that suffices).
 */
final class PrefixCache {

    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle INTS = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

    private final int tokensPerPage;
    private final LongIntMap index;
    private final boolean[] published;
    private final long[] key; // per published slot, its index key (see indexKey)
    private final long[] parentHi;
    private final long[] parentLo;
    private final long[] salt;
    private final int[][] tokens; // per slot, allocated on first publication: heap grows with what is published
    private final MessageDigest sha256;
    /** Tokens a page's digest input holds at once; a larger page is hashed in pieces (a page may hold 2^29 tokens). */
    static final int DIGEST_CHUNK_TOKENS = 1024;
    private final byte[] digestIn;
    private final byte[] digestOut = new byte[32];

    PrefixCache(int capacity, int tokensPerPage) {
        this.tokensPerPage = tokensPerPage;
        this.index = new LongIntMap(Math.min(capacity, 1 << 16));
        this.published = new boolean[capacity];
        this.key = new long[capacity];
        this.parentHi = new long[capacity];
        this.parentLo = new long[capacity];
        this.salt = new long[capacity];
        this.tokens = new int[capacity][];
        this.digestIn = new byte[24 + 4 * Math.min(tokensPerPage, DIGEST_CHUNK_TOKENS)];
        try {
            this.sha256 = MessageDigest.getInstance("SHA-256"); // every Java SE runtime has it
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("this JVM lacks SHA-256", e);
        }
    }

    int size() {
        return index.size();
    }

    /**
     * @param cacheSalt a salt a caller passed to admit or publish
     * @throws IllegalArgumentException if it is 0, the value of a salt never set
     */
    static void requireSalt(long cacheSalt) {
        if (cacheSalt == 0) {
            throw new IllegalArgumentException("cache salt 0 is refused: it is what a salt that was never set holds, and a "
                + "salt two tenants share shares their KV; pass the tenant's own salt, or PrefixHash.SHARED_SALT for "
                + "content every tenant opts in to share");
        }
    }

    boolean isPublished(int slot) {
        return published[slot];
    }

    /**
     * @param parent the prefix digest of the page before ({@link PrefixDigest#ROOT} for a first page)
     * @return the prefix digest of the page of {@code ids[from ..]} after {@code parent}
     */
    PrefixDigest digest(PrefixDigest parent, long pageSalt, int[] ids, int from) {
        LONGS.set(digestIn, 0, parent.hi());
        LONGS.set(digestIn, 8, parent.lo());
        LONGS.set(digestIn, 16, pageSalt);
        int at = 24;
        for (int i = 0; i < tokensPerPage; i++) {
            if (at == digestIn.length) { // a page of more than DIGEST_CHUNK_TOKENS tokens: the same bytes, in pieces
                sha256.update(digestIn, 0, at);
                at = 0;
            }
            INTS.set(digestIn, at, ids[from + i]);
            at += 4;
        }
        sha256.update(digestIn, 0, at);
        try {
            sha256.digest(digestOut, 0, 32);
        } catch (DigestException e) {
            throw new IllegalStateException(e); // 32 bytes is SHA-256's length
        }
        return new PrefixDigest((long) LONGS.get(digestOut, 0), (long) LONGS.get(digestOut, 8));
    }

    /**
     * Publishes the content of a full page held by {@code slot}; the page is not indexed if the slot already is, or
     * if its digest's entry is taken (by an equal page).
     *
     * @param own    the page's prefix digest ({@link #digest} of {@code parent} and this page)
     * @param parent the prefix digest of the page before it ({@link PrefixDigest#ROOT} for a first page)
     */
    void publish(int slot, PrefixDigest own, PrefixDigest parent, long pageSalt, int[] ids, int from) {
        final long k = indexKey(own);
        if (published[slot] || index.get(k) >= 0) {
            return;
        }
        // what may allocate first (the slot's token array, the index's growth): an OutOfMemoryError then leaves the slot
        // unpublished, never marked published without its index entry (under the pool lock, no lookup runs between)
        if (tokens[slot] == null) {
            tokens[slot] = new int[tokensPerPage];
        }
        System.arraycopy(ids, from, tokens[slot], 0, tokensPerPage);
        index.put(k, slot);
        published[slot] = true;
        key[slot] = k;
        parentHi[slot] = parent.hi();
        parentLo[slot] = parent.lo();
        salt[slot] = pageSalt;
    }

    /**
     * @param own    the prefix digest of the prompt's pages up to and including this one ({@link #digest})
     * @param parent the prefix digest of the prompt's pages before this one ({@link PrefixDigest#ROOT} for the first)
     * @return the slot holding exactly this page (same prefix before it, salt and tokens), or -1
     */
    int lookup(PrefixDigest own, PrefixDigest parent, long pageSalt, int[] ids, int from) {
        final int slot = index.get(indexKey(own));
        if (slot < 0) {
            return -1;
        }
        if (parentHi[slot] != parent.hi() || parentLo[slot] != parent.lo() || salt[slot] != pageSalt
            || !Arrays.equals(tokens[slot], 0, tokensPerPage, ids, from, from + tokensPerPage)) {
            return -1; // a collision of 64 digest bits: different content (or a different prefix before it) under one key
        }
        return slot;
    }

    /** Forgets a slot's content (its page is being evicted or reused). */
    void unpublish(int slot) {
        if (published[slot]) {
            published[slot] = false;
            index.remove(key[slot]);
        }
    }

    /** The index key of a page: the first 64 bits of its prefix digest. */
    private static long indexKey(PrefixDigest own) {
        return own.hi();
    }
}
