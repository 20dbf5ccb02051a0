package io.kvpool.jmh;

import io.kvpool.DType;
import io.kvpool.KvCopy;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
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
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;

/**
 * Copy-in of a prompt's KV into a sequence ({@link KvCopy}) against one {@link MemorySegment#copy} of the same
 * bytes into the same memory, in the same run:
 * <ul>
 *   <li>{@code kvpool_copy_in}: {@link KvCopy#copyIn(Sequence, int, int, MemorySegment, long)} of all layers of a
 *       4,096-token prompt (one bulk copy per page and layer: 256 pages × 64 layer/K-V blocks of 32 KiB);</li>
 *   <li>{@code baseline_copy_in}: {@code MemorySegment.copy} of the same 512 MiB from the same source into the pool's
 *       own page memory, in one call (the ceiling: no checks, no splitting);</li>
 *   <li>{@code kvpool_copy_in_per_layer}: the same bytes as 64 {@link KvCopy#copyLayerIn} calls, one per layer and
 *       K/V, as an engine writing each layer's KV when its prefill step produces it;</li>
 *   <li>{@code reference_same_blocks} (a control, not a goal): the 16,384 bare {@code MemorySegment.copy} calls of
 *       32 KiB that {@code kvpool_copy_in} makes, in the same order (layer by layer, page by page), with none of its
 *       checks. Its distance to the baseline is what the scatter itself costs (a layer's blocks are a page apart in
 *       the pool); its distance to {@code kvpool_copy_in} is what KvCopy adds.</li>
 * </ul>
 * Layout: 32 layers × 8 KV heads × 128 dim × FP16 × 16 tokens/page (a Llama-3-8B-like model; 2 KiB vectors,
 * 2 MiB pages). The pool holds exactly the prompt's 256 pages, fill NONE. Source and pages (1 GiB together) are
 * far beyond the caches, so both sides are memory-bound. Goal: {@code kvpool_copy_in} at ≥ 0.9× the baseline's
 * speed, i.e. {@code baseline ÷ kvpool} ≥ 0.9 in ms/op.
 *
 * <p>At setup one copy-in is checked byte for byte against the source, vector by vector, at
 * {@link KvLayout#offset}.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch"})
@State(Scope.Thread)
public class KvCopyBenchmark {

    static final KvLayout LAYOUT = new KvLayout(32, 8, 128, DType.FP16, 16);
    static final int TOKENS = 4096;

    KvPool pool;
    Sequence seq;
    KvCopy copy;
    Arena arena;
    MemorySegment src;
    MemorySegment pages;
    long bytes;

    @Setup(Level.Trial)
    public void setUp() {
        final int pageCount = (int) LAYOUT.pagesFor(TOKENS);
        pool = KvPool.builder(LAYOUT).pages(pageCount).maxContextTokens(TOKENS).fillMode(FillMode.NONE).build();
        seq = pool.admit(TOKENS, 0).sequence();
        seq.append(TOKENS);
        copy = KvCopy.of(pool);
        pages = ((HostPageStorage) pool.storage()).segment();
        bytes = TOKENS * LAYOUT.bytesPerToken();
        arena = Arena.ofShared();
        src = arena.allocate(bytes, 4096);
        final SplittableRandom r = new SplittableRandom(1);
        for (long o = 0; o < bytes; o += 8) {
            src.set(ValueLayout.JAVA_LONG, o, r.nextLong());
        }
        copy.copyIn(seq, 0, TOKENS, src, 0);
        check();
    }

    /** Every vector of the sequence equals the source's, where the class comment of {@link KvCopy} puts it. */
    private void check() {
        final long vec = LAYOUT.bytesPerTokenVector();
        final int tpp = LAYOUT.tokensPerPage();
        for (int t = 0; t < TOKENS; t++) {
            final MemorySegment page = seq.page(t / tpp);
            for (int l = 0; l < LAYOUT.layers(); l++) {
                for (int kv = 0; kv < 2; kv++) {
                    final long at = ((2L * l + kv) * TOKENS + t) * vec;
                    final long off = LAYOUT.offset(l, kv, t % tpp);
                    if (MemorySegment.mismatch(src, at, at + vec, page, off, off + vec) != -1) {
                        throw new AssertionError("token " + t + " layer " + l + " kv " + kv + " differs after copyIn");
                    }
                }
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        seq.close();
        pool.close();
        arena.close();
    }

    @Benchmark
    public void kvpool_copy_in() {
        copy.copyIn(seq, 0, TOKENS, src, 0);
    }

    @Benchmark
    public void baseline_copy_in() {
        MemorySegment.copy(src, 0, pages, 0, bytes);
    }

    @Benchmark
    public void reference_same_blocks() {
        final long vec = LAYOUT.bytesPerTokenVector();
        final int tpp = LAYOUT.tokensPerPage();
        final long block = tpp * vec;
        final long pageBytes = LAYOUT.bytesPerPage();
        final int planes = 2 * LAYOUT.layers();
        final int pageCount = TOKENS / tpp;
        for (int q = 0; q < planes; q++) {
            for (int p = 0; p < pageCount; p++) {
                MemorySegment.copy(src, ((long) q * TOKENS + (long) p * tpp) * vec, pages, seq.pageIndex(p) * pageBytes + q * block, block);
            }
        }
    }

    @Benchmark
    public void kvpool_copy_in_per_layer() {
        final long plane = TOKENS * LAYOUT.bytesPerTokenVector();
        for (int l = 0; l < LAYOUT.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                copy.copyLayerIn(seq, l, kv, 0, TOKENS, src, (2L * l + kv) * plane);
            }
        }
    }
}
