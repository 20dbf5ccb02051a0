package io.kvpool.micrometer;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.function.Consumer;

/**
 * The meters one binder registered, by registry, so that the binder's {@code close()} can remove them.
 *
 * <p>A registry keeps one meter of a name and tags and hands it back to a second registration. A bind that gets
 * back a meter the registry held before it began is therefore showing another binder's object, not its own: the
 * bind is undone (the meters it did add are removed) and refused. A binder of the same class, tags and object as one
 * already bound there is a twin: its bind adds nothing and shares the first's meters, which stay until the last of
 * the twins closes. A binder dropped without {@code close()} counts until the collector finds it: while the object
 * lives, a later binder of it is that binder's twin, and the last twin that closes, once the dropped ones are
 * collected, removes the meters. Once the object is collected too and no binder of it is left, the next bind to that
 * registry removes them (a new object may then show under the same tags).
 *
 * <p>What is kept of a bind ({@code Shown}) is kept by object, then by registry, both weakly, and holds nothing that
 * reaches its registry (meters and close actions' targets weakly): a registry dropped by the application is
 * collected even while its objects live, and what was kept for it goes with it.
 *
 * <p>Thread-safe: binds and closes of every binder run one at a time, under one lock (they are rare), so two
 * binders cannot interleave their registrations into one registry.
 */
final class BoundMeters {

    /** A close action and its target, held weakly here: the target's own meter keeps it (see {@link #onClose}). */
    private record CloseAction<T>(WeakReference<T> target, Consumer<T> action) {
        void run() {
            final T t = target.get();
            if (t != null) {
                action.accept(t);
            }
        }
    }

    /** What one registry shows for one binder class and tags: the object, the meters, and the binders sharing them. */
    private static final class Shown {
        final WeakReference<Object> observed;
        /** Weakly: the registry holds them while they are its meters; one it no longer holds is not removed again. */
        final List<WeakReference<Meter>> meters;
        final List<CloseAction<?>> onClose;
        /** The binders that bound it and have not closed; a dropped one is cleared and no longer counts. */
        final List<WeakReference<BoundMeters>> binders = new ArrayList<>();
        /**
         * Whether the registry held any of {@link #meters} right after the bind: one whose filters denied them all (no-op
         * meters) never held them, and holding none later says nothing about a clear ({@link #cleared}).
         */
        final boolean held;

        Shown(WeakReference<Object> observed, List<WeakReference<Meter>> meters, List<CloseAction<?>> onClose, boolean held) {
            this.observed = observed;
            this.meters = meters;
            this.onClose = onClose;
            this.held = held;
        }

        /** Drops {@code b}, and the binders collected unclosed; {@return whether none is left} */
        boolean release(BoundMeters b) {
            binders.removeIf(r -> r.get() == null || r.get() == b);
            return binders.isEmpty();
        }
    }

    /** Every bind and close; also guards {@link #SHOWN}. */
    private static final Object LOCK = new Object();
    /**
     * Observed object → registry → "binder class tags" → what that registry shows of it, until the last binder sharing
     * it closes: a later binder of the object is a twin even when every earlier one was dropped unclosed. Weak on the
     * object (meters hold it weakly too) and on the registry.
     */
    private static final Map<Object, Map<MeterRegistry, Map<String, Shown>>> SHOWN = new WeakHashMap<>();
    /**
     * Registry → what it shows, of every object, until the last binder sharing it closes or the sweep takes it (see
     * {@link #sweepOrphans}): the records of a collected object, which {@link #SHOWN} no longer reaches. Weak on the registry.
     */
    private static final Map<MeterRegistry, List<Shown>> BY_REGISTRY = new WeakHashMap<>();

    /** {@return the registries for which a record of what they show of {@code observed} is kept} For tests. */
    static int registriesKeptFor(Object observed) {
        synchronized (LOCK) {
            final Map<MeterRegistry, Map<String, Shown>> byRegistry = SHOWN.get(observed);
            return byRegistry == null ? 0 : byRegistry.size(); // size() expunges the collected registries first
        }
    }

    private final String binder;
    private final Tags tags;
    /** "binder class tags": what a registry shows for this binder is recorded under it. */
    private final String key;
    private final WeakReference<Object> observed;
    private final Map<MeterRegistry, Shown> bound = new IdentityHashMap<>();
    /** The close actions' targets, strongly, while this binder lives (also during a bind that fails). */
    private final List<Object> keep = new ArrayList<>();
    private boolean closed;
    // the bind under way (under LOCK): what the registry held when it began, and what it added
    private Set<Meter> before;
    private List<Meter> adding;
    private List<CloseAction<?>> closing;

