package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static io.kvpool.TokenTags.readSequence;
import static io.kvpool.TokenTags.tag;
import static io.kvpool.TokenTags.writeSequence;
import static org.junit.jupiter.api.Assertions.*;

/** {@link KvPool#appendEach}: a decode step over a batch is what appending to each sequence would be, all or nothing. */
class AppendEachTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    /** What an observer can see of a sequence. */
    private record View(int tokens, int pages, int reserved, long version) {
        static View of(Sequence s) {
            return new View(s.tokenCount(), s.pageCount(), s.reservedPages(), s.structureVersion());
        }
    }

    private static List<View> views(Sequence[] batch) {
        final List<View> out = new ArrayList<>();
        for (Sequence s : batch) {
            out.add(View.of(s));
        }
        return out;
    }

    @Test
    void aBatchStepLeavesEverySequenceAsAppendingToEachWould() {
        for (long seed = 1; seed <= 20; seed++) {
            final SplittableRandom rnd = new SplittableRandom(seed);
            try (KvPool batched = TestPools.builder(96).build(); KvPool single = TestPools.builder(96).build()) {
                final int n = 2 + rnd.nextInt(6);
                final Sequence[] a = new Sequence[n];
                final Sequence[] b = new Sequence[n];
                for (int i = 0; i < n; i++) {
                    final int prompt = rnd.nextInt(1, 9);
                    final int max = rnd.nextInt(0, 12);
                    if (i > 0 && rnd.nextInt(3) == 0) { // a fork of the previous one: shared pages, copy-on-write
                        a[i] = a[i - 1].fork();
                        b[i] = b[i - 1].fork();
                    } else {
                        a[i] = batched.admit(prompt, max).sequence();
                        b[i] = single.admit(prompt, max).sequence();
                        a[i].append(prompt);
                        b[i].append(prompt);
                        writeSequence(a[i], 100 + i, 0, prompt);
                        writeSequence(b[i], 100 + i, 0, prompt);
                    }
                }
                for (int step = 0; step < 12; step++) {
                    final int tokens = rnd.nextInt(0, 3);
                    final int count = rnd.nextInt(1, n + 1);
                    final int[] before = new int[count];
                    for (int i = 0; i < count; i++) {
                        before[i] = a[i].tokenCount();
                    }
                    final int pages = batched.appendEach(a, count, tokens);
                    final long allocationsBefore = single.snapshot().allocations();
                    for (int i = 0; i < count; i++) {
                        b[i].append(tokens);
                    }
                    final long expected = single.snapshot().allocations() - allocationsBefore;
                    assertTrue(pages >= 0, "seed " + seed + ": every page is reserved, yet " + pages);
                    assertEquals(views(b), views(a), "seed " + seed + " step " + step);
                    assertEquals(expected, pages, "seed " + seed + " step " + step + ": pages allocated");
                    for (int i = 0; i < count; i++) {
                        writeSequence(a[i], 100 + i, before[i], a[i].tokenCount());
                    }
                }
                for (int i = 0; i < n; i++) {
                    for (int t = 0; t < a[i].tokenCount(); t++) {
                        final long got = readSequence(a[i], t);
                        assertTrue(got == tag(100 + i, t) || forkedFromEarlier(a, i, t, got),
                            "seed " + seed + ": sequence " + i + " token " + t + " reads another sequence's KV");
                    }
                }
                assertEquals(single.verifyAccounting().free(), batched.verifyAccounting().free(), "seed " + seed);
                for (int i = 0; i < n; i++) {
                    a[i].close();
                    b[i].close();
                }
                assertEquals(96, batched.verifyAccounting().free());
            }
        }
    }

    /** A fork's tokens before the fork carry its parent's (or an earlier ancestor's) tags. */
    private static boolean forkedFromEarlier(Sequence[] a, int i, int t, long got) {
        for (int j = 0; j < i; j++) {
            if (got == tag(100 + j, t)) {
                return true;
            }
        }
        return false;
    }

    @Test
    void aStepThePoolCannotSupplyChangesNothingAndSaysHowManyPagesAreShort() {
        try (KvPool pool = TestPools.builder(8).build()) {
            final Sequence a = pool.admit(TPP, 0).sequence();
            final Sequence b = pool.admit(TPP, 0).sequence();
            final Sequence big = pool.admit(5 * TPP, 0).sequence(); // 7 of 8 pages reserved: 1 unreserved
            a.append(TPP);
            b.append(TPP);
            final Sequence[] batch = {a, b, big};
            final List<View> before = views(batch);
            final PoolSnapshot snap = pool.snapshot();
            assertEquals(-1, pool.appendEach(batch, 2, 1), "a and b each need a page beyond their reservation; 1 is free");
            assertEquals(before, views(batch));
            assertEquals(snap.free(), pool.snapshot().free());
            assertEquals(snap.reserved(), pool.snapshot().reserved());
            assertEquals(snap.allocations(), pool.snapshot().allocations());
            assertEquals(1, pool.appendEach(batch, 1, 1), "one of them fits");
            big.close();
            assertEquals(1, pool.appendEach(new Sequence[] {b}, 1, 1), "pages freed: the step that came up short now fits");
            a.close();
            b.close();
            assertEquals(8, pool.verifyAccounting().free());
        }
    }

    @Test
    void aFailedCopyOnWriteUndoesTheWholeStepReservationsIncluded() {
        final PoolFaultPathsTest.FailingCopyStorage[] storage = new PoolFaultPathsTest.FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(16).storage((l, n) -> storage[0] = new PoolFaultPathsTest.FailingCopyStorage(l, n)).build()) {
            final Sequence plain = pool.admit(TPP, 2 * TPP).sequence();
            plain.append(TPP); // full last page: the step allocates a new one
            final Sequence parent = pool.admit(TPP + 2, TPP).sequence();
            parent.append(TPP + 2); // partial last page
            final Sequence child = parent.fork(); // shared partial page: the step copies it
            final Sequence[] batch = {plain, parent, child};
            final List<View> before = views(batch);
            final PoolSnapshot snap = pool.snapshot();
            storage[0].failNextCopy = true;
            assertThrows(IllegalStateException.class, () -> pool.appendEach(batch, 3, 1));
            assertEquals(before, views(batch), "the step threw, so no sequence may have changed");
            assertEquals(snap.free(), pool.snapshot().free());
            assertEquals(snap.reserved(), pool.snapshot().reserved());
            assertEquals(2, pool.appendEach(batch, 3, 1), "plain's new page and parent's copy; then child holds the page alone");
            assertEquals(1, pool.refcountOfSlot(child.pageIndex(child.pageCount() - 1)));
            assertNotEquals(parent.pageIndex(1), child.pageIndex(1));
            for (Sequence s : batch) {
                s.close();
            }
            assertEquals(16, pool.verifyAccounting().free());
        }
    }

    @Test
    void aBatchItCannotTakeIsRefusedBeforeAnySequenceChanges() {
        try (KvPool pool = TestPools.pool(16); KvPool other = TestPools.pool(16)) {
            final Sequence a = pool.admit(TPP, TPP).sequence();
            final Sequence b = pool.admit(TPP, TPP).sequence();
            final Sequence foreign = other.admit(TPP, TPP).sequence();
            final Sequence closed = pool.admit(TPP, TPP).sequence();
            closed.close();
            final Sequence full = pool.admit(16 * TPP - 4 * TPP, 0).sequence();
            full.append(12 * TPP);
            final List<View> before = views(new Sequence[] {a, b});
            assertThrows(IllegalArgumentException.class, () -> pool.appendEach(new Sequence[] {a, b, a}, 3, 1), "twice");
            assertThrows(IllegalArgumentException.class, () -> pool.appendEach(new Sequence[] {a, b, foreign}, 3, 1), "another pool's");
            assertThrows(IllegalArgumentException.class, () -> pool.appendEach(new Sequence[] {a, b, null}, 3, 1), "null");
            assertThrows(IllegalStateException.class, () -> pool.appendEach(new Sequence[] {a, b, closed}, 3, 1), "closed");
            assertThrows(IllegalArgumentException.class, () -> pool.appendEach(new Sequence[] {a, b, full}, 3, 5 * TPP), "beyond the max context");
            assertThrows(IllegalArgumentException.class, () -> pool.appendEach(new Sequence[] {a, b}, 2, -1), "negative");
            assertThrows(IndexOutOfBoundsException.class, () -> pool.appendEach(new Sequence[] {a, b}, 3, 1), "count");
            assertEquals(before, views(new Sequence[] {a, b}));
            assertEquals(2, pool.appendEach(new Sequence[] {b, a}, 2, 1));
            assertEquals(0, pool.appendEach(new Sequence[] {b, a}, 2, 1), "the pages have room: no allocation");
            assertEquals(2, a.tokenCount());
            a.close();
            b.close();
            full.close();
            foreign.close();
        }
    }

    @Test
    void threadsSteppingTheirOwnBatchesNeverShareAPageAndThePoolBalances() throws Exception {
        final int threads = 4, perThread = 6, rounds = 3_000;
        try (KvPool pool = TestPools.builder(4 * 6 * 4 + 8).build()) {
            final List<Throwable> failures = java.util.Collections.synchronizedList(new ArrayList<>());
            final java.util.concurrent.CyclicBarrier start = new java.util.concurrent.CyclicBarrier(threads);
            final Thread[] ts = new Thread[threads];
            for (int t = 0; t < threads; t++) {
                final int id = t;
                ts[t] = new Thread(() -> {
                    final SplittableRandom rnd = new SplittableRandom(id);
                    final Sequence[] batch = new Sequence[perThread];
                    final long[] owner = new long[perThread];
                    long next = 1_000L * (id + 1);
                    try {
                        start.await();
                        for (int r = 0; r < rounds; r++) {
                            for (int i = 0; i < perThread; i++) {
                                if (batch[i] == null || batch[i].tokenCount() >= 4 * TPP - 2) {
                                    if (batch[i] != null) {
                                        batch[i].close();
                                    }
                                    Admission adm;
                                    while (!(adm = pool.admit(1, 4 * TPP - 1)).admitted()) {
                                        Thread.onSpinWait(); // RETRY_LATER: another thread's pages come back
                                    }
                                    batch[i] = adm.sequence();
                                    owner[i] = next++;
                                    batch[i].append(1);
                                    writeSequence(batch[i], owner[i], 0, 1);
                                }
                            }
                            final int tokens = 1 + rnd.nextInt(2);
                            final int[] before = new int[perThread];
                            for (int i = 0; i < perThread; i++) {
                                before[i] = batch[i].tokenCount();
                            }
                            final int pages = pool.appendEach(batch, perThread, tokens);
                            if (pages < 0) {
                                throw new AssertionError("reservations cover every page, yet " + pages + " short");
                            }
                            for (int i = 0; i < perThread; i++) {
                                writeSequence(batch[i], owner[i], before[i], batch[i].tokenCount());
                                for (int k = 0; k < batch[i].tokenCount(); k++) {
                                    if (readSequence(batch[i], k) != tag(owner[i], k)) {
                                        throw new AssertionError("thread " + id + " sequence " + i + " token " + k
                                            + " holds another request's KV");
                                    }
                                }
                            }
                        }
                        for (Sequence s : batch) {
                            s.close();
                        }
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                });
                ts[t].start();
            }
            for (Thread t : ts) {
                t.join();
            }
            assertEquals(List.of(), failures);
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(pool.capacity(), snap.free(), snap::toString);
            assertEquals(0, snap.reserved(), snap::toString);
        }
    }

    @Test
    void aReferenceTakenAfterAnAppendMakesTheNextAppendCopyTheSharedPage() throws Exception {
        try (KvPool pool = TestPools.builder(16).build()) {
            final Sequence s = pool.admit(1, 4 * TPP).sequence();
            s.append(1);
            writeSequence(s, 7, 0, 1);
            s.append(1); // finds its partial last page unshared
            writeSequence(s, 7, 1, 2);
            final long shared = s.pageHandle(0);
            final Thread reader = new Thread(() -> pool.retain(shared)); // e.g. an offload copier keeping the page
            reader.start();
            reader.join(); // happens-before the next append
            final long[] kept = {shared, 0};
            for (Sequence[] batch : new Sequence[][] {null, {s}}) {
                final int before = s.pageIndex(0);
                if (batch == null) {
                    s.append(1);
                } else {
                    kept[1] = s.pageHandle(0);
                    pool.retain(kept[1]); // on this thread, after the copy above found its new page unshared
                    assertEquals(1, pool.appendEach(batch, 1, 1));
                }
                assertNotEquals(before, s.pageIndex(0), "a page someone else holds a reference to was written in place");
                assertEquals(tag(7, 1), readSequence(s, 1), "the copy holds the tokens written before");
                writeSequence(s, 7, s.tokenCount() - 1, s.tokenCount());
            }
            assertEquals(tag(7, 0), TokenTags.read(pool.page(shared), pool.layout(), 0));
            for (long h : kept) {
                assertEquals(1, pool.refcountOfSlot(PageHandle.slot(h)), "the retained pages keep only the retainer's reference");
                pool.release(h);
            }
            s.close();
            assertEquals(16, pool.verifyAccounting().free());
        }
    }

    @Test
    void decodeStepsAllocateNothing() {
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        final int n = 16;
        try (KvPool pool = TestPools.builder(n * 16 + 4).build()) {
            final Sequence[] batch = new Sequence[n];
            for (int i = 0; i < n; i++) {
                batch[i] = pool.admit(1 + i, 16 * TPP - 1 - i).sequence();
                batch[i].append(1 + i); // staggered: some sequence needs a page in most steps
            }
            final int steps = 20_000, warmup = 15_000;
            long allocated = 0;
            int pages = 0;
            threads.getCurrentThreadAllocatedBytes();
            for (int step = 0; step < steps; step++) {
                for (Sequence s : batch) {
                    if (s.tokenCount() == 16 * TPP) {
                        s.truncate(0); // finished: a new request in its place
                    }
                }
                final long before = threads.getCurrentThreadAllocatedBytes();
                final int got = pool.appendEach(batch, n, 1);
                if (step >= warmup) {
                    allocated += threads.getCurrentThreadAllocatedBytes() - before;
                    pages += got;
                }
            }
            assertTrue(pages > (steps - warmup) * n / TPP / 2, pages + " pages: the steps did allocate");
            assertTrue(allocated < steps - warmup, allocated + " bytes allocated by " + (steps - warmup) + " steps");
            for (Sequence s : batch) {
                s.close();
            }
        }
    }

    @Test
    void aStepThatComesUpShortTakesBackTheTokensItCountedForSequencesWithRoom() {
        try (KvPool pool = TestPools.builder(8).build()) {
            final Sequence roomy = pool.admit(2, 0).sequence();
            final Sequence a = pool.admit(TPP, 0).sequence();
            final Sequence b = pool.admit(TPP, 0).sequence();
            final Sequence big = pool.admit(4 * TPP, 0).sequence(); // 7 of 8 pages reserved: 1 unreserved
            roomy.append(1); // room for TPP - 1 more tokens: the plan counts its token at once
            a.append(TPP);
            b.append(TPP);
            final Sequence[] batch = {roomy, a, b};
            final List<View> before = views(batch);
            assertEquals(-1, pool.appendEach(batch, 3, 1), "a and b need a page each beyond their reservations; 1 is free");
            assertEquals(before, views(batch), "roomy's token, counted in the plan, must be taken back");
            roomy.close();
            a.close();
            b.close();
            big.close();
        }
    }

    @Test
    void aClosedPoolOrANegativeCountIsRefusedEvenForAnEmptyBatch() {
        final KvPool pool = TestPools.builder(8).build();
        final Sequence s = pool.admit(1, TPP).sequence();
        s.append(1); // room in its page: a step would need no lock
        assertThrows(IllegalArgumentException.class, () -> pool.appendEach(new Sequence[0], 0, -1));
        pool.close();
        assertThrows(IllegalStateException.class, () -> pool.appendEach(new Sequence[] {s}, 1, 1));
        assertThrows(IllegalStateException.class, () -> pool.appendEach(new Sequence[0], 0, 1));
        assertEquals(1, s.tokenCount());
    }
}
