package io.kvpool.jmh;

import io.kvpool.Admission;
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
import org.openjdk.jmh.infra.Blackhole;

import java.util.concurrent.TimeUnit;

/**
 * Admission of a 4,096-token request (3,072 prompt + 1,024 new tokens = 256 pages of 16 tokens reserved),
 * then its release, single-threaded, on a pool of 4,096 pages ({@link Layouts#BOOKKEEPING}, fill NONE;
 * admission touches no page bytes).
 *
 * <ul>
 *   <li>{@code reserve_cancel}: the allocation-free path, {@link KvPool#tryReserve} +
 *       {@link KvPool#cancelReservation}. Goal: ≤ 100 ns and 0 B/op ({@code -prof gc}).</li>
 *   <li>{@code admit_close}: the object path, {@link KvPool#admit(int, int)} (an {@link Admission} and a
 *       {@link Sequence}) + {@link Sequence#close()}.</li>
 * </ul>
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class AdmissionBenchmark {

    static final int PAGES = 4096;
    static final int PROMPT = 3072;
    static final int MAX_NEW = 1024;

    KvPool pool;
    NaiveBaselinePool baseline;

    @Setup(Level.Trial)
    public void setUp() {
        pool = KvPool.builder(Layouts.BOOKKEEPING).pages(PAGES).maxContextTokens(8192).fillMode(FillMode.NONE).build();
        baseline = new NaiveBaselinePool(Layouts.BOOKKEEPING, PAGES, 8192, FillMode.NONE);
        final long r = pool.tryReserve(PROMPT, MAX_NEW);
        final long b = baseline.tryReserve(PROMPT, MAX_NEW);
        if (r <= 0 || b <= 0 || pool.snapshot().reserved() != 256 || baseline.freeUnreserved() != PAGES - 256) {
            throw new IllegalStateException("a 4,096-token request should reserve 256 pages: " + r + ", " + b);
        }
        pool.cancelReservation(r);
        baseline.cancelReservation(b);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        try (KvPool p = pool; NaiveBaselinePool b = baseline) {
            final PoolSnapshot snap = p.verifyAccounting();
            if (snap.reserved() != 0 || snap.openReservations() != 0 || snap.openSequences() != 0
                || b.freeUnreserved() != PAGES) {
                throw new IllegalStateException("leak: " + snap + ", baseline free unreserved " + b.freeUnreserved());
            }
        }
    }

    @Benchmark
    public long kvpool_reserve_cancel() {
        final long r = pool.tryReserve(PROMPT, MAX_NEW);
        pool.cancelReservation(r); // throws on a rejection code
        return r;
    }

    @Benchmark
    public long baseline_reserve_cancel() {
        final long r = baseline.tryReserve(PROMPT, MAX_NEW);
        baseline.cancelReservation(r);
        return r;
    }

    @Benchmark
    public void kvpool_admit_close(Blackhole bh) {
        final Admission a = pool.admit(PROMPT, MAX_NEW);
        final Sequence s = a.sequence(); // throws unless admitted
        bh.consume(s.reservedPages());
        s.close();
    }

    @Benchmark
    public void baseline_admit_close(Blackhole bh) {
        final NaiveBaselinePool.Admitted a = baseline.admit(PROMPT, MAX_NEW);
        final NaiveBaselinePool.Seq s = a.sequence();
        bh.consume(a.code());
        s.close(); // NPE unless admitted
    }
}
