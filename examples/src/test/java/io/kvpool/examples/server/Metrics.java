package io.kvpool.examples.server;

import java.util.LinkedHashMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Parses the Prometheus text format the server writes, checking its shape on the way. */
final class Metrics {
    private Metrics() {
    }

    /** @return every sample, {@code name{labels}} → value; fails on a malformed line or a family declared twice */
    static Map<String, Double> parse(String text) {
        final Map<String, Double> samples = new LinkedHashMap<>();
        final Map<String, String> types = new LinkedHashMap<>();
        for (String line : text.split("\n")) {
            if (line.startsWith("# TYPE ")) {
                final String[] p = line.split(" ");
                assertEquals(4, p.length, line);
                assertTrue(types.put(p[2], p[3]) == null, () -> "family declared twice: " + p[2]);
                continue;
            }
            if (line.startsWith("#") || line.isBlank()) {
                continue;
            }
            final int sp = line.lastIndexOf(' ');
            assertTrue(sp > 0, line);
            final String key = line.substring(0, sp);
            final String family = key.contains("{") ? key.substring(0, key.indexOf('{')) : key;
            assertTrue(types.containsKey(family) || types.containsKey(family.replaceAll("_(sum|count)$", "")),
                () -> "sample without a TYPE: " + line);
            assertTrue(samples.put(key, Double.parseDouble(line.substring(sp + 1))) == null, () -> "sample twice: " + key);
        }
        return samples;
    }

    /** @return the families a text declares ({@code # TYPE}) whose names start with {@code kvpool_}, in order */
    static java.util.List<String> families(String text) {
        return text.lines().filter(l -> l.startsWith("# TYPE kvpool_")).map(l -> l.split(" ")[2]).toList();
    }
}
