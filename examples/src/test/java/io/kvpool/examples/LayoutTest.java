package io.kvpool.examples;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The examples' dependency rule, as each package's {@code package-info.java} states it: every main source file
 * under {@code io/kvpool/examples} may reference (import, or name fully qualified in code) only the
 * {@code io.kvpool.examples} packages its own package is allowed. Comments do not count: Javadoc may link anywhere.
 */
class LayoutTest {

    /** Each package (less {@code io.kvpool.examples.}; {@code ""} is the root) and the packages it may use. */
    static final Map<String, Set<String>> ALLOWED = allowed();

    /** The one exception: the launcher lists the {@code load} and {@code replay} subcommands, which start a server. */
    static final Map<String, Set<String>> FILE_EXCEPTIONS = Map.of("server/KvServerMain.java", Set.of("load", "replay"));

    private static Map<String, Set<String>> allowed() {
        final Map<String, Set<String>> m = new LinkedHashMap<>();
        m.put("", Set.of());
        m.put("http", Set.of());
        m.put("ui", Set.of("http"));
        m.put("server.link", Set.of());
        m.put("server.echo", Set.of("server.link"));
        m.put("server.config", Set.of("server.echo", "server.link"));
        m.put("server.role", Set.of("server.config", "server.echo", "server.link", "ui"));
        m.put("server.api", Set.of("server.role", "server.config", "http"));
        m.put("server.router", Set.of("server.api", "server.role", "server.config", "server.echo", "http"));
        m.put("server.metrics", Set.of("server.router", "server.role", "server.config", "http"));
        m.put("server.remote", Set.of("server.metrics", "server.api", "server.role", "server.config", "server.echo", "server.link",
            "http", "ui"));
        m.put("server", Set.of("server.remote", "server.metrics", "server.router", "server.api", "server.role", "server.config",
            "server.echo", "server.link", "http", "ui"));
        m.put("load", Set.of("server", "server.config", "server.echo"));
        m.put("replay", Set.of("load", "server", "server.config"));
        return m;
    }

    private static final String ROOT = "io.kvpool.examples";
    private static final Pattern PACKAGE = Pattern.compile("^package\\s+([\\w.]+)\\s*;", Pattern.MULTILINE);
    /** A reference: {@code io.kvpool.examples} and the lower-case segments after it (a package, then a class). */
    private static final Pattern REFERENCE = Pattern.compile("\\bio\\.kvpool\\.examples((?:\\.[a-z_][a-z0-9_]*)*)(?=\\.[A-Z*]|\\s*;)");

    static Path sources() {
        final Path inModule = Path.of("src/main/java/io/kvpool/examples");
        return Files.isDirectory(inModule) ? inModule : Path.of("examples").resolve(inModule);
    }

    @Test
    void everyMainSourceFileKeepsItsPackagesRule() throws IOException {
        final List<String> violations = violations(sources());
        if (!violations.isEmpty()) {
            fail(violations.size() + " forbidden edge(s); the rule is in each package's package-info.java:\n  "
                + String.join("\n  ", violations));
        }
    }

    @Test
    void theRuleItselfIsAcyclicAndNamesOnlyKnownPackages() {
        ALLOWED.forEach((p, uses) -> uses.forEach(u -> assertTrue(ALLOWED.containsKey(u), p + " may use unknown package " + u)));
        final Set<String> done = new TreeSet<>();
        for (String p : ALLOWED.keySet()) {
            visit(p, new ArrayList<>(), done);
        }
        assertEquals(ALLOWED.keySet(), done);
    }

    @Test
    void theCheckSeesAForbiddenImportAndAFullyQualifiedName() {
        final String src = """
            package io.kvpool.examples.server.link;

            import io.kvpool.examples.server.role.PrefillRole; // forbidden: link is the bottom
            import io.kvpool.examples.http.HttpCall;           /* forbidden too: io.kvpool.examples.server.api.Http */

            final class X {
                Object o = new io.kvpool.examples.server.echo.EchoKv(null, null);
                String s = "io.kvpool.examples.server.router.Router is text, not a reference";
            }
            """;
        assertEquals(List.of("server/link/X.java: server.link -> http", "server/link/X.java: server.link -> server.echo",
            "server/link/X.java: server.link -> server.role"), check("server/link/X.java", src));
        assertEquals(List.of(), check("server/KvServerMain.java",
            "package io.kvpool.examples.server;\nclass K { Object o = new io.kvpool.examples.load.LoadCommand(); }\n"));
    }

