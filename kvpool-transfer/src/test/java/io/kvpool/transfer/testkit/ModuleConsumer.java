package io.kvpool.transfer.testkit;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A consumer module for module-path tests: compiled from source with the JDK's {@code javac} against the built
 * kvpool modules, then run in a child JVM.
 */
public final class ModuleConsumer {
    private ModuleConsumer() {
    }

    /** What {@code javac} answered: its exit code and its diagnostics. */
    public record Compiled(int exitCode, String diagnostics) {
    }

    /** @return the module path of the jars or class directories the given classes were loaded from */
    public static String modulePath(Class<?>... from) {
        return String.join(File.pathSeparator, Arrays.stream(from).map(ModuleConsumer::locationOf).toList());
    }

    private static String locationOf(Class<?> c) {
        try {
            return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Compiles a module: {@code moduleInfo} and, in package {@code pkg}, one class per entry of {@code classes}
     * (simple name → source), into {@code out}; the sources are written under {@code out}'s sibling {@code src-…}.
     */
    public static Compiled compile(Path out, String modulePath, String moduleInfo, String pkg, Map<String, String> classes)
        throws IOException {
        final Path src = out.resolveSibling("src-" + out.getFileName());
        final Path pkgDir = Files.createDirectories(src.resolve(pkg.replace('.', '/')));
        final List<String> args = new ArrayList<>(List.of("--module-path", modulePath, "-d", out.toString(), "-proc:none"));
        Files.writeString(src.resolve("module-info.java"), moduleInfo);
        args.add(src.resolve("module-info.java").toString());
        for (Map.Entry<String, String> c : classes.entrySet()) {
            final Path f = pkgDir.resolve(c.getKey() + ".java");
            Files.writeString(f, c.getValue());
            args.add(f.toString());
        }
        // java.util.spi.ToolProvider is in java.base: a test compiled into a kvpool module does not read java.compiler
        final java.util.spi.ToolProvider javac = java.util.spi.ToolProvider.findFirst("javac")
            .orElseThrow(() -> new IllegalStateException("the tests run on a JRE without javac"));
        final ByteArrayOutputStream diagnostics = new ByteArrayOutputStream();
        final PrintStream to = new PrintStream(diagnostics, true, StandardCharsets.UTF_8);
        final int rc = javac.run(to, to, args.toArray(String[]::new));
        return new Compiled(rc, diagnostics.toString(StandardCharsets.UTF_8));
    }

    /**
     * Runs {@code java} of this JVM's JDK with {@code args}, with none of the environment's JVM options (they would
     * add their own output, or flags).
     *
     * @return its output (stdout and stderr together)
     * @throws IllegalStateException if it runs longer than 60 s (it is killed) or exits with a status other than 0
     *                               (with the output)
     */
    public static String run(List<String> args) throws IOException, InterruptedException {
        final List<String> cmd = new ArrayList<>(List.of(System.getProperty("java.home") + "/bin/java"));
        cmd.addAll(args);
        final Path log = Files.createTempFile("kvpool-module-consumer", ".log");
        try {
            final ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
            pb.environment().keySet().removeAll(List.of("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"));
            final Process child = pb.start();
            // waited for before the output is read: a child that hangs is killed at the limit, never waited on for ever
            final boolean ended = child.waitFor(60, TimeUnit.SECONDS);
            if (!ended) {
                child.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
            final String out = Files.readString(log, StandardCharsets.UTF_8);
            if (!ended) {
                throw new IllegalStateException("the child JVM ran past 60 s:\n" + out);
            }
            return exited(child, out);
        } finally {
            Files.deleteIfExists(log);
        }
    }

    private static String exited(Process child, String out) {
        if (child.exitValue() != 0) {
            throw new IllegalStateException("the child JVM exited with " + child.exitValue() + ":\n" + out);
        }
        return out;
    }

    /** @return whether a module of that name is on {@code modulePath} */
    public static boolean holds(String modulePath, String module) {
        final Path[] entries = java.util.Arrays.stream(modulePath.split(File.pathSeparator)).map(Path::of).toArray(Path[]::new);
        return java.lang.module.ModuleFinder.of(entries).find(module).isPresent();
    }
}
