package io.kvpool.micrometer;

import io.kvpool.Admission;
import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolMetrics;
import io.kvpool.Sequence;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;

import java.lang.ref.Reference;
import java.lang.ref.WeakReference;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.ToLongFunction;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/** {@link KvPoolMeterBinder} on a {@link SimpleMeterRegistry}: which meters, and that they follow the pool. */
class KvPoolMeterBinderTest {

    /** 4 tokens per page. */
    static final KvLayout LAYOUT = new KvLayout(2, 1, 4, DType.FP32, 4);

    /** Every meter the binder registers, by key, with the {@link PoolMetrics} getter it must read. */
    static final Map<String, ToLongFunction<PoolMetrics>> EXPECTED = new LinkedHashMap<>();
    /** The meters that are gauges; the rest are function counters. */
    static final java.util.Set<String> GAUGES = new java.util.HashSet<>();

    static {
        gauge("kvpool.pool.pages{state=free}", PoolMetrics::free);
        gauge("kvpool.pool.pages{state=owned}", PoolMetrics::owned);
        gauge("kvpool.pool.pages{state=receiving}", PoolMetrics::receiving);
        gauge("kvpool.pool.pages{state=draining}", PoolMetrics::draining);
        gauge("kvpool.pool.pages{state=quarantined}", PoolMetrics::quarantined);
        gauge("kvpool.pool.pages{state=retired}", PoolMetrics::retired);
        gauge("kvpool.pool.capacity", PoolMetrics::capacity);
        gauge("kvpool.pool.reserved", PoolMetrics::reserved);
        gauge("kvpool.pool.cached.free", PoolMetrics::cachedFree);
        gauge("kvpool.pool.prefix.indexed", PoolMetrics::publishedPrefixes);
        gauge("kvpool.pool.sequences.open", PoolMetrics::openSequences);
        gauge("kvpool.pool.reservations.open", PoolMetrics::openReservations);
        EXPECTED.put("kvpool.pool.allocations", PoolMetrics::allocations);
        EXPECTED.put("kvpool.pool.prefix.hits", PoolMetrics::prefixHits);
        EXPECTED.put("kvpool.pool.evictions", PoolMetrics::evictions);
        EXPECTED.put("kvpool.pool.admissions.rejected{reason=context_too_long}", PoolMetrics::rejectedContextTooLong);
        EXPECTED.put("kvpool.pool.admissions.rejected{reason=exceeds_pool}", PoolMetrics::rejectedExceedsPool);
        EXPECTED.put("kvpool.pool.admissions.rejected{reason=retry_later}", PoolMetrics::retryLater);
        EXPECTED.put("kvpool.pool.handles.refused{reason=stale}", PoolMetrics::staleHandlesRefused);
        EXPECTED.put("kvpool.pool.handles.refused{reason=foreign}", PoolMetrics::foreignHandlesRefused);
        EXPECTED.put("kvpool.pool.quarantine.events", PoolMetrics::quarantineEvents);
    }

    private static void gauge(String key, ToLongFunction<PoolMetrics> getter) {
        EXPECTED.put(key, getter);
        GAUGES.add(key);
    }

    /** Runs the collector until {@code ref} is cleared (1 s at most), then asserts it is. */
    static void awaitCollected(java.lang.ref.Reference<?> ref, String message) throws InterruptedException {
        for (int i = 0; i < 100 && ref.get() != null; i++) {
            System.gc();
            Thread.sleep(10);
        }
        assertNull(ref.get(), message);
    }

    /** 16 pages of 4 tokens, contexts up to 64 tokens. */
    static KvPool pool() {
        return KvPool.builder(LAYOUT).pages(16).maxContextTokens(64).build();
    }

    static Map<String, Meter> bound(KvPool pool, MeterRegistry registry, String name) {
        new KvPoolMeterBinder(pool, Tags.of("pool", name)).bindTo(registry);
        return Meters.byKey(registry, "pool", name);
    }

    @Test
    void everyPoolMeterIsRegisteredOnceWithItsTypeADescriptionAndTheCommonTags() {
        try (KvPool pool = pool()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final Map<String, Meter> meters = bound(pool, registry, "decode");
            assertEquals(new java.util.TreeSet<>(EXPECTED.keySet()), meters.keySet());
            assertEquals(EXPECTED.size(), registry.getMeters().size(), "every meter carries the common tag");
            meters.forEach((key, m) -> {
                assertEquals(GAUGES.contains(key) ? Meter.Type.GAUGE : Meter.Type.COUNTER, m.getId().getType(), key);
                assertNotNull(m.getId().getDescription(), key);
                assertFalse(m.getId().getDescription().isBlank(), key);
            });
            assertEquals("pages", meters.get("kvpool.pool.pages{state=free}").getId().getBaseUnit());
        }
    }