    /**
     * @param binder   the binder's class name, for messages and the record of what is shown
     * @param tags     the binder's common tags
     * @param observed the pool or engine the binder observes (held weakly)
     */
    BoundMeters(String binder, Tags tags, Object observed) {
        this.binder = binder;
        this.tags = tags;
        this.key = binder + " " + tags;
        this.observed = new WeakReference<>(observed);
    }

    /**
     * Runs {@code registrations}, which register the binder's meters through {@link #add}, unless this binder, or a
     * twin of it (same class, tags and object), is bound to {@code registry} already. A failure undoes the bind.
     *
     * @throws IllegalStateException if this binder is closed, or {@code registry} shows another object under these
     *                               names and tags (a registration got back a meter the registry held before)
     */
    void bind(MeterRegistry registry, Runnable registrations) {
        synchronized (LOCK) {
            if (closed) {
                throw new IllegalStateException(binder + " " + tags + " is closed: make a new binder to bind again");
            }
            final Shown mineThere = bound.get(registry);
            if (mineThere != null) {
                if (!cleared(registry, mineThere)) {
                    return;
                }
                forget(registry, mineThere);
            }
            final Object mine = observed.get();
            final Map<MeterRegistry, Map<String, Shown>> byRegistry = mine == null ? null : SHOWN.get(mine);
            final Map<String, Shown> shown = byRegistry == null ? null : byRegistry.get(registry);
            Shown there = shown == null ? null : shown.get(key);
            if (there != null && cleared(registry, there)) {
                forget(registry, there);
                there = null;
            }
            if (there != null) {
                // a twin: the meters there are this object's already
                there.binders.add(new WeakReference<>(this));
                bound.put(registry, there);
                for (CloseAction<?> c : there.onClose) {
                    final Object t = c.target().get();
                    if (t != null) {
                        keep.add(t);
                    }
                }
                return;
            }
            sweepOrphans(registry);
            before = heldBy(registry);
            adding = new ArrayList<>();
            closing = new ArrayList<>();
            try {
                registrations.run();
                final Shown s = new Shown(observed, adding.stream().map(WeakReference::new).toList(), List.copyOf(closing),
                    holdsAny(registry, adding));
                s.binders.add(new WeakReference<>(this));
                bound.put(registry, s);
                if (mine != null) { // recorded only for a bind that succeeded
                    SHOWN.computeIfAbsent(mine, o -> new WeakHashMap<>()).computeIfAbsent(registry, r -> new HashMap<>()).put(key, s);
                    BY_REGISTRY.computeIfAbsent(registry, r -> new ArrayList<>()).add(s);
                }
            } catch (RuntimeException | Error e) {
                closing.forEach(CloseAction::run); // what it added besides meters (peer-info rows), while their meters hold them
                adding.forEach(registry::remove);  // only what this bind added; a meter it got back is another's
                throw e;
            } finally {
                before = null;
                adding = null;
                closing = null;
            }
        }
    }

    /**
     * Whether {@code registry} holds none of the meters {@code s} recorded, though it held some after the bind: the
     * application cleared them (or removed them) behind the binders' backs. Such a record shows nothing, and a bind
     * must not take it as its twin. Under the lock.
     */
    private static boolean cleared(MeterRegistry registry, Shown s) {
        return s.held && !holdsAny(registry, s.meters.stream().map(WeakReference::get).toList());
    }

    /** {@return the meters {@code registry} holds now, by identity: a meter of the same id is another meter} */
    private static Set<Meter> heldBy(MeterRegistry registry) {
        final Set<Meter> held = Collections.newSetFromMap(new IdentityHashMap<>());
        held.addAll(registry.getMeters());
        return held;
    }

    /** @return whether {@code registry} holds any of {@code meters} (the same instances; nulls are skipped) */
    private static boolean holdsAny(MeterRegistry registry, List<Meter> meters) {
        final Set<Meter> held = heldBy(registry);
        for (Meter m : meters) {
            if (m != null && held.contains(m)) {
                return true;
            }
        }
        return false;
    }