    private static void visit(String p, List<String> path, Set<String> done) {
        if (path.contains(p)) {
            fail("the rule has a cycle: " + String.join(" -> ", path) + " -> " + p);
        }
        if (done.contains(p)) {
            return;
        }
        path.add(p);
        for (String u : ALLOWED.getOrDefault(p, Set.of())) {
            visit(u, path, done);
        }
        path.removeLast();
        done.add(p);
    }

    /** @return "file: package -> forbidden package" for every forbidden reference under {@code root} */
    static List<String> violations(Path root) throws IOException {
        final List<String> out = new ArrayList<>();
        try (Stream<Path> files = Files.walk(root)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".java")).sorted().toList()) {
                out.addAll(check(root.relativize(f).toString().replace('\\', '/'), Files.readString(f)));
            }
        }
        assertTrue(out.size() > 0 || Files.exists(root.resolve("server/KvServer.java")), "no sources at " + root.toAbsolutePath());
        return out;
    }

    /** @return the forbidden edges of one source file, {@code file} its path under {@code io/kvpool/examples} */
    static List<String> check(String file, String source) {
        final String code = stripCommentsAndStrings(source);
        final Matcher pm = PACKAGE.matcher(code);
        if (!pm.find()) {
            return List.of(file + ": no package declaration");
        }
        final String own = relative(pm.group(1));
        if (own == null || !ALLOWED.containsKey(own)) {
            return List.of(file + ": package " + pm.group(1) + " has no rule; add it to LayoutTest.ALLOWED and its package-info.java");
        }
        final Set<String> ok = new TreeSet<>(ALLOWED.get(own));
        ok.addAll(FILE_EXCEPTIONS.getOrDefault(file, Set.of()));
        final Set<String> bad = new TreeSet<>();
        final Matcher m = REFERENCE.matcher(code.substring(pm.end()));
        while (m.find()) {
            final String used = relative(ROOT + m.group(1));
            if (!used.equals(own) && !ok.contains(used)) {
                bad.add(used);
            }
        }
        return bad.stream().map(b -> file + ": " + (own.isEmpty() ? "(root)" : own) + " -> " + (b.isEmpty() ? "(root)" : b)).toList();
    }

    private static String relative(String pkg) {
        if (pkg.equals(ROOT)) {
            return "";
        }
        return pkg.startsWith(ROOT + ".") ? pkg.substring(ROOT.length() + 1) : null;
    }

    /** @return {@code s} with comments, string and text-block literals blanked (so they cannot count as references) */
    static String stripCommentsAndStrings(String s) {
        final StringBuilder b = new StringBuilder(s.length());
        int i = 0;
        while (i < s.length()) {
            if (s.startsWith("/*", i)) {
                final int e = s.indexOf("*/", i + 2);
                i = e < 0 ? s.length() : e + 2;
                b.append(' ');
            } else if (s.startsWith("//", i)) {
                final int e = s.indexOf('\n', i);
                i = e < 0 ? s.length() : e;
            } else if (s.startsWith("\"\"\"", i)) {
                final int e = s.indexOf("\"\"\"", i + 3);
                i = e < 0 ? s.length() : e + 3;
                b.append("\"\"");
            } else if (s.charAt(i) == '"' || s.charAt(i) == '\'') {
                final char q = s.charAt(i);
                int j = i + 1;
                while (j < s.length() && s.charAt(j) != q && s.charAt(j) != '\n') {
                    j += s.charAt(j) == '\\' ? 2 : 1;
                }
                i = Math.min(j + 1, s.length());
                b.append(q).append(q);
            } else {
                b.append(s.charAt(i++));
            }
        }
        return b.toString();
    }
}
