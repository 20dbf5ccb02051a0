package io.kvpool;


import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A {@link KvPool} driven one operation at a time next to a simple model of what it must do. Each
 * {@link Op} is applied to both; {@link #check()} compares them and throws a {@link Violation} naming
 * the broken rule. Used by the stateful properties and by the tests proving those properties can fail.
 *
 * <p>The model knows, per slot: the generation of its current tenancy, its refcount, its writer pin and
 * its published prefix key; per live sequence: token ids, which sequence wrote each token's KV, its
 * handles and how it got each one (fresh allocation, fork, prefix attach), its reservation. Which free
 * slot the allocator picks is not predicted, only checked (it must be free, plain before cached).
 *
 * <p>Every token a sequence appends gets a tag written into all its K and V vectors: the writer's id
 * and the token's position. Reads must find the tag of whoever the model says wrote that token.
 */
final class PoolHarness implements AutoCloseable {

    /** Which rule a {@link Violation} broke. */
    enum Kind {
        /** {@link KvPool#verifyAccounting()} failed, or refcounts/page counts do not add up. */
        ACCOUNTING,
        /** Two live sequences share a page without fork or prefix-cache provenance. */
        SHARING,
        /** A sequence reads, for one of its tokens, KV that another sequence wrote (or nothing). */
        ISOLATION,
        /** An append wrote into a partial last page that is shared or published instead of copying it first. */
        COPY_ON_WRITE,
        /** A page's unwritten tokens hold KV of a previous tenant outside the sequence's lineage. */
        LEFTOVER,
        /** A published prefix page's bytes changed after publication. */
        PUBLISHED_IMMUTABLE,
        /** A handle whose page was freed (and maybe reused) was not refused. */
        STALE_HANDLE,
        /** The pool's observable behaviour differs from the model's prediction. */
        MODEL
    }

    /** A broken rule. */
    static final class Violation extends AssertionError {
        private static final long serialVersionUID = 1L;
        final Kind kind;

        Violation(Kind kind, String message, Throwable cause) {
            super(kind + ": " + message, cause);
            this.kind = kind;
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Operations (plain data, so jqwik can generate and shrink them; "pick" selects among live things)

    sealed interface Op permits Admit, Append, Truncate, Fork, Publish, Close, Allocate, Loose, StaleUse {
    }

    /** Admit a prompt of {@code prompt} tokens of document {@code doc}; with a prefix lookup under the tenant's salt, or plain. Then prefill the prompt. */
    record Admit(int doc, int prompt, int maxNew, int tenant, boolean prefix) implements Op {
    }

    /** Append {@code n} tokens (continuing the document, or diverging from it). */
    record Append(int pick, int n, boolean diverge) implements Op {
    }

    /** Truncate to {@code tokenCount × permille / 1000} tokens (1001: one token too many, refused). */
    record Truncate(int pick, int permille) implements Op {
    }

    record Fork(int pick) implements Op {
    }

    /** Publish under the sequence's own salt ({@code ownSalt}) or the tenant's (refused if it differs from the sequence's). */
    record Publish(int pick, int tenant, boolean ownSalt) implements Op {
    }

    record Close(int pick) implements Op {
    }

    /** {@link KvPool#tryAllocate()} a loose page and tag it. */
    record Allocate() implements Op {
    }

    /** Apply a handle event (retain, release, pin, commit, drain, quarantine, ...) to a loose page. */
    record Loose(int pick, SlotEvent event) implements Op {
    }

    /** Use a handle whose page was freed: must be refused. how: 0 release, 1 retain, 2 page, 3 pinWriter. */
    record StaleUse(int pick, int how) implements Op {
    }

    // ---------------------------------------------------------------------------------------------

    static final long[] SALTS = {PrefixHash.SHARED_SALT, 0x7E11A17L, 0x7E11A27L};
    static final int DOCS = 3;
    private static final int LOOSE_WRITER = 1 << 20;
    private static final int DEAD_HANDLES_KEPT = 24;
    private static final ValueLayout.OfLong LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final long CANARY_READ = Long.MIN_VALUE;
    private static final long GARBAGE_READ = Long.MIN_VALUE + 1;

    enum How { ALLOC, FORK, ATTACH }

    /** How a sequence got a page: allocated it, inherited it by fork (from {@code inherited}), or attached it from the prefix cache under {@code salt}. */
    record Acq(How how, int seq, long salt, Acq inherited) {
        Acq root() {
            Acq a = this;
            while (a.how == How.FORK) {
                a = a.inherited;
            }
            return a;
        }
    }

    record Key(long salt, List<Integer> tokens) {
    }

    /** Model of one sequence. */
    final class Seq {
        final int id;
        final Sequence seq;
        final int doc;
        final List<Integer> ids = new ArrayList<>();
        final List<Integer> writers = new ArrayList<>();
        final List<Long> handles = new ArrayList<>();
        final List<Acq> acq = new ArrayList<>();
        final Set<Integer> heritage = new HashSet<>();
        int reserved;
        long admitted;
        boolean hasSalt;
        long salt;
        int published;

        Seq(int id, Sequence seq, int doc) {
            this.id = id;
            this.seq = seq;
            this.doc = doc;
            heritage.add(id);
        }

        int tokens() {
            return ids.size();
        }

        @Override
        public String toString() {
            return "s" + id;
        }
    }

    /** Model of a loose page (from {@link KvPool#tryAllocate()}). */
    record LoosePage(int id, long handle) {
    }

    final KvPool pool;
    final KvLayout layout;
    final int tpp;
    final int capacity;
    final long maxContext;

    // slots
    private final long[] gen;
    private final int[] refs;
    private final SlotState[] pin;
    private final Key[] pubKey;
    private final int[][] pubWriters;
    private final int[] pubBase;
    private final Map<Key, Integer> index = new HashMap<>();

    // things
    final List<Seq> live = new ArrayList<>();
    final List<LoosePage> loose = new ArrayList<>();
    final ArrayDeque<Long> dead = new ArrayDeque<>();
    private int nextId = 1;
    private int nextLooseId = 1;
    private int divergeCounter;

    // expected counters
    private long allocations;
    private long prefixHits;
    private long evictions;
    private long rejectedContextTooLong;
    private long retryLater;
    private long staleRefused;
    private long quarantineEvents;

    private final List<String> log = new ArrayList<>();
    /** How often interesting things happened (for the properties' coverage statistics). */
    final Map<String, Integer> events = new java.util.TreeMap<>();

    PoolHarness(KvPool pool) {
        this.pool = pool;
        this.layout = pool.layout();
        this.tpp = layout.tokensPerPage();
        this.capacity = pool.capacity();
        this.maxContext = pool.maxContextTokens();
        if (layout.bytesPerTokenVector() < 16) {
            throw new IllegalArgumentException("tags need ≥ 16-byte vectors: " + layout);
        }
        gen = new long[capacity];
        refs = new int[capacity];
        pin = new SlotState[capacity];
        pubKey = new Key[capacity];
        pubWriters = new int[capacity][];
        pubBase = new int[capacity];
    }

    static int docToken(int doc, int pos, int tpp) {
        return switch (doc) {
            case 0 -> 1 + pos;
            case 1 -> pos < tpp ? 1 + pos : 5000 + pos; // shares its first page with doc 0
            default -> 9000 + pos;
        };
    }

    // ---------------------------------------------------------------------------------------------
    // Applying operations

    void apply(Op op) {
        switch (op) {
            case Admit a -> admit(a);
            case Append a -> {
                final Seq s = pick(a.pick());
                if (s == null) {
                    return;
                }
                final int[] ids = new int[a.n()];
                for (int i = 0; i < ids.length; i++) {
                    ids[i] = a.diverge() ? 20000 + (divergeCounter++ % 5) : docToken(s.doc, s.tokens() + i, tpp);
                }
                log("append(" + s + ", " + a.n() + (a.diverge() ? ", diverging ids" : "") + ")");
                append(s, ids);
            }
            case Truncate t -> truncate(t);
            case Fork f -> fork(f);
            case Publish p -> publish(p);
            case Close c -> {
                final Seq s = pick(c.pick());
                if (s != null) {
                    close(s);
                }
            }
            case Allocate ignored -> allocateLoose();
            case Loose l -> looseEvent(l);
            case StaleUse u -> staleUse(u);
        }
    }

    private Seq pick(int pick) {
        return live.isEmpty() ? null : live.get(Math.floorMod(pick, live.size()));
    }

    private void admit(Admit a) {
        final int prompt = Math.max(1, a.prompt());
        final int[] ids = new int[prompt];
        for (int i = 0; i < prompt; i++) {
            ids[i] = docToken(a.doc(), i, tpp);
        }
        final long salt = SALTS[Math.floorMod(a.tenant(), SALTS.length)];
        final long tokens = (long) prompt + a.maxNew();
        final long needed = layout.pagesFor(tokens);
        final long available = free() - reserved();
        final Admission.Decision expected = tokens > maxContext ? Admission.Decision.REJECTED_CONTEXT_TOO_LONG
            : needed > available ? Admission.Decision.RETRY_LATER : Admission.Decision.ADMITTED;
        final Admission adm = get("admit", () -> a.prefix() ? pool.admit(ids, a.maxNew(), salt) : pool.admit(prompt, a.maxNew()));
        final int id = nextId;
        log((adm.admitted() ? "s" + id + " = " : "") + "admit(doc " + a.doc() + ", prompt " + prompt + ", maxNew " + a.maxNew()
            + (a.prefix() ? ", salt of tenant " + Math.floorMod(a.tenant(), SALTS.length) : ", plain") + ") -> " + adm.decision());
        if (adm.decision() != expected) {
            throw fail(Kind.MODEL, "admission decided " + adm + ", model expected " + expected + " (needed " + needed
                + ", free " + free() + ", reserved " + reserved() + ")");
        }
        switch (expected) {
            case REJECTED_CONTEXT_TOO_LONG -> rejectedContextTooLong++;
            case RETRY_LATER -> {
                retryLater++;
                event("admission retry later");
            }
            default -> { }
        }
        if (!adm.admitted()) {
            return;
        }
        nextId++;
        final Seq s = new Seq(id, adm.sequence(), a.doc());
        s.reserved = (int) needed;
        s.admitted = tokens;
        live.add(s);
        if (a.prefix()) {
            s.hasSalt = true;
            s.salt = salt;
            attachExpected(s, ids, salt);
        }
        final int[] rest = new int[prompt - s.tokens()];
        System.arraycopy(ids, s.tokens(), rest, 0, rest.length);
        append(s, rest);
    }

    /** Predicts which cached pages admission attaches, checks the sequence got exactly those. */
    private void attachExpected(Seq s, int[] ids, long salt) {
        final int maxPages = (ids.length - 1) / tpp;
        for (int m = 0; m < maxPages; m++) {
            final Key key = key(salt, ids, (m + 1) * tpp);
            final Integer slot = index.get(key);
            if (slot == null) {
                break;
            }
            if (refs[slot] > 0 && pin[slot] == null) {
                refs[slot]++; // shared with whoever holds it
                event("prefix page shared");
            } else if (isFree(slot)) {
                evictOrRevive(slot, false); // revived from the cached free pages
                event("prefix page revived");
            } else {
                break;
            }
            if (s.reserved > 0) {
                s.reserved--;
            }
            prefixHits++;
            s.handles.add(PageHandle.of(pool.poolId(), slot, gen[slot]));
            s.acq.add(new Acq(How.ATTACH, s.id, salt, null));
            for (int t = 0; t < tpp; t++) {
                s.ids.add(ids[m * tpp + t]);
                s.writers.add(pubWriters[slot][t]);
                s.heritage.add(pubWriters[slot][t]);
            }
            s.published = m + 1;
        }
        log("  attached " + s.handles.size() + " cached page(s)");
        for (int i = s.handles.size(); i < s.seq.pageCount(); i++) {
            final int slot = s.seq.pageIndex(i);
            if (pubKey[slot] == null || pubKey[slot].salt() != salt || !pubKey[slot].tokens().equals(key(salt, ids, (i + 1) * tpp).tokens())) {
                throw fail(Kind.SHARING, s + " (salt " + salt + ") attached slot " + slot + " as page " + i + ", which is "
                    + (pubKey[slot] == null ? "not a published prefix" : "published under salt " + pubKey[slot].salt()
                        + (pubKey[slot].salt() == salt ? " for other tokens" : "")) + ": " + holders(slot));
            }
        }
        if (s.seq.tokenCount() != s.tokens() || s.seq.pageCount() != s.handles.size()) {
            throw fail(Kind.MODEL, s + " attached " + s.seq.tokenCount() + " tokens in " + s.seq.pageCount() + " pages, model expected "
                + s.tokens() + " tokens in " + s.handles.size());
        }
        for (int i = 0; i < s.handles.size(); i++) {
            if (s.seq.pageHandle(i) != s.handles.get(i)) {
                throw fail(Kind.MODEL, s + " attached " + PageHandle.toString(s.seq.pageHandle(i)) + " as page " + i + ", model expected "
                    + PageHandle.toString(s.handles.get(i)));
            }
        }
    }

    private void append(Seq s, int[] newIds) {
        final int n = newIds.length;
        final int tc = s.tokens();
        final Sequence q = s.seq;
        if (tc + (long) n > maxContext) {
            expectThrows(IllegalArgumentException.class, () -> q.append(n), "append past the max context");
            expectUnchanged(s, "refused append");
            return;
        }
        if (n == 0) {
            call("append(0)", () -> q.append(0));
            return;
        }
        final int pages = s.handles.size();
        final boolean partial = tc % tpp != 0;
        final int lastSlot = partial ? PageHandle.slot(s.handles.get(pages - 1)) : -1;
        final boolean lastShared = partial && refs[lastSlot] > 1;
        final boolean lastPublished = partial && pubKey[lastSlot] != null;
        // copy-on-write is required for a shared or published partial last page, and for nothing else
        final boolean required = lastShared || lastPublished;
        final boolean allowed = required;
        final int newPages = (int) (layout.pagesFor(tc + (long) n) - pages);
        final int plainBefore = plainFree();
        final long available = free() - reserved();
        try {
            q.append(n);
        } catch (PoolExhaustedException e) {
            log("  -> PoolExhaustedException");
            event("append exhausted");
            if (!exhausts(s, newPages, allowed, available)) {
                throw fail(Kind.MODEL, s + " append of " + n + " refused although " + available + " free unreserved page(s) and "
                    + s.reserved + " reserved suffice for " + newPages + " new page(s)" + (allowed ? " and a copy" : ""), e);
            }
            expectUnchanged(s, "exhausted append");
            return;
        } catch (RuntimeException e) {
            throw fail(Kind.MODEL, "append threw unexpectedly: " + e, e);
        }
        if (q.pageCount() != pages + newPages) {
            throw fail(Kind.MODEL, s + " has " + q.pageCount() + " pages after append, model expected " + (pages + newPages));
        }
        final boolean copied = partial && q.pageHandle(pages - 1) != s.handles.get(pages - 1);
        if (!copied && required) {
            throw fail(Kind.COPY_ON_WRITE, s + " appended into its partial last page (slot " + lastSlot + ") without copy-on-write although it is "
                + (lastShared ? "shared (refcount " + refs[lastSlot] + ")" : "a published prefix page (key salt " + pubKey[lastSlot].salt() + ")"));
        }
        if (copied && !allowed) {
            throw fail(Kind.MODEL, s + " append copied its last page (slot " + lastSlot + ") which is neither shared, published nor truncated into");
        }
        final int allocate = newPages + (copied ? 1 : 0);
        final int fromReservation = covered(s, newPages, copied);
        if (exhausts(s, newPages, copied, available)) {
            throw fail(Kind.MODEL, s + " append of " + n + " was not refused: it needed " + allocate + " page(s), " + s.reserved
                + " reserved and " + available + " free unreserved");
        }
        final List<Long> fresh = new ArrayList<>();
        if (copied) {
            fresh.add(q.pageHandle(pages - 1));
        }
        for (int i = pages; i < q.pageCount(); i++) {
            fresh.add(q.pageHandle(i));
        }
        observeFresh(fresh, plainBefore, s + " append");
        if (copied) {
            final long old = s.handles.get(pages - 1);
            s.handles.set(pages - 1, fresh.get(0));
            s.acq.set(pages - 1, new Acq(How.ALLOC, s.id, 0, null));
            s.published = Math.min(s.published, pages - 1);
            release(old);
            event(lastShared ? "copy-on-write shared" : lastPublished ? "copy-on-write published" : "copy-on-write unneeded");
            log("  copy-on-write of page " + (pages - 1) + ": slot " + PageHandle.slot(old) + " -> " + PageHandle.slot(fresh.get(0)));
        }
        for (int k = copied ? 1 : 0; k < fresh.size(); k++) {
            s.handles.add(fresh.get(k));
            s.acq.add(new Acq(How.ALLOC, s.id, 0, null));
        }
        s.reserved -= fromReservation;
        for (int i = 0; i < n; i++) {
            final int pos = tc + i;
            writeTag(page(s, pos / tpp), pos % tpp, s.id, pos);
            s.ids.add(newIds[i]);
            s.writers.add(s.id);
        }
    }

    /**
     * @return whether the pages of an append, {@code newPages} and a copy if {@code copy}, beyond what the sequence's
     *         reservation covers ({@link #covered}) exceed the free unreserved pages
     */
    private boolean exhausts(Seq s, int newPages, boolean copy, long available) {
        final int unreserved = newPages + (copy ? 1 : 0) - covered(s, newPages, copy);
        return unreserved > 0 && unreserved > available;
    }

    /**
     * The model's rule for what a reservation covers: the new pages as far as it reaches; a copy only from a credit
     * beyond the growth the admission still needs (a fork's, a truncate's top-up), never one another holder forced.
     */
    private int covered(Seq s, int newPages, boolean copy) {
        int covered = Math.min(newPages, s.reserved);
        final long growthNeed = Math.max(0, layout.pagesFor(s.admitted) - s.handles.size());
        if (copy && covered < s.reserved && s.reserved > growthNeed) {
            covered++;
        }
        return covered;
    }

    private void truncate(Truncate t) {
        final Seq s = pick(t.pick());
        if (s == null) {
            return;
        }
        final int tc = s.tokens();
        if (t.permille() > 1000) {
            log("truncate(" + s + ", " + (tc + 1) + ") -> refused");
            expectThrows(IllegalArgumentException.class, () -> s.seq.truncate(tc + 1), "truncate beyond the token count");
            return;
        }
        final int n = (int) ((long) tc * Math.max(0, t.permille()) / 1000);
        log("truncate(" + s + ", " + n + ")");
        call("truncate", () -> s.seq.truncate(n));
        final int keep = (int) layout.pagesFor(n);
        final int dropped = s.handles.size() - keep;
        for (int i = s.handles.size() - 1; i >= keep; i--) {
            release(s.handles.remove(i));
            s.acq.remove(i);
        }
        s.ids.subList(n, tc).clear();
        s.writers.subList(n, tc).clear();
        s.published = Math.min(s.published, keep);
        // Whether the next append must copy the new partial last page: someone else holds it, or it holds a
        // published prefix. Truncate re-reserves a page for that copy.
        boolean copyNext = false;
        if (n % tpp != 0 && keep > 0) {
            final int last = PageHandle.slot(s.handles.get(keep - 1));
            if (refs[last] == 1 && pubKey[last] != null) {
                // a published page only this sequence holds leaves the prefix cache (it is written in place again,
                // so the admission guarantee needs no copy)
                index.remove(pubKey[last]);
                pubKey[last] = null;
                event("truncate into an own published page");
            }
            copyNext = refs[last] > 1 || pubKey[last] != null;
            if (refs[last] > 1) {
                event("truncate into a shared page");
            }
            if (keep <= s.published) {
                s.published = keep - 1;
            }
        }
        if (dropped > 0 || copyNext) {
            // the reservation is topped up (as far as free pages allow) to regrow to the admitted tokens, plus a copy
            final long available = free() - reserved();
            final int topUp = topUp(s, keep, copyNext, available);
            final int actual = s.seq.reservedPages() - s.reserved;
            if (actual != topUp) {
                throw fail(Kind.MODEL, s + " reservation topped up by " + actual + " after truncating to " + n + ", model expected " + topUp
                    + " (reserved " + s.reserved + ", available " + available + ")");
            }
            s.reserved += actual;
        }
    }

    private int topUp(Seq s, int keep, boolean copy, long available) {
        final long want = Math.max(0, layout.pagesFor(s.admitted) - keep) + (copy ? 1 : 0);
        return want > s.reserved ? (int) Math.max(0, Math.min(want - s.reserved, available)) : 0;
    }

    private void fork(Fork f) {
        final Seq p = pick(f.pick());
        if (p == null) {
            return;
        }
        final int cowPage = p.tokens() % tpp != 0 ? 1 : 0;
        final int growth = (int) Math.max(0, layout.pagesFor(p.admitted) - p.handles.size());
        // the parent gets a copy-on-write credit only if its reservation does not already cover growth + copy
        final int parentCredit = Math.max(0, Math.min(cowPage, growth + cowPage - p.reserved));
        if (parentCredit + cowPage + growth > free() - reserved()) {
            log("fork(" + p + ") -> PoolExhaustedException");
            event("fork exhausted");
            expectThrows(PoolExhaustedException.class, p.seq::fork, "fork without pages to reserve");
            expectUnchanged(p, "refused fork");
            return;
        }
        final Sequence child = get("fork", p.seq::fork);
        final Seq c = new Seq(nextId++, child, p.doc);
        log(c + " = fork(" + p + ")");
        event("fork");
        p.reserved += parentCredit;
        c.reserved = growth + cowPage;
        c.admitted = p.admitted;
        c.hasSalt = p.hasSalt;
        c.salt = p.salt;
        c.published = p.published;
        c.ids.addAll(p.ids);
        c.writers.addAll(p.writers);
        c.heritage.addAll(p.heritage);
        for (int i = 0; i < p.handles.size(); i++) {
            final long h = p.handles.get(i);
            refs[PageHandle.slot(h)]++;
            c.handles.add(h);
            c.acq.add(new Acq(How.FORK, c.id, 0, p.acq.get(i)));
        }
        live.add(c);
    }

    private void publish(Publish op) {
        final Seq s = pick(op.pick());
        if (s == null) {
            return;
        }
        final long salt = op.ownSalt() && s.hasSalt ? s.salt : SALTS[Math.floorMod(op.tenant(), SALTS.length)];
        final int[] ids = s.ids.stream().mapToInt(Integer::intValue).toArray();
        if (s.hasSalt && salt != s.salt) {
            log("publish(" + s + ", foreign salt) -> refused");
            expectThrows(IllegalArgumentException.class, () -> s.seq.publish(ids, salt), "publish under another tenant's salt");
            return;
        }
        call("publish", () -> s.seq.publish(ids, salt));
        final int full = s.tokens() / tpp;
        int indexed = 0;
        if (full > s.published) {
            for (int i = s.published; i < full; i++) {
                final int slot = PageHandle.slot(s.handles.get(i));
                final Key key = key(salt, ids, (i + 1) * tpp);
                if (pubKey[slot] != null || index.containsKey(key)) {
                    continue;
                }
                pubKey[slot] = key;
                pubBase[slot] = i * tpp;
                pubWriters[slot] = new int[tpp];
                for (int t = 0; t < tpp; t++) {
                    pubWriters[slot][t] = s.writers.get(i * tpp + t);
                }
                index.put(key, slot);
                indexed++;
            }
            s.published = full;
            s.hasSalt = true;
            s.salt = salt;
        }
        log("publish(" + s + ") -> " + indexed + " page(s) indexed");
        if (indexed > 0) {
            event("publish");
        }
    }

    private void close(Seq s) {
        log("close(" + s + ")");
        call("close", s.seq::close);
        for (int i = s.handles.size() - 1; i >= 0; i--) {
            release(s.handles.get(i));
        }
        s.handles.clear();
        live.remove(s);
    }

    private void allocateLoose() {
        if (free() - reserved() < 1) {
            final long h = get("tryAllocate", pool::tryAllocate);
            log("tryAllocate() -> " + PageHandle.toString(h));
            if (h != PageHandle.EXHAUSTED) {
                throw fail(Kind.MODEL, "tryAllocate returned " + PageHandle.toString(h) + " with no free unreserved page");
            }
            return;
        }
        final int plainBefore = plainFree();
        final long h = get("tryAllocate", pool::tryAllocate);
        final LoosePage l = new LoosePage(nextLooseId++, h);
        log("l" + l.id() + " = tryAllocate() -> " + PageHandle.toString(h));
        if (!PageHandle.isHandle(h)) {
            throw fail(Kind.MODEL, "tryAllocate returned " + PageHandle.toString(h) + " with " + (free() - reserved())
                + " free unreserved pages");
        }
        observeFresh(List.of(h), plainBefore, "tryAllocate");
        loose.add(l);
        final MemorySegment page = get("page", () -> pool.page(h));
        for (int t = 0; t < tpp; t++) {
            writeTag(page, t, LOOSE_WRITER + l.id(), t);
        }
    }

    private void looseEvent(Loose op) {
        if (loose.isEmpty()) {
            return;
        }
        final LoosePage l = loose.get(Math.floorMod(op.pick(), loose.size()));
        final long h = l.handle();
        final int slot = PageHandle.slot(h);
        final SlotState phase = pin[slot] == null ? SlotState.OWNED : pin[slot];
        final int r = refs[slot];
        final SlotEvent e = op.event();
        // the model: the transition table of SlotStateMachine, for the events a transport issues
        SlotState next = switch (e) {
            case RETAIN -> phase == SlotState.OWNED ? SlotState.OWNED : null;
            case RELEASE -> phase == SlotState.OWNED ? (r == 1 ? SlotState.FREE : SlotState.OWNED) : (r == 0 ? null : phase);
            case PIN_WRITER -> phase == SlotState.OWNED && r == 1 ? SlotState.RECEIVING : null;
            case COMMIT_RECEIVE -> phase == SlotState.RECEIVING ? (r == 0 ? SlotState.FREE : SlotState.OWNED) : null;
            case BEGIN_DRAIN -> phase == SlotState.RECEIVING ? SlotState.DRAINING : null;
            case DRAINED -> phase == SlotState.DRAINING ? (r == 0 ? SlotState.FREE : SlotState.OWNED) : null;
            case QUARANTINE -> phase == SlotState.RECEIVING || phase == SlotState.DRAINING ? SlotState.QUARANTINED : null;
            case RELEASE_QUARANTINE -> phase == SlotState.QUARANTINED ? (r == 0 ? SlotState.FREE : SlotState.OWNED) : null;
            case ALLOCATE -> throw new IllegalArgumentException("ALLOCATE is not a handle event");
        };
        final Runnable action = switch (e) {
            case RETAIN -> () -> pool.retain(h);
            case RELEASE -> () -> {
                final boolean freed = pool.release(h);
                if (freed != (r == 1 && phase == SlotState.OWNED)) {
                    throw fail(Kind.MODEL, "release(l" + l.id() + ") returned freed=" + freed);
                }
            };
            case PIN_WRITER -> () -> pool.handles().pinWriter(h);
            case COMMIT_RECEIVE -> () -> pool.handles().commitReceive(h);
            case BEGIN_DRAIN -> () -> pool.handles().beginDrain(h);
            case DRAINED -> () -> pool.handles().drained(h);
            case QUARANTINE -> () -> pool.handles().quarantine(h);
            case RELEASE_QUARANTINE -> () -> pool.handles().releaseQuarantine(h);
            case ALLOCATE -> throw new AssertionError();
        };
        log(e + "(l" + l.id() + ") in " + phase + "(refs " + r + ") -> " + (next == null ? "refused" : next));
        if (next == null) {
            expectThrows(IllegalSlotTransitionException.class, action, e + " in " + phase + " with refcount " + r);
            event("loose event refused");
            return;
        }
        call(e.toString(), action);
        switch (e) {
            case RETAIN -> refs[slot]++;
            case RELEASE -> refs[slot]--;
            case QUARANTINE -> {
                quarantineEvents++;
                event("quarantine");
            }
            default -> { }
        }
        if (next == SlotState.FREE) {
            pin[slot] = null;
            loose.remove(l);
            becameFree(slot);
        } else {
            pin[slot] = next == SlotState.OWNED ? null : next;
        }
    }

    private void staleUse(StaleUse u) {
        if (dead.isEmpty()) {
            return;
        }
        final List<Long> d = new ArrayList<>(dead);
        final long h = d.get(Math.floorMod(u.pick(), d.size()));
        final int how = Math.floorMod(u.how(), 4);
        final String what = switch (how) {
            case 0 -> "release";
            case 1 -> "retain";
            case 2 -> "page";
            default -> "pinWriter";
        };
        log(what + "(stale " + PageHandle.toString(h) + ")");
        event("stale handle used");
        staleRefused++;
        try {
            switch (how) {
                case 0 -> pool.release(h);
                case 1 -> pool.retain(h);
                case 2 -> pool.page(h);
                default -> pool.handles().pinWriter(h);
            }
        } catch (StaleHandleException expected) {
            return;
        } catch (RuntimeException e) {
            throw fail(Kind.STALE_HANDLE, what + " of stale handle " + PageHandle.toString(h) + " threw " + e + " instead of StaleHandleException", e);
        }
        throw fail(Kind.STALE_HANDLE, what + " of stale handle " + PageHandle.toString(h) + " (slot now "
            + pool.stateOfSlot(PageHandle.slot(h)) + ", " + holders(PageHandle.slot(h)) + ") was not refused");
    }

    // ---------------------------------------------------------------------------------------------
    // Model primitives

    private boolean isFree(int slot) {
        return refs[slot] == 0 && pin[slot] == null;
    }

    private int free() {
        int n = 0;
        for (int s = 0; s < capacity; s++) {
            if (isFree(s)) {
                n++;
            }
        }
        return n;
    }

    private int plainFree() {
        int n = 0;
        for (int s = 0; s < capacity; s++) {
            if (isFree(s) && pubKey[s] == null) {
                n++;
            }
        }
        return n;
    }

    private int cachedFree() {
        return free() - plainFree();
    }

    private long reserved() {
        long r = 0;
        for (Seq s : live) {
            r += s.reserved;
        }
        return r;
    }

    private Key key(long salt, int[] ids, int end) {
        final List<Integer> t = new ArrayList<>(end);
        for (int i = 0; i < end; i++) {
            t.add(ids[i]);
        }
        return new Key(salt, List.copyOf(t));
    }

    /** A free slot leaves FREE: evicted from the cache (loses its prefix) or revived by an attach (keeps it). */
    private void evictOrRevive(int slot, boolean evict) {
        if (evict && pubKey[slot] != null) {
            index.remove(pubKey[slot]);
            pubKey[slot] = null;
            pubWriters[slot] = null;
            evictions++;
            event("eviction");
        }
        gen[slot]++;
        refs[slot] = 1;
        allocations++;
    }

    /**
     * Checks freshly allocated pages: each was FREE in the model, gets the next generation, and the
     * allocator took cached (published) free pages only once the plain ones ran out.
     */
    private void observeFresh(List<Long> fresh, int plainBefore, String what) {
        int evicted = 0;
        final Set<Integer> seen = new HashSet<>();
        for (long h : fresh) {
            final int slot = PageHandle.slot(h);
            if (!seen.add(slot) || !isFree(slot)) {
                throw fail(Kind.SHARING, what + " got page " + PageHandle.toString(h) + " which is not free: " + holders(slot));
            }
            if (PageHandle.generation(h) != gen[slot] + 1) {
                throw fail(Kind.MODEL, what + " got " + PageHandle.toString(h) + ", expected generation " + (gen[slot] + 1));
            }
            if (pubKey[slot] != null) {
                evicted++;
            }
        }
        final int expectedEvicted = Math.max(0, fresh.size() - plainBefore);
        if (evicted != expectedEvicted) {
            throw fail(Kind.MODEL, what + " took " + evicted + " cached prefix page(s) for " + fresh.size() + " page(s) with "
                + plainBefore + " plain free page(s); expected " + expectedEvicted);
        }
        for (long h : fresh) {
            evictOrRevive(PageHandle.slot(h), true);
        }
    }

    private void release(long h) {
        final int slot = PageHandle.slot(h);
        refs[slot]--;
        if (isFree(slot)) {
            becameFree(slot);
        }
    }

    private void becameFree(int slot) {
        dead.addLast(PageHandle.of(pool.poolId(), slot, gen[slot]));
        if (dead.size() > DEAD_HANDLES_KEPT) {
            dead.removeFirst();
        }
    }

    private String holders(int slot) {
        final StringBuilder b = new StringBuilder("slot " + slot + " refs " + refs[slot] + (pin[slot] == null ? "" : " " + pin[slot]) + " held by [");
        for (Seq s : live) {
            if (s.handles.stream().anyMatch(h -> PageHandle.slot(h) == slot)) {
                b.append(' ').append(s);
            }
        }
        for (LoosePage l : loose) {
            if (PageHandle.slot(l.handle()) == slot) {
                b.append(" l").append(l.id());
            }
        }
        return b.append(" ]").toString();
    }

    // ---------------------------------------------------------------------------------------------
    // Bytes

    private static long tagB(long a, int layer, int kv) {
        return Long.rotateLeft(a, 23) ^ 0x5EED_0000_0000_0000L ^ (2L * layer + kv);
    }

    private void writeTag(MemorySegment page, int token, int writer, int pos) {
        final long a = ((long) writer << 32) | (pos & 0xFFFF_FFFFL);
        for (int l = 0; l < layout.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                final long off = layout.offset(l, kv, token);
                page.set(LE, off, a);
                page.set(LE, off + 8, tagB(a, l, kv));
            }
        }
    }

    /** @return the tag (writer << 32 | position) every vector of the token carries, or CANARY_READ, or GARBAGE_READ */
    private long readTag(MemorySegment page, int token) {
        long found = 0;
        for (int l = 0; l < layout.layers(); l++) {
            for (int kv = 0; kv < 2; kv++) {
                final long off = layout.offset(l, kv, token);
                final long a = page.get(LE, off);
                final long b = page.get(LE, off + 8);
                final long v = a == PageStorage.CANARY && b == PageStorage.CANARY ? CANARY_READ
                    : b == tagB(a, l, kv) ? a : GARBAGE_READ;
                if (l == 0 && kv == 0) {
                    found = v;
                } else if (v != found) {
                    return GARBAGE_READ;
                }
            }
        }
        return found;
    }

    private static String describeTag(long t) {
        return t == CANARY_READ ? "canary" : t == GARBAGE_READ ? "garbage" : "tag(writer " + writerName((int) (t >>> 32)) + ", pos " + (int) t + ")";
    }

    private static String writerName(int w) {
        return w >= LOOSE_WRITER ? "l" + (w - LOOSE_WRITER) : "s" + w;
    }

    private MemorySegment page(Seq s, int i) {
        return get("page", () -> s.seq.page(i));
    }

    // ---------------------------------------------------------------------------------------------
    // Checks

    /** Compares pool and model; call after every operation (a quiescent point). */
    void check() {
        final PoolSnapshot snap;
        try {
            snap = pool.verifyAccounting();
        } catch (IllegalStateException e) {
            throw fail(Kind.ACCOUNTING, "verifyAccounting: " + e.getMessage(), e);
        }
        checkSharingAndRefcounts();
        checkShapes();
        checkIsolation();
        checkPublishedImmutable();
        checkDeadHandles();
        checkSlotsAndCounters(snap);
    }

    /** Actual block tables: every page shared by two live sequences has fork or prefix-cache provenance; refcounts add up. */
    private void checkSharingAndRefcounts() {
        final Map<Integer, List<Object[]>> holders = new HashMap<>(); // slot -> [seq, page index, handle, acq]
        for (Seq s : live) {
            final Sequence q = s.seq;
            final long expectedPages = layout.pagesFor(q.tokenCount());
            if (q.pageCount() != expectedPages) {
                throw fail(Kind.ACCOUNTING, s + " holds " + q.tokenCount() + " tokens in " + q.pageCount() + " pages, expected " + expectedPages);
            }
            for (int i = 0; i < q.pageCount(); i++) {
                final long h = q.pageHandle(i);
                final Acq acq = i < s.handles.size() && s.handles.get(i) == h ? s.acq.get(i) : null;
                holders.computeIfAbsent(PageHandle.slot(h), k -> new ArrayList<>()).add(new Object[] {s, i, h, acq});
            }
        }
        for (Map.Entry<Integer, List<Object[]>> e : holders.entrySet()) {
            final int slot = e.getKey();
            final List<Object[]> hs = e.getValue();
            for (int x = 0; x < hs.size(); x++) {
                for (int y = x + 1; y < hs.size(); y++) {
                    final String pair = hs.get(x)[0] + " page " + hs.get(x)[1] + " and " + hs.get(y)[0] + " page " + hs.get(y)[1]
                        + " share slot " + slot;
                    if (hs.get(x)[0] == hs.get(y)[0]) {
                        throw fail(Kind.SHARING, pair + ": one sequence holds a page twice");
                    }
                    if ((long) hs.get(x)[2] != (long) hs.get(y)[2]) {
                        throw fail(Kind.SHARING, pair + " under different generations: " + PageHandle.toString((long) hs.get(x)[2]) + " vs "
                            + PageHandle.toString((long) hs.get(y)[2]));
                    }
                    final Acq a = (Acq) hs.get(x)[3];
                    final Acq b = (Acq) hs.get(y)[3];
                    if (a == null || b == null) {
                        throw fail(Kind.SHARING, pair + ", but " + (a == null ? hs.get(x)[0] : hs.get(y)[0])
                            + " never got that page by allocation, fork or prefix attach");
                    }
                    final Acq ra = a.root();
                    final Acq rb = b.root();
                    if (ra == rb) {
                        continue; // one inherited it from the other, or both from a common ancestor, by fork
                    }
                    final Key k = pubKey[slot];
                    final boolean viaCache = k != null && (ra.how() != How.ATTACH || ra.salt() == k.salt())
                        && (rb.how() != How.ATTACH || rb.salt() == k.salt()) && (ra.how() == How.ATTACH || rb.how() == How.ATTACH);
                    if (!viaCache) {
                        throw fail(Kind.SHARING, pair + " without fork lineage or prefix-cache attach under the page's salt (roots "
                            + ra + " / " + rb + ", published " + (k == null ? "no" : "under salt " + k.salt()) + ")");
                    }
                }
            }
        }
        for (int slot = 0; slot < capacity; slot++) {
            final int seqHolders = holders.getOrDefault(slot, List.of()).size();
            int looseRefs = 0;
            for (LoosePage l : loose) {
                if (PageHandle.slot(l.handle()) == slot) {
                    looseRefs = refs[slot];
                }
            }
            final int rc = pool.refcountOfSlot(slot);
            if (rc != seqHolders + looseRefs) {
                throw fail(Kind.ACCOUNTING, "slot " + slot + " has refcount " + rc + " but " + seqHolders + " live sequence(s) and "
                    + looseRefs + " loose reference(s) hold it");
            }
        }
    }

    /** Each live sequence: token count, pages, handles, reservation as the model says. */
    private void checkShapes() {
        for (Seq s : live) {
            final Sequence q = s.seq;
            if (q.tokenCount() != s.tokens() || q.pageCount() != s.handles.size() || q.reservedPages() != s.reserved
                || q.publishedPages() != s.published || q.isClosed()) {
                throw fail(Kind.MODEL, s + " is " + q + " published " + q.publishedPages() + ", model: tokens " + s.tokens() + " pages "
                    + s.handles.size() + " reserved " + s.reserved + " published " + s.published);
            }
            for (int i = 0; i < s.handles.size(); i++) {
                if (q.pageHandle(i) != s.handles.get(i)) {
                    throw fail(Kind.MODEL, s + " page " + i + " is " + PageHandle.toString(q.pageHandle(i)) + ", model "
                        + PageHandle.toString(s.handles.get(i)));
                }
            }
        }
    }

    /**
     * Every live sequence reads, for each of its tokens, the tag of the sequence the model says wrote it
     * (itself, a fork ancestor, or a prefix publisher); past its last token its last page holds only the
     * canary or leftovers of its own lineage. Loose pages keep their tags.
     */
    private void checkIsolation() {
        for (Seq s : live) {
            final int tc = s.tokens();
            for (int i = 0; i < s.handles.size(); i++) {
                final MemorySegment page = page(s, i);
                for (int t = 0; t < tpp; t++) {
                    final int pos = i * tpp + t;
                    final long got = readTag(page, t);
                    if (pos < tc) {
                        final long want = ((long) s.writers.get(pos) << 32) | pos;
                        if (got != want) {
                            throw fail(Kind.ISOLATION, s + " reads token " + pos + " (page " + i + ", slot " + PageHandle.slot(s.handles.get(i))
                                + ") as " + describeTag(got) + ", expected " + describeTag(want));
                        }
                    } else if (got != CANARY_READ && (got == GARBAGE_READ || (int) got != pos || !s.heritage.contains((int) (got >>> 32)))) {
                        throw fail(Kind.LEFTOVER, s + " page " + i + " (slot " + PageHandle.slot(s.handles.get(i)) + ") holds " + describeTag(got)
                            + " in unwritten token " + pos + ": leftover of a page's previous tenant (lineage " + s.heritage + ")");
                    }
                }
            }
        }
        for (LoosePage l : loose) {
            final int slot = PageHandle.slot(l.handle());
            if (pin[slot] == SlotState.DRAINING || pin[slot] == SlotState.QUARANTINED) {
                expectThrows(IllegalSlotTransitionException.class, () -> pool.page(l.handle()), "page() of a " + pin[slot] + " page");
                continue;
            }
            final MemorySegment page = get("page", () -> pool.page(l.handle()));
            for (int t = 0; t < tpp; t++) {
                final long got = readTag(page, t);
                final long want = ((long) (LOOSE_WRITER + l.id()) << 32) | t;
                if (got != want) {
                    throw fail(Kind.ISOLATION, "loose page l" + l.id() + " reads token " + t + " as " + describeTag(got));
                }
            }
        }
    }

    /** Published prefix pages (held or cached free) keep the bytes they had when published. */
    private void checkPublishedImmutable() {
        for (int slot = 0; slot < capacity; slot++) {
            if (pubKey[slot] == null) {
                continue;
            }
            final MemorySegment page = pool.storage().hostPage(slot);
            for (int t = 0; t < tpp; t++) {
                final long want = ((long) pubWriters[slot][t] << 32) | (pubBase[slot] + t);
                final long got = readTag(page, t);
                if (got != want) {
                    throw fail(Kind.PUBLISHED_IMMUTABLE, "published prefix page in slot " + slot + " (" + holders(slot) + ") token "
                        + (pubBase[slot] + t) + " now holds " + describeTag(got) + ", published as " + describeTag(want));
                }
            }
        }
    }

    /** Handles whose page was freed (and maybe reused since) are refused. */
    private void checkDeadHandles() {
        for (long h : dead) {
            if (pool.state(h) != null) {
                throw fail(Kind.STALE_HANDLE, "state(" + PageHandle.toString(h) + ") = " + pool.state(h) + " for a freed page");
            }
            staleRefused++;
            final long v = pool.validate(h);
            if (v != PageHandle.STALE) {
                throw fail(Kind.STALE_HANDLE, "validate(" + PageHandle.toString(h) + ") = " + PageHandle.toString(v)
                    + " for a page freed earlier; slot " + PageHandle.slot(h) + " is now " + pool.stateOfSlot(PageHandle.slot(h))
                    + " (" + holders(PageHandle.slot(h)) + ")");
            }
        }
    }

    private void checkSlotsAndCounters(PoolSnapshot snap) {
        long owned = 0;
        long receiving = 0;
        long draining = 0;
        long quarantined = 0;
        for (int slot = 0; slot < capacity; slot++) {
            final SlotState want = pin[slot] != null ? pin[slot] : refs[slot] > 0 ? SlotState.OWNED : SlotState.FREE;
            final SlotState got = pool.stateOfSlot(slot);
            if (got != want || pool.refcountOfSlot(slot) != refs[slot]) {
                throw fail(Kind.MODEL, "slot " + slot + " is " + got + " refs " + pool.refcountOfSlot(slot) + ", model " + want + " refs " + refs[slot]);
            }
            switch (want) {
                case OWNED -> owned++;
                case RECEIVING -> receiving++;
                case DRAINING -> draining++;
                case QUARANTINED -> quarantined++;
                default -> { }
            }
        }
        final String model = "free=" + free() + " (cached " + cachedFree() + ") owned=" + owned + " receiving=" + receiving + " draining=" + draining
            + " quarantined=" + quarantined + " reserved=" + reserved() + " published=" + index.size() + " sequences=" + live.size()
            + " allocations=" + allocations + " prefixHits=" + prefixHits + " evictions=" + evictions + " tooLong=" + rejectedContextTooLong
            + " retryLater=" + retryLater + " staleRefused=" + staleRefused + " quarantineEvents=" + quarantineEvents;
        final PoolSnapshot after = pool.snapshot();
        if (snap.free() != free() || snap.owned() != owned || snap.receiving() != receiving || snap.draining() != draining
            || snap.quarantined() != quarantined || snap.retired() != 0 || snap.reserved() != reserved() || snap.cachedFree() != cachedFree()
            || snap.publishedPrefixes() != index.size() || snap.openSequences() != live.size() || snap.openReservations() != 0
            || snap.allocations() != allocations || snap.prefixHits() != prefixHits || snap.evictions() != evictions
            || snap.rejectedContextTooLong() != rejectedContextTooLong || snap.rejectedExceedsPool() != 0 || snap.retryLater() != retryLater
            || after.staleHandlesRefused() != staleRefused || after.quarantineEvents() != quarantineEvents) {
            throw fail(Kind.MODEL, "snapshot " + snap + " (staleRefused now " + after.staleHandlesRefused() + "), model " + model);
        }
        if (snap.reserved() > snap.free()) {
            throw fail(Kind.ACCOUNTING, "reserved " + snap.reserved() + " > free " + snap.free());
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Helpers

    private void expectUnchanged(Seq s, String what) {
        final Sequence q = s.seq;
        if (q.tokenCount() != s.tokens() || q.pageCount() != s.handles.size() || q.reservedPages() != s.reserved) {
            throw fail(Kind.MODEL, what + " changed " + s + ": now " + q);
        }
    }

    private <T> T get(String what, java.util.function.Supplier<T> op) {
        try {
            return op.get();
        } catch (RuntimeException e) {
            throw fail(Kind.MODEL, what + " threw unexpectedly: " + e, e);
        }
    }

    private void call(String what, Runnable op) {
        try {
            op.run();
        } catch (Violation v) {
            throw v;
        } catch (RuntimeException e) {
            throw fail(Kind.MODEL, what + " threw unexpectedly: " + e, e);
        }
    }

    private void expectThrows(Class<? extends RuntimeException> type, Runnable op, String what) {
        try {
            op.run();
        } catch (RuntimeException e) {
            if (type.isInstance(e)) {
                return;
            }
            throw fail(Kind.MODEL, what + ": expected " + type.getSimpleName() + ", got " + e, e);
        }
        throw fail(Kind.MODEL, what + ": expected " + type.getSimpleName() + ", nothing was thrown");
    }

    void event(String name) {
        events.merge(name, 1, Integer::sum);
    }

    void log(String line) {
        log.add(line);
    }

    Violation fail(Kind kind, String message) {
        return fail(kind, message, null);
    }

    Violation fail(Kind kind, String message, Throwable cause) {
        final int from = Math.max(0, log.size() - 60);
        return new Violation(kind, message + "\n  after " + log.size() + " operations (pool " + capacity + " pages × " + tpp
            + " tokens, max context " + maxContext + ")" + (from > 0 ? ", last 60" : "") + ":\n    "
            + String.join("\n    ", log.subList(from, log.size())), cause);
    }

    /** Closes what is open (quietly) and the pool. */
    @Override
    public void close() {
        if (pool.isClosed()) {
            return;
        }
        try {
            for (Seq s : List.copyOf(live)) {
                s.seq.close();
            }
            for (LoosePage l : List.copyOf(loose)) {
                final int slot = PageHandle.slot(l.handle());
                if (pin[slot] == SlotState.RECEIVING) {
                    pool.handles().commitReceive(l.handle());
                } else if (pin[slot] == SlotState.DRAINING) {
                    pool.handles().drained(l.handle());
                } else if (pin[slot] == SlotState.QUARANTINED) {
                    pool.handles().releaseQuarantine(l.handle());
                }
                for (int r = refs[slot]; r > 0; r--) {
                    pool.release(l.handle());
                }
            }
        } catch (RuntimeException ignored) {
            // a broken pool (a test of the checker) may refuse; closing reports it
        }
        pool.close();
    }
}
