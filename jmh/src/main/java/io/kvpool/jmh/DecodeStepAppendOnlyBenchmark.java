package io.kvpool.jmh;

import io.kvpool.BlockTable;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

import java.lang.foreign.Arena;
import java.util.concurrent.TimeUnit;

/**
 * A decode step as the goal defines it: 256 running sequences each append one token (a new page every 16 steps,
 * 16 page allocations a step on average) and the batch's block table is brought up to date; no sequence finishes.
 * Each invocation runs {@value #STEPS} steps; before it (untimed) every sequence is cut back to its staggered start,
 * so the sequences never outgrow their admission. The score is per step. {@link DecodeStepBenchmark} times the
 * steady state of a server instead, where finishing sequences free 16 pages a step.
 * <ul>
 *   <li>{@code kvpool_step}: {@link KvPool#appendEach}, then {@link BlockTable#refresh()};</li>
 *   <li>{@code baseline_step}: {@link NaiveBaselinePool}, with the whole block table rebuilt into an {@code int[]}.</li>
 * </ul>
 * Setup per invocation is JMH's {@code Level.Invocation}, acceptable here: an invocation lasts a few hundred
 * microseconds, far above the timer's resolution.
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class DecodeStepAppendOnlyBenchmark {

    static final int BATCH = 256;
    static final int STEPS = 512;
    static final int START_MAX = 1024;
    static final int TOKENS = START_MAX + STEPS; // each sequence's admitted length
    static final int MAX_PAGES = TOKENS / 16;
    static final int PAGES = BATCH * MAX_PAGES + 64;

    KvPool pool;
    Sequence[] seqs;
    int[] starts;
    Arena arena;
    BlockTable table;
    NaiveBaselinePool baseline;
    NaiveBaselinePool.Seq[] baseSeqs;
    int[] baseTable;

    @Setup(Level.Trial)
    public void setUp() {
        pool = KvPool.builder(Layouts.BOOKKEEPING).pages(PAGES).maxContextTokens(TOKENS).build();
        baseline = new NaiveBaselinePool(Layouts.BOOKKEEPING, PAGES, TOKENS, pool.fillMode());
        seqs = new Sequence[BATCH];
        baseSeqs = new NaiveBaselinePool.Seq[BATCH];
        starts = new int[BATCH];
        arena = Arena.ofConfined();
        table = new BlockTable(BATCH, MAX_PAGES, arena.allocate(BlockTable.tableBytes(BATCH, MAX_PAGES)),
            arena.allocate(BlockTable.lengthsBytes(BATCH)));
        baseTable = new int[BATCH * MAX_PAGES];
        for (int i = 0; i < BATCH; i++) {
            seqs[i] = pool.admit(1, TOKENS - 1).sequence();
            baseSeqs[i] = baseline.admit(1, TOKENS - 1).sequence();
            starts[i] = 1 + (int) ((long) i * (START_MAX - 2) / BATCH); // staggered: new pages spread over the steps
            table.set(i, seqs[i]);
        }
    }

    @Setup(Level.Invocation)
    public void restart() {
        for (int i = 0; i < BATCH; i++) {
            seqs[i].truncate(Math.min(seqs[i].tokenCount(), starts[i]));
            seqs[i].append(starts[i] - seqs[i].tokenCount());
            baseSeqs[i].truncateToZero();
            baseSeqs[i].append(starts[i]);
        }
        table.refresh();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        try (KvPool p = pool; NaiveBaselinePool b = baseline; Arena a = arena) {
            for (int i = 0; i < BATCH; i++) {
                seqs[i].close();
                baseSeqs[i].close();
            }
            final PoolSnapshot snap = p.verifyAccounting();
            if (snap.free() != PAGES || snap.reserved() != 0 || b.freeUnreserved() != PAGES) {
                throw new IllegalStateException("leak: " + snap + ", baseline free unreserved " + b.freeUnreserved());
            }
        }
    }

    @Benchmark
    @OperationsPerInvocation(STEPS)
    public int kvpool_step() {
        int pages = 0;
        for (int s = 0; s < STEPS; s++) {
            pages += pool.appendEach(seqs, BATCH, 1);
            table.refresh();
        }
        if (pages != expectedPages()) {
            throw new IllegalStateException(pages + " pages allocated, expected " + expectedPages());
        }
        return pages;
    }

    @Benchmark
    @OperationsPerInvocation(STEPS)
    public int baseline_step() {
        int pages = 0;
        for (int s = 0; s < STEPS; s++) {
            for (int i = 0; i < BATCH; i++) {
                final NaiveBaselinePool.Seq q = baseSeqs[i];
                q.append(1);
                pages += q.copyBlockTable(baseTable, i * MAX_PAGES);
            }
        }
        return pages;
    }

    /** Pages the {@value #STEPS} steps allocate: a new page each time a sequence's count crosses a multiple of 16. */
    private int expectedPages() {
        int n = 0;
        for (int i = 0; i < BATCH; i++) {
            n += (starts[i] + STEPS + 15) / 16 - (starts[i] + 15) / 16;
        }
        return n;
    }
}
