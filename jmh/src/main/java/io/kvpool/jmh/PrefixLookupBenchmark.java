package io.kvpool.jmh;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;

/**
 * Prefix lookup: admission of a 4,096-token prompt (+ 256 new tokens) with {@link KvPool#admit(int[], int, long)},
 * which attaches the longest cached prefix, then close of the returned sequence. A publisher sequence
 * holding a 4,096-token prompt (256 full pages, all published) stays open, so cached pages are OWNED and
 * shared by refcount. {@link Layouts#BOOKKEEPING}, fill NONE, 1,024 pages.
 *
 * <ul>
 *   <li>{@code hit}: the prompt's first {@code cachedPages} pages equal the publisher's; page
 *       {@code cachedPages + 1} differs. Per op: {@code cachedPages + 1} chained SHA-256 page digests (16
 *       tokens each), as many index lookups, {@code cachedPages} full-key verifications, retains and releases.
 *       255 is the most a 4,096-token prompt can attach (its last token is always computed).</li>
 *   <li>{@code miss}: the first page already differs: one digest, one failed lookup, plus admission.</li>
 * </ul>
 * The baseline hashes each page with the cheaper, invertible {@link io.kvpool.PrefixHash#of} and verifies over a
 * {@code HashMap<Long, Integer>} index keyed by it.
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class PrefixLookupBenchmark {

    static final int PAGES = 1024;
    static final int TPP = 16;
    static final int PROMPT = 4096;
    static final int MAX_NEW = 256;
    static final long SALT = 0x5EED_7E11A47L;

    /** A pool and a baseline, each with a published 4,096-token prompt held open. */
    @State(Scope.Thread)
    public static class Cache {
        KvPool pool;
        Sequence publisher;
        NaiveBaselinePool baseline;
        NaiveBaselinePool.Seq basePublisher;
        int[] published;

        @Setup(Level.Trial)
        public void setUp() {
            published = new SplittableRandom(42).ints(PROMPT, 0, 128_000).toArray();
            pool = KvPool.builder(Layouts.BOOKKEEPING).pages(PAGES).maxContextTokens(8192).fillMode(FillMode.NONE).build();
            publisher = pool.admit(published, 0, SALT).sequence();
            publisher.append(PROMPT);
            publisher.publish(published, SALT);
            baseline = new NaiveBaselinePool(Layouts.BOOKKEEPING, PAGES, 8192, FillMode.NONE);
            basePublisher = baseline.admit(published, 0, SALT).sequence();
            basePublisher.append(PROMPT);
            basePublisher.publish(published, SALT);
            if (publisher.publishedPages() != PROMPT / TPP || pool.snapshot().publishedPrefixes() != PROMPT / TPP) {
                throw new IllegalStateException("publisher: " + publisher + ", " + pool.snapshot());
            }
        }

        /** @return a prompt equal to the published one on its first {@code pages} pages, different after */
        int[] promptSharing(int pages) {
            final int[] p = published.clone();
            for (int i = pages * TPP; i < PROMPT; i++) {
                p[i] = p[i] + 1;
            }
            return p;
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            try (KvPool p = pool; NaiveBaselinePool b = baseline) {
                publisher.close();
                basePublisher.close();
                final PoolSnapshot snap = p.verifyAccounting();
                if (snap.free() != PAGES || snap.reserved() != 0 || snap.openSequences() != 0 || b.freeUnreserved() != PAGES) {
                    throw new IllegalStateException("leak: " + snap + ", baseline free unreserved " + b.freeUnreserved());
                }
            }
        }
    }

    /** A prompt whose first {@code cachedPages} pages are cached. */
    @State(Scope.Thread)
    public static class Hit {
        @Param({"64", "255"})
        int cachedPages;
        int[] prompt;

        @Setup(Level.Trial)
        public void setUp(Cache c) {
            prompt = c.promptSharing(cachedPages);
            try (Sequence s = c.pool.admit(prompt, MAX_NEW, SALT).sequence();
                 NaiveBaselinePool.Seq b = c.baseline.admit(prompt, MAX_NEW, SALT).sequence()) {
                if (s.tokenCount() != cachedPages * TPP || b.tokenCount() != cachedPages * TPP) {
                    throw new IllegalStateException("expected " + cachedPages + " cached pages: " + s + ", baseline "
                        + b.tokenCount() + " tokens");
                }
            }
        }
    }

    /** A prompt whose first page is not cached. */
    @State(Scope.Thread)
    public static class Miss {
        int[] prompt;

        @Setup(Level.Trial)
        public void setUp(Cache c) {
            prompt = c.promptSharing(0);
            try (Sequence s = c.pool.admit(prompt, MAX_NEW, SALT).sequence();
                 NaiveBaselinePool.Seq b = c.baseline.admit(prompt, MAX_NEW, SALT).sequence()) {
                if (s.tokenCount() != 0 || b.tokenCount() != 0) {
                    throw new IllegalStateException("expected a miss: " + s + ", baseline " + b.tokenCount() + " tokens");
                }
            }
        }
    }

    @Benchmark
    public int kvpool_hit(Cache c, Hit h) {
        final Sequence s = c.pool.admit(h.prompt, MAX_NEW, SALT).sequence();
        final int n = s.tokenCount();
        s.close();
        return n;
    }

    @Benchmark
    public int baseline_hit(Cache c, Hit h) {
        final NaiveBaselinePool.Seq s = c.baseline.admit(h.prompt, MAX_NEW, SALT).sequence();
        final int n = s.tokenCount();
        s.close();
        return n;
    }

    @Benchmark
    public int kvpool_miss(Cache c, Miss m) {
        final Sequence s = c.pool.admit(m.prompt, MAX_NEW, SALT).sequence();
        final int n = s.tokenCount();
        s.close();
        return n;
    }

    @Benchmark
    public int baseline_miss(Cache c, Miss m) {
        final NaiveBaselinePool.Seq s = c.baseline.admit(m.prompt, MAX_NEW, SALT).sequence();
        final int n = s.tokenCount();
        s.close();
        return n;
    }
}
