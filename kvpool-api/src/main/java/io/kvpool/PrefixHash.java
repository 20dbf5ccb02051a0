package io.kvpool;

/**
 * A cheap chained content hash of full pages, as in vLLM's first design: a page's hash covers its parent page's
 * hash, a cache salt and the page's token ids. For callers that want a stable 64-bit name for a prefix (a
 * router that sends requests with equal prefixes to the same engine, say); the pool does not use it.
 *
 * <h2>Algorithm (stable across processes and versions of this class; bump {@link #VERSION} to change)</h2>
 * <pre>
 *   h = fmix64(parent ^ 0x9E3779B97F4A7C15)
 *   h = fmix64(h ^ salt)
 *   for each token t at index i of the page:  h = fmix64(h ^ ((i &lt;&lt; 32) | (t &amp; 0xFFFFFFFF)))
 *   fmix64 = MurmurHash3's 64-bit finaliser
 * </pre>
 * The first page's parent is {@link #ROOT}. Equal hashes do not prove equal prefixes: a 64-bit hash can
 * collide, and this one is not collision-resistant (fmix64 is invertible: an adversary finds a second preimage
 * in milliseconds). So the pool's prefix cache keys and compares pages by a SHA-256 chain digest instead, and
 * compares every token id and the salt before it shares a page; a caller must not decide by this hash alone that
 * two requests may share KV.
 *
 * <p>The salt is how tenants stay apart: give each tenant its own salt and no two tenants ever share a
 * page; use {@link #SHARED_SALT} only for content that tenants opt in to sharing (a public system prompt).
 */
public final class PrefixHash {

    /** Version of the algorithm above, with {@link #SHARED_SALT} as one of its inputs. */
    public static final int VERSION = 2;
    /** Parent hash of a sequence's first page. */
    public static final long ROOT = 0x6B7670_6F6F6C01L;
    /**
     * The salt for content every tenant has opted in to share: {@code "kvshared"} in ASCII. Not 0, which the pool
     * refuses as a salt: it is what a {@code long} that was never set holds, and a salt shared by mistake shares KV
     * across tenants.
     */
    public static final long SHARED_SALT = 0x6B76_7368_6172_6564L;

    private PrefixHash() {
    }

    /**
     * Hashes one full page of tokens, chained to the page before it, in the given cache namespace.
     *
     * @param parent the previous page's hash, or {@link #ROOT}
     * @param salt   the cache namespace (tenant); any value here, though the pool refuses 0
     * @param tokens token ids
     * @param from   index of the page's first token in {@code tokens}
     * @param count  tokens in the page
     * @return the page's hash
     */
    public static long of(long parent, long salt, int[] tokens, int from, int count) {
        long h = fmix64(parent ^ 0x9E3779B97F4A7C15L);
        h = fmix64(h ^ salt);
        for (int i = 0; i < count; i++) {
            h = fmix64(h ^ (((long) i << 32) | (tokens[from + i] & 0xFFFFFFFFL)));
        }
        return h;
    }

    static long fmix64(long k) {
        k ^= k >>> 33;
        k *= 0xff51afd7ed558ccdL;
        k ^= k >>> 33;
        k *= 0xc4ceb9fe1a85ec53L;
        k ^= k >>> 33;
        return k;
    }
}
