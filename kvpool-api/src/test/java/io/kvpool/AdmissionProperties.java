package io.kvpool;

import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.Tuple;
import net.jqwik.api.statistics.Statistics;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.lifecycle.AddLifecycleHook;
import net.jqwik.api.lifecycle.AfterProperty;
import net.jqwik.api.lifecycle.AfterTry;
import net.jqwik.api.state.Action;
import net.jqwik.api.state.ActionChain;
import net.jqwik.api.state.ActionChainArbitrary;
import net.jqwik.api.state.Transformer;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Admission: random requests ({@link KvPool#admit}, {@link KvPool#tryReserve},
 * {@link KvPool#openSequence}, {@link KvPool#cancelReservation}), growth and closes against a model of
 * free and reserved pages. A request is ADMITTED iff {@code prompt + maxNew ≤ maxContext} and its pages
 * fit {@code free − reserved}; the typed decision and its numbers match the model; {@code reserved ≤ free}
 * always; opening keeps a reservation, cancelling and closing return it exactly; under
 * {@link ReservationPolicy#FULL} an admitted request never runs out of pages within its admitted tokens.
 */
@AddLifecycleHook(PropsTries.class)
class AdmissionProperties {

    sealed interface Req permits Admit, Reserve, Open, Cancel, Grow, Close {
    }

    /** Sizes are in thousandths of the pool's max context, so requests fit pools of any size about equally often. */
    record Admit(int promptPermille, int maxNewPermille) implements Req {
    }

    record Reserve(int promptPermille, int maxNewPermille) implements Req {
    }

    record Open(int pick) implements Req {
    }

    /** Cancel a reservation; {@code again}: then cancel (and open) it a second time, which must be refused. */
    record Cancel(int pick, boolean again) implements Req {
    }

    /** Append {@code n} tokens to an admitted sequence. */
    record Grow(int pick, int n) implements Req {
    }

    record Close(int pick) implements Req {
    }

    /** The admission model next to a pool. */
    static final class Model implements AutoCloseable {
        final KvPool pool;
        final int capacity;
        final long maxContext;
        final boolean full;
        final int maxReservations;

        final class Seq {
            final Sequence seq;
            int reserved;
            long admitted;
            int tokens;

            Seq(Sequence seq, int reserved, long admitted) {
                this.seq = seq;
                this.reserved = reserved;
                this.admitted = admitted;
            }
        }

        record Reservation(long id, int pages, long tokens) {
        }

        final List<Seq> seqs = new ArrayList<>();
        final List<Reservation> reservations = new ArrayList<>();
        final List<Long> spent = new ArrayList<>(); // opened or cancelled reservation ids
        long tooLong;
        long retryLater;
        final List<String> log = new ArrayList<>();
        final java.util.Set<String> events = new java.util.TreeSet<>();

        Model(KvPool pool, int maxReservations, ReservationPolicy policy) {
            this.pool = pool;
            this.capacity = pool.capacity();
            this.maxContext = pool.maxContextTokens();
            this.full = policy == ReservationPolicy.FULL;
            this.maxReservations = maxReservations;
        }

        int prompt(int permille) {
            return Math.max(1, tokens(permille));
        }

        int tokens(int permille) {
            return (int) ((maxContext * permille + 999) / 1000);
        }

        long free() {
            long used = 0;
            for (Seq s : seqs) {
                used += pool.layout().pagesFor(s.tokens);
            }
            return capacity - used;
        }

        long reserved() {
            long r = 0;
            for (Seq s : seqs) {
                r += s.reserved;
            }
            for (Reservation v : reservations) {
                r += v.pages();
            }
            return r;
        }

        /** @return the decision the model expects, before reservation-slot limits */
        Admission.Decision decide(int prompt, int maxNew) {
            final long tokens = (long) prompt + maxNew;
            if (tokens > maxContext) {
                return Admission.Decision.REJECTED_CONTEXT_TOO_LONG;
            }
            if (needed(prompt, maxNew) > capacity) {
                return Admission.Decision.REJECTED_EXCEEDS_POOL;
            }
            return needed(prompt, maxNew) > free() - reserved() ? Admission.Decision.RETRY_LATER : Admission.Decision.ADMITTED;
        }

        long needed(int prompt, int maxNew) {
            return pool.layout().pagesFor(full ? (long) prompt + maxNew : prompt);
        }

        void count(Admission.Decision d) {
            if (d == Admission.Decision.REJECTED_CONTEXT_TOO_LONG) {
                tooLong++;
            } else if (d == Admission.Decision.RETRY_LATER) {
                retryLater++;
            }
        }

        void apply(Req req) {
            switch (req) {
                case Admit a -> admit(prompt(a.promptPermille()), tokens(a.maxNewPermille()));
                case Reserve r -> reserve(prompt(r.promptPermille()), tokens(r.maxNewPermille()));
                case Open o -> {
                    if (reservations.isEmpty()) {
                        return;
                    }
                    final Reservation r = reservations.remove(Math.floorMod(o.pick(), reservations.size()));
                    log.add("openSequence(" + r.id() + ")");
                    final Sequence seq = pool.openSequence(r.id());
                    spent.add(r.id());
                    seqs.add(new Seq(seq, r.pages(), r.tokens()));
                    check(seq.reservedPages() == r.pages() && seq.admittedTokens() == r.tokens() && seq.tokenCount() == 0,
                        "opened " + seq + " admitted for " + seq.admittedTokens() + " tokens from reservation " + r);
                }
                case Cancel c -> {
                    if (reservations.isEmpty()) {
                        return;
                    }
                    final Reservation r = reservations.remove(Math.floorMod(c.pick(), reservations.size()));
                    log.add("cancelReservation(" + r.id() + ")" + (c.again() ? " twice" : ""));
                    final long before = pool.snapshot().reserved();
                    pool.cancelReservation(r.id());
                    spent.add(r.id());
                    final long returned = before - pool.snapshot().reserved();
                    events.add("cancelReservation");
                    check(returned == r.pages(), "cancelling reservation " + r + " returned " + returned + " pages");
                    if (c.again()) {
                        refused(() -> pool.cancelReservation(r.id()), "cancelling reservation " + r.id() + " again");
                        refused(() -> pool.openSequence(r.id()), "opening cancelled reservation " + r.id());
                    }
                }
                case Grow g -> grow(g);
                case Close c -> {
                    if (seqs.isEmpty()) {
                        return;
                    }
                    final Seq s = seqs.remove(Math.floorMod(c.pick(), seqs.size()));
                    log.add("close(" + s.seq + ")");
                    final PoolSnapshot before = pool.snapshot();
                    final int held = s.seq.reservedPages();
                    s.seq.close();
                    final PoolSnapshot after = pool.snapshot();
                    check(held == s.reserved && before.reserved() - after.reserved() == held,
                        "closing a sequence holding " + held + " reserved pages (model " + s.reserved + ") returned "
                            + (before.reserved() - after.reserved()));
                }
            }
        }

        private void admit(int prompt, int maxNew) {
            final Admission.Decision expected = decide(prompt, maxNew);
            final long available = free() - reserved();
            final Admission a = pool.admit(prompt, maxNew);
            log.add("admit(" + prompt + ", " + maxNew + ") -> " + a);
            count(expected);
            events.add("admit " + expected);
            check(a.decision() == expected, "expected " + expected + " (free " + free() + ", reserved " + reserved() + ")");
            check(a.requestedTokens() == (long) prompt + maxNew && a.maxContextTokens() == maxContext && a.pagesInService() == capacity
                    && a.pagesAvailable() == available && a.pagesNeeded() == needed(prompt, maxNew)
                    && a.admitted() == (expected == Admission.Decision.ADMITTED) && !a.message().isEmpty(),
                "numbers of " + a + ": needed " + a.pagesNeeded() + ", available " + a.pagesAvailable() + " (model " + available + ")");
            if (!a.admitted()) {
                refused(a::sequence, "sequence() of a refused admission");
                return;
            }
            final Sequence seq = a.sequence();
            final long admitted = full ? (long) prompt + maxNew : prompt;
            check(seq.reservedPages() == needed(prompt, maxNew) && seq.admittedTokens() == admitted && seq.tokenCount() == 0,
                "admitted " + seq + " for " + seq.admittedTokens() + " tokens");
            seqs.add(new Seq(seq, (int) needed(prompt, maxNew), admitted));
        }

        private void reserve(int prompt, int maxNew) {
            Admission.Decision expected = decide(prompt, maxNew);
            if (expected == Admission.Decision.ADMITTED && reservations.size() == maxReservations) {
                expected = Admission.Decision.RETRY_LATER; // no reservation slot left
            }
            final long id = pool.tryReserve(prompt, maxNew);
            log.add("tryReserve(" + prompt + ", " + maxNew + ") -> " + id);
            count(expected);
            events.add("tryReserve " + (expected == Admission.Decision.RETRY_LATER && decide(prompt, maxNew) == Admission.Decision.ADMITTED
                ? "RETRY_LATER (no reservation slot)" : expected));
            final long code = switch (expected) {
                case ADMITTED -> 0;
                case REJECTED_CONTEXT_TOO_LONG -> Admission.CONTEXT_TOO_LONG;
                case REJECTED_EXCEEDS_POOL -> Admission.EXCEEDS_POOL;
                case RETRY_LATER -> Admission.RETRY_LATER;
            };
            if (expected == Admission.Decision.ADMITTED) {
                check(id > 0 && !spent.contains(id) && reservations.stream().noneMatch(r -> r.id() == id), "expected a new reservation id");
                reservations.add(new Reservation(id, (int) needed(prompt, maxNew), full ? (long) prompt + maxNew : prompt));
            } else {
                check(id == code, "expected " + expected + " (" + code + ")");
            }
        }

        private void grow(Grow g) {
            if (seqs.isEmpty()) {
                return;
            }
            final Seq s = seqs.get(Math.floorMod(g.pick(), seqs.size()));
            final int n = g.n();
            log.add("append(" + s.seq + ", " + n + ")");
            if (s.tokens + (long) n > maxContext) {
                refused(() -> s.seq.append(n), "append past the max context");
                return;
            }
            final int newPages = (int) (pool.layout().pagesFor(s.tokens + (long) n) - pool.layout().pagesFor(s.tokens));
            final int fromReservation = Math.min(newPages, s.reserved);
            final int unreserved = newPages - fromReservation;
            if (unreserved > free() - reserved()) {
                check(!full || s.tokens + n > s.admitted, "FULL reservation ran out within the admitted tokens");
                events.add("append exhausted (" + (full ? "FULL, past admitted tokens" : "PROMPT_ONLY") + ")");
                try {
                    s.seq.append(n);
                } catch (PoolExhaustedException expected) {
                    return;
                }
                throw violation("append of " + n + " beyond the reservation was not refused (free " + free() + ", reserved " + reserved() + ")");
            }
            try {
                s.seq.append(n);
            } catch (RuntimeException e) {
                throw violation("append of " + n + " threw " + e);
            }
            s.tokens += n;
            s.reserved -= fromReservation;
        }

        /** The invariants, at a quiescent point. */
        void checkInvariants() {
            final PoolSnapshot snap;
            try {
                snap = pool.verifyAccounting();
            } catch (IllegalStateException e) {
                throw violation("verifyAccounting: " + e.getMessage());
            }
            check(snap.reserved() <= snap.free(), "reserved " + snap.reserved() + " > free " + snap.free());
            check(snap.free() == free() && snap.reserved() == reserved() && snap.openSequences() == seqs.size()
                    && snap.openReservations() == reservations.size() && snap.rejectedContextTooLong() == tooLong
                    && snap.rejectedExceedsPool() == 0 && snap.retryLater() == retryLater,
                "snapshot " + snap + ", model free " + free() + " reserved " + reserved() + " sequences " + seqs.size() + " reservations "
                    + reservations.size() + " tooLong " + tooLong + " retryLater " + retryLater);
            for (Seq s : seqs) {
                check(s.seq.reservedPages() == s.reserved && s.seq.tokenCount() == s.tokens, s.seq + ", model reserved " + s.reserved);
            }
        }

        private void refused(Runnable op, String what) {
            try {
                op.run();
            } catch (IllegalArgumentException | IllegalStateException expected) {
                return;
            }
            throw violation(what + " was not refused");
        }

        void check(boolean ok, String message) {
            if (!ok) {
                throw violation(message);
            }
        }

        AssertionError violation(String message) {
            return new AssertionError(message + "\n  pool of " + capacity + " pages × " + pool.layout().tokensPerPage() + " tokens, max context "
                + maxContext + ", " + (full ? "FULL" : "PROMPT_ONLY") + " reservations, at most " + maxReservations + " open; operations:\n    "
                + String.join("\n    ", log));
        }

        @Override
        public void close() {
            try {
                seqs.forEach(s -> s.seq.close());
                reservations.forEach(r -> pool.cancelReservation(r.id()));
            } catch (RuntimeException ignored) {
                // a broken pool (a test of the checker) may refuse
            }
            pool.close();
        }
    }

    // ---------------------------------------------------------------------------------------------

    private static final List<Model> OPEN = new ArrayList<>();
    private static final ThreadLocal<Object[]> POOL_SHAPE = ThreadLocal.withInitial(() -> new Object[] {8, 32L, ReservationPolicy.FULL, 4});

    @Property(tries = 200)
    void admissionMatchesTheModel(@ForAll @IntRange(min = 1, max = 16) int pages,
                                  @ForAll @IntRange(min = 10, max = 100) int contextPercent,
                                  @ForAll boolean promptOnly,
                                  @ForAll @IntRange(min = 1, max = 4) int maxReservations,
                                  @ForAll("requests") ActionChain<Model> chain) {
        final long maxContext = Math.max(1, (long) pages * TestPools.SMALL.tokensPerPage() * contextPercent / 100);
        POOL_SHAPE.set(new Object[] {pages, maxContext, promptOnly ? ReservationPolicy.PROMPT_ONLY : ReservationPolicy.FULL, maxReservations});
        final Model m = chain.withInvariant("admission matches the model", Model::checkInvariants).run();
        m.events.forEach(e -> Statistics.label("tries in which this happened").collect(e));
    }

    @Provide
    Arbitrary<ActionChain<Model>> requests() {
        return chain(() -> {
            final Object[] shape = POOL_SHAPE.get();
            return model(TestPools.builder((int) shape[0]).maxContextTokens((long) shape[1]), (ReservationPolicy) shape[2], (int) shape[3]);
        });
    }

    static ActionChainArbitrary<Model> chain(java.util.function.Supplier<Model> start) {
        ActionChainArbitrary<Model> chain = ActionChain.startWith(start);
        for (Tuple.Tuple2<Integer, Arbitrary<Req>> w : weightedRequests()) {
            final Arbitrary<Req> reqs = w.get2();
            final Action.Independent<Model> action = () -> reqs.map(r -> Transformer.mutate(r.toString(), m -> m.apply(r)));
            chain = chain.withAction(w.get1(), action);
        }
        return chain.withMaxTransformations(60);
    }

    static List<Tuple.Tuple2<Integer, Arbitrary<Req>>> weightedRequests() {
        final Arbitrary<Integer> prompt = Arbitraries.frequencyOf(Tuple.of(6, Arbitraries.integers().between(0, 500)),
            Tuple.of(1, Arbitraries.integers().between(0, 1100)));
        final Arbitrary<Integer> maxNew = Arbitraries.frequencyOf(Tuple.of(6, Arbitraries.integers().between(0, 300)),
            Tuple.of(1, Arbitraries.integers().between(0, 1100)));
        final Arbitrary<Integer> pick = Arbitraries.integers().between(0, 15);
        return List.of(
            Tuple.of(5, Combinators.combine(prompt, maxNew).as(Admit::new)),
            Tuple.of(3, Combinators.combine(prompt, maxNew).as(Reserve::new)),
            Tuple.of(2, pick.map(Open::new)),
            Tuple.of(2, Combinators.combine(pick, Arbitraries.of(false, true)).as(Cancel::new)),
            Tuple.of(4, Combinators.combine(pick, Arbitraries.integers().between(0, 12)).as(Grow::new)),
            Tuple.of(4, pick.map(Close::new)));
    }

    static Model model(KvPoolBuilder builder, ReservationPolicy policy, int maxReservations) {
        final Model m = new Model(builder.reservationPolicy(policy).maxReservations(maxReservations).build(), maxReservations, policy);
        synchronized (OPEN) {
            OPEN.add(m);
        }
        return m;
    }

    @AfterTry
    @AfterProperty
    void closePools() {
        synchronized (OPEN) {
            OPEN.forEach(Model::close);
            OPEN.clear();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // The property can fail

    /** @return the failure the model reports for these requests, or null */
    static AssertionError run(Model m, Req... reqs) {
        try {
            m.checkInvariants();
            for (Req r : reqs) {
                m.apply(r);
                m.checkInvariants();
            }
            return null;
        } catch (AssertionError e) {
            return e;
        } finally {
            m.close();
        }
    }

    private static final Req[] TOO_LONG = {new Admit(750, 500), new Grow(0, 5)}; // 24 + 16 tokens against a max context of 32

    @Example
    void aTooLongRequestIsRejectedBySafePool() {
        final AssertionError e = run(model(TestPools.builder(8), ReservationPolicy.FULL, 4), TOO_LONG);
        assertNull(e, () -> String.valueOf(e));
    }

    @Example
    void withoutAdmissionRejectionATooLongRequestIsAdmittedAsAPlaceholder() {
        final AssertionError e = KvPoolStatefulProperties.quietly(() ->
            run(model(TestPools.builder(8).unsafeDisable(Safeguard.ADMISSION_REJECTION), ReservationPolicy.FULL, 4), TOO_LONG));
        assertNotNull(e, "the checker accepted a 40-token request admitted into a 32-token context");
        assertTrue(e.getMessage().startsWith("expected REJECTED_CONTEXT_TOO_LONG"), e::getMessage);
    }

    @Example
    void aReservationChangedBehindTheModelsBackIsCaught() {
        final Model m = model(TestPools.builder(8), ReservationPolicy.FULL, 4);
        m.apply(new Admit(125, 125)); // 4 + 4 tokens: 2 pages reserved
        m.checkInvariants();
        m.seqs.get(0).seq.reservedPages++; // a leak: the sequence now returns one page more than it was given
        final AssertionError e = assertThrows(AssertionError.class, () -> m.apply(new Close(0)));
        m.close();
        assertTrue(e.getMessage().startsWith("closing a sequence holding 3 reserved pages (model 2)"), e::getMessage);
    }

    @Example
    void randomSearchFindsTheDisabledAdmissionRejection() {
        final int[] found = {0};
        KvPoolStatefulProperties.quietly(() -> {
            final Arbitrary<Req> any = Arbitraries.frequencyOf(weightedRequests());
            for (int run = 0; run < 100 && found[0] == 0; run++) {
                final List<Req> reqs = any.list().ofMinSize(1).ofMaxSize(60).sample();
                final AssertionError e = run(model(TestPools.builder(8).maxContextTokens(20).unsafeDisable(Safeguard.ADMISSION_REJECTION),
                    ReservationPolicy.FULL, 4), reqs.toArray(Req[]::new));
                if (e != null && e.getMessage().startsWith("expected REJECTED_CONTEXT_TOO_LONG")) {
                    found[0]++;
                }
            }
            return null;
        });
        assertEquals(1, found[0], "100 random request sequences did not catch the disabled admission rejection");
    }
}
