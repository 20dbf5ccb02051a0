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
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

import java.lang.foreign.Arena;
import java.util.concurrent.TimeUnit;

/**
 * One decode step of a batch of 256 running sequences: every sequence appends one token (a new page every 16
 * steps), and the step ends with the batch's block table current. A sequence that reaches its admitted
 * length finishes (truncate to 0, every page freed) and starts over, staggered so that every step sees the
 * same mix: on average 16 page allocations and 16 page frees per step, as in a server's steady state.
 * {@link Layouts#BOOKKEEPING}, the pool's defaults (CANARY fill on free, no allocator cache).
 *
 * <p>{@code kvpool_step}: {@link KvPool#appendEach} appends one token to every sequence (one lock acquisition for
 * the step's pages), then {@link BlockTable#refresh()} brings the batch's padded int32 {@code [256 × 64]} table and
 * lengths in native memory (the shape a paged-attention kernel takes) up to date: it writes only pages appended
 * since the last step, and rewrites the rows of finished sequences. {@code kvpool_step_each_append} does the same
 * with {@link Sequence#append} on each sequence.
 * {@link DecodeStepAppendOnlyBenchmark} times the steps without the finishing sequences' frees.
 * {@code baseline_step}: the same on {@link NaiveBaselinePool}, with the whole block table rebuilt from its
 * per-sequence lists into an {@code int[]}, as a pool without incremental tables does.
 */
@BenchmarkMode(Mode.AverageTime)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch", "--sun-misc-unsafe-memory-access=allow"}) // fixed, pre-touched heap (see README)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class DecodeStepBenchmark {

    static final int BATCH = 256;
    static final int TOKENS = 1024; // each sequence's admitted length: 64 pages
    static final int MAX_PAGES = TOKENS / 16;
    static final int PAGES = BATCH * MAX_PAGES + 64;

    KvPool pool;
    Sequence[] seqs;
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
        arena = Arena.ofConfined();
        table = new BlockTable(BATCH, MAX_PAGES, arena.allocate(BlockTable.tableBytes(BATCH, MAX_PAGES)),
            arena.allocate(BlockTable.lengthsBytes(BATCH)));
        baseTable = new int[BATCH * MAX_PAGES];
        for (int i = 0; i < BATCH; i++) {
            seqs[i] = pool.admit(1, TOKENS - 1).sequence();
            baseSeqs[i] = baseline.admit(1, TOKENS - 1).sequence();
            final int start = 1 + (int) ((long) i * (TOKENS - 2) / BATCH); // staggered: finishes spread over the steps
            seqs[i].append(start);
            baseSeqs[i].append(start);
            table.set(i, seqs[i]);
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
    public int kvpool_step() {
        finishAndRestart();
        if (pool.appendEach(seqs, BATCH, 1) < 0) {
            throw new IllegalStateException("the reservations cover every page: " + pool.snapshot());
        }
        return table.refresh();
    }

    /** {@code kvpool_step} with {@link Sequence#append} on each sequence, then {@link BlockTable#refresh()}. */
    @Benchmark
    public int kvpool_step_each_append() {
        finishAndRestart();
        for (int i = 0; i < BATCH; i++) {
            seqs[i].append(1);
        }
        return table.refresh();
    }

    /** A sequence that reached its admitted length finishes: every page back to the pool; a new request takes its place. */
    private void finishAndRestart() {
        for (int i = 0; i < BATCH; i++) {
            final Sequence s = seqs[i];
            if (s.tokenCount() == TOKENS) {
                s.truncate(0);
            }
        }
    }

    @Benchmark
    public int baseline_step() {
        int pages = 0;
        for (int i = 0; i < BATCH; i++) {
            final NaiveBaselinePool.Seq s = baseSeqs[i];
            if (s.tokenCount() == TOKENS) {
                s.truncateToZero();
            }
            s.append(1);
            pages += s.copyBlockTable(baseTable, i * MAX_PAGES);
        }
        return pages;
    }
}
