package io.kvpool;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * Drives a pool with random admissions (with prefix attach per tenant), appends, forks, truncations,
 * publishes and closes, writing into every token a tag that names its tenant, token id and position.
 * It reports a <em>leak</em> whenever any read shows data that the reader's tenant never wrote:
 * <ul>
 *   <li>a live sequence reads every one of its tokens after every step;</li>
 *   <li>pages freshly allocated to a sequence must hold the free-page canary before it writes them;</li>
 *   <li>handles kept from closed sequences are probed: if the pool does not refuse them, the page they
 *       reach must not hold another tenant's tags.</li>
 * </ul>
 * With every safeguard on it must find nothing; with one off, the tests show it finds the leak.
 */
final class IsolationHarness {

    static final int TENANTS = 4;

    /** What a run found. */
    record Result(long steps, long leaks, String firstLeak, long staleProbes, long staleRefused, long tokensChecked) {
    }

    private record Live(Sequence seq, int tenant, List<Integer> ids) {
    }

    private record Stale(long handle, int tenant) {
    }

    private final KvPool pool;
    private final KvLayout layout;
    private final SplittableRandom rnd;
    private final List<Live> live = new ArrayList<>();
    private final List<Stale> stale = new ArrayList<>();
    private final int[][] commonPrefixes = new int[TENANTS][];
    private long leaks;
    private String firstLeak;
    private long staleProbes;
    private long staleRefused;
    private long tokensChecked;

    IsolationHarness(KvPool pool, long seed) {
        this.pool = pool;
        this.layout = pool.layout();
        this.rnd = new SplittableRandom(seed);
        for (int t = 0; t < TENANTS; t++) {
            commonPrefixes[t] = new int[] {1, 2, 3, 4, 5, 6, 7, 8, 9}; // the same ids for all tenants: only the salt separates them
        }
    }

    static long tag(int tenant, int tokenId, int position) {
        return 0x4000_0000_0000_0000L | ((long) tenant << 48) | ((long) (tokenId & 0xFFFF) << 24) | (position & 0xFFFFFF);
    }

    /** @return the tenant's cache salt: its own, never 0 (refused) */
    static long salt(int tenant) {
        return 0x7E11A000L + tenant;
    }

    static int tenantOf(long tag) {
        return (int) ((tag >>> 48) & 0x3FFF);
    }

    Result run(int steps) {
        for (int i = 0; i < steps; i++) {
            step();
            checkLive();
        }
        for (Live l : live) {
            l.seq.close();
        }
        live.clear();
        return new Result(steps, leaks, firstLeak, staleProbes, staleRefused, tokensChecked);
    }

    private void leak(String what) {
        leaks++;
        if (firstLeak == null) {
            firstLeak = what;
        }
    }

    private void step() {
        final int op = rnd.nextInt(100);
        if (op < 25 || live.isEmpty()) {
            admit();
        } else if (op < 50) {
            append(pick());
        } else if (op < 58) {
            fork(pick());
        } else if (op < 66) {
            truncate(pick());
        } else if (op < 74) {
            final Live l = pick();
            l.seq.publish(ids(l), salt(l.tenant));
        } else if (op < 90) {
            close(live.remove(rnd.nextInt(live.size())));
        } else {
            probeStale();
        }
    }

    private Live pick() {
        return live.get(rnd.nextInt(live.size()));
    }

    private static int[] ids(Live l) {
        return l.ids.stream().mapToInt(Integer::intValue).toArray();
    }

    private void admit() {
        final int tenant = rnd.nextInt(TENANTS);
        final int len = 1 + rnd.nextInt(14);
        final int[] prompt = new int[len];
        final boolean shared = rnd.nextBoolean();
        for (int i = 0; i < len; i++) {
            prompt[i] = shared && i < commonPrefixes[tenant].length ? commonPrefixes[tenant][i] : 100 + rnd.nextInt(50);
        }
        final Admission a = pool.admit(prompt, rnd.nextInt(6), salt(tenant));
        if (!a.admitted()) {
            return;
        }
        final Live l = new Live(a.sequence(), tenant, new ArrayList<>());
        for (int i = 0; i < l.seq.tokenCount(); i++) {
            l.ids.add(prompt[i]); // attached from the cache: written by an earlier request of this tenant
        }
        live.add(l);
        final int rest = len - l.seq.tokenCount();
        final int[] tail = new int[rest];
        System.arraycopy(prompt, l.seq.tokenCount(), tail, 0, rest);
        appendTokens(l, tail);
    }