    @Test
    void twoPoolsWithDistinctCommonTagsEachGetTheirOwnMeters() {
        try (KvPool prefill = pool(); KvPool decode = KvPool.builder(LAYOUT).pages(8).maxContextTokens(32).build()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final Map<String, Meter> p = bound(prefill, registry, "prefill");
            final Map<String, Meter> d = bound(decode, registry, "decode");
            assertEquals(16, Meters.value(p.get("kvpool.pool.capacity")));
            assertEquals(8, Meters.value(d.get("kvpool.pool.capacity")));
            assertEquals(2 * EXPECTED.size(), registry.getMeters().size());
        }
    }

    @Test
    void metersFollowThePoolThroughAdmissionsRejectionsPrefixHitsAndStaleHandles() {
        try (KvPool pool = pool()) {
            final Map<String, Meter> m = bound(pool, new SimpleMeterRegistry(), "decode");
            assertEquals(16, Meters.value(m.get("kvpool.pool.pages{state=free}")));
            assertEquals(0, Meters.value(m.get("kvpool.pool.allocations")));

            final Sequence a = pool.admit(10, 2).sequence(); // 12 tokens reserved: 3 pages
            a.append(10);
            assertEquals(3, Meters.value(m.get("kvpool.pool.pages{state=owned}")));
            assertEquals(13, Meters.value(m.get("kvpool.pool.pages{state=free}")));
            assertEquals(3, Meters.value(m.get("kvpool.pool.allocations")));
            assertEquals(1, Meters.value(m.get("kvpool.pool.sequences.open")));

            assertEquals(Admission.Decision.REJECTED_CONTEXT_TOO_LONG, pool.admit(100, 0).decision());
            assertEquals(Admission.Decision.RETRY_LATER, pool.admit(60, 0).decision()); // 15 pages; 13 are free
            assertEquals(Admission.Decision.RETRY_LATER, pool.admit(56, 0).decision()); // 14 pages
            assertEquals(1, Meters.value(m.get("kvpool.pool.admissions.rejected{reason=context_too_long}")));
            assertEquals(2, Meters.value(m.get("kvpool.pool.admissions.rejected{reason=retry_later}")));
            // exceeds_pool needs retired pages (generations exhausted), which no public call can make here
            assertEquals(0, Meters.value(m.get("kvpool.pool.admissions.rejected{reason=exceeds_pool}")));

            final long stale = a.pageHandle(0);
            a.close();
            assertTrue(pool.validate(stale) < 0, "the page was freed: its handle is stale");
            assertEquals(1, Meters.value(m.get("kvpool.pool.handles.refused{reason=stale}")));
            assertEquals(16, Meters.value(m.get("kvpool.pool.pages{state=free}")));
            assertEquals(0, Meters.value(m.get("kvpool.pool.sequences.open")));

            final int[] prompt = IntStream.rangeClosed(1, 8).toArray(); // 2 full pages
            try (Sequence first = pool.admit(prompt, 4, 7).sequence()) {
                first.append(8);
                first.page(0).fill((byte) 1); // KV written: a page still holding the canary cannot be published
                first.page(1).fill((byte) 1);
                first.publish(prompt, 7);
            }
            assertEquals(2, Meters.value(m.get("kvpool.pool.cached.free")), "a closed published sequence leaves cached free pages");
            assertEquals(2, Meters.value(m.get("kvpool.pool.prefix.indexed")));
            try (Sequence second = pool.admit(prompt, 4, 7).sequence()) {
                assertTrue(Meters.value(m.get("kvpool.pool.prefix.hits")) > 0, "the second admission attached the prefix");
                assertEquals(second.pageCount(), Meters.value(m.get("kvpool.pool.pages{state=owned}")));
                everyMeterReadsItsGetter(pool, m);
            }
        }
    }

