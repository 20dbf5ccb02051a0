package io.kvpool.micrometer;

import io.kvpool.KvPool;
import io.kvpool.PoolMetrics;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.MeterBinder;

import java.lang.ref.WeakReference;
import java.util.Objects;
import java.util.function.ToLongFunction;

/**
 * Binds a {@link KvPool}'s gauges and counters ({@link KvPool#metrics()}, a {@link PoolMetrics}) to a
 * Micrometer registry: pages by state, capacity, reservations, the prefix cache, admissions refused by
 * reason, handles refused by reason, quarantine events. The module README lists every meter.
 *
 * <p>Each meter reads one {@link PoolMetrics} getter when the registry asks, from the registry's thread;
 * those getters may be called from any thread. Gauges are Micrometer {@link Gauge}s and monotonic counters
 * {@link FunctionCounter}s, so nothing is counted twice and the pool's hot paths are not touched.
 *
 * <p><b>Lifetime:</b> neither the binder nor its meters keep the pool alive. The binder holds the pool
 * weakly, and every meter holds it weakly (Micrometer's default, {@code strongReference(false)}). Once the
 * pool is unreachable and collected, its gauges read NaN and its counters keep their last value. {@link #close()}
 * removes the binder's meters; close it with the pool.
 *
 * <p>To bind several pools to one registry, give each distinct common tags (e.g. {@code pool=prefill} and
 * {@code pool=decode}): a registry keeps one meter of a name and tags, so a second binder with the same tags is
 * refused until the first is closed.
 */
public final class KvPoolMeterBinder implements MeterBinder, AutoCloseable {

    private static final String[] STATES = {"free", "owned", "receiving", "draining", "quarantined", "retired"};

    private final WeakReference<KvPool> pool;
    private final Tags tags;
    private final BoundMeters bound;

    /**
     * A binder with no common tags.
     *
     * @param pool the pool to observe
     * @throws NullPointerException if {@code pool} is null
     */
    public KvPoolMeterBinder(KvPool pool) {
        this(pool, Tags.empty());
    }

    /**
     * A binder whose meters all carry {@code tags}, e.g. {@code Tags.of("pool", "decode")}.
     *
     * @param pool the pool to observe
     * @param tags common tags added to every meter
     * @throws NullPointerException if {@code pool} or {@code tags} is null
     */
    public KvPoolMeterBinder(KvPool pool, Iterable<Tag> tags) {
        this.pool = new WeakReference<>(Objects.requireNonNull(pool, "pool"));
        this.tags = Tags.of(Objects.requireNonNull(tags, "tags"));
        this.bound = new BoundMeters("KvPoolMeterBinder", this.tags, pool);
    }

    /**
     * Registers the pool's meters. Binding this binder twice to one registry, or another binder of the same object with the same tags, registers nothing new. Binds
     * nothing if the pool was already collected.
     *
     * @param registry the registry to add the meters to
     * @throws NullPointerException  if {@code registry} is null
     * @throws IllegalStateException if this binder is closed, or the registry holds meters of the same names and
     *                               tags observing another object (close their binder first, or give this one
     *                               other tags); nothing of this bind is left registered
     */
    @Override
    public void bindTo(MeterRegistry registry) {
        Objects.requireNonNull(registry, "registry");
        final KvPool p = pool.get();
        if (p == null) {
            return;
        }
        bound.bind(registry, () -> register(registry, p));
    }

