package io.kvpool;

import io.kvpool.storage.FillMode;

import java.util.ArrayList;
import java.util.List;

/**
 * Run in a child JVM with a small heap ({@link OomRecoveryTest}): exhausts the heap for real, runs one pool operation,
 * frees the heap and prints what the pool holds afterwards.
 */
final class OomRecoveryMain {

    static List<Object> filler;
    /** Heap the filler's list cannot take (its growth fails first): a chain that needs no growth. */
    static Object[] chain;
    static int fills, fillsThrown;

    /** Fills the heap down to objects of 16 bytes: the next allocation of any size fails. */
    static void exhaust() {
        filler = new ArrayList<>(1 << 16);
        for (int size : new int[] {1 << 20, 1 << 16, 1 << 12, 1 << 8, 16, 4, 1, 0}) {
            try {
                while (true) {
                    filler.add(new byte[size]);
                }
            } catch (OutOfMemoryError e) {
                // next size down
            }
        }
        try {
            while (true) {
                filler.add(new Object());
            }
        } catch (OutOfMemoryError e) {
            // full
        }
    }

    static void release() {
        filler = null;
        System.gc();
    }

    public static void main(String[] args) throws Exception {
        final String what = args[0];
        if (what.equals("evictMany")) {
            evictMany();
            return;
        }
        if (what.equals("retainAll")) {
            retainAll();
            return;
        }
        if (what.equals("tryReserve")) {
            tryReserve();
            return;
        }
        final int tpp = TestPools.SMALL.tokensPerPage();
        try (KvPool pool = KvPool.builder(TestPools.SMALL).pages(8).maxContextTokens(8L * tpp).fillMode(FillMode.ZERO)
            .storage((l, n) -> new ForwardingStorage(l, n) {
                @Override
                public void fill(int page, FillMode mode) {
                    fills++;
                    try {
                        d.fill(page, mode);
                    } catch (Throwable t) {
                        fillsThrown++;
                        throw t;
                    }
                }
            }).build()) {
            // warm-up: every class of the paths below loaded, on another sequence
            try (Sequence w = pool.admit(2 * tpp, 0).sequence()) {
                w.append(2 * tpp);
                w.truncate(tpp);
                w.append(tpp);
            }
            Throwable thrown = null;
            Sequence seq;
            switch (what) {
                case "close" -> {
                    seq = pool.admit(2 * tpp, 0).sequence();
                    seq.append(2 * tpp);
                    exhaust();
                    try {
                        seq.close();
                    } catch (Throwable t) {
                        thrown = t;
                    }
                    release();
                    seq.close(); // a close that threw before it changed anything is tried again; after one that did, a no-op
                }
                case "forkClose" -> {
                    seq = pool.admit(2 * tpp, 0).sequence();
                    seq.append(2 * tpp);
                    final Sequence child = seq.fork();
                    exhaust();
                    try {
                        child.close();
                        seq.close();
                    } catch (Throwable t) {
                        thrown = t;
                    }
                    release();
                    child.close();
                    seq.close();
                }
                case "truncate" -> {
                    seq = pool.admit(2 * tpp, 0).sequence();
                    seq.append(2 * tpp);
                    exhaust();
                    try {
                        seq.truncate(0);
                    } catch (Throwable t) {
                        thrown = t;
                    }
                    release();
                    seq.close();
                }
                case "evict" -> {
                    // an append that takes 6 plain pages and evicts the 2 cached ones of a published prefix
                    seq = pool.admit(6 * tpp, 0).sequence();
                    seq.append(8 * tpp); // warm-up: page tables and scratch for 8 pages, 2 past the reservation
                    seq.truncate(0);
                    final int[] ids = new int[2 * tpp];
                    for (int i = 0; i < ids.length; i++) {
                        ids[i] = 100 + i;
                    }
                    try (Sequence p = pool.admit(ids, 0, 7L).sequence()) {
                        p.append(ids.length);
                        p.publish(ids, 7L);
                    }
                    System.out.println("before: cachedFree=" + pool.snapshot().cachedFree() + " reserved=" + pool.snapshot().reserved());
                    exhaust();
                    fills = 0;
                    try {
                        seq.append(8 * tpp);
                    } catch (Throwable t) {
                        thrown = t;
                    }
                    release();
                    System.out.println("fills during the append=" + fills + ", of which threw=" + fillsThrown);
                    System.out.println("seq pages=" + seq.pageCount() + " reservedPages=" + seq.reservedPages());
                    seq.close();
                }
                default -> throw new IllegalArgumentException(what);
            }
            report(pool, thrown);
        }
    }