    private void append(Live l) {
        final long room = l.seq.admittedTokens() - l.seq.tokenCount();
        if (room <= 0) {
            return;
        }
        final int[] more = new int[1 + rnd.nextInt((int) Math.min(4, room))];
        for (int i = 0; i < more.length; i++) {
            more[i] = 100 + rnd.nextInt(50);
        }
        appendTokens(l, more);
    }

    private void appendTokens(Live l, int[] more) {
        final Sequence s = l.seq;
        final int from = s.tokenCount();
        final int oldPages = s.pageCount();
        try {
            s.append(more.length);
        } catch (PoolExhaustedException e) {
            return; // only after truncation of shared pages; nothing changed
        }
        final int tpp = layout.tokensPerPage();
        for (int t = from; t < s.tokenCount(); t++) {
            final int p = t / tpp;
            if (p >= oldPages) { // a freshly allocated page: its next tenant must see the canary, never old data
                final MemorySegment page = s.page(p);
                if (pool.firstCanaryToken(s.pageHandle(p), t % tpp, t % tpp + 1) != t % tpp) {
                    final long found = TokenTags.read(page, layout, t % tpp);
                    leak("fresh page " + s.pageIndex(p) + " held " + Long.toHexString(found) + " instead of the canary (tenant "
                        + l.tenant + ", position " + t + ")");
                }
            }
            l.ids.add(more[t - from]);
            TokenTags.write(s.page(p), layout, t % tpp, tag(l.tenant, more[t - from], t));
        }
    }

    private void fork(Live l) {
        try {
            final Sequence child = l.seq.fork();
            live.add(new Live(child, l.tenant, new ArrayList<>(l.ids)));
        } catch (PoolExhaustedException e) {
            // no room for the child's reservation: refused, nothing changed
        }
    }

    private void truncate(Live l) {
        final int n = rnd.nextInt(l.seq.tokenCount() + 1);
        l.seq.truncate(n);
        while (l.ids.size() > n) {
            l.ids.remove(l.ids.size() - 1);
        }
    }

    private void close(Live l) {
        for (int i = 0; i < l.seq.pageCount(); i++) {
            if (stale.size() < 64) {
                stale.add(new Stale(l.seq.pageHandle(i), l.tenant));
            } else {
                stale.set(rnd.nextInt(stale.size()), new Stale(l.seq.pageHandle(i), l.tenant));
            }
        }
        l.seq.close();
    }

    private void probeStale() {
        if (stale.isEmpty()) {
            return;
        }
        final Stale s = stale.get(rnd.nextInt(stale.size()));
        staleProbes++;
        final MemorySegment page;
        try {
            page = pool.page(s.handle);
        } catch (StaleHandleException | IllegalSlotTransitionException refused) {
            staleRefused++;
            return;
        }
        // not refused: the handle's tenancy is still alive (a fork or cache attachment kept the page), or
        // the generation check is off. Either way it must not show another tenant's data.
        for (int t = 0; t < layout.tokensPerPage(); t++) {
            final long found = TokenTags.read(page, layout, t);
            if (found != Long.MIN_VALUE && (found & 0x4000_0000_0000_0000L) != 0 && tenantOf(found) != s.tenant) {
                leak("stale handle " + PageHandle.toString(s.handle) + " of tenant " + s.tenant + " read tenant "
                    + tenantOf(found) + "'s token " + Long.toHexString(found));
                return;
            }
        }
    }

    private void checkLive() {
        for (Live l : live) {
            for (int t = 0; t < l.seq.tokenCount(); t++) {
                final long found = TokenTags.readSequence(l.seq, t);
                tokensChecked++;
                if (found != tag(l.tenant, l.ids.get(t), t)) {
                    leak("tenant " + l.tenant + " position " + t + " expected " + Long.toHexString(tag(l.tenant, l.ids.get(t), t))
                        + " read " + Long.toHexString(found));
                    return;
                }
            }
        }
    }
}
