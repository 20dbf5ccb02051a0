package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.security.DigestException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;

/**
 * The index of published full pages: content hash → slot, plus, per slot, the full key that a lookup
 * compares before sharing — the exact prefix before the page, the salt and the page's token ids — so neither
 * a chance collision nor a forged one can hand one prefix's KV to another. Entries outlive their references:
 * an unreferenced published page is FREE but stays indexed (and in {@link FreePages}' LRU) until the allocator
 * evicts it.
 *
 * <p><b>The prefix before a page is compared by a cryptographic digest, not by the chain hash.</b> The 64-bit
 * {@link PrefixHash} only finds the candidate; it is not collision-resistant (its mixer is invertible: a second
 * preimage of a page's chain hash takes milliseconds), so comparing the parent's <em>hash</em> would trust it
 * for everything before the page: an adversary sharing a salt could publish a different first page with the
 * same chain hash, then a second page that a victim's prompt would attach, its KV computed after the
 * adversary's text. Each page therefore records its parent's prefix digest — SHA-256, truncated to 128 bits,
 * chained over (parent digest, salt, token ids) exactly as the hash is — and a lookup compares it with the digest
 * of the prompt's own prefix, which it extends page by page as it matches.
 *
 * <pre>
 *   digest(root) = 0                      digest(page i) = SHA-256(digest(page i-1) ‖ salt ‖ ids of page i)[0..16)
 *   publish page i:  index[hash] = slot, key = (digest(page i-1), salt, ids) — unless the slot or the hash is taken
 *   lookup page i:   index[hash] → slot whose key is exactly (digest of the prompt's pages before i, salt, ids)
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
    private final long[] hash;
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
        this.hash = new long[capacity];
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
     * Publishes the content of a full page held by {@code slot}, whose chain hash {@code h} the caller computed
     * ({@link PrefixHash#of}); the page is not indexed if the slot already is, or if the hash is taken (by an
     * equal page, or by a different one after a collision).
     *
     * @param parent the prefix digest of the page before it ({@link PrefixDigest#ROOT} for a first page)
     */
    void publish(int slot, long h, PrefixDigest parent, long pageSalt, int[] ids, int from) {
        if (published[slot] || index.get(h) >= 0) {
            return;
        }
        // what may allocate first (the slot's token array, the index's growth): an OutOfMemoryError then leaves the slot
        // unpublished, never marked published without its index entry (under the pool lock, no lookup runs between)
        if (tokens[slot] == null) {
            tokens[slot] = new int[tokensPerPage];
        }
        System.arraycopy(ids, from, tokens[slot], 0, tokensPerPage);
        index.put(h, slot);
        published[slot] = true;
        hash[slot] = h;
        parentHi[slot] = parent.hi();
        parentLo[slot] = parent.lo();
        salt[slot] = pageSalt;
    }

    /**
     * @param parent the prefix digest of the prompt's pages before this one ({@link PrefixDigest#ROOT} for the first)
     * @return the slot holding exactly this page (same prefix before it, salt and tokens), or -1
     */
    int lookup(long h, PrefixDigest parent, long pageSalt, int[] ids, int from) {
        final int slot = index.get(h);
        if (slot < 0) {
            return -1;
        }
        if (parentHi[slot] != parent.hi() || parentLo[slot] != parent.lo() || salt[slot] != pageSalt
            || !Arrays.equals(tokens[slot], 0, tokensPerPage, ids, from, from + tokensPerPage)) {
            return -1; // a collision: different content (or a different prefix before it) under the same hash
        }
        return slot;
    }

    /** Forgets a slot's content (its page is being evicted or reused). */
    void unpublish(int slot) {
        if (published[slot]) {
            published[slot] = false;
            index.remove(hash[slot]);
        }
    }
}
