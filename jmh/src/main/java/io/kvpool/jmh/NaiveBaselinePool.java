package io.kvpool.jmh;

import io.kvpool.KvLayout;
import io.kvpool.PrefixHash;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;

/**
 * The naive baseline of the pool benchmarks: what a straightforward page pool looks like. Every method is
 * {@code synchronized}; free pages are an {@link ArrayDeque}{@code <Integer>} used as a LIFO stack;
 * refcounts are a {@link HashMap}{@code <Integer, Integer>} (a page is in use iff it has an entry);
 * the prefix index is a {@link HashMap}{@code <Long, Integer>} from chained page hash to page.
 *
 * <p>It performs the <em>same operations</em> as {@link io.kvpool.KvPool} so the benchmarks compare like
 * with like, and it is written plainly, not pessimised:
 * <ul>
 *   <li>alloc: admission check ({@code free - reserved ≥ 1}), pop, refcount = 1;
 *       free: refcount − 1, and at zero remove the entry, unpublish, fill the page (same
 *       {@link PageStorage#fill} call as the pool, when a fill mode other than NONE is configured), push;</li>
 *   <li>reserve/admit: the same decision (context too long / exceeds pool / retry later) by counting
 *       reserved pages; a reservation id maps to its page count in a {@code HashMap<Long, Integer>};</li>
 *   <li>fork: refcount + 1 for every page of the block table, plus the same growth reservation the pool
 *       makes for the child; close: refcount − 1 for every page (last page first) and the reservation back;</li>
 *   <li>prefix lookup: the same {@link PrefixHash#of} chained hash per page, a {@code HashMap<Long,Integer>}
 *       lookup, and the same full-key verification (parent hash, salt and every token id) before sharing a page.</li>
 * </ul>
 * What it leaves out, in its favour: generation-tagged handles and their checks (pages are plain ints),
 * the lock-free release path, and the LRU of cached free pages (a published page whose refcount reaches
 * zero is simply unpublished). Not a reference implementation of anything but a benchmark baseline.
 */
public final class NaiveBaselinePool implements AutoCloseable {

    /** Rejection codes, as {@link io.kvpool.Admission}'s. */
    public static final long CONTEXT_TOO_LONG = -1, EXCEEDS_POOL = -2, RETRY_LATER = -3;

    private final int capacity;
    private final int tokensPerPage;
    private final long maxContextTokens;
    private final PageStorage storage; // null when fill is NONE: nothing to write
    private final FillMode fill;

    private final ArrayDeque<Integer> free = new ArrayDeque<>();
    private final HashMap<Integer, Integer> refcounts = new HashMap<>();
    private final HashMap<Long, Integer> reservations = new HashMap<>();
    private final HashMap<Long, Integer> prefixIndex = new HashMap<>();
    // the full key of each published page, checked before sharing it (indexed by page)
    private final boolean[] published;
    private final long[] pageHash;
    private final long[] pageParent;
    private final long[] pageSalt;
    private final int[][] pageTokens;
    private long reserved;
    private long nextReservationId;

    /**
     * @param layout           page layout (only {@code tokensPerPage} matters unless {@code fill} writes pages)
     * @param pages            number of pages
     * @param maxContextTokens max tokens of one request
     * @param fill             what a freed page is filled with; anything but NONE allocates host storage for it
     */
    public NaiveBaselinePool(KvLayout layout, int pages, long maxContextTokens, FillMode fill) {
        this.capacity = pages;
        this.tokensPerPage = layout.tokensPerPage();
        this.maxContextTokens = maxContextTokens;
        this.fill = fill;
        this.storage = fill == FillMode.NONE ? null : HostPageStorage.allocate(layout, pages);
        for (int p = 0; p < pages; p++) {
            free.addLast(p); // page 0 on top, like the pool's stack
        }
        this.published = new boolean[pages];
        this.pageHash = new long[pages];
        this.pageParent = new long[pages];
        this.pageSalt = new long[pages];
        this.pageTokens = new int[pages][];
    }

    // ---- single pages ----

    /** @return a page, or -1 if no free unreserved page is left */
    public synchronized int allocate() {
        if (free.size() - reserved < 1) {
            return -1;
        }
        final Integer page = free.pop();
        refcounts.put(page, 1);
        return page;
    }

    /** Adds a reference. */
    public synchronized void retain(int page) {
        final Integer rc = refcounts.get(page);
        if (rc == null) {
            throw new IllegalStateException("page " + page + " is free");
        }
        refcounts.put(page, rc + 1);
    }

