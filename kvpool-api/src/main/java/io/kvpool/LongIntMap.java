package io.kvpool;

import java.security.SecureRandom;
import java.util.Arrays;

/**
 * An open-addressing {@code long → int} hash map for the prefix index: no boxing, no allocation per
 * operation, linear probing with backward-shift deletion (no tombstones), load factor at most 1/2.
 * Values are non-negative; {@link #get} answers -1 for a missing key.
 *
 * <pre>
 *   keys[i], values[i]     values[i] == -1 ⇔ bucket i is empty
 *   bucket of k            mix(k ^ seed) &amp; (length - 1), then i+1, i+2, … (wrapping)
 * </pre>
 * The seed is random per map. The keys are digest bits a client can choose by grinding prompts offline; with a
 * fixed mix, keys aimed at one bucket would make every lookup walk one long probe run. Without the seed, the
 * client cannot tell which keys share a bucket.
 * Not thread-safe: used under the pool lock.
 */
final class LongIntMap {

    private static final SecureRandom SEEDS = new SecureRandom();

    private final long seed;
    private long[] keys;
    private int[] values;
    private int size;

    /** @param expected keys expected; the map grows past it */
    LongIntMap(int expected) {
        this(expected, SEEDS.nextLong());
    }

    /** Test-only: a map with the given bucket seed. */
    LongIntMap(int expected, long seed) {
        this.seed = seed;
        final int buckets = Integer.highestOneBit(Math.max(8, expected) * 2 - 1) << 1;
        keys = new long[buckets];
        values = new int[buckets];
        Arrays.fill(values, -1);
    }

    /**
     * @return the number of keys; the pool's metrics read it without the lock, so it only ever moves by one
     *         key at a time ({@link #grow} leaves it alone)
     */
    int size() {
        return size;
    }

    /** @return the value of {@code key}, or -1 */
    int get(long key) {
        final int mask = keys.length - 1;
        for (int i = bucket(key, mask); ; i = (i + 1) & mask) {
            final int v = values[i];
            if (v < 0) {
                return -1;
            }
            if (keys[i] == key) {
                return v;
            }
        }
    }

    /** Sets {@code key → value} ({@code value ≥ 0}), replacing an earlier value. */
    void put(long key, int value) {
        if (value < 0) {
            throw new IllegalArgumentException("values are ≥ 0, was " + value);
        }
        if (2 * (size + 1) > keys.length) {
            grow();
        }
        if (insert(keys, values, key, value)) {
            size++;
        }
    }

    /** @return whether {@code key} was new in {@code ks}/{@code vs} (else its value was replaced) */
    private boolean insert(long[] ks, int[] vs, long key, int value) {
        final int mask = ks.length - 1;
        for (int i = bucket(key, mask); ; i = (i + 1) & mask) {
            if (vs[i] < 0) {
                ks[i] = key;
                vs[i] = value;
                return true;
            }
            if (ks[i] == key) {
                vs[i] = value;
                return false;
            }
        }
    }

    /** Removes {@code key}. @return its value, or -1 if it was missing */
    int remove(long key) {
        final int mask = keys.length - 1;
        int i = bucket(key, mask);
        while (true) {
            if (values[i] < 0) {
                return -1;
            }
            if (keys[i] == key) {
                break;
            }
            i = (i + 1) & mask;
        }
        final int old = values[i];
        // backward shift: move later entries of the probe run into the hole, so lookups never stop early
        int hole = i;
        for (int j = (hole + 1) & mask; values[j] >= 0; j = (j + 1) & mask) {
            final int home = bucket(keys[j], mask);
            // entry j may fill the hole if its home is not cyclically inside (hole, j]
            if (((j - home) & mask) >= ((j - hole) & mask)) {
                keys[hole] = keys[j];
                values[hole] = values[j];
                hole = j;
            }
        }
        values[hole] = -1;
        size--;
        return old;
    }

    private void grow() {
        final long[] ks = new long[keys.length * 2];
        final int[] vs = new int[values.length * 2];
        Arrays.fill(vs, -1);
        for (int i = 0; i < keys.length; i++) {
            if (values[i] >= 0) {
                insert(ks, vs, keys[i], values[i]);
            }
        }
        keys = ks;
        values = vs;
    }

    /**
     * @return the bucket where {@code key}'s probe run starts: MurmurHash3's 64-bit finaliser of the seeded key, so
     *         every bit of the key and of the seed reaches the bucket bits
     */
    int bucket(long key, int mask) {
        long h = key ^ seed;
        h = (h ^ (h >>> 33)) * 0xFF51AFD7ED558CCDL;
        h = (h ^ (h >>> 33)) * 0xC4CEB9FE1A85EC53L;
        return (int) (h ^ (h >>> 33)) & mask;
    }

    /** Test-only. @return the probes a lookup of {@code key} makes until it finds it or an empty bucket */
    int probes(long key) {
        final int mask = keys.length - 1;
        int n = 1;
        for (int i = bucket(key, mask); values[i] >= 0 && keys[i] != key; i = (i + 1) & mask) {
            n++;
        }
        return n;
    }

    /** Test-only. @return the number of buckets */
    int buckets() {
        return keys.length;
    }
}
