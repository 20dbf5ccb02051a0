package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Prefix sharing across threads: several threads admit prompts of two tenants that share their first pages, attach
 * what the others published, compute the rest, publish, decode and close, all on one small pool, so that a page is
 * attached on one thread (RETAIN or revival under the pool lock) while another thread drops its last reference
 * without the lock, and cached pages are evicted and reused all the while. Every token's KV is a tag of the tenant's
 * salt and the exact token ids up to it, so an attached page from another prefix or tenant, or a page freed and reused
 * under its holder, reads as foreign bytes. At the end the accounting must balance. The control: a non-atomic
 * state-word CAS, which loses refcount updates between attach and release.
 */
class ConcurrentPrefixSharingTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();
    private static final int PAGES = 24;
    private static final int WORKERS = 3;
    private static final int DECODE = 4;
    private static final long[] SALTS = {TestPools.SALT, TestPools.SALT + 1};
    private static final long MILLIS = Long.getLong("kvpool.stress.millis", 1500);

    /** A prompt: the first two pages the same in every document, then the document's own tokens. */
    private static int[] prompt(int doc, int length) {
        final int[] ids = new int[length + DECODE];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = i >= length ? 77_000 + i : i < 2 * TPP ? 100 + i : doc * 1000 + i;
        }
        return ids;
    }

    /** The tag of every token: its position and a hash of the salt and the token ids up to it. */
    private static long[] expected(long salt, int[] ids) {
        final long[] tags = new long[ids.length];
        long h = salt;
        for (int t = 0; t < ids.length; t++) {
            h = (h ^ ids[t]) * 0x9E37_79B9_7F4A_7C15L;
            h ^= h >>> 29;
            tags[t] = TokenTags.tag(h & 0x3FFF_FFFFL, t);
        }
        return tags;
    }

    private static void write(Sequence s, long[] tags, int from, int to) {
        for (int t = from; t < to; t++) {
            TokenTags.write(s.page(t / TPP), s.pool().layout(), t % TPP, tags[t]);
        }
    }

    /** @return null, or what the first token that does not hold its tag holds */
    private static String check(Sequence s, long[] tags, int to, String when) {
        for (int t = 0; t < to; t++) {
            final long got = TokenTags.readSequence(s, t);
            if (got != tags[t]) {
                return when + ": token " + t + " of " + s + " (slot " + s.pageIndex(t / TPP) + ") holds "
                    + Long.toHexString(got) + ", not its own " + Long.toHexString(tags[t]);
            }
        }
        return null;
    }

    private static void worker(KvPool pool, long seed, AtomicReference<String> failure, CountDownLatch start) {
        final SplittableRandom rnd = new SplittableRandom(seed);
        try {
            start.await();
            final long end = System.nanoTime() + MILLIS * 1_000_000;
            while (System.nanoTime() < end && failure.get() == null) {
                final long salt = SALTS[rnd.nextInt(SALTS.length)];
                final int length = 1 + rnd.nextInt(5 * TPP);
                final int[] ids = prompt(rnd.nextInt(3), length);
                final long[] tags = expected(salt, ids);
                final Admission a = pool.admit(Arrays.copyOf(ids, length), DECODE, salt);
                if (!a.admitted()) {
                    continue;
                }
                try (Sequence s = a.sequence()) {
                    final int cached = s.tokenCount();
                    String bad = check(s, tags, cached, "attached");
                    s.append(length - cached);
                    write(s, tags, cached, length);
                    if (bad == null && rnd.nextInt(3) != 0) {
                        s.publish(Arrays.copyOf(ids, length), salt);
                    }
                    Thread.yield(); // let the others attach, release and evict meanwhile
                    if (bad == null) {
                        bad = check(s, tags, length, "after the prompt");
                    }
                    final int decode = rnd.nextInt(DECODE + 1);
                    for (int k = 0; k < decode && bad == null; k++) {
                        s.append(1);
                        write(s, tags, length + k, length + k + 1);
                        bad = check(s, tags, length + k + 1, "decoding");
                    }
                    if (bad != null) {
                        failure.compareAndSet(null, bad);
                    }
                }
            }
        } catch (Throwable t) {
            failure.compareAndSet(null, t.toString());
        }
    }

    /** @return the first failure of a run, or null */
    private static String run(KvPool pool, long seed) throws InterruptedException {
        final AtomicReference<String> failure = new AtomicReference<>();
        final CountDownLatch start = new CountDownLatch(1);
        final List<Thread> threads = new ArrayList<>();
        for (int w = 0; w < WORKERS; w++) {
            final long s = seed * 31 + w;
            threads.add(Thread.ofPlatform().name("prefix-" + w).start(() -> worker(pool, s, failure, start)));
        }
        start.countDown();
        for (Thread t : threads) {
            t.join(60_000);
        }
        if (failure.get() != null) {
            return failure.get();
        }
        try {
            final PoolSnapshot s = pool.verifyAccounting();
            if (s.inUse() != 0 || s.reserved() != 0 || s.openSequences() != 0) {
                return "after every sequence closed: " + s;
            }
        } catch (IllegalStateException e) {
            return e.toString();
        }
        return null;
    }

    @Test
    void threadsAttachingPublishingAndReleasingCachedPrefixesOnlyEverReadTheirOwnPromptsKv() throws InterruptedException {
        try (KvPool pool = TestPools.builder(PAGES).maxContextTokens(64).build()) {
            assertNull(run(pool, 1));
            final PoolSnapshot s = pool.snapshot();
            assertTrue(s.prefixHits() > 500 && s.evictions() > 100, "prefixes were shared and evicted: " + s);
        }
    }

    @Test
    void theTestCatchesANonAtomicStateWordCas() throws InterruptedException {
        String caught = null;
        for (long seed = 1; seed <= 5 && caught == null; seed++) {
            final KvPoolBuilder b = TestPools.builder(PAGES).maxContextTokens(64);
            b.slotWords = ConcurrentStressTest.RacySlotWords::new;
            final KvPool pool = b.build();
            try {
                caught = run(pool, seed);
            } finally {
                try {
                    pool.close();
                } catch (RuntimeException corrupted) {
                    // the control broke the pool on purpose
                }
            }
        }
        assertNotNull(caught, "lost refcount updates between attach and release must be caught");
    }
}