    @Test
    void theBinderAndItsMetersDoNotKeepThePoolAlive() throws InterruptedException {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        final KvPool[] holder = {pool()};
        final WeakReference<KvPool> ref = new WeakReference<>(holder[0]);
        final KvPoolMeterBinder binder = new KvPoolMeterBinder(holder[0], Tags.of("pool", "gone"));
        binder.bindTo(registry);
        try (Sequence s = holder[0].admit(4, 0).sequence()) {
            s.append(4); // one allocation
        }
        final Map<String, Meter> m = Meters.byKey(registry, "pool", "gone");
        assertEquals(1, Meters.value(m.get("kvpool.pool.allocations")));
        holder[0].close();
        holder[0] = null;
        awaitCollected(ref, "the binder or the registry's meters kept a dropped pool reachable");
        assertTrue(Double.isNaN(Meters.value(m.get("kvpool.pool.capacity"))), "a collected pool's gauge reads NaN");
        assertEquals(1, Meters.value(m.get("kvpool.pool.allocations")), "a collected pool's counter keeps its last value");
        binder.bindTo(registry); // binds nothing once the pool is gone
        assertEquals(EXPECTED.size(), registry.getMeters().size());
        Reference.reachabilityFence(binder);
    }

    @Test
    void aClosedBindersMetersLeaveSoARebuiltPoolShowsUnderTheSameTags() {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        final KvPoolMeterBinder first;
        try (KvPool old = pool()) {
            first = new KvPoolMeterBinder(old, Tags.of("pool", "decode"));
            first.bindTo(registry);
            assertEquals(16, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.pool.capacity")));
        }
        first.close();
        first.close(); // idempotent
        assertTrue(registry.getMeters().isEmpty(), "left after close: " + registry.getMeters());
        try (KvPool rebuilt = KvPool.builder(LAYOUT).pages(24).maxContextTokens(64).build()) {
            final Map<String, Meter> m = bound(rebuilt, registry, "decode");
            assertEquals(EXPECTED.keySet(), m.keySet());
            assertEquals(24, Meters.value(m.get("kvpool.pool.capacity")), "the rebuilt pool's capacity");
            everyMeterReadsItsGetter(rebuilt, m);
            final IllegalStateException closed = assertThrows(IllegalStateException.class, () -> first.bindTo(registry));
            assertTrue(closed.getMessage().contains("closed"), closed.getMessage());
        }
    }

    @Test
    void aBinderOfTheSamePoolIsATwinAfterTheFirstBinderWasCollectedUnclosed() throws InterruptedException {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (KvPool pool = pool()) {
            KvPoolMeterBinder first = new KvPoolMeterBinder(pool, Tags.of("pool", "decode"));
            first.bindTo(registry); // bound, never closed, not kept: as a server that binds and forgets
            final java.lang.ref.WeakReference<KvPoolMeterBinder> gone = new java.lang.ref.WeakReference<>(first);
            first = null;
            awaitCollected(gone, "the first binder was collected");
            System.gc(); // and whatever only it kept
            final KvPoolMeterBinder second = new KvPoolMeterBinder(pool, Tags.of("pool", "decode"));
            second.bindTo(registry); // the same pool and tags: a twin, not "another binder"
            assertEquals(EXPECTED.size(), registry.getMeters().size());
            second.close(); // the last binder of what the registry shows: its meters go
            assertEquals(0, registry.getMeters().size());
        }
    }

    @Test
    void aNewPoolTakesTheTagsOfACollectedPoolWhoseBinderWasDroppedUnclosed() throws InterruptedException {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        KvPool old = pool();
        new KvPoolMeterBinder(old, Tags.of("pool", "decode")).bindTo(registry); // bound, never closed, not kept
        final WeakReference<KvPool> oldRef = new WeakReference<>(old);
        old.close();
        old = null;
        awaitCollected(oldRef, "the first pool was collected");
        System.gc(); // and its binder, which nothing held
        try (KvPool rebuilt = KvPool.builder(LAYOUT).pages(24).maxContextTokens(64).build()) {
            final KvPoolMeterBinder second = new KvPoolMeterBinder(rebuilt, Tags.of("pool", "decode"));
            second.bindTo(registry); // nothing will ever close the first binder's meters: they go now
            final Map<String, Meter> m = Meters.byKey(registry, "pool", "decode");
            assertEquals(EXPECTED.keySet(), m.keySet());
            assertEquals(24, Meters.value(m.get("kvpool.pool.capacity")), "the new pool's capacity, not a collected pool's NaN");
            everyMeterReadsItsGetter(rebuilt, m);
            second.close();
            assertEquals(0, registry.getMeters().size());
        }
    }

    @Test
    void aBinderRemovesOnlyItsOwnMetersAfterTheRegistryWasCleared() {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (KvPool first = pool(); KvPool second = KvPool.builder(LAYOUT).pages(24).maxContextTokens(64).build()) {
            final KvPoolMeterBinder a = new KvPoolMeterBinder(first, Tags.of("pool", "decode"));
            a.bindTo(registry);
            registry.clear(); // the application's own: a's meters are gone without its close
            final KvPoolMeterBinder b = new KvPoolMeterBinder(second, Tags.of("pool", "decode"));
            b.bindTo(registry);
            a.close(); // its meters' ids are b's now: not its meters
            final Map<String, Meter> m = Meters.byKey(registry, "pool", "decode");
            assertEquals(EXPECTED.keySet(), m.keySet(), "a's close took b's meters");
            assertEquals(24, Meters.value(m.get("kvpool.pool.capacity")));
            b.close();
            assertEquals(0, registry.getMeters().size());
        }
    }

    @Test
    void bindingAgainAfterTheRegistryWasClearedShowsThePoolAgain() {
        // an application that clears its registry and binds again (a reset): the record of the first bind shows nothing
        // any more, so neither a new binder of the same pool and tags nor the first binder itself may take it as bound
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (KvPool p = pool()) {
            final KvPoolMeterBinder a = new KvPoolMeterBinder(p, Tags.of("pool", "decode"));
            a.bindTo(registry);
            registry.clear();
            final KvPoolMeterBinder b = new KvPoolMeterBinder(p, Tags.of("pool", "decode"));
            b.bindTo(registry);
            assertEquals(EXPECTED.keySet(), Meters.byKey(registry, "pool", "decode").keySet(), "a new binder after clear()");
            registry.clear();
            a.bindTo(registry);
            assertEquals(EXPECTED.keySet(), Meters.byKey(registry, "pool", "decode").keySet(), "the first binder after clear()");
            b.close(); // not bound there any more: a's meters stay
            assertEquals(EXPECTED.keySet(), Meters.byKey(registry, "pool", "decode").keySet(), "b's close took a's meters");
            a.close();
            assertEquals(0, registry.getMeters().size());
        }
    }

    @Test
    void theMetersOfACollectedPoolStayWhileItsBinderLives() throws InterruptedException {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        KvPool old = pool();
        final KvPoolMeterBinder first = new KvPoolMeterBinder(old, Tags.of("pool", "decode"));
        first.bindTo(registry);
        final WeakReference<KvPool> oldRef = new WeakReference<>(old);
        old.close();
        old = null;
        awaitCollected(oldRef, "the first pool was collected");
        try (KvPool rebuilt = pool()) {
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new KvPoolMeterBinder(rebuilt, Tags.of("pool", "decode")).bindTo(registry));
            assertTrue(e.getMessage().contains("close that binder first"), e.getMessage()); // its close would remove them
        }
        first.close();
        assertEquals(0, registry.getMeters().size());
    }

