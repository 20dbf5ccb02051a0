package io.kvpool.micrometer;

import io.micrometer.core.instrument.FunctionTimer;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.TimeGauge;
import io.micrometer.core.instrument.binder.MeterBinder;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The module README's meter tables against the meters each binder registers: every meter has a row, every row a meter,
 * and a row's type, unit and tags are the meter's. Its Prometheus names are {@link PrometheusScrapeTest#FAMILIES}.
 */
class ReadmeMeterTableTest {

    private static final Pattern CODE = Pattern.compile("`([^`]+)`");

    /** One row of a meter table: its names, Prometheus name (or null), type and tags columns. */
    record Row(List<String> names, String prometheus, String type, String tags) {
    }

    /** {@return the rows of the table under the README heading that starts with {@code heading}} */
    static List<Row> table(String heading) throws IOException {
        final List<String> lines = Files.readAllLines(Path.of("README.md"));
        final int at = lines.indexOf(lines.stream().filter(l -> l.startsWith(heading)).findFirst()
            .orElseThrow(() -> new AssertionError("no heading " + heading + " in README.md")));
        final List<Row> rows = new ArrayList<>();
        for (int i = at + 1; i < lines.size() && !lines.get(i).startsWith("#"); i++) {
            final String l = lines.get(i);
            if (!l.startsWith("| `")) {
                continue;
            }
            final String[] cells = l.substring(1).split("\\|", -1);
            final Matcher p = CODE.matcher(cells[1]);
            rows.add(new Row(codes(cells[0]), p.find() ? p.group(1) : null, cells[2].trim(), cells[3].trim()));
        }
        assertFalse(rows.isEmpty(), "no rows under " + heading);
        return rows;
    }

    private static List<String> codes(String cell) {
        final List<String> out = new ArrayList<>();
        final Matcher m = CODE.matcher(cell);
        while (m.find()) {
            out.add(m.group(1));
        }
        return out;
    }

    /** {@return the binder's meters by name, its common tag {@code pool=x} left out of their tags} */
    static Map<String, List<Meter>> bound(MeterBinder binder) {
        final MeterRegistry registry = new SimpleMeterRegistry();
        binder.bindTo(registry);
        return registry.getMeters().stream().collect(Collectors.groupingBy(m -> m.getId().getName(), TreeMap::new,
            Collectors.toList()));
    }

    /** {@return tag key → the values the meters of one name carry, the common tag left out} */
    static Map<String, Set<String>> tags(List<Meter> meters) {
        final Map<String, Set<String>> out = new TreeMap<>();
        for (Meter m : meters) {
            for (Tag t : m.getId().getTags()) {
                if (!t.getKey().equals("pool")) {
                    out.computeIfAbsent(t.getKey(), k -> new TreeSet<>()).add(t.getValue());
                }
            }
        }
        return out;
    }

    /**
     * {@return tag key → the values a row's tags column lists} "{@code `k`: a, b}" lists values, "{@code `k`}" only a key
     * (its values are the data's), "{@code `k`: as `name`}" the values of the row of that name; "{@code `k` (x)}" in a
     * row of several names only a key of the name that ends in {@code .x}.
     */
    static Map<String, Set<String>> tags(Row row, String name, Function<String, Row> byName) {
        final Map<String, Set<String>> out = new TreeMap<>();
        if (row.tags().isEmpty()) {
            return out;
        }
        final Matcher m = Pattern.compile("^`([a-z_]+)`(?:\\s*\\((\\w+)\\))?(?::\\s*(.*))?$").matcher(row.tags());
        assertTrue(m.find(), () -> "tags column of " + row.names() + ": " + row.tags());
        if (m.group(2) != null && !name.endsWith("." + m.group(2))) {
            return out;
        }
        final String values = m.group(3);
        if (values == null || values.isBlank()) {
            out.put(m.group(1), null);
        } else if (values.startsWith("as `")) {
            final String other = codes(values).get(0);
            out.put(m.group(1), tags(byName.apply(other), other, byName).get(m.group(1)));
        } else {
            out.put(m.group(1), new TreeSet<>(List.of(values.trim().split(",\\s*"))));
        }
        return out;
    }

    /**
     * Checks one binder's meters against its table; {@code all} is every table's rows by name (a row may point to
     * another table's), {@code prometheus} collects the table's Prometheus names.
     */
    static void check(String heading, MeterBinder binder, Map<String, Row> all, Set<String> prometheus) throws IOException {
        final Map<String, Row> byName = new TreeMap<>();
        for (Row r : table(heading)) {
            r.names().forEach(n -> assertNull(byName.put(n, r), () -> n + " has two rows under " + heading));
            if (r.prometheus() != null) {
                prometheus.add(r.prometheus());
            }
        }
        final Map<String, List<Meter>> meters = bound(binder);
        assertEquals(meters.keySet(), byName.keySet(), heading + ": the README's names are the registered ones");
        meters.forEach((name, list) -> {
            final Row row = byName.get(name);
            for (Meter m : list) {
                final String type = switch (m) {
                    case FunctionTimer t -> "function timer";
                    case TimeGauge g -> "time gauge";
                    default -> switch (m.getId().getType()) {
                        case GAUGE -> m.getId().getBaseUnit() == null ? "gauge" : "gauge (" + m.getId().getBaseUnit() + ")";
                        case COUNTER -> "counter";
                        default -> m.getId().getType().toString();
                    };
                };
                assertTrue(List.of(row.type().split(",\\s*")).contains(type),
                    () -> name + " is a " + type + ", its README row says " + row.type());
            }
            final Map<String, Set<String>> documented = tags(row, name, all::get);
            final Map<String, Set<String>> actual = tags(list);
            assertEquals(documented.keySet(), actual.keySet(), () -> name + ": tag keys");
            documented.forEach((k, v) -> {
                if (v != null) {
                    assertEquals(v, actual.get(k), () -> name + ": values of tag " + k);
                }
            });
        });
    }

    @Test
    void everyRegisteredMeterHasAReadmeRowWithItsTypeUnitTagsAndPrometheusName() throws IOException {
        final Set<String> prometheus = new TreeSet<>();
        final Map<String, Row> all = new TreeMap<>();
        for (String heading : List.of("### Pool", "### Receiver", "### Sender")) {
            table(heading).forEach(r -> r.names().forEach(n -> all.putIfAbsent(n, r)));
        }
        try (SimRig rig = new SimRig()) {
            check("### Pool", new KvPoolMeterBinder(rig.decode, Tags.of("pool", "x")), all, prometheus);
            check("### Receiver", new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "x")), all, prometheus);
            check("### Sender", new TransferSenderMeterBinder(rig.sender, Tags.of("pool", "x")), all, prometheus);
        }
        assertEquals(PrometheusScrapeTest.FAMILIES.stream().map(f -> f.substring(0, f.indexOf(' ')))
            .collect(Collectors.toCollection(TreeSet::new)), prometheus, "the README's Prometheus names are the scrape's families");
    }
}
