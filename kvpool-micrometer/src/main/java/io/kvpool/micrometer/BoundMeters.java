package io.kvpool.micrometer;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * The meters one binder registered, by registry, so that the binder's {@code close()} can remove them. Each
 * binder names one anchor meter, the first it registers: a registry that already holds the anchor under the
 * binder's tags, registered by any other binder, is refused, since Micrometer would hand back the other
 * binder's meters and the second object would never be shown. Thread-safe: every method holds this object's
 * monitor.
 */
final class BoundMeters {

    private final String binder;
    private final String anchor;
    private final Tags tags;
    private final Map<MeterRegistry, List<Meter>> meters = new IdentityHashMap<>();
    private final List<Runnable> onClose = new ArrayList<>();
    private boolean closed;

    /**
     * @param binder the binder's class, for messages
     * @param anchor the name of the first meter the binder registers
     * @param tags   the binder's common tags
     */
    BoundMeters(String binder, String anchor, Tags tags) {
        this.binder = binder;
        this.anchor = anchor;
        this.tags = tags;
    }

    /**
     * Starts a bind to {@code registry}.
     *
     * @return {@code false} if this binder is bound to it already (nothing new to register), else {@code true}
     * @throws IllegalStateException if the binder is closed, or another binder's meters hold these names and tags
     */
    synchronized boolean begin(MeterRegistry registry) {
        if (closed) {
            throw new IllegalStateException(binder + " " + tags + " is closed: make a new binder to bind again");
        }
        if (meters.containsKey(registry)) {
            return false;
        }
        for (Meter m : registry.find(anchor).tags(tags).meters()) {
            if (Tags.of(m.getId().getTags()).equals(tags)) {
                throw new IllegalStateException("the registry already has " + anchor + " with tags " + tags
                    + " from another binder: close that binder first (it removes its meters), or give this one other tags");
            }
        }
        meters.put(registry, new ArrayList<>());
        return true;
    }

    /** Records a meter registered to {@code registry} after {@link #begin} returned true; returns it. */
    synchronized <M extends Meter> M add(MeterRegistry registry, M meter) {
        meters.get(registry).add(meter);
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
        meters.forEach((registry, list) -> list.forEach(registry::remove));
        meters.clear();
        onClose.forEach(Runnable::run);
        onClose.clear();
    }
}
