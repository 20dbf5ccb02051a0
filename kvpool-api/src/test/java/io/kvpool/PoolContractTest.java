package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static io.kvpool.TokenTags.writeSequence;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The pool's contract over single-threaded call sequences: admission's full guarantee after truncating into an own
 * published page, capacity and context limits that build, messages that claim only what happened, a storage whose
 * close closes the pool again, token ranges checked whatever the storage checks; and a random search over call
 * sequences for content, stale handles and the admission guarantee.
 */
class PoolContractTest {

    private static int[] ids(int n, int base) {
        final int[] t = new int[n];
        for (int i = 0; i < n; i++) {
            t[i] = base + i;
        }
        return t;
    }

    /**
     * Truncate's Javadoc: "Truncating pages only this sequence holds never weakens the guarantee." A page this
     * sequence alone holds but has published is immutable while cached: truncating into it must not make the next
     * append copy it, one page more than the admission reserved, for which the top-up finds none in a full pool. Such
     * a page leaves the prefix cache instead.
     */
    @Test
    void truncatingIntoOwnPublishedPageKeepsTheFullAdmissionGuarantee() {
        try (KvPool pool = TestPools.pool(3)) {
            final int[] p = ids(8, 100);
            final Sequence a = pool.admit(p, 4, 7).sequence(); // 12 tokens: all 3 pages reserved
            a.append(8);
            writeSequence(a, 1, 0, 8);
            a.publish(p, 7);                                    // pages 0 and 1 published, refcount 1 each
            assertEquals(1, pool.refcountOfSlot(a.pageIndex(1)), "only this sequence holds page 1");
            a.truncate(6);                                      // into its own published page
            assertDoesNotThrow(() -> a.append(6), "6 → 12 tokens is within the 12 admitted; " + pool.snapshot());
            assertEquals(12, a.tokenCount());
            a.close();
            pool.verifyAccounting();
        }
    }

    /**
     * ContextPolicy.CLAMP: "Clamp the max context to what fits and log a warning". On a pool holding more than
     * Integer.MAX_VALUE tokens it must not clamp to the pool's tokens, which build() refuses (a sequence counts at
     * most Integer.MAX_VALUE tokens): the opt-in that exists so a deployment starts anyway would not start.
     */
    @Test
    void clampOnAPoolHoldingMoreThanASequenceCanCountStillBuilds() {
        final KvLayout big = new KvLayout(1, 1, 1, DType.FP8, 1 << 20);    // 2^20 tokens per page
        final KvPoolBuilder b = KvPool.builder(big).pages(4096)            // 2^32 tokens in the pool
            .maxContextTokens(1L << 40).contextPolicy(ContextPolicy.CLAMP).storage(PoolFaultPathsTest.NoBytes::new);
        final KvPool pool = assertDoesNotThrow(b::build, "CLAMP must clamp to what fits, not refuse to build");
        try (pool) {
            assertTrue(pool.maxContextTokens() <= Integer.MAX_VALUE, "clamped to " + pool.maxContextTokens());
        }
    }

    /**
     * With ContextPolicy.FAIL the same pool's PoolCapacityException names "the largest safe context": a number that
     * build() then refuses with IllegalArgumentException.
     */
    @Test
    void theLargestSafeContextNamedByPoolCapacityExceptionCanBeBuilt() {
        final KvLayout big = new KvLayout(1, 1, 1, DType.FP8, 1 << 20);
        final PoolCapacityException e = assertThrows(PoolCapacityException.class, () -> KvPool.builder(big).pages(4096)
            .maxContextTokens(1L << 40).storage(PoolFaultPathsTest.NoBytes::new).build());
        final long safe = e.poolTokens();
        assertDoesNotThrow(() -> KvPool.builder(big).pages(4096).maxContextTokens(safe)
            .storage(PoolFaultPathsTest.NoBytes::new).build().close(), "the 'largest safe context' " + safe + " from: " + e.getMessage());
    }

