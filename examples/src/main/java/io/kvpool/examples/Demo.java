package io.kvpool.examples;

import io.kvpool.Admission;
import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolCapacityException;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.StaleHandleException;

import java.io.PrintStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * A guided tour of a kvpool pool on host memory: startup check, admission, writing KV, prefix sharing
 * between requests of one tenant (and not across tenants), a fork with copy-on-write, a receive that is
 * aborted and drained, a stale handle refused, and the pool's accounting after each step.
 * The disaggregated example server ({@code ./dev example}) is {@link io.kvpool.examples.server.KvServerMain}.
 *
 * <p>Run with {@code ./dev demo} from the repository root.
 */
public final class Demo {

    private final PrintStream out;

    Demo(PrintStream out) {
        this.out = out;
    }

    public static void main(String[] args) {
        new Demo(System.out).run();
    }

    void run() {
        final KvLayout layout = new KvLayout(4, 2, 64, DType.FP16, 16);
        out.println("kvpool demo — layout " + layout + ", fingerprint " + Long.toHexString(layout.fingerprint()));

        out.println("\n1. The startup check (the 2026 incident: 1,048,576 tokens advertised on a pool of 681,280)");
        try {
            KvPool.builder(new KvLayout(1, 1, 8, DType.FP8, 16)).pages(42_580).maxContextTokens(1_048_576).build();
            throw new IllegalStateException("the incident configuration must not build");
        } catch (PoolCapacityException e) {
            out.println("   refused: " + e.getMessage());
        }

        try (KvPool pool = KvPool.builder(layout).pages(64).maxContextTokens(512).build()) {
            out.println("\n2. A pool of " + pool.capacity() + " pages (" + pool.capacity() * layout.bytesPerPage() / 1024
                + " KiB, " + pool.capacity() * layout.tokensPerPage() + " tokens), max context " + pool.maxContextTokens());
            state(pool);

            out.println("\n3. Admission answers with a typed decision, never a placeholder");
            out.println("   600 + 10 tokens      → " + pool.admit(600, 10));
            final int[] system = ids(40, 7); // a tenant's system prompt: 2 full pages + 8 tokens
            final Admission a = pool.admit(system, 64, /* tenant salt */ 1);
            out.println("   tenant 1, 40 + 64    → " + a);
            final Sequence alice = a.sequence();
            alice.append(40);
            write(alice, 1, 0, 40);
            alice.publish(system, 1);
            out.println("   alice prefilled 40 tokens on pages " + table(alice) + ", published " + alice.publishedPages() + " full pages");
            state(pool);

            out.println("\n4. Prefix sharing: same tenant attaches the cached pages; another tenant does not");
            final Sequence bob = pool.admit(system, 64, 1).sequence();
            out.println("   tenant 1 again: " + bob.tokenCount() + " tokens attached from the cache, pages " + table(bob));
            final Sequence eve = pool.admit(system, 64, 2).sequence();
            out.println("   tenant 2, same tokens: " + eve.tokenCount() + " tokens attached (salts keep tenants apart)");
            bob.append(8);
            write(bob, 1, 32, 40);
            eve.append(40);
            write(eve, 2, 0, 40);
            state(pool);

            out.println("\n5. Fork (e.g. parallel sampling): pages shared, the partial last page copied on write");
            final Sequence beam = alice.fork();
            out.println("   before writing: alice " + table(alice) + "  beam " + table(beam));
            beam.append(1);
            write(beam, 9, 40, 41);
            alice.append(1);
            write(alice, 1, 40, 41);
            out.println("   after one token each: alice " + table(alice) + "  beam " + table(beam));
            out.println("   alice token 40 written by request " + owner(alice, 40) + ", beam token 40 by request " + owner(beam, 40));
            state(pool);

            out.println("\n6. A transfer into a page is aborted: the page drains before it can be freed");
            final long staging = pool.tryAllocate();
            pool.handles().pinWriter(staging);
            pool.release(staging); // the request gave up: but a remote writer may still be writing
            out.println("   released while RECEIVING → still " + pool.state(staging) + " (a writer pin holds it)");
            pool.handles().beginDrain(staging);
            out.println("   abort → " + pool.state(staging) + " until the sender confirms every write ended");
            pool.handles().drained(staging);
            out.println("   DRAINED received → " + (pool.state(staging) == null ? "FREE" : pool.state(staging)));

            out.println("\n7. A stale handle is refused, never served");
            final long old = eve.pageHandle(0);
            eve.close();
            final Sequence next = pool.admit(48, 0).sequence(); // reuses eve's freed pages
            next.append(48);
            try {
                pool.page(old);
                throw new IllegalStateException("a stale handle must be refused");
            } catch (StaleHandleException e) {
                out.println("   " + e.getMessage());
            }

            out.println("\n8. Everyone finishes");
            for (Sequence s : new Sequence[] {alice, bob, beam, next}) {
                s.close();
            }
            final PoolSnapshot s = pool.verifyAccounting();
            out.println("   " + s);
            out.println("   accounting " + (s.balanced() && s.inUse() == 0 && s.reserved() == 0 ? "balanced: every page is back" : "NOT balanced"));
        }
    }

    private void state(KvPool pool) {
        out.println("   pool: " + pool.snapshot());
    }

    private static int[] ids(int n, int seed) {
        final int[] ids = new int[n];
        for (int i = 0; i < n; i++) {
            ids[i] = seed * 1000 + i;
        }
        return ids;
    }

    private static String table(Sequence s) {
        final int[] t = new int[s.pageCount()];
        s.copyBlockTable(t, 0);
        return java.util.Arrays.toString(t);
    }

    /** Writes the request id into the first element of every K and V vector of tokens [from, to). */
    private static void write(Sequence s, int request, int from, int to) {
        final KvLayout l = s.pool().layout();
        for (int t = from; t < to; t++) {
            final MemorySegment page = s.page(t / l.tokensPerPage());
            for (int layer = 0; layer < l.layers(); layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    page.set(ValueLayout.JAVA_INT_UNALIGNED, l.offset(layer, kv, t % l.tokensPerPage()), request);
                }
            }
        }
    }

    private static int owner(Sequence s, int t) {
        final KvLayout l = s.pool().layout();
        return s.page(t / l.tokensPerPage()).get(ValueLayout.JAVA_INT_UNALIGNED, l.offset(0, 0, t % l.tokensPerPage()));
    }
}
