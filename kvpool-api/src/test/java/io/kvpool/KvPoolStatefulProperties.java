package io.kvpool;

import io.kvpool.PoolHarness.Admit;
import io.kvpool.PoolHarness.Allocate;
import io.kvpool.PoolHarness.Append;
import io.kvpool.PoolHarness.Close;
import io.kvpool.PoolHarness.Fork;
import io.kvpool.PoolHarness.Kind;
import io.kvpool.PoolHarness.Loose;
import io.kvpool.PoolHarness.Op;
import io.kvpool.PoolHarness.Publish;
import io.kvpool.PoolHarness.StaleUse;
import io.kvpool.PoolHarness.Truncate;
import io.kvpool.PoolHarness.Violation;

import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.Tuple;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.statistics.Statistics;
import net.jqwik.api.lifecycle.AddLifecycleHook;
import net.jqwik.api.lifecycle.AfterProperty;
import net.jqwik.api.lifecycle.AfterTry;
import net.jqwik.api.state.Action;
import net.jqwik.api.state.ActionChain;
import net.jqwik.api.state.ActionChainArbitrary;
import net.jqwik.api.state.Transformer;

import java.util.ArrayList;
import java.util.List;
import java.util.logging.Level;
import java.util.logging.Logger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Random operation sequences against a simple model ({@link PoolHarness}). After every
 * operation: the accounting verifies and matches the model's page counts; every live sequence has
 * {@code ceil(tokens / tokensPerPage)} pages; refcounts equal the live holders; two live sequences share
 * a page only through fork lineage or a prefix-cache attach under the page's salt; every sequence reads
 * back exactly the KV tags of whoever wrote its tokens (itself, a fork ancestor, a prefix publisher) and
 * no previous tenant's leftovers; published prefix pages never change; freed handles are refused.
 *
 * <p>The examples below prove the checker can fail: with a safeguard disabled, or with a fault injected
 * behind the model's back, it reports the matching violation.
 */
@AddLifecycleHook(PropsTries.class)
class KvPoolStatefulProperties {

    static final int MAX_STEPS = 60;
    private static final List<PoolHarness> OPEN = new ArrayList<>();

    // ---------------------------------------------------------------------------------------------
    // The property

    /** The pool the next chain starts from: pages and max context, set by the property before it runs the chain. */
    private static final ThreadLocal<long[]> POOL_SHAPE = ThreadLocal.withInitial(() -> new long[] {8, 32});

    @Property(tries = 200)
    void randomOperationsKeepPoolAndModelInStep(@ForAll @IntRange(min = 3, max = 16) int pages,
                                                @ForAll @IntRange(min = 25, max = 100) int contextPercent,
                                                @ForAll("operations") ActionChain<PoolHarness> chain) {
        POOL_SHAPE.set(new long[] {pages, Math.max(1, (long) pages * TestPools.SMALL.tokensPerPage() * contextPercent / 100)});
        final PoolHarness h = chain.withInvariant("pool matches model", PoolHarness::check).run();
        h.events.keySet().forEach(e -> Statistics.label("tries in which this happened").collect(e));
    }

    @Provide
    Arbitrary<ActionChain<PoolHarness>> operations() {
        // (the pool's shape is a plain parameter, not flatMapped in: jqwik cannot shrink an ActionChain inside a flatMap)
        final java.util.function.Supplier<PoolHarness> start = () -> {
            final long[] shape = POOL_SHAPE.get();
            return harness(TestPools.builder((int) shape[0]).maxContextTokens(shape[1]).build());
        };
        return chain(start);
    }

    static ActionChainArbitrary<PoolHarness> chain(java.util.function.Supplier<PoolHarness> start) {
        ActionChainArbitrary<PoolHarness> chain = ActionChain.startWith(start);
        for (Tuple.Tuple2<Integer, Arbitrary<Op>> w : weightedOps()) {
            final Arbitrary<Op> ops = w.get2();
            final Action.Independent<PoolHarness> action = () -> ops.map(op -> Transformer.mutate(op.toString(), h -> h.apply(op)));
            chain = chain.withAction(w.get1(), action);
        }
        return chain.withMaxTransformations(MAX_STEPS);
    }

