package io.kvpool.micrometer;

import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.MultiGauge;
import io.micrometer.core.instrument.Tags;

import java.lang.ref.WeakReference;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * {@code kvpool.peer.info}: one row per build of the peers whose links are UP or RETIRING (tag {@code build}, value 1), and
 * {@code kvpool.peer.links}: how many links are UP or RETIRING. The rows follow the engine's {@code peerBuilds()}: each read of
 * {@code kvpool.peer.links} (every scrape reads it) brings them up to date, so a build that came or went shows in
 * the rows from the next scrape on. {@code kvpool.peer.heartbeat.failures}: links the engine failed because the peer
 * answered no PING in time; {@code kvpool.peer.refused}, {@code kvpool.peer.frames.malformed},
 * {@code kvpool.peer.hellos.duplicate}: handshakes refused, frames that failed a link, HELLOs ignored as copies. Holds the
 * engine weakly, as every binder's meter does.
 */
final class PeerInfo {

    static final String INFO_DESCRIPTION =
        "1 for each build (tag build) of the peers whose links are UP or RETIRING, as their HELLO named it: a rollout mixes builds";
    static final String LINKS_DESCRIPTION = "Links to peers whose handshake passed, UP or RETIRING now (every build)";
    static final String HEARTBEAT_DESCRIPTION =
        "Links failed because the peer sent nothing within the heartbeat timeout after a PING, or did not finish the handshake "
            + "(HELLO, then INSTANCE on version 4) within the idle time plus the timeout of the link's start (a partition, a stopped peer)";

    static final String REFUSED_DESCRIPTION = "Links refused in the handshake, by either side: another model, layout "
        + "fingerprint or environment, another build under strictBuild, or no protocol version both speak";
    static final String MALFORMED_DESCRIPTION =
        "Frames that did not decode, or decoded but broke the protocol (a frame before the handshake, a version the link "
            + "does not speak, a second HELLO with another identity); each failed its link";
    static final String DUPLICATE_HELLOS_DESCRIPTION = "Copies of a peer's HELLO that came after it passed, ignored";

    private PeerInfo() {
    }

    /** What an engine counts about its links, read by the meters {@link #bind} registers. */
    record LinkCounts<E>(java.util.function.ToDoubleFunction<E> heartbeatFailures, java.util.function.ToDoubleFunction<E> refused,
                         java.util.function.ToDoubleFunction<E> malformedFrames, java.util.function.ToDoubleFunction<E> duplicateHellos) {
    }

    /** Registers the peer meters for {@code engine} under {@code tags}, recorded in {@code bound}, which removes them. */
    static <E> void bind(MeterRegistry registry, E engine, Function<E, Map<String, Integer>> builds, LinkCounts<E> counts,
                         Tags tags, BoundMeters bound) {
        counter(registry, engine, "kvpool.peer.heartbeat.failures", HEARTBEAT_DESCRIPTION, counts.heartbeatFailures(), tags, bound);
        counter(registry, engine, "kvpool.peer.refused", REFUSED_DESCRIPTION, counts.refused(), tags, bound);
        counter(registry, engine, "kvpool.peer.frames.malformed", MALFORMED_DESCRIPTION, counts.malformedFrames(), tags, bound);
        counter(registry, engine, "kvpool.peer.hellos.duplicate", DUPLICATE_HELLOS_DESCRIPTION, counts.duplicateHellos(), tags, bound);
        final MultiGauge info = MultiGauge.builder("kvpool.peer.info").description(INFO_DESCRIPTION).tags(tags).register(registry);
        final WeakReference<E> ref = new WeakReference<>(engine);
        final Refresh<E> refresh = new Refresh<>(info, ref, builds);
        // before the rows exist: a bind refused below (its undo runs this) leaves none; once closed, no scrape of the
        // links gauge, which may outlive it for a moment, brings a row back
        bound.onClose(refresh, Refresh::close); // the links gauge below holds the refresher strongly
        refresh.current();
        bound.add(registry, Gauge.builder("kvpool.peer.links", refresh,
                r -> r.current().values().stream().mapToInt(Integer::intValue).sum())
            .strongReference(true) // the refresher holds the engine only weakly
            .description(LINKS_DESCRIPTION)
            .tags(tags)
            .register(registry));
    }

    private static <E> void counter(MeterRegistry registry, E engine, String name, String description,
                                    java.util.function.ToDoubleFunction<E> value, Tags tags, BoundMeters bound) {
        bound.add(registry, io.micrometer.core.instrument.FunctionCounter.builder(name, engine, value)
            .description(description)
            .tags(tags)
            .register(registry)); // a function counter holds its object weakly
    }

    private static final class Refresh<E> {
        private final MultiGauge info;
        private final WeakReference<E> engine;
        private final Function<E, Map<String, Integer>> builds;
        private Set<String> shown;
        private boolean closed;

        Refresh(MultiGauge info, WeakReference<E> engine, Function<E, Map<String, Integer>> builds) {
            this.info = info;
            this.engine = engine;
            this.builds = builds;
        }

        /** @return the builds UP or RETIRING now (empty once the engine is collected), the rows brought up to date */
        synchronized Map<String, Integer> current() {
            if (closed) {
                return Map.of(); // a scrape that read the links gauge before its binder closed
            }
            final E e = engine.get();
            final Map<String, Integer> now = e == null ? Map.of() : builds.apply(e);
            if (!now.keySet().equals(shown)) {
                shown = Set.copyOf(now.keySet());
                final List<MultiGauge.Row<?>> rows = shown.stream().sorted()
                    .<MultiGauge.Row<?>>map(b -> MultiGauge.Row.of(Tags.of("build", b), 1)).toList();
                info.register(rows, true);
            }
            return now;
        }

        /** Removes every row, once; later reads show none. */
        synchronized void close() {
            closed = true;
            info.register(List.of(), true);
        }
    }
}