    /**
     * An append that takes 8 plain pages and evicts 100,000 cached ones: the list of evicted pages to fill is copied
     * after every page of the step was taken, and that copy (400 KB) is what fails.
     */
    private static void evictMany() {
        final int cached = 100_000, plain = 8;
        final KvLayout oneToken = new KvLayout(1, 1, 1, DType.FP8, 1);
        try (KvPool pool = KvPool.builder(oneToken).pages(cached + plain).maxContextTokens(cached + plain)
            .fillMode(FillMode.ZERO).reservationPolicy(ReservationPolicy.PROMPT_ONLY).build()) {
            final int[] ids = new int[cached];
            for (int i = 0; i < cached; i++) {
                ids[i] = i + 1;
            }
            final Sequence seq = pool.admit(1, 0).sequence();
            publish(pool, ids);
            seq.append(cached + plain); // warm-up: the fill list and the sequence's tables at full size
            seq.truncate(0);
            publish(pool, ids);
            exhaust();
            Throwable thrown = null;
            try {
                seq.append(cached + plain);
            } catch (Throwable t) {
                thrown = t;
            }
            release();
            System.out.println("seq pages=" + seq.pageCount() + " reservedPages=" + seq.reservedPages());
            seq.close();
            report(pool, thrown);
        }
    }

    private static void publish(KvPool pool, int[] ids) {
        try (Sequence p = pool.admit(ids, 0, 7L).sequence()) {
            p.append(ids.length - p.tokenCount());
            p.publish(ids, 7L);
        }
    }

    /** retainAll of a current and a stale handle: refused, and its refusal is built with the heap full. */
    private static void retainAll() {
        try (KvPool pool = TestPools.pool(8)) {
            final long current = pool.tryAllocate();
            final long stale = pool.tryAllocate();
            pool.release(stale);
            final long[] both = {current, stale};
            try {
                pool.retainAll(both, 0, 2); // warm-up: the same refusal with room on the heap
            } catch (StaleHandleException expected) {
                // refused
            }
            exhaust();
            Throwable thrown = null;
            try {
                pool.retainAll(both, 0, 2);
            } catch (Throwable t) {
                thrown = t;
            }
            release();
            System.out.println("refcount of the current page after the refused retainAll="
                + pool.refcountOfSlot(PageHandle.slot(current)) + " (1: all or none)");
            pool.release(current);
            report(pool, thrown);
        }
    }

    /** tryReserve with the heap full: a decision whose record cannot be made must leave nothing reserved. */
    private static void tryReserve() {
        final int tpp = TestPools.SMALL.tokensPerPage();
        try (KvPool pool = TestPools.pool(8)) {
            pool.cancelReservation(pool.tryReserve(2 * tpp, 0)); // warm-up: every class of the path loaded
            exhaust();
            try {
                while (true) {
                    chain = new Object[] {chain}; // the last bytes the list could not take
                }
            } catch (OutOfMemoryError e) {
                // full
            }
            Throwable thrown = null;
            long id = 0;
            try {
                id = pool.tryReserve(2 * tpp, 0);
            } catch (Throwable t) {
                thrown = t;
            }
            chain = null;
            release();
            if (id > 0) {
                pool.cancelReservation(id);
            }
            report(pool, thrown);
        }
    }

    private static void report(KvPool pool, Throwable thrown) {
        final PoolSnapshot s = pool.snapshot();
        System.out.println("thrown=" + thrown);
        if (thrown != null) {
            for (StackTraceElement e : thrown.getStackTrace()) {
                if (e.getClassName().startsWith("io.kvpool")) {
                    System.out.println("  at " + e);
                }
            }
        }
        System.out.println("RESULT owned=" + s.owned() + " free=" + s.free() + " reserved=" + s.reserved()
            + " openSequences=" + s.openSequences());
    }
}
