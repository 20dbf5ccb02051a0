package io.kvpool.micrometer;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.Collections;
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
 * bind is undone (the meters it did add are removed) and refused, unless that other binder observes the same object
 * under the same tags, in which case the bind is a no-op. Which object a registry's meters observe, by binder class
 * and tags, is kept here, weakly on both the registry and the object.
 *
 * <p>Thread-safe: a bind and a close of one binder run one at a time (this object's monitor).
 */
final class BoundMeters {

    /** Registry → "binder class tags" → the object its meters observe. Weak on registries and objects. */
    private static final Map<MeterRegistry, Map<String, WeakReference<Object>>> OBSERVED = new WeakHashMap<>();

    private final String binder;
    private final Tags tags;
    private final WeakReference<Object> observed;
    private final Map<MeterRegistry, List<Meter>> meters = new IdentityHashMap<>();
    private final List<Runnable> onClose = new ArrayList<>();
    private boolean closed;
    // the bind under way: what the registry held when it began, and the meters it added
    private Set<Meter> before;
    private List<Meter> adding;

    /**
     * @param binder   the binder's class name, for messages and the record of what is observed
     * @param tags     the binder's common tags
     * @param observed the pool or engine the binder observes (held weakly)
     */
    BoundMeters(String binder, Tags tags, Object observed) {
        this.binder = binder;
        this.tags = tags;
        this.observed = new WeakReference<>(observed);
    }

    /**
     * Runs {@code registrations}, which register the binder's meters through {@link #add}, unless this binder is
     * bound to {@code registry} already or another binder observing the same object is. A failure undoes the bind.
     *
     * @throws IllegalStateException if this binder is closed, or {@code registry} shows another object under these
     *                               names and tags (a registration got back a meter the registry held before)
     */
    synchronized void bind(MeterRegistry registry, Runnable registrations) {
        if (closed) {
            throw new IllegalStateException(binder + " " + tags + " is closed: make a new binder to bind again");
        }
        if (meters.containsKey(registry) || observedThere(registry) == observed.get() && observed.get() != null) {
            return; // bound already, by this binder or a twin of it on the same object: the meters are there
        }
        before = Collections.newSetFromMap(new IdentityHashMap<>());
        before.addAll(registry.getMeters());
        adding = new ArrayList<>();
        final int closeActions = onClose.size();
        try {
            registrations.run();
            meters.put(registry, adding);
            synchronized (OBSERVED) {
                OBSERVED.computeIfAbsent(registry, r -> new java.util.HashMap<>()).put(key(), observed);
            }
        } catch (RuntimeException | Error e) {
            adding.forEach(registry::remove); // only what this bind added; a meter it got back is another's
            final List<Runnable> undo = onClose.subList(closeActions, onClose.size());
            undo.forEach(Runnable::run); // what this bind added besides meters (peer-info rows)
            undo.clear();
            throw e;
        } finally {
            before = null;
            adding = null;
        }
    }

    /**
     * Records a meter a registration of {@link #bind} got back from {@code registry}; returns it.
     *
     * @throws IllegalStateException if the registry held it before the bind began: another binder's meter
     */
    synchronized <M extends Meter> M add(MeterRegistry registry, M meter) {
        if (before.contains(meter)) {
            throw new IllegalStateException("the registry already has " + meter.getId().getName() + " with tags " + tags
                + " from another binder (or from this one through a composite registry): close that binder first (it "
                + "removes its meters), or give this one other tags");
        }
        adding.add(meter);
        return meter;
    }

    /** Runs {@code action} at {@link #close}, after the meters are removed. */
    synchronized void onClose(Runnable action) {
        onClose.add(action);
    }

    /** Removes every recorded meter from its registry and runs the close actions, once; later calls do nothing. */
    synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        meters.forEach((registry, list) -> {
            list.forEach(registry::remove);
            synchronized (OBSERVED) {
                final Map<String, WeakReference<Object>> m = OBSERVED.get(registry);
                if (m != null && m.get(key()) == observed) {
                    m.remove(key());
                }
            }
        });
        meters.clear();
        onClose.forEach(Runnable::run);
        onClose.clear();
    }

    /** @return the object another binder of this class and tags observes in {@code registry}, or {@code null} */
    private Object observedThere(MeterRegistry registry) {
        synchronized (OBSERVED) {
            final Map<String, WeakReference<Object>> m = OBSERVED.get(registry);
            final WeakReference<Object> ref = m == null ? null : m.get(key());
            return ref == null ? null : ref.get();
        }
    }

    private String key() {
        return binder + " " + tags;
    }
}