    /**
     * The operations and how often each is drawn. Few documents and tenants and mostly short prompts, so
     * prompts share prefixes; half the admissions come from two tenants reading two documents that share
     * their first page, so the prefix cache gets hits (shared and revived pages) and misses by salt.
     */
    static List<Tuple.Tuple2<Integer, Arbitrary<Op>>> weightedOps() {
        final Arbitrary<Integer> pick = Arbitraries.integers().between(0, 15);
        final Arbitrary<Integer> doc = Arbitraries.frequency(Tuple.of(5, 0), Tuple.of(3, 1), Tuple.of(2, 2));
        final Arbitrary<Integer> tenant = Arbitraries.frequency(Tuple.of(5, 0), Tuple.of(3, 1), Tuple.of(2, 2));
        final Arbitrary<Integer> prompt = Arbitraries.frequencyOf(Tuple.of(6, Arbitraries.integers().between(1, 14)),
            Tuple.of(1, Arbitraries.integers().between(1, 64)));
        final Arbitrary<Integer> maxNew = Arbitraries.integers().between(0, 8);
        final Arbitrary<Op> admit = Combinators.combine(doc, prompt, maxNew, tenant, Arbitraries.frequency(Tuple.of(3, true), Tuple.of(1, false)))
            .as(Admit::new);
        final Arbitrary<Op> admitCached = Combinators.combine(Arbitraries.frequency(Tuple.of(3, 0), Tuple.of(1, 1)), prompt, maxNew,
            Arbitraries.frequency(Tuple.of(3, 0), Tuple.of(1, 1)), Arbitraries.just(true)).as(Admit::new);
        final Arbitrary<Op> append = Combinators.combine(pick, Arbitraries.integers().between(0, 9),
            Arbitraries.frequency(Tuple.of(4, false), Tuple.of(1, true))).as(Append::new);
        final Arbitrary<Op> truncate = Combinators.combine(pick,
            Arbitraries.frequencyOf(Tuple.of(12, Arbitraries.integers().between(0, 1000)), Tuple.of(1, Arbitraries.just(1001)))).as(Truncate::new);
        final Arbitrary<Op> fork = pick.map(Fork::new);
        final Arbitrary<Op> publish = Combinators.combine(pick, tenant,
            Arbitraries.frequency(Tuple.of(4, true), Tuple.of(1, false))).as(Publish::new);
        final Arbitrary<Op> close = pick.map(Close::new);
        final Arbitrary<Op> allocate = Arbitraries.just(new Allocate());
        final Arbitrary<Op> looseEvent = Combinators.combine(pick, Arbitraries.of(SlotEvent.RETAIN, SlotEvent.RELEASE, SlotEvent.PIN_WRITER,
            SlotEvent.COMMIT_RECEIVE, SlotEvent.BEGIN_DRAIN, SlotEvent.DRAINED, SlotEvent.QUARANTINE, SlotEvent.RELEASE_QUARANTINE)).as(Loose::new);
        final Arbitrary<Op> stale = Combinators.combine(Arbitraries.integers().between(0, 31), Arbitraries.integers().between(0, 3))
            .as(StaleUse::new);
        return List.of(Tuple.of(3, admit), Tuple.of(3, admitCached), Tuple.of(5, append), Tuple.of(2, truncate), Tuple.of(2, fork),
            Tuple.of(4, publish), Tuple.of(4, close), Tuple.of(1, allocate), Tuple.of(2, looseEvent), Tuple.of(1, stale));
    }

    static PoolHarness harness(KvPool pool) {
        final PoolHarness h = new PoolHarness(pool);
        synchronized (OPEN) {
            OPEN.add(h);
        }
        return h;
    }

