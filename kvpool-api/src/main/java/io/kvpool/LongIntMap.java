package io.kvpool;

import java.util.Arrays;

/**
 * An open-addressing {@code long → int} hash map for the prefix index: no boxing, no allocation per
 * operation, linear probing with backward-shift deletion (no tombstones), load factor at most 1/2.
 * Values are non-negative; {@link #get} answers -1 for a missing key.
 *
 * <pre>
 *   keys[i], values[i]     values[i] == -1 ⇔ bucket i is empty
 *   bucket of k            mix(k) &amp; (length - 1), then i+1, i+2, … (wrapping)
 * </pre>
 * Not thread-safe: used under the pool lock.
 */
final class LongIntMap {

    private long[] keys;
    private int[] values;
    private int size;

    LongIntMap(int expected) {
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
    private static boolean insert(long[] ks, int[] vs, long key, int value) {
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

    private static int bucket(long key, int mask) {
        long h = key * 0x9E3779B97F4A7C15L; // Fibonacci hashing: the keys are SHA-256 bits already, this spreads any other
        return (int) (h ^ (h >>> 32)) & mask;
    }
}
