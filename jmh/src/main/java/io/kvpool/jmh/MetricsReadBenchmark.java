package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.SlotState;
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

/**
 * Reading a pool's gauges at 1M pages (half of them in use), the scrape a metrics endpoint does.
 * {@code kvpool_metrics_read}: {@code pool.metrics().read()}, every gauge and counter, no lock.
 * {@code kvpool_snapshot}: {@code pool.snapshot()}, the same under a short critical section.
 * {@code baseline_scan}: counting the pages by state slot by slot, as a snapshot did before the counts were
 * kept incrementally (about 2 ms at this size). {@code kvpool_verify_accounting}: {@code pool.verifyAccounting()}, the
 * full check a test or an operator runs (every slot's state word and the free structures, under the pool lock), not a
 * scrape. Pages are 4 bytes (1 layer × 1 head × 1 dim × FP16 × 1 token):
 * only the bookkeeping is measured.
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class MetricsReadBenchmark {

    static final int PAGES = 1 << 20;
    static final KvLayout TINY = new KvLayout(1, 1, 1, DType.FP16, 1);

    KvPool pool;
    long[] held;

    @Setup(Level.Trial)
    public void setUp() {
        pool = KvPool.builder(TINY).pages(PAGES).maxContextTokens(PAGES).fillMode(FillMode.NONE).build();
        held = new long[PAGES / 2];
        for (int i = 0; i < held.length; i++) {
            held[i] = pool.tryAllocate();
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        try (KvPool p = pool) {
            for (long h : held) {
                p.release(h);
            }
            final PoolSnapshot snap = p.verifyAccounting();
            if (snap.free() != PAGES) {
                throw new IllegalStateException("leak: " + snap);
            }
        }
    }

    @Benchmark
    public PoolSnapshot kvpool_metrics_read() {
        return pool.metrics().read();
    }

    @Benchmark
    public PoolSnapshot kvpool_snapshot() {
        return pool.snapshot();
    }

    @Benchmark
    public PoolSnapshot kvpool_verify_accounting() {
        return pool.verifyAccounting();
    }

    @Benchmark
    public long baseline_scan() {
        final long[] byState = new long[SlotState.values().length];
        for (int s = 0; s < PAGES; s++) {
            byState[pool.stateOfSlot(s).ordinal()]++;
        }
        return byState[SlotState.OWNED.ordinal()];
    }
}
