package io.kvpool.micrometer;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Statistic;

import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

/** Reads a registry's meters by a short key, {@code name{tag=value,...}} without the common tags. */
final class Meters {
    private Meters() {
    }

    /** @return {@code name{k=v,...}}, tags sorted, the common tag {@code common} left out */
    static String key(Meter m, String common) {
        final String tags = m.getId().getTags().stream().filter(t -> !t.getKey().equals(common))
            .map(t -> t.getKey() + "=" + t.getValue()).collect(Collectors.joining(","));
        return m.getId().getName() + (tags.isEmpty() ? "" : "{" + tags + "}");
    }

    /** @return every meter of the registry that carries {@code common=value}, by key */
    static Map<String, Meter> byKey(MeterRegistry registry, String common, String value) {
        final Map<String, Meter> out = new TreeMap<>();
        for (Meter m : registry.getMeters()) {
            if (value.equals(m.getId().getTag(common))) {
                out.put(key(m, common), m);
            }
        }
        return out;
    }

    /** @return the meter's one value: a gauge's value, a counter's count, a timer's count */
    static double value(Meter m) {
        double v = Double.NaN;
        for (var s : m.measure()) {
            if (s.getStatistic() == Statistic.VALUE
                || s.getStatistic() == Statistic.COUNT) {
                v = s.getValue();
            }
        }
        return v;
    }
}