    /**
     * Admission.message() for ADMITTED must not say "N pages reserved" with N = pagesNeeded(): admit(ids, ...) hands
     * back the reservation of every page it attaches, so the sequence and the pool hold fewer.
     */
    @Test
    void anAdmittedMessageDoesNotClaimReservedPagesItAttached() {
        try (KvPool pool = TestPools.pool(8)) {
            final int[] p = ids(9, 300);
            final Sequence a = pool.admit(p, 0, 5).sequence();
            a.append(9);
            writeSequence(a, 1, 0, 9);
            a.publish(p, 5);                                    // pages 0 and 1 published; a keeps them
            final Admission b = pool.admit(p, 3, 5);            // 12 tokens = 3 pages; attaches 2 shared pages
            assertEquals(8, b.sequence().tokenCount());
            assertEquals(1, b.sequence().reservedPages());
            assertFalse(b.message().contains("3 pages reserved"), b.message());
            assertTrue(b.message().contains("8 tokens attached from the prefix cache"), b.message());
            assertTrue(pool.admit(4, 0).message().endsWith("1 pages reserved"), "no attach: the pages are reserved");
            b.sequence().close();
            a.close();
        }
    }

    // ---- model-based search ----

    static final class M {
        Sequence s;
        int[] ids = new int[0];
        long salt;
        boolean exempt;
        long admitted;
    }

    static long f(long salt, int[] ids, int t) {
        long h = salt * 0x9E3779B97F4A7C15L;
        for (int i = 0; i <= t; i++) {
            h = PrefixHash.fmix64(h ^ ids[i] ^ ((long) i << 40));
        }
        return (h & 0x0FFF_FFFF_FFFF_FFFFL) | 0x4000_0000_0000_0000L;
    }

    static void write(Sequence s, int[] ids, long salt, int from, int to) {
        final KvLayout l = s.pool().layout();
        for (int t = from; t < to; t++) {
            TokenTags.write(s.page(t / l.tokensPerPage()), l, t % l.tokensPerPage(), f(salt, ids, t));
        }
    }

    static void check(M m, String ctx) {
        final KvLayout l = m.s.pool().layout();
        assertEquals(m.ids.length, m.s.tokenCount(), ctx);
        for (int t = 0; t < m.ids.length; t++) {
            final long got = TokenTags.read(m.s.page(t / l.tokensPerPage()), l, t % l.tokensPerPage());
            if (got != f(m.salt, m.ids, t)) {
                fail(ctx + ": token " + t + " of " + m.s + " ids " + Arrays.toString(m.ids) + " holds " + Long.toHexString(got));
            }
        }
    }

