package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The prefix index's hash map against {@link HashMap}: random puts, replacements and removals over a small key space
 * (so probe runs collide, wrap around the table and are shifted back by removals), past several growths.
 */
class LongIntMapTest {

    @Test
    void randomOperationsAgreeWithAHashMap() {
        for (long seed = 1; seed <= 20; seed++) {
            final SplittableRandom rnd = new SplittableRandom(seed);
            final LongIntMap map = new LongIntMap(1 + rnd.nextInt(8));
            final Map<Long, Integer> model = new HashMap<>();
            final List<Long> keys = new ArrayList<>();
            final int keySpace = 8 + rnd.nextInt(120);
            for (int i = 0; i < keySpace; i++) {
                keys.add(rnd.nextInt(4) == 0 ? (long) i : rnd.nextLong()); // small keys hash close together
            }
            for (int step = 0; step < 3_000; step++) {
                final long key = keys.get(rnd.nextInt(keys.size()));
                final String ctx = "seed " + seed + " step " + step + " key " + key;
                switch (rnd.nextInt(5)) {
                    case 0, 1 -> {
                        final int value = rnd.nextInt(3) == 0 ? 0 : rnd.nextInt(1 << 20);
                        map.put(key, value);
                        model.put(key, value);
                    }
                    case 2 -> assertEquals(model.containsKey(key) ? (int) model.remove(key) : -1, map.remove(key), ctx);
                    default -> assertEquals(model.getOrDefault(key, -1), map.get(key), ctx);
                }
                assertEquals(model.size(), map.size(), ctx);
            }
            for (Map.Entry<Long, Integer> e : model.entrySet()) {
                assertEquals(e.getValue(), map.get(e.getKey()), "seed " + seed);
            }
        }
    }

    @Test
    void theMapGrowsPastItsExpectedSizeAndKeepsEveryEntry() {
        final LongIntMap map = new LongIntMap(2);
        for (int i = 0; i < 1_000; i++) {
            map.put(i * 31L, i);
        }
        assertEquals(1_000, map.size());
        for (int i = 0; i < 1_000; i++) {
            assertEquals(i, map.get(i * 31L));
        }
        for (int i = 0; i < 1_000; i += 2) {
            assertEquals(i, map.remove(i * 31L));
        }
        assertEquals(-1, map.remove(0));
        assertEquals(-1, map.get(0));
        for (int i = 1; i < 1_000; i += 2) {
            assertEquals(i, map.get(i * 31L));
        }
        assertEquals(500, map.size());
    }

    @Test
    void theSizeAReaderWithoutTheLockSeesNeverDropsWhileTheMapGrows() throws Exception {
        // the pool's metrics read size() without the pool lock; a grow must not show 0 .. n while it re-inserts
        final LongIntMap map = new LongIntMap(8);
        final java.util.concurrent.atomic.AtomicBoolean done = new java.util.concurrent.atomic.AtomicBoolean();
        final java.util.concurrent.atomic.AtomicReference<String> drop = new java.util.concurrent.atomic.AtomicReference<>();
        final java.util.concurrent.CountDownLatch reading = new java.util.concurrent.CountDownLatch(1);
        final Thread reader = new Thread(() -> {
            int last = 0;
            reading.countDown();
            while (!done.get()) { // a volatile read each turn: size is read again each turn
                final int now = map.size();
                if (now < last && drop.get() == null) {
                    drop.set(last + " then " + now);
                }
                last = now;
            }
        });
        reader.start();
        reading.await();
        for (int k = 0; k < 1_000_000 && drop.get() == null; k++) { // 18 grows, the last ones re-inserting ~10^5 keys
            map.put(k * 31L + 7, k);
        }
        done.set(true);
        reader.join();
        assertNull(drop.get(), "a reader saw the size drop: " + drop.get());
    }

    @Test
    void valuesAreNonNegative() {
        final LongIntMap map = new LongIntMap(4);
        assertThrows(IllegalArgumentException.class, () -> map.put(1, -1));
        map.put(1, 0);
        assertEquals(0, map.get(1));
        map.put(1, 5);
        assertEquals(5, map.get(1), "a put replaces");
        assertEquals(1, map.size());
    }

    @Test
    void keysAimedAtOneBucketOfOneMapSpreadOverAnother() {
        // a client that knew the mix could grind prompts until their digests share a bucket: every lookup of one
        // of them would then walk one long probe run; another map's seed scatters the same keys
        final LongIntMap aimedAt = new LongIntMap(256, 42);
        final int mask = aimedAt.buckets() - 1;
        final SplittableRandom rnd = new SplittableRandom(7);
        final long[] aimed = new long[128];
        for (int n = 0; n < aimed.length; ) {
            final long k = rnd.nextLong();
            if (aimedAt.bucket(k, mask) == 0) {
                aimed[n++] = k;
            }
        }
        final LongIntMap other = new LongIntMap(256);
        assertEquals(aimedAt.buckets(), other.buckets());
        for (int i = 0; i < aimed.length; i++) {
            aimedAt.put(aimed[i], i);
            other.put(aimed[i], i);
        }
        assertEquals(aimedAt.buckets(), other.buckets(), "neither grew");
        int worstAimed = 0, worstOther = 0;
        for (long k : aimed) {
            worstAimed = Math.max(worstAimed, aimedAt.probes(k));
            worstOther = Math.max(worstOther, other.probes(k));
        }
        assertEquals(aimed.length, worstAimed, "the aimed keys form one run in the map they were aimed at");
        assertTrue(worstOther <= 16, "the same keys in a map with its own seed: longest lookup " + worstOther + " probes");
    }

    @Test
    void everyMapDrawsItsOwnSeed() {
        final long k = 0x0123_4567_89AB_CDEFL;
        final java.util.Set<Integer> buckets = new java.util.HashSet<>();
        for (int i = 0; i < 16; i++) {
            final LongIntMap map = new LongIntMap(1 << 15);
            buckets.add(map.bucket(k, map.buckets() - 1));
        }
        assertTrue(buckets.size() > 8, "one key's bucket in 16 new maps of 65,536 buckets: " + buckets);
    }
}
