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

/**
 * The meters one binder registered, by registry, so that the binder's {@code close()} can remove them.
 *
 * <p>A registry keeps one meter of a name and tags and hands it back to a second registration. A bind that gets
 * back a meter the registry held before it began is therefore showing another binder's object, not its own: the
 * bind is undone (the meters it did add are removed) and refused. A binder of the same class, tags and object as one
 * already bound there is a twin: its bind adds nothing and shares the first's meters, which stay until the last of
 * the twins closes.
 *
 * <p>Thread-safe: binds and closes of every binder run one at a time, under one lock (they are rare), so two
 * binders cannot interleave their registrations into one registry.
 */
final class BoundMeters {

    /** What one registry shows for one binder class and tags: the object, the meters, and the binders sharing them. */
    private static final class Shown {
        final WeakReference<Object> observed;
        final List<Meter> meters;
        final List<Runnable> onClose;
        int binders = 1;

        Shown(WeakReference<Object> observed, List<Meter> meters, List<Runnable> onClose) {
            this.observed = observed;
            this.meters = meters;
            this.onClose = onClose;
        }
    }

    /** Every bind and close; also guards {@link #SHOWN}. */
    private static final Object LOCK = new Object();
    /**
     * Registry → "binder class tags" → what it shows. Weak on the registry and on what it shows: a {@link Shown} reaches
     * its registry (a peer-info row's MultiGauge holds it), so a strong value would keep the entry for ever; the binders
     * bound there hold their {@link Shown} strongly, which keeps the entry while one of them lives.
     */
    private static final Map<MeterRegistry, Map<String, WeakReference<Shown>>> SHOWN = new WeakHashMap<>();

    private final String binder;
    private final Tags tags;
    /** "binder class tags": what a registry shows for this binder is recorded under it. */
    private final String key;
    private final WeakReference<Object> observed;
    private final Map<MeterRegistry, Shown> bound = new IdentityHashMap<>();
    private boolean closed;
    // the bind under way (under LOCK): what the registry held when it began, and what it added
    private Set<Meter> before;
    private List<Meter> adding;
    private List<Runnable> closing;

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
            if (bound.containsKey(registry)) {
                return;
            }
            final Map<String, WeakReference<Shown>> shown = SHOWN.computeIfAbsent(registry, r -> new HashMap<>());
            final WeakReference<Shown> ref = shown.get(key);
            final Shown there = ref == null ? null : ref.get();
            final Object mine = observed.get();
            if (there != null && mine != null && there.observed.get() == mine) {
                there.binders++; // a twin: the meters there are this object's already
                bound.put(registry, there);
                return;
            }
            before = Collections.newSetFromMap(new IdentityHashMap<>());
            before.addAll(registry.getMeters());
            adding = new ArrayList<>();
            closing = new ArrayList<>();
            try {
                registrations.run();
                final Shown s = new Shown(observed, adding, closing);
                shown.put(key, new WeakReference<>(s));
                bound.put(registry, s);
            } catch (RuntimeException | Error e) {
                adding.forEach(registry::remove); // only what this bind added; a meter it got back is another's
                closing.forEach(Runnable::run);   // and what it added besides meters (peer-info rows)
                throw e;
            } finally {
                before = null;
                adding = null;
                closing = null;
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

    /** Runs {@code action} when the meters this bind adds are removed. Under the bind. */
    void onClose(Runnable action) {
        closing.add(action);
    }

    /**
     * Gives up this binder's share of what each registry shows; the last of a twin group removes the meters and runs
     * the close actions. Once; later calls do nothing.
     */
    void close() {
        synchronized (LOCK) {
            if (closed) {
                return;
            }
            closed = true;
            bound.forEach((registry, s) -> {
                if (--s.binders > 0) {
                    return;
                }
                s.meters.forEach(registry::remove);
                s.onClose.forEach(Runnable::run);
                final Map<String, WeakReference<Shown>> shown = SHOWN.get(registry);
                final WeakReference<Shown> ref = shown == null ? null : shown.get(key);
                if (ref != null && ref.get() == s) {
                    shown.remove(key);
                }
            });
            bound.clear();
        }
    }
}