    @Test
    void whatIsKeptOfABindGoesWithItsRegistry() throws InterruptedException {
        try (KvPool pool = pool()) {
            for (int i = 0; i < 200; i++) { // a long-lived pool bound to short-lived registries, binders never closed
                new KvPoolMeterBinder(pool, Tags.of("pool", "decode")).bindTo(new SimpleMeterRegistry());
            }
            assertTrue(BoundMeters.registriesKeptFor(pool) > 0);
            for (int i = 0; i < 100 && BoundMeters.registriesKeptFor(pool) > 0; i++) {
                System.gc();
                Thread.sleep(10);
            }
            assertEquals(0, BoundMeters.registriesKeptFor(pool), "records of collected registries were kept");
        }
    }

    @Test
    void aSecondBinderWithTheSameTagsIsRefusedInsteadOfHidden() {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (KvPool a = pool(); KvPool b = KvPool.builder(LAYOUT).pages(24).maxContextTokens(64).build()) {
            final KvPoolMeterBinder binder = new KvPoolMeterBinder(a, Tags.of("pool", "decode"));
            binder.bindTo(registry);
            binder.bindTo(registry); // the same binder again: nothing new
            assertEquals(EXPECTED.size(), registry.getMeters().size());
            new KvPoolMeterBinder(a, Tags.of("pool", "decode")).bindTo(registry); // another binder of the same pool: nothing new
            assertEquals(EXPECTED.size(), registry.getMeters().size());
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new KvPoolMeterBinder(b, Tags.of("pool", "decode")).bindTo(registry));
            assertTrue(e.getMessage().contains("kvpool.pool.pages") && e.getMessage().contains("pool=decode"), e.getMessage());
            assertEquals(0, BoundMeters.registriesKeptFor(b), "a refused bind keeps no record");
            assertEquals(16, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.pool.capacity")));
            new KvPoolMeterBinder(b, Tags.of("pool", "decode", "replica", "2")).bindTo(registry); // other tags: bound
            assertEquals(2 * EXPECTED.size(), registry.getMeters().size());
        }
    }

