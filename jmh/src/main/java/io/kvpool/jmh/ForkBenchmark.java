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
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

import java.util.concurrent.TimeUnit;

/**
 * Fork + close of a sequence holding 4,096 tokens (256 full pages of 16 tokens), admitted for 256 more
 * tokens, so the fork also reserves the child's 16 pages of growth. Per op: 256 refcount increments and
 * 256 decrements plus the reservation, on both sides. {@link Layouts#BOOKKEEPING}, fill NONE, 1,024 pages.
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class ForkBenchmark {

    static final int PAGES = 1024;
    static final int TOKENS = 4096;
    static final int MAX_NEW = 256;

    KvPool pool;
    Sequence seq;
    NaiveBaselinePool baseline;
    NaiveBaselinePool.Seq baseSeq;

    @Setup(Level.Trial)
    public void setUp() {
        pool = KvPool.builder(Layouts.BOOKKEEPING).pages(PAGES).maxContextTokens(8192).fillMode(FillMode.NONE).build();
        seq = pool.admit(TOKENS, MAX_NEW).sequence();
        seq.append(TOKENS);
        baseline = new NaiveBaselinePool(Layouts.BOOKKEEPING, PAGES, 8192, FillMode.NONE);
        baseSeq = baseline.admit(TOKENS, MAX_NEW).sequence();
        baseSeq.append(TOKENS);
        if (seq.pageCount() != 256 || baseSeq.pageCount() != 256) {
            throw new IllegalStateException("expected 256 pages: " + seq + ", " + baseSeq.pageCount());
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        try (KvPool p = pool; NaiveBaselinePool b = baseline) {
            seq.close();
            baseSeq.close();
            final PoolSnapshot snap = p.verifyAccounting();
            if (snap.free() != PAGES || snap.reserved() != 0 || snap.openSequences() != 0 || b.freeUnreserved() != PAGES) {
                throw new IllegalStateException("leak: " + snap + ", baseline free unreserved " + b.freeUnreserved());
            }
        }
    }

    @Benchmark
    public int kvpool_fork_close() {
        final Sequence child = seq.fork();
        final int n = child.pageCount();
        child.close();
        return n;
    }

    @Benchmark
    public int baseline_fork_close() {
        final NaiveBaselinePool.Seq child = baseSeq.fork();
        final int n = child.pageCount();
        child.close();
        return n;
    }
}