    /**
     * Random single-threaded call sequences (admit with prefix attach, append within the admission, truncate, fork,
     * publish, close, tryAllocate) against a content oracle (every token reads the tag its own ids and salt
     * determine), the stale-handle rules and the FULL admission guarantee; a sequence is exempt from the guarantee
     * only where truncate's Javadoc allows it (it dropped, or kept partial, a page another owner shared). With
     * truncate into an own published page not exempted, it fails within a few seeds; 3000 seeds x 150 steps pass.
     */
    @Test
    void randomCallSequencesKeepContentStaleHandlesAndTheFullAdmissionGuarantee() {
        for (int seed = 0; seed < Integer.getInteger("fz.seeds", 300); seed++) {
            final Random r = new Random(seed);
            final List<String> log = new ArrayList<>();
            try (KvPool pool = TestPools.builder(r.nextInt(10) + 3).threadCache(r.nextBoolean() ? 4 : 0).build()) {
                final List<M> live = new ArrayList<>();
                final List<Long> stale = new ArrayList<>();
                for (int step = 0; step < Integer.getInteger("fz.steps", 80); step++) {
                    final int op = r.nextInt(7);
                    final String ctx = "seed " + seed + " step " + step + " log " + log;
                    try {
                        if (op == 0 || live.isEmpty()) {
                            final int prompt = 1 + r.nextInt(14);
                            final int[] ids = new int[prompt];
                            for (int i = 0; i < prompt; i++) ids[i] = 1 + r.nextInt(2);
                            final int maxNew = r.nextInt(9);
                            final long salt = 1 + r.nextInt(2);
                            final Admission a = pool.admit(ids, maxNew, salt);
                            log.add("admit(" + Arrays.toString(ids) + "," + maxNew + "," + salt + ")=" + a.decision());
                            if (a.admitted()) {
                                final M m = new M();
                                m.s = a.sequence();
                                m.salt = salt;
                                m.admitted = m.s.admittedTokens();
                                final int cached = m.s.tokenCount();
                                m.ids = Arrays.copyOf(ids, cached);
                                check(m, ctx + " (attached " + cached + ")");
                                m.s.append(prompt - cached);
                                m.ids = ids;
                                write(m.s, ids, salt, cached, prompt);
                                live.add(m);
                            }
                        } else {
                            final M m = live.get(r.nextInt(live.size()));
                            final int idx = live.indexOf(m);
                            if (op == 1) {
                                final int room = (int) (m.admitted - m.ids.length);
                                if (room > 0) {
                                    final int k = 1 + r.nextInt(room);
                                    log.add("s" + idx + ".append(" + k + ")");
                                    try {
                                        m.s.append(k);
                                    } catch (PoolExhaustedException e) {
                                        if (!m.exempt) throw new AssertionError(ctx + ": append within admission failed: " + e, e);
                                        continue;
                                    }
                                    final int old = m.ids.length;
                                    m.ids = Arrays.copyOf(m.ids, old + k);
                                    for (int i = old; i < old + k; i++) m.ids[i] = 1 + r.nextInt(2);
                                    write(m.s, m.ids, m.salt, old, old + k);
                                }
                            } else if (op == 2) {
                                final int n = r.nextInt(m.ids.length + 1);
                                final int tpp = pool.layout().tokensPerPage();
                                final int keep = (int) pool.layout().pagesFor(n);
                                for (int i = keep; i < m.s.pageCount(); i++) {
                                    if (pool.refcountOfSlot(m.s.pageIndex(i)) > 1) m.exempt = true;
                                }
                                if (n % tpp != 0 && keep > 0 && (pool.refcountOfSlot(m.s.pageIndex(keep - 1)) > 1)) m.exempt = true;
                                for (int i = keep; i < m.s.pageCount(); i++) {
                                    if (pool.refcountOfSlot(m.s.pageIndex(i)) == 1) stale.add(m.s.pageHandle(i));
                                }
                                log.add("s" + idx + ".truncate(" + n + ")");
                                m.s.truncate(n);
                                m.ids = Arrays.copyOf(m.ids, n);
                            } else if (op == 3) {
                                log.add("s" + idx + ".fork()");
                                try {
                                    final Sequence c = m.s.fork();
                                    final M cm = new M();
                                    cm.s = c;
                                    cm.ids = m.ids.clone();
                                    cm.salt = m.salt;
                                    cm.admitted = m.admitted;
                                    cm.exempt = m.exempt;
                                    live.add(cm);
                                } catch (PoolExhaustedException e) {
                                    log.add("fork refused");
                                }
                            } else if (op == 4) {
                                log.add("s" + idx + ".publish");
                                m.s.publish(m.ids, m.salt);
                            } else if (op == 5) {
                                for (int i = 0; i < m.s.pageCount(); i++) {
                                    if (pool.refcountOfSlot(m.s.pageIndex(i)) == 1) stale.add(m.s.pageHandle(i));
                                }
                                log.add("s" + idx + ".close");
                                m.s.close();
                                live.remove(m);
                            } else {
                                final long h = pool.tryAllocate();
                                log.add("tryAllocate=" + PageHandle.toString(h));
                                if (h > 0) {
                                    pool.release(h);
                                }
                            }
                        }
                        for (M m : live) {
                            check(m, ctx);
                        }
                        pool.verifyAccounting();
                        for (long h : stale) {
                            assertTrue(pool.validate(h) < 0, ctx + " stale " + PageHandle.toString(h));
                            assertNull(pool.state(h), ctx);
                            assertTrue(pool.tryTransition(h, SlotEvent.RETAIN) < 0, ctx);
                            assertTrue(pool.tryTransition(h, SlotEvent.PIN_WRITER) < 0, ctx);
                        }
                    } catch (AssertionError e) {
                        throw e;
                    } catch (RuntimeException e) {
                        throw new AssertionError(ctx + ": " + e, e);
                    }
                }
                for (M m : live) {
                    m.s.close();
                }
                final PoolSnapshot snap = pool.verifyAccounting();
                assertEquals(0, snap.reserved(), "seed " + seed + " " + snap);
                assertEquals(pool.capacity(), snap.free(), "seed " + seed + " " + snap);
            }
        }
    }

