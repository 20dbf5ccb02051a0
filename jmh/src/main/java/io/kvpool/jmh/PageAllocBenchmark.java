package io.kvpool.jmh;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.storage.FillMode;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Alloc + free of one page, single-threaded: {@link KvPool#tryAllocate()} + {@link KvPool#release(long)}
 * against {@link NaiveBaselinePool#allocate()} + {@link NaiveBaselinePool#release(int)}.
 *
 * <ul>
 *   <li>{@code alloc_free}: fill NONE, {@link Layouts#BOOKKEEPING} (512 B pages, never touched),
 *       4,096 pages — pure bookkeeping, with the pool's defaults: every allocation takes the pool lock,
 *       every free goes through the lock-free return stack. Goal: ≤ 20 ns and ≥ 5× the
 *       baseline.</li>
 *   <li>{@code alloc_free_cached}: the same with the opt-in allocator cache ({@code threadCache(32)}, for a
 *       server whose allocations come from one scheduler thread): the benchmark thread is that thread,
 *       so it frees into and allocates from its cache without the lock.</li>
 *   <li>{@code alloc_free_canary16k}: fill CANARY (the pool's default) on free, {@link Layouts#PAGE_16K}
 *       (16 KiB pages), 64 pages (1 MiB, cache-resident). Both sides write the same 16 KiB canary through
 *       the same {@code PageStorage.fill}. Shows what the canary costs per page freed.</li>
 * </ul>
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class PageAllocBenchmark {

    static final int PAGES = 4096;
    static final int PAGES_16K = 64;

    /** Bookkeeping only: fill NONE, 512 B pages. */
    @State(Scope.Thread)
    public static class NoFill {
        KvPool pool;
        NaiveBaselinePool baseline;

        @Setup(Level.Trial)
        public void setUp() {
            pool = build(Layouts.BOOKKEEPING, PAGES, FillMode.NONE);
            baseline = new NaiveBaselinePool(Layouts.BOOKKEEPING, PAGES, (long) PAGES * 16, FillMode.NONE);
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            check(pool, baseline, PAGES);
        }
    }

    /** Bookkeeping only, with the allocator cache. */
    @State(Scope.Thread)
    public static class Cached {
        KvPool pool;
        NaiveBaselinePool baseline;

        @Setup(Level.Trial)
        public void setUp() {
            pool = KvPool.builder(Layouts.BOOKKEEPING).pages(PAGES).maxContextTokens((long) PAGES * Layouts.BOOKKEEPING.tokensPerPage())
                .fillMode(FillMode.NONE).threadCache(32).build();
            baseline = new NaiveBaselinePool(Layouts.BOOKKEEPING, PAGES, (long) PAGES * 16, FillMode.NONE);
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            check(pool, baseline, PAGES);
        }
    }

    /** Canary fill of 16 KiB pages on free. */
    @State(Scope.Thread)
    public static class Canary16K {
        KvPool pool;
        NaiveBaselinePool baseline;

        @Setup(Level.Trial)
        public void setUp() {
            pool = build(Layouts.PAGE_16K, PAGES_16K, FillMode.CANARY);
            baseline = new NaiveBaselinePool(Layouts.PAGE_16K, PAGES_16K, (long) PAGES_16K * 16, FillMode.CANARY);
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            check(pool, baseline, PAGES_16K);
        }
    }

    static KvPool build(KvLayout layout, int pages, FillMode fill) {
        return KvPool.builder(layout).pages(pages).maxContextTokens((long) pages * layout.tokensPerPage()).fillMode(fill).build();
    }

    static void check(KvPool pool, NaiveBaselinePool baseline, int pages) {
        try (pool; baseline) {
            final PoolSnapshot snap = pool.verifyAccounting();
            if (snap.free() != pages || baseline.freeUnreserved() != pages) {
                throw new IllegalStateException("leak: " + snap + ", baseline free " + baseline.freeUnreserved());
            }
        }
    }

    @Benchmark
    public long kvpool_alloc_free(NoFill s) {
        final long h = s.pool.tryAllocate();
        s.pool.release(h); // throws on a negative code, so a failed allocation cannot go unnoticed
        return h;
    }

    @Benchmark
    public int baseline_alloc_free(NoFill s) {
        final int p = s.baseline.allocate();
        s.baseline.release(p); // throws on -1
        return p;
    }

    @Benchmark
    public long kvpool_alloc_free_cached(Cached s) {
        final long h = s.pool.tryAllocate();
        s.pool.release(h);
        return h;
    }

    @Benchmark
    public int baseline_alloc_free_cached(Cached s) {
        final int p = s.baseline.allocate();
        s.baseline.release(p);
        return p;
    }

    @Benchmark
    public long kvpool_alloc_free_canary16k(Canary16K s) {
        final long h = s.pool.tryAllocate();
        s.pool.release(h);
        return h;
    }

    @Benchmark
    public int baseline_alloc_free_canary16k(Canary16K s) {
        final int p = s.baseline.allocate();
        s.baseline.release(p);
        return p;
    }

    /**
     * The floor under {@code kvpool_alloc_free}: the three uncontended CAS instructions an
     * alloc+free pair needs without the allocator cache (pool lock, the release's state word, the
     * return-stack push), on three different cache lines, and nothing else. Not a competitor: it shows how
     * much of that pair is the atomics themselves (with the cache, one CAS remains: the release's).
     */
    @State(Scope.Thread)
    public static class Atomics {
        final AtomicLongArray words = new AtomicLongArray(64); // slots 0, 16, 32: 128 bytes apart
    }

    @Benchmark
    public long floor_three_cas(Atomics a) {
        final AtomicLongArray w = a.words;
        final long x = w.get(0);
        w.compareAndSet(0, x, x + 1);
        final long y = w.get(16);
        w.compareAndSet(16, y, y + 1);
        final long z = w.get(32);
        w.compareAndSet(32, z, z + 1);
        return x + y + z;
    }
}
