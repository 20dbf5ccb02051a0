package io.kvpool;

import java.lang.ref.Cleaner;
import java.util.ArrayDeque;

/**
 * Hands out pool ids ({@code 1..}{@link PageHandle#MAX_POOL}) least recently used first, and takes them back
 * when a pool is closed or collected. While fewer than {@code MAX_POOL} pools are open the ids in use are
 * distinct; past that an id is shared (the generation check still applies) and a warning is logged. An id goes
 * back to the free ids only when its last user is gone: a shared id freed by its first user while a sharer lives
 * would be handed to a third pool, whose handles would then equal the sharer's. Thread-safe.
 */
final class PoolIds {

    private static final System.Logger LOG = System.getLogger("io.kvpool");
    private static final Cleaner CLEANER = Cleaner.create();
    private static final ArrayDeque<Integer> FREE = new ArrayDeque<>();
    /** Open pools holding each id (index 0 unused). Guarded by the class. */
    private static final int[] USERS = new int[PageHandle.MAX_POOL + 1];
    private static int shared;

    static {
        for (int id = 1; id <= PageHandle.MAX_POOL; id++) {
            FREE.addLast(id);
        }
    }

    private PoolIds() {
    }

    /**
     * Takes an id for {@code pool}; it comes back when the returned action runs (at close) or the pool is collected.
     *
     * @return the id (index 0) and the action that gives it back, idempotent
     */
    static Cleaner.Cleanable take(Object pool, int[] idOut) {
        final int id;
        synchronized (PoolIds.class) {
            if (FREE.isEmpty()) {
                shared = shared % PageHandle.MAX_POOL + 1;
                id = shared;
                LOG.log(System.Logger.Level.WARNING, "kvpool: more than " + PageHandle.MAX_POOL + " pools are open in this JVM; "
                    + "pool id " + id + " is shared, so handles of those pools are told apart by generation only");
            } else {
                id = FREE.removeFirst();
            }
            USERS[id]++;
        }
        idOut[0] = id;
        return CLEANER.register(pool, () -> giveBack(id));
    }

    /** @return the open pools holding {@code id} (a test's view) */
    static int users(int id) {
        synchronized (PoolIds.class) {
            return USERS[id];
        }
    }

    private static void giveBack(int id) {
        synchronized (PoolIds.class) {
            if (--USERS[id] == 0) {
                FREE.addLast(id);
            }
        }
    }
}