    /** A pool over host memory whose storage's close closes the pool again (an owner that closes both). */
    private static KvPool poolClosedByItsStorage(java.util.concurrent.atomic.AtomicInteger storageCloses) {
        final KvLayout l = new KvLayout(1, 1, 8, DType.FP32, 4);
        final KvPool[] p = new KvPool[1];
        p[0] = KvPool.builder(l).pages(2).maxContextTokens(8)
            .storage((lay, n) -> io.kvpool.storage.HostPageStorage.over(lay, n,
                java.lang.foreign.Arena.ofAuto().allocate(lay.bytesPerPage() * n, 4096), true, () -> {
                    storageCloses.incrementAndGet();
                    p[0].close();
                }))
            .build();
        return p[0];
    }

    @Test
    void aStorageWhoseCloseClosesThePoolAgainLetsTheFirstCloseReturn() {
        final java.util.concurrent.atomic.AtomicInteger storageCloses = new java.util.concurrent.atomic.AtomicInteger();
        final KvPool pool = poolClosedByItsStorage(storageCloses);
        assertDoesNotThrow(pool::close);
        assertTrue(pool.isClosed());
        assertDoesNotThrow(pool::close);
        assertEquals(1, storageCloses.get());
    }

    @Test
    void theLastUnpinAfterCloseReleasesAStorageThatClosesThePoolAgainWithoutThrowing() throws Exception {
        final java.util.concurrent.atomic.AtomicInteger storageCloses = new java.util.concurrent.atomic.AtomicInteger();
        final KvPool pool = poolClosedByItsStorage(storageCloses);
        final Sequence s = pool.admit(4, 0).sequence();
        s.append(4);
        final long h = s.pageHandle(0);
        pool.handles().pinWriter(h);
        pool.close(); // a page is RECEIVING: the storage stays
        assertEquals(0, storageCloses.get());
        final Thread transport = new Thread(() -> pool.handles().commitReceive(h)); // not the closing thread
        final Throwable[] thrown = new Throwable[1];
        transport.setUncaughtExceptionHandler((t, e) -> thrown[0] = e);
        transport.start();
        transport.join(10_000);
        assertFalse(transport.isAlive(), "the commit did not return");
        assertNull(thrown[0], () -> "the commit that released the storage threw " + thrown[0]);
        assertEquals(1, storageCloses.get(), "the last unpin released the storage");
    }

    @Test
    void firstCanaryTokenRefusesATokenRangeOutsideThePageWhateverTheStorageChecks() {
        final KvLayout l = new KvLayout(1, 1, 8, DType.FP32, 4);
        try (KvPool pool = KvPool.builder(l).pages(2).maxContextTokens(8).storage(PoolFaultPathsTest.NoBytes::new).build();
             Sequence s = pool.admit(4, 0).sequence()) {
            s.append(4);
            final long h = s.pageHandle(0);
            assertEquals(-1, pool.firstCanaryToken(h, 0, 4));
            for (int[] r : new int[][] {{0, 5}, {-1, 2}, {3, 2}}) {
                final IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class,
                    () -> pool.firstCanaryToken(h, r[0], r[1]));
                assertTrue(e.getMessage().contains(r[0] + "") && e.getMessage().contains(r[1] + ""), e.getMessage());
            }
        }
    }
}