    @AfterTry
    @AfterProperty
    void closePools() {
        synchronized (OPEN) {
            OPEN.forEach(PoolHarness::close);
            OPEN.clear();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // The checker can fail: each safeguard switched off, and a fault injected behind the model's back

    /** Runs operations, checking after each; @return the violation, or null. */
    static Violation run(PoolHarness h, Op... ops) {
        try {
            h.check();
            for (Op op : ops) {
                h.apply(op);
                h.check();
            }
            return null;
        } catch (Violation v) {
            return v;
        } finally {
            h.close();
        }
    }

    /** A 4-token request, closed, then a 1-token request that gets the same slot. */
    private static final Op[] REUSE = {
        new Admit(0, 4, 0, 0, false), new Close(0), new Admit(2, 1, 0, 0, false),
    };

    @Example
    void theCheckerPassesTheReuseScenarioOnASafePool() {
        final Violation v = run(harness(TestPools.pool(4)), REUSE);
        assertNull(v, () -> String.valueOf(v));
    }

    @Example
    void withoutTheGenerationCheckAClosedSequencesHandleReachesTheNextTenant() {
        final Violation v = quietly(() -> run(harness(TestPools.builder(4).unsafeDisable(Safeguard.GENERATION_CHECK).build()), REUSE));
        assertTrue(v != null && v.kind == Kind.STALE_HANDLE, () -> "expected a STALE_HANDLE violation, got " + v);
    }

    @Example
    void withoutFreePageFillTheNextTenantSeesThePreviousTenantsKv() {
        final Violation v = quietly(() -> run(harness(TestPools.builder(4).unsafeDisable(Safeguard.FREE_PAGE_FILL).build()), REUSE));
        assertTrue(v != null && v.kind == Kind.LEFTOVER, () -> "expected a LEFTOVER violation, got " + v);
    }

    @Example
    void aPageSharedWithoutForkOrPrefixProvenanceIsCaught() {
        final PoolHarness h = harness(TestPools.pool(8));
        h.apply(new Admit(0, 4, 4, 1, true));
        h.apply(new Admit(0, 4, 4, 2, true)); // other tenant: no prefix hit, its own page
        h.check();
        // behind the model's back: s2 takes a reference to s1's page, as a buggy attach would
        final Sequence s1 = h.live.get(0).seq;
        final Sequence s2 = h.live.get(1).seq;
        h.pool.retain(s1.pageHandle(0));
        s2.addPage(s1.pageHandle(0));
        s2.setTokenCountAfterAttach(8);
        final Violation v = assertThrows(Violation.class, h::check);
        h.close();
        assertEquals(Kind.SHARING, v.kind, v::getMessage);
    }

    @Example
    void aForkWritingIntoItsParentsPageIsRefused() {
        final PoolHarness h = harness(TestPools.pool(8));
        h.apply(new Admit(0, 6, 2, 0, false));
        h.apply(new Fork(0));
        // behind the model's back: the child writes its next token into the shared page, as append would without copy-on-write
        final Sequence child = h.live.get(1).seq;
        assertThrows(IllegalArgumentException.class, () -> child.page(1).fill((byte) 0x42), "the shared page is read-only");
        h.check();
        h.close();
    }

    @Example
    void aForkWritingIntoItsParentsPageIsCaughtWithSharedPagesWritable() {
        final PoolHarness h = harness(TestPools.builder(8).unsafeDisable(Safeguard.SHARED_PAGE_READ_ONLY).build());
        h.apply(new Admit(0, 6, 2, 0, false));
        h.apply(new Fork(0));
        h.check();
        final Sequence child = h.live.get(1).seq;
        child.page(1).fill((byte) 0x42);
        final Violation v = assertThrows(Violation.class, h::check);
        h.close();
        assertEquals(Kind.ISOLATION, v.kind, v::getMessage);
    }

    /** Random search (the property's own operation mix) finds each disabled safeguard. */
    @Example
    void randomSearchFindsEachDisabledSafeguard() {
        for (Object[] c : new Object[][] {{Safeguard.GENERATION_CHECK, Kind.STALE_HANDLE}, {Safeguard.FREE_PAGE_FILL, Kind.LEFTOVER}}) {
            final Safeguard off = (Safeguard) c[0];
            final Kind expected = (Kind) c[1];
            final int[] found = {0, Integer.MAX_VALUE};
            quietly(() -> {
                for (int run = 0; run < 200 && found[0] < 3; run++) {
                    final Arbitrary<Op> anyOp = Arbitraries.frequencyOf(weightedOps());
                    final List<Op> ops = anyOp.list().ofMinSize(1).ofMaxSize(MAX_STEPS).sample();
                    final Violation v = run(harness(TestPools.builder(8).unsafeDisable(off).build()), ops.toArray(Op[]::new));
                    if (v != null && v.kind == expected) {
                        found[0]++;
                        found[1] = Math.min(found[1], ops.size());
                    }
                }
                return null;
            });
            assertTrue(found[0] > 0, () -> "200 random runs with " + off + " disabled found no " + expected + " violation");
        }
    }

    /** Unsafe pools log an error when built; keep those out of the test output. */
    static <T> T quietly(java.util.function.Supplier<T> body) {
        final Logger logger = Logger.getLogger("io.kvpool");
        final Level level = logger.getLevel();
        logger.setLevel(Level.OFF);
        try {
            return body.get();
        } finally {
            logger.setLevel(level);
        }
    }
}
