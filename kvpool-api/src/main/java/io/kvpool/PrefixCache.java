package io.kvpool;

import org.agrona.collections.Long2LongHashMap;

import java.util.Arrays;

/**
 * The index of published full pages: content hash → slot, plus, per slot, the full key (parent hash,
 * salt, token ids) that a lookup compares before sharing, so a hash collision can never hand one prefix's
 * KV to another. Entries outlive their references: an unreferenced published page is FREE but stays
 * indexed (and in {@link FreePages}' LRU) until the allocator evicts it.
 * Not thread-safe: every method is called under the pool lock.
 */
final class PrefixCache {

    private static final long MISSING = -1L;

    private final int tokensPerPage;
    private final Long2LongHashMap index = new Long2LongHashMap(MISSING);
    private final boolean[] published;
    private final long[] hash;
    private final long[] parent;
    private final long[] salt;
    private final int[][] tokens; // per slot, allocated on first publication: heap grows with what is published

    PrefixCache(int capacity, int tokensPerPage) {
        this.tokensPerPage = tokensPerPage;
        this.published = new boolean[capacity];
        this.hash = new long[capacity];
        this.parent = new long[capacity];
        this.salt = new long[capacity];
        this.tokens = new int[capacity][];
    }

    int size() {
        return index.size();
    }

    boolean isPublished(int slot) {
        return published[slot];
    }

    /**
     * Publishes the content of a full page held by {@code slot}.
     *
     * @return the page's hash (the chain continues with it whether or not this slot was indexed: an equal
     *         page may already be indexed, or a different page may own the hash after a collision)
     */
    long publish(int slot, long parentHash, long pageSalt, int[] ids, int from) {
        final long h = PrefixHash.of(parentHash, pageSalt, ids, from, tokensPerPage);
        if (published[slot] || index.get(h) != MISSING) {
            return h;
        }
        published[slot] = true;
        hash[slot] = h;
        parent[slot] = parentHash;
        salt[slot] = pageSalt;
        if (tokens[slot] == null) {
            tokens[slot] = new int[tokensPerPage];
        }
        System.arraycopy(ids, from, tokens[slot], 0, tokensPerPage);
        index.put(h, slot);
        return h;
    }

    /** @return the slot holding exactly this page (same parent, salt and tokens), or -1 */
    int lookup(long h, long parentHash, long pageSalt, int[] ids, int from) {
        final long found = index.get(h);
        if (found == MISSING) {
            return -1;
        }
        final int slot = (int) found;
        if (parent[slot] != parentHash || salt[slot] != pageSalt
            || !Arrays.equals(tokens[slot], 0, tokensPerPage, ids, from, from + tokensPerPage)) {
            return -1; // a 64-bit collision: different content under the same hash
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
