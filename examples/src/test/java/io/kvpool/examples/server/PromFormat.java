package io.kvpool.examples.server;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A strict reader of the Prometheus text format (0.0.4) for the tests: what a scraper would choke on or
 * silently merge. Checks that each family has one {@code # TYPE} (before its samples) and at most one
 * {@code # HELP}; that a family's samples are one block (a family never comes back after another began); that
 * counters' samples end in {@code _total}; that each sample line parses, label values escaped ({@code \\},
 * {@code \"}, {@code \n} only) and the value a number.
 */
final class PromFormat {

    private static final Pattern NAME = Pattern.compile("[a-zA-Z_:][a-zA-Z0-9_:]*");
    private static final Pattern SAMPLE = Pattern.compile("([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{(.*)})? (\\S+)( -?\\d+)?");
    private static final Pattern LABEL = Pattern.compile("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\\\n]|\\\\[\\\\\"n])*)\"(,|$)");

    private PromFormat() {
    }

    /** @return every way {@code text} breaks the format (empty if none) */
    static List<String> violations(String text) {
        final List<String> v = new ArrayList<>();
        final Map<String, String> types = new HashMap<>();
        final Set<String> helps = new HashSet<>();
        final Set<String> closed = new HashSet<>(); // families whose block ended
        String current = null;
        int n = 0;
        for (String line : text.split("\n", -1)) {
            n++;
            if (line.isEmpty()) {
                continue;
            }
            final String family;
            if (line.startsWith("#")) {
                final String[] p = line.split(" ", 4);
                if (p.length < 3 || !(p[1].equals("TYPE") || p[1].equals("HELP"))) {
                    continue; // a plain comment
                }
                family = p[2];
                if (!NAME.matcher(family).matches()) {
                    v.add("line " + n + ": bad metric name in '" + line + "'");
                }
                if (p[1].equals("TYPE")) {
                    if (types.containsKey(family)) {
                        v.add("line " + n + ": a second TYPE for " + family);
                    }
                    if (p.length < 4 || !Set.of("counter", "gauge", "histogram", "summary", "untyped").contains(p[3])) {
                        v.add("line " + n + ": bad type in '" + line + "'");
                    }
                    types.put(family, p.length < 4 ? "?" : p[3]);
                } else if (!helps.add(family)) {
                    v.add("line " + n + ": a second HELP for " + family);
                }
            } else {
                final Matcher m = SAMPLE.matcher(line);
                if (!m.matches()) {
                    v.add("line " + n + ": not a sample: '" + line + "'");
                    continue;
                }
                family = familyOf(m.group(1), types);
                final String type = types.get(family);
                if (type == null) {
                    v.add("line " + n + ": sample of " + m.group(1) + " before (or without) its TYPE");
                } else if (type.equals("counter") && !m.group(1).endsWith("_total")) {
                    v.add("line " + n + ": counter sample " + m.group(1) + " does not end in _total");
                }
                if (m.group(3) != null && !m.group(3).isEmpty()) {
                    final Matcher l = LABEL.matcher(m.group(3));
                    int at = 0;
                    while (at < m.group(3).length() && l.find(at) && l.start() == at) {
                        at = l.end();
                    }
                    if (at != m.group(3).length()) {
                        v.add("line " + n + ": labels do not parse (unescaped quote, backslash or newline?): '" + line + "'");
                    }
                }
                try {
                    final String value = m.group(4);
                    if (!value.equals("NaN") && !value.equals("+Inf") && !value.equals("-Inf")) {
                        Double.parseDouble(value);
                    }
                } catch (NumberFormatException e) {
                    v.add("line " + n + ": bad value in '" + line + "'");
                }
            }
            if (!family.equals(current)) {
                if (closed.contains(family)) {
                    v.add("line " + n + ": family " + family + " comes back after its block ended");
                }
                if (current != null) {
                    closed.add(current);
                }
                current = family;
            }
        }
        return v;
    }

    /** A sample's family: its name, or the name less {@code _total}, {@code _bucket}, {@code _sum}, {@code _count} when that is a declared family. */
    private static String familyOf(String sample, Map<String, String> types) {
        if (types.containsKey(sample)) {
            return sample;
        }
        for (String suffix : new String[] {"_total", "_bucket", "_sum", "_count", "_created"}) {
            if (sample.endsWith(suffix) && types.containsKey(sample.substring(0, sample.length() - suffix.length()))) {
                return sample.substring(0, sample.length() - suffix.length());
            }
        }
        return sample;
    }
}