    /**
     * Forgets a record whose meters {@code registry} no longer holds ({@link #cleared}): its binders are no longer bound
     * there (a later bind of each shows its object again), and its close actions do not run: they would act by meter
     * id, on what another binder may have registered since. Under the lock.
     */
    private void forget(MeterRegistry registry, Shown s) {
        for (WeakReference<BoundMeters> r : s.binders) {
            final BoundMeters b = r.get();
            if (b != null) {
                b.bound.remove(registry, s);
            }
        }
        s.binders.clear();
        unrecord(registry, s, key);
    }

    /** Removes {@code s} from the records of what {@code registry} shows. Under the lock. */
    private static void unrecord(MeterRegistry registry, Shown s, String key) {
        final List<Shown> all = BY_REGISTRY.get(registry);
        if (all != null && all.remove(s) && all.isEmpty()) {
            BY_REGISTRY.remove(registry);
        }
        final Object o = s.observed.get();
        final Map<MeterRegistry, Map<String, Shown>> byRegistry = o == null ? null : SHOWN.get(o);
        final Map<String, Shown> shown = byRegistry == null ? null : byRegistry.get(registry);
        if (shown != null && shown.remove(key, s) && shown.isEmpty()) {
            byRegistry.remove(registry);
            if (byRegistry.isEmpty()) {
                SHOWN.remove(o);
            }
        }
    }

    /**
     * Removes from {@code registry} the meters of objects that were collected while every binder that showed them was
     * dropped unclosed: nothing will close those, and they would refuse a binder of a new object under the same tags.
     * Meters of a collected object whose binder lives stay: that binder's close removes them. Under the lock.
     */
    private static void sweepOrphans(MeterRegistry registry) {
        final List<Shown> all = BY_REGISTRY.get(registry);
        if (all == null) {
            return;
        }
        all.removeIf(s -> {
            if (s.observed.get() != null || !s.release(null)) { // release(null) drops only the collected binders
                return false;
            }
            takeDown(registry, s);
            return true;
        });
        if (all.isEmpty()) {
            BY_REGISTRY.remove(registry);
        }
    }

    /**
     * Takes down what {@code s} shows in {@code registry}: runs its close actions, while its meters still hold their
     * targets, then removes the meters its bind added that the registry still holds, the same instances (a registry
     * cleared since may hold another binder's meter under the same id, which a removal by id would take). A record
     * whose meters were all cleared takes nothing down: its close actions (peer-info rows) remove by id too. Under the lock.
     */
    private static void takeDown(MeterRegistry registry, Shown s) {
        if (cleared(registry, s)) {
            return;
        }
        s.onClose.forEach(CloseAction::run);
        final Set<Meter> held = heldBy(registry);
        for (WeakReference<Meter> ref : s.meters) {
            final Meter m = ref.get();
            if (m != null && held.contains(m)) {
                registry.remove(m);
            }
        }
    }

    /**
     * Records a meter a registration of {@link #bind} got back from {@code registry}; returns it. Under the bind.
     *
     * @throws IllegalStateException if the registry held it before the bind began: another binder's meter
     */
    <M extends Meter> M add(MeterRegistry registry, M meter) {
        if (before.contains(meter)) {
            throw new IllegalStateException("the registry already has " + meter.getId().getName() + " with tags " + tags
                + " from another binder (or from this one through a composite registry): close that binder first (it "
                + "removes its meters), or give this one other tags");
        }
        adding.add(meter);
        return meter;
    }

    /**
     * Runs {@code action} on {@code target} when the meters this bind adds are removed, before they are. Under the bind.
     * The target is held strongly by this binder and weakly by what the registry shows, so one of the bind's meters
     * must hold it strongly too (else it may be gone when the last binder closes); {@code action} must not hold it.
     */
    <T> void onClose(T target, Consumer<T> action) {
        keep.add(target);
        closing.add(new CloseAction<>(new WeakReference<>(target), action));
    }

    /**
     * Gives up this binder's share of what each registry shows; the last live binder of a twin group runs the close
     * actions and removes the meters. Once; later calls do nothing.
     */
    void close() {
        synchronized (LOCK) {
            if (closed) {
                return;
            }
            closed = true;
            bound.forEach((registry, s) -> {
                if (!s.release(this)) {
                    return;
                }
                takeDown(registry, s);
                unrecord(registry, s, key);
            });
            bound.clear();
            keep.clear();
        }
    }
}
