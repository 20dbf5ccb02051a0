package io.kvpool.examples.ui;

import io.kvpool.Sequence;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Which live request holds which pages of one pool, as the role that owns the pool books them: the role calls
 * {@link #hold} when a request's pages are known (admission, a committed transfer) and {@link #release} when the
 * request is over there. The live page reads {@link #snapshot()}: no pool is scanned, and the answer holds at most
 * {@link #MAX_HOLDERS} requests and {@link #MAX_SLOTS} slots each (the largest holders first).
 *
 * <p>Thread-safe: any thread may hold, release and snapshot.
 */
public final class PageHolders {
    /** Most requests a snapshot lists (the ones holding the most pages). */
    public static final int MAX_HOLDERS = 256;
    /** Most slots listed per request (its page count is always exact). */
    public static final int MAX_SLOTS = 1024;

    private static final Comparator<PoolView.Holder> LARGEST_FIRST =
        Comparator.comparingInt(PoolView.Holder::pages).reversed().thenComparingLong(PoolView.Holder::requestId);

    private final Map<Long, PoolView.Holder> byRequest = new ConcurrentHashMap<>();

    /** Books the pages of a sequence (its block table, read now) as held by the request. Replaces an earlier booking. */
    public void hold(long requestId, String tenant, String phase, Sequence seq) {
        final int n = seq.pageCount();
        final int[] slots = new int[n];
        seq.copyBlockTable(slots, 0);
        final List<Integer> listed = new ArrayList<>(Math.min(n, MAX_SLOTS));
        for (int i = 0; i < n && i < MAX_SLOTS; i++) {
            listed.add(slots[i]);
        }
        byRequest.put(requestId, new PoolView.Holder(requestId, tenant, phase, n, listed));
    }

    /** Books a page count whose slots this role does not know (e.g. pages a transfer is still receiving into). */
    public void hold(long requestId, String tenant, String phase, int pages) {
        byRequest.put(requestId, new PoolView.Holder(requestId, tenant, phase, pages, List.of()));
    }

    /** The request is over here: it holds nothing any more. */
    public void release(long requestId) {
        byRequest.remove(requestId);
    }

    /** @return requests booked now */
    public int size() {
        return byRequest.size();
    }

    /** @return at most {@link #MAX_HOLDERS} holders, the largest first (ties by request id) */
    public List<PoolView.Holder> snapshot() {
        final List<PoolView.Holder> all = new ArrayList<>(byRequest.values());
        all.sort(LARGEST_FIRST);
        return all.size() <= MAX_HOLDERS ? all : List.copyOf(all.subList(0, MAX_HOLDERS));
    }

    @Override
    public String toString() {
        return "PageHolders[" + byRequest.size() + " requests]";
    }
}