    /** Drops a reference. @return whether the page became free */
    public synchronized boolean release(int page) {
        return releaseLocked(page);
    }

    private boolean releaseLocked(int page) {
        final Integer rc = refcounts.get(page);
        if (rc == null) {
            throw new IllegalStateException("page " + page + " is already free");
        }
        if (rc > 1) {
            refcounts.put(page, rc - 1);
            return false;
        }
        refcounts.remove(page);
        if (published[page]) {
            published[page] = false;
            prefixIndex.remove(pageHash[page]);
        }
        if (storage != null) {
            storage.fill(page, fill);
        }
        free.push(page);
        return true;
    }

    // ---- admission ----

    private long decideLocked(long tokens) {
        if (tokens > maxContextTokens) {
            return CONTEXT_TOO_LONG;
        }
        final long needed = (tokens + tokensPerPage - 1) / tokensPerPage;
        if (needed > capacity) {
            return EXCEEDS_POOL;
        }
        if (needed > free.size() - reserved) {
            return RETRY_LATER;
        }
        reserved += needed;
        return needed;
    }

    /** @return a reservation id ({@code > 0}) or a negative rejection code */
    public synchronized long tryReserve(int promptTokens, int maxNewTokens) {
        final long needed = decideLocked((long) promptTokens + maxNewTokens);
        if (needed < 0) {
            return needed;
        }
        final long id = ++nextReservationId;
        reservations.put(id, (int) needed);
        return id;
    }

    /** Returns a reservation's pages. */
    public synchronized void cancelReservation(long id) {
        final Integer pages = reservations.remove(id);
        if (pages == null) {
            throw new IllegalArgumentException("unknown reservation " + id);
        }
        reserved -= pages;
    }

    /** The outcome of {@link #admit}: a code ({@code > 0} pages reserved, or a rejection) and the sequence. */
    public record Admitted(long code, Seq sequence) {
    }

    /** Admits a request, reserving pages for {@code prompt + maxNew} tokens. */
    public synchronized Admitted admit(int promptTokens, int maxNewTokens) {
        final long tokens = (long) promptTokens + maxNewTokens;
        final long needed = decideLocked(tokens);
        return new Admitted(needed, needed < 0 ? null : new Seq((int) needed, tokens));
    }

    /**
     * Admits a request and attaches the longest cached prefix of its prompt (at most
     * {@code (prompt − 1) / tokensPerPage} pages), returning the reservation of each shared page.
     */
    public synchronized Admitted admit(int[] promptTokenIds, int maxNewTokens, long salt) {
        final int prompt = promptTokenIds.length;
        final long tokens = (long) prompt + maxNewTokens;
        final long needed = decideLocked(tokens);
        if (needed < 0) {
            return new Admitted(needed, null);
        }
        final Seq seq = new Seq((int) needed, tokens);
        final int maxPages = (prompt - 1) / tokensPerPage;
        long parent = PrefixHash.ROOT;
        int matched = 0;
        while (matched < maxPages) {
            final int from = matched * tokensPerPage;
            final long h = PrefixHash.of(parent, salt, promptTokenIds, from, tokensPerPage);
            final Integer page = prefixIndex.get(h);
            if (page == null || pageParent[page] != parent || pageSalt[page] != salt
                || !Arrays.equals(pageTokens[page], 0, tokensPerPage, promptTokenIds, from, from + tokensPerPage)) {
                break;
            }
            final Integer rc = refcounts.get(page);
            if (rc == null) {
                break; // cannot happen: a page is unpublished when freed
            }
            refcounts.put(page, rc + 1);
            seq.pages.add(page);
            seq.reservedPages--; // shared, not taken from the free pages
            reserved--;
            parent = h;
            matched++;
        }
        seq.tokens = matched * tokensPerPage;
        return new Admitted(needed, seq);
    }

    synchronized void appendLocked(Seq seq, int n) {
        final long target = seq.tokens + (long) n;
        final int newPages = (int) ((target + tokensPerPage - 1) / tokensPerPage - seq.pages.size());
        if (newPages > seq.reservedPages + (free.size() - reserved)) {
            throw new IllegalStateException("pool exhausted");
        }
        for (int i = 0; i < newPages; i++) {
            final Integer page = free.pop();
            refcounts.put(page, 1);
            seq.pages.add(page);
            if (seq.reservedPages > 0) {
                seq.reservedPages--;
                reserved--;
            }
        }
        seq.tokens = (int) target;
    }