    /** Registers every meter of {@code p} (through {@link BoundMeters#add}). */
    private void register(MeterRegistry registry, KvPool p) {
        for (String state : STATES) {
            gauge(registry, p, "kvpool.pool.pages", "Pages by state; the states add up to the capacity at a quiescent point",
                "pages", pagesIn(state), "state", state);
        }
        gauge(registry, p, "kvpool.pool.capacity", "Pages the pool was built with", "pages", PoolMetrics::capacity);
        gauge(registry, p, "kvpool.pool.reserved", "Pages reserved for admitted requests and not yet allocated", "pages",
            PoolMetrics::reserved);
        gauge(registry, p, "kvpool.pool.cached.free", "FREE pages that still hold a published prefix (counted in state=free too)",
            "pages", PoolMetrics::cachedFree);
        gauge(registry, p, "kvpool.pool.prefix.indexed", "Pages in the prefix index, free or not", "pages",
            PoolMetrics::publishedPrefixes);
        gauge(registry, p, "kvpool.pool.sequences.open", "Sequences not yet closed", null, PoolMetrics::openSequences);
        gauge(registry, p, "kvpool.pool.reservations.open", "Reservations from tryReserve not yet opened or cancelled", null,
            PoolMetrics::openReservations);

        counter(registry, p, "kvpool.pool.allocations", "Times a page left FREE", PoolMetrics::allocations);
        counter(registry, p, "kvpool.pool.prefix.hits", "Pages attached from the prefix cache", PoolMetrics::prefixHits);
        counter(registry, p, "kvpool.pool.evictions", "Cached free pages evicted to satisfy an allocation", PoolMetrics::evictions);
        final String rejected = "Admissions the pool refused, by reason (retry_later: it fits the pool, but not now)";
        counter(registry, p, "kvpool.pool.admissions.rejected", rejected, PoolMetrics::rejectedContextTooLong, "reason", "context_too_long");
        counter(registry, p, "kvpool.pool.admissions.rejected", rejected, PoolMetrics::rejectedExceedsPool, "reason", "exceeds_pool");
        counter(registry, p, "kvpool.pool.admissions.rejected", rejected, PoolMetrics::retryLater, "reason", "retry_later");
        final String refused = "Operations refused for their page handle, by reason (stale: an older generation or invalid; "
            + "foreign: another pool's)";
        counter(registry, p, "kvpool.pool.handles.refused", refused, PoolMetrics::staleHandlesRefused, "reason", "stale");
        counter(registry, p, "kvpool.pool.handles.refused", refused, PoolMetrics::foreignHandlesRefused, "reason", "foreign");
        counter(registry, p, "kvpool.pool.quarantine.events", "Pages that entered QUARANTINED", PoolMetrics::quarantineEvents);
    }

    /**
     * Removes the meters this binder registered from every registry it bound them to, so that a pool built
     * again can be bound under the same tags. Idempotent; a closed binder cannot bind again.
     */
    @Override
    public void close() {
        bound.close();
    }

    private static ToLongFunction<PoolMetrics> pagesIn(String state) {
        return switch (state) {
            case "free" -> PoolMetrics::free;
            case "owned" -> PoolMetrics::owned;
            case "receiving" -> PoolMetrics::receiving;
            case "draining" -> PoolMetrics::draining;
            case "quarantined" -> PoolMetrics::quarantined;
            case "retired" -> PoolMetrics::retired;
            default -> throw new IllegalArgumentException(state);
        };
    }

    /** Registers a gauge that reads the pool through its weak reference; the function captures no pool. */
    private void gauge(MeterRegistry registry, KvPool p, String name, String description, String baseUnit,
                       ToLongFunction<PoolMetrics> value, String... tag) {
        bound.add(registry, Gauge.builder(name, p, pl -> value.applyAsLong(pl.metrics()))
            .strongReference(false)
            .description(description)
            .baseUnit(baseUnit)
            .tags(tags)
            .tags(tag)
            .register(registry));
    }

    /** Registers a function counter that reads the pool through its weak reference; the function captures no pool. */
    private void counter(MeterRegistry registry, KvPool p, String name, String description, ToLongFunction<PoolMetrics> value,
                         String... tag) {
        bound.add(registry, FunctionCounter.builder(name, p, pl -> value.applyAsLong(pl.metrics()))
            .description(description)
            .tags(tags)
            .tags(tag)
            .register(registry));
    }
}