    @Test
    void aSameTagsTwinIsRefusedUnderTheRegistrysCommonTagsToo() {
        // common tags (registry.config().commonTags, Spring Boot's management.metrics.tags) sit on every stored meter
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        registry.config().commonTags("app", "engine");
        try (KvPool a = pool(); KvPool b = KvPool.builder(LAYOUT).pages(24).maxContextTokens(64).build()) {
            new KvPoolMeterBinder(a, Tags.of("pool", "decode")).bindTo(registry);
            assertThrows(IllegalStateException.class, () -> new KvPoolMeterBinder(b, Tags.of("pool", "decode")).bindTo(registry));
            assertEquals(EXPECTED.size(), registry.getMeters().size(), "the refused bind left nothing behind");
            assertEquals(16, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.pool.capacity{app=engine}")));
        }
    }

    @Test
    void twinBindersShareTheMetersUntilTheLastCloses() {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (KvPool pool = pool()) {
            final KvPoolMeterBinder a = new KvPoolMeterBinder(pool, Tags.of("pool", "decode"));
            final KvPoolMeterBinder b = new KvPoolMeterBinder(pool, Tags.of("pool", "decode"));
            a.bindTo(registry);
            b.bindTo(registry);
            assertEquals(EXPECTED.size(), registry.getMeters().size());
            a.close();
            assertEquals(EXPECTED.size(), registry.getMeters().size(), "b still shows the pool");
            assertEquals(16, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.pool.capacity")));
            b.close();
            assertTrue(registry.getMeters().isEmpty(), "the last twin removed them: " + registry.getMeters());
        }
    }

    @Test
    void twoBindersOfTwoPoolsWithTheSameTagsBindingAtOnceNeverMixTheirMeters() throws Exception {
        for (int round = 0; round < 50; round++) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            try (KvPool a = pool(); KvPool b = KvPool.builder(LAYOUT).pages(24).maxContextTokens(64).build()) {
                final java.util.concurrent.CyclicBarrier start = new java.util.concurrent.CyclicBarrier(2);
                final java.util.concurrent.atomic.AtomicInteger refused = new java.util.concurrent.atomic.AtomicInteger();
                final Thread[] t = new Thread[2];
                final KvPool[] pools = {a, b};
                for (int i = 0; i < 2; i++) {
                    final KvPool p = pools[i];
                    t[i] = new Thread(() -> {
                        try {
                            start.await();
                            new KvPoolMeterBinder(p, Tags.of("pool", "decode")).bindTo(registry);
                        } catch (IllegalStateException e) {
                            refused.incrementAndGet();
                        } catch (Exception e) {
                            throw new AssertionError(e);
                        }
                    });
                    t[i].start();
                }
                for (Thread x : t) {
                    x.join();
                }
                assertEquals(1, refused.get(), "exactly one of the two binds is refused");
                final Map<String, Meter> m = Meters.byKey(registry, "pool", "decode");
                final long capacity = (long) Meters.value(m.get("kvpool.pool.capacity"));
                final KvPool shown = capacity == 16 ? a : b;
                everyMeterReadsItsGetter(shown, m); // every meter reads the one pool whose bind won
                assertEquals(EXPECTED.size(), registry.getMeters().size());
            }
        }
    }

    @Test
    void nullArgumentsAreRefused() {
        try (KvPool pool = pool()) {
            assertThrows(NullPointerException.class, () -> new KvPoolMeterBinder(null));
            assertThrows(NullPointerException.class, () -> new KvPoolMeterBinder(pool, null));
            assertThrows(NullPointerException.class, () -> new KvPoolMeterBinder(pool).bindTo(null));
        }
    }

    /** Each meter reads its own getter (the state must make most values distinct for this to mean anything). */
    static void everyMeterReadsItsGetter(KvPool pool, Map<String, Meter> meters) {
        final PoolMetrics metrics = pool.metrics();
        EXPECTED.forEach((key, getter) -> assertEquals(getter.applyAsLong(metrics), Meters.value(meters.get(key)), key));
    }
}