    synchronized Seq forkLocked(Seq parent) {
        final int partial = parent.tokens % tokensPerPage != 0 ? 1 : 0;
        final long growth = Math.max(0, (parent.admittedTokens + tokensPerPage - 1) / tokensPerPage - parent.pages.size());
        if (partial + growth + partial > free.size() - reserved) {
            throw new IllegalStateException("pool exhausted");
        }
        reserved += partial + growth + partial;
        parent.reservedPages += partial;
        for (Integer page : parent.pages) {
            refcounts.put(page, refcounts.get(page) + 1);
        }
        final Seq child = new Seq((int) (growth + partial), parent.admittedTokens);
        child.pages.addAll(parent.pages);
        child.tokens = parent.tokens;
        return child;
    }

    synchronized void publishLocked(Seq seq, int[] tokenIds, long salt) {
        final int full = seq.tokens / tokensPerPage;
        long parent = PrefixHash.ROOT;
        for (int i = 0; i < full; i++) {
            final int from = i * tokensPerPage;
            final long h = PrefixHash.of(parent, salt, tokenIds, from, tokensPerPage);
            final int page = seq.pages.get(i);
            if (!published[page] && !prefixIndex.containsKey(h)) {
                published[page] = true;
                pageHash[page] = h;
                pageParent[page] = parent;
                pageSalt[page] = salt;
                pageTokens[page] = Arrays.copyOfRange(tokenIds, from, from + tokensPerPage);
                prefixIndex.put(h, page);
            }
            parent = h;
        }
    }

    synchronized void closeLocked(Seq seq) {
        for (int i = seq.pages.size() - 1; i >= 0; i--) {
            releaseLocked(seq.pages.get(i));
        }
        seq.pages.clear();
        reserved -= seq.reservedPages;
        seq.reservedPages = 0;
    }

    synchronized void truncateToZeroLocked(Seq seq) {
        for (int i = seq.pages.size() - 1; i >= 0; i--) {
            releaseLocked(seq.pages.get(i));
        }
        seq.pages.clear();
        seq.tokens = 0;
        final long want = (seq.admittedTokens + tokensPerPage - 1) / tokensPerPage;
        final long add = Math.max(0, Math.min(want - seq.reservedPages, free.size() - reserved));
        reserved += add;
        seq.reservedPages += (int) add;
    }

    /** @return pages neither in use nor reserved, for the benchmarks' sanity checks */
    public synchronized long freeUnreserved() {
        return free.size() - reserved;
    }

    /** @return pages on the free list */
    public synchronized int freePages() {
        return free.size();
    }

    @Override
    public synchronized void close() {
        if (storage != null) {
            storage.close();
        }
    }

    /** A request's block table: a list of boxed page numbers, a token count and a reservation. */
    public final class Seq implements AutoCloseable {
        final ArrayList<Integer> pages = new ArrayList<>();
        final long admittedTokens;
        int reservedPages;
        int tokens;
        private boolean closed;

        Seq(int reservedPages, long admittedTokens) {
            this.reservedPages = reservedPages;
            this.admittedTokens = admittedTokens;
        }

        /** Grows by {@code n} tokens, allocating pages from the reservation first. */
        public void append(int n) {
            appendLocked(this, n);
        }

        /** @return a sequence sharing every page (refcount + 1 each) with its own growth reservation */
        public Seq fork() {
            return forkLocked(this);
        }

        /** Publishes the full pages to the prefix index. */
        public void publish(int[] tokenIds, long salt) {
            publishLocked(this, tokenIds, salt);
        }

        /** Drops every token and page, keeping the reservation for the admitted length (a finished request's slot reused). */
        public void truncateToZero() {
            truncateToZeroLocked(this);
        }

        /** Copies the block table into {@code dst[offset ..]}, unboxing each page. @return pages copied */
        public int copyBlockTable(int[] dst, int offset) {
            synchronized (NaiveBaselinePool.this) {
                for (int i = 0; i < pages.size(); i++) {
                    dst[offset + i] = pages.get(i);
                }
                return pages.size();
            }
        }

        /** @return tokens held */
        public int tokenCount() {
            return tokens;
        }

        /** @return pages held */
        public int pageCount() {
            return pages.size();
        }

        /** Releases every page (last first) and the unused reservation. Idempotent. */
        @Override
        public void close() {
            if (!closed) {
                closed = true;
                closeLocked(this);
            }
        }
    }
}
