package io.kvpool;

import io.kvpool.PoolFaultPathsTest.FailingCopyStorage;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.function.Supplier;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * What operators are told: the log records (unsafe safeguards, a leaky close, a failed fill, a clamped context),
 * every gauge and counter of {@link PoolMetrics}, the build errors of {@link CapacityCheck}, and pool ids coming back.
 */
class PoolDiagnosticsTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    /**
     * The records the pool logs at WARNING and above while {@code action} runs whose message starts with {@code prefix}
     * (other tests in the same JVM may leave more than 127 pools uncollected, and the pool ids' sharing warning with them).
     */
    private static <T> List<LogRecord> logged(String prefix, Supplier<T> action) {
        final List<LogRecord> records = new ArrayList<>();
        final Handler capture = handler(r -> {
            if (r.getLevel().intValue() >= Level.WARNING.intValue() && r.getMessage().startsWith(prefix)) {
                records.add(r);
            }
        });
        whileHandling(capture, action::get);
        return records;
    }

    /** Runs {@code action} with {@code h} added to the pool's logger. */
    private static void whileHandling(Handler h, Runnable action) {
        final Logger logger = Logger.getLogger("io.kvpool");
        logger.addHandler(h);
        try {
            action.run();
        } finally {
            logger.removeHandler(h);
        }
    }

    /** A log handler that hands each record to {@code publish}. */
    private static Handler handler(java.util.function.Consumer<LogRecord> publish) {
        return new Handler() {
            @Override
            public void publish(LogRecord r) {
                publish.accept(r);
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
    }

    private static String only(List<LogRecord> records, Level level) {
        assertEquals(1, records.size(), () -> "records: " + records.stream().map(LogRecord::getMessage).toList());
        assertEquals(level, records.get(0).getLevel());
        return records.get(0).getMessage();
    }

    @Test
    void aPoolWithSafeguardsOffSaysSoAtStartup() {
        final KvPool[] pool = new KvPool[1];
        final String message = only(logged("UNSAFE", () -> pool[0] = TestPools.builder(2)
            .unsafeDisable(Safeguard.ADMISSION_REJECTION, Safeguard.FREE_PAGE_FILL).build()), Level.SEVERE);
        assertTrue(message.startsWith("UNSAFE kvpool built with safeguards DISABLED: [") && message.contains("FREE_PAGE_FILL")
            && message.contains("ADMISSION_REJECTION"), message); // in the set's order, which varies from JVM to JVM
        assertEquals(EnumSet.of(Safeguard.ADMISSION_REJECTION, Safeguard.FREE_PAGE_FILL), pool[0].disabledSafeguards());
        final KvPool[] safe = new KvPool[1];
        assertEquals(0, logged("UNSAFE", () -> safe[0] = TestPools.pool(2)).size(), "a safe pool logs nothing");
        assertEquals(EnumSet.noneOf(Safeguard.class), safe[0].disabledSafeguards());
        safe[0].close();
        pool[0].close();
    }

    @Test
    void aLeakyCloseLogsItsReportAndACleanOneLogsNothing() {
        final KvPool clean = TestPools.pool(2);
        clean.release(clean.tryAllocate());
        assertEquals(0, logged("kvpool closed", () -> {
            clean.close();
            return null;
        }).size());
        final KvPool leaky = TestPools.pool(2);
        leaky.tryAllocate();
        final String message = only(logged("kvpool closed", () -> {
            leaky.close();
            return null;
        }), Level.SEVERE);
        assertEquals(leaky.closeReport().orElseThrow(), message);
        assertTrue(message.startsWith("kvpool closed with outstanding pages: 1 of 2 in use"), message);
    }

    @Test
    void aLogBackendThatThrowsOnTheCloseReportDoesNotKeepTheStorage() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        final KvPool leaky = TestPools.builder(2).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build();
        leaky.tryAllocate(); // never released: close reports it
        final Handler failing = handler(r -> {
            if (r.getMessage().startsWith("kvpool closed")) {
                throw new IllegalStateException("injected: the log backend is broken");
            }
        });
        whileHandling(failing, leaky::close);
        assertEquals(1, storage[0].closes.get(), "the storage is released even though the report could not be logged");
        assertTrue(leaky.closeReport().orElseThrow().startsWith("kvpool closed with outstanding pages: 1 of 2 in use"));
        leaky.close(); // idempotent, and does not release twice
        assertEquals(1, storage[0].closes.get());
    }

    @Test
    void aFailedFillAtFreeIsLogged() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(2).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final long h = pool.tryAllocate();
            storage[0].failNextFill = true;
            final String message = only(logged("kvpool: filling", () -> pool.release(h)), Level.WARNING);
            assertTrue(message.startsWith("kvpool: filling freed slot " + PageHandle.slot(h) + " failed"), message);
        }
    }

    @Test
    void aClampedContextIsLoggedWithItsNumbers() {
        final KvPool[] pool = new KvPool[1];
        final String message = only(logged("advertised", () -> pool[0] = KvPool.builder(TestPools.SMALL).pages(4).maxContextTokens(17)
            .contextPolicy(ContextPolicy.CLAMP).build()), Level.WARNING);
        assertEquals("advertised max context of 17 tokens exceeds what this pool can hold for one request: 16 tokens "
            + "(4 pages × 4 tokens/page, 1,024 bytes); clamping the max context to 16 tokens", message);
        assertEquals(16, pool[0].maxContextTokens());
        pool[0].close();
    }

    // ---- build errors ----

    private static String buildError(KvPoolBuilder b) {
        return assertThrows(IllegalArgumentException.class, b::build).getMessage();
    }

    @Test
    void buildErrorsNameWhatIsWrong() {
        final KvLayout l = TestPools.SMALL;
        assertEquals("set the pool size with pages(n) or byteBudget(bytes)", buildError(KvPool.builder(l).maxContextTokens(4)));
        assertEquals("a pool has 1..16777216 pages, asked for 0", buildError(KvPool.builder(l).pages(0).maxContextTokens(4)));
        assertEquals("byte budget of 0 bytes holds no page of 256 bytes (" + l + ")",
            buildError(KvPool.builder(l).byteBudget(0).maxContextTokens(4)));
        assertEquals("byte budget of 255 bytes holds no page of 256 bytes (" + l + ")",
            buildError(KvPool.builder(l).byteBudget(255).maxContextTokens(4)));
        assertEquals("set maxContextTokens(n): the context length the deployment advertises", buildError(KvPool.builder(l).pages(1)));
        assertEquals("maxContextTokens must be ≥ 1, was 0", buildError(KvPool.builder(l).pages(1).maxContextTokens(0)));
        try (KvPool one = KvPool.builder(l).byteBudget(l.bytesPerPage()).maxContextTokens(4).build()) {
            assertEquals(1, one.capacity(), "a budget of exactly one page holds one page");
        }
        try (KvPool two = KvPool.builder(l).byteBudget(3 * l.bytesPerPage() - 1).maxContextTokens(8).build()) {
            assertEquals(2, two.capacity());
        }
    }

    @Test
    void aContextThePoolCannotHoldNamesTheLargestSafeOneAndTheMemoryItWouldNeed() {
        final PoolCapacityException e = assertThrows(PoolCapacityException.class,
            () -> KvPool.builder(TestPools.SMALL).pages(4).maxContextTokens(17).build());
        assertEquals("advertised max context of 17 tokens exceeds what this pool can hold for one request: 16 tokens "
            + "(4 pages × 4 tokens/page, 1,024 bytes); the largest safe context is 16 tokens. Lower the advertised context, "
            + "give the pool more memory (at least 1,280 bytes), or opt in to ContextPolicy.CLAMP", e.getMessage());
        final String noPool = "the largest safe context is 16 tokens. No pool holds this context: a sequence counts at most "
            + "2,147,483,647 tokens and a pool has at most 16,777,216 pages. Lower it, or opt in to ContextPolicy.CLAMP";
        for (long context : new long[] {Long.MAX_VALUE / 2, (1L << 55) * TPP, Integer.MAX_VALUE + 1L}) {
            final PoolCapacityException beyond = assertThrows(PoolCapacityException.class,
                () -> KvPool.builder(TestPools.SMALL).pages(4).maxContextTokens(context).build());
            assertTrue(beyond.getMessage().endsWith(noPool), "no memory helps: " + beyond.getMessage());
        }
        final PoolCapacityException mostPages = assertThrows(PoolCapacityException.class, // every page a pool may have
            () -> KvPool.builder(TestPools.SMALL).pages(4).maxContextTokens((PageHandle.MAX_SLOT + 1L) * TPP).build());
        assertTrue(mostPages.getMessage().contains("(at least 4,294,967,296 bytes)"), mostPages.getMessage());
    }

    @Test
    void aPoolLargerThanASequenceCanCountSaysWhyItsContextIsCapped() {
        final KvLayout big = new KvLayout(1, 1, 4, DType.FP16, 1 << 20); // 16 MiB pages of 2^20 tokens
        final PoolCapacityException e = assertThrows(PoolCapacityException.class, () -> KvPool.builder(big).pages(4096)
            .maxContextTokens(1L << 32).storage(PoolFaultPathsTest.NoBytes::new).build());
        assertTrue(e.getMessage().contains("; a sequence counts at most 2,147,483,647 tokens)"), e.getMessage());
    }

    // ---- gauges and counters ----

    @Test
    void everyGaugeAndCounterReadsWhatTheSnapshotSays() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] ids = IntStream.range(0, TPP + 1).toArray();
            final Sequence publisher = pool.admit(ids, 0, TestPools.SALT).sequence();
            publisher.append(ids.length);
            TokenTags.writeSequence(publisher, 1, 0, ids.length);
            publisher.publish(ids, TestPools.SALT);
            final Sequence attached = pool.admit(ids, TPP, TestPools.SALT).sequence(); // a prefix hit
            publisher.close();
            final long receiving = pool.tryAllocate();
            final long draining = pool.tryAllocate();
            final long quarantined = pool.tryAllocate();
            for (long h : new long[] {receiving, draining, quarantined}) {
                pool.handles().pinWriter(h);
            }
            pool.handles().beginDrain(draining);
            pool.handles().beginDrain(quarantined);
            pool.handles().quarantine(quarantined);
            final long reservation = pool.tryReserve(TPP, 0);
            pool.admit(1000, 0);      // context too long
            assertEquals(Admission.RETRY_LATER, pool.tryReserve(10 * TPP, 0)); // 9 free pages are unreserved
            final long stale = pool.tryAllocate();
            pool.release(stale);
            assertThrows(StaleHandleException.class, () -> pool.release(stale));
            try (KvPool other = TestPools.pool(1)) {
                final long foreign = other.tryAllocate();
                assertThrows(StaleHandleException.class, () -> pool.release(foreign));
            }
            final PoolSnapshot s = pool.verifyAccounting();
            final PoolMetrics m = pool.metrics();
            assertEquals(16, m.capacity());
            assertEquals(List.of(s.free(), s.owned(), s.receiving(), s.draining(), s.quarantined(), s.retired(), s.reserved(),
                    s.cachedFree(), s.publishedPrefixes(), s.openSequences(), s.openReservations()),
                List.of(m.free(), m.owned(), m.receiving(), m.draining(), m.quarantined(), m.retired(), m.reserved(), m.cachedFree(),
                    m.publishedPrefixes(), m.openSequences(), m.openReservations()));
            assertEquals(List.of(s.allocations(), s.prefixHits(), s.evictions(), s.rejectedContextTooLong(), s.rejectedExceedsPool(),
                    s.retryLater(), s.staleHandlesRefused(), s.foreignHandlesRefused(), s.quarantineEvents()),
                List.of(m.allocations(), m.prefixHits(), m.evictions(), m.rejectedContextTooLong(), m.rejectedExceedsPool(),
                    m.retryLater(), m.staleHandlesRefused(), m.foreignHandlesRefused(), m.quarantineEvents()));
            // and the values themselves
            assertEquals(List.of(12L, 1L, 1L, 1L, 1L, 0L, 3L, 0L, 1L, 1L, 1L),
                List.of(s.free(), s.owned(), s.receiving(), s.draining(), s.quarantined(), s.retired(), s.reserved(),
                    s.cachedFree(), s.publishedPrefixes(), s.openSequences(), s.openReservations()), s.toString());
            assertEquals(List.of(6L, 1L, 0L, 1L, 0L, 1L, 1L, 1L, 1L),
                List.of(s.allocations(), s.prefixHits(), s.evictions(), s.rejectedContextTooLong(), s.rejectedExceedsPool(),
                    s.retryLater(), s.staleHandlesRefused(), s.foreignHandlesRefused(), s.quarantineEvents()), s.toString());
            pool.cancelReservation(reservation);
            attached.close();
            pool.handles().commitReceive(receiving);
            pool.handles().drained(draining);
            pool.handles().releaseQuarantine(quarantined);
            for (long h : new long[] {receiving, draining, quarantined}) {
                pool.release(h);
            }
            assertEquals(16, pool.verifyAccounting().free());
        }
    }

    // ---- pool ids ----

    @Test
    void aClosedPoolsIdComesBackBeforeAnyIdIsShared() {
        final KvPool[] built = new KvPool[1];
        final boolean shared = !logged("kvpool: more than", () -> built[0] = TestPools.pool(1)).isEmpty();
        final KvPool first = built[0];
        org.junit.jupiter.api.Assumptions.assumeFalse(shared, "every pool id is taken by pools other tests left open");
        final int id = first.poolId();
        first.close(); // first stays strongly reachable: only close can give its id back
        final List<KvPool> later = new ArrayList<>();
        boolean seen = false;
        for (int i = 0; i < PageHandle.MAX_POOL && !seen; i++) {
            final KvPool p = TestPools.pool(1);
            later.add(p);
            seen = p.poolId() == id;
            p.close();
        }
        assertTrue(seen, "pool id " + id + " never came back after its pool was closed");
        java.lang.ref.Reference.reachabilityFence(first);
        java.lang.ref.Reference.reachabilityFence(later);
    }
}
