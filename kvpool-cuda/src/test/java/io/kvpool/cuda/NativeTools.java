package io.kvpool.cuda;

import org.junit.jupiter.api.Assumptions;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The tests that check native code on the CPU ({@link KernelEmulationTest}: the kernels built with g++;
 * {@link MemcpyBatchAbiTest}: {@code cuda.h} read by gcc) run a compiler and then what it built: both through here.
 */
final class NativeTools {

    private NativeTools() {
    }

    /**
     * Skips the calling test (a JUnit assumption), saying why, unless {@code tool --version} runs and exits 0.
     *
     * @param purpose what the tool is needed for, as the skip message says it ("to compile ...")
     */
    static void assumeUsable(String tool, String purpose) throws InterruptedException {
        final String why = run(List.of(tool, "--version"), null, 60);
        Assumptions.assumeTrue(why == null, () -> tool + " is needed " + purpose + " and is not usable here: " + why);
    }

    /**
     * Runs {@code cmd} (its stderr merged into its stdout) and waits at most {@code timeoutSeconds} for it to exit.
     *
     * @param out receives the output on exit (whatever the status), if not {@code null}
     * @return {@code null} on exit 0, else what went wrong: the command and its exit status with its output, a
     *         timeout, or the {@link IOException} that kept it from starting
     */
    static String run(List<String> cmd, StringBuilder out, long timeoutSeconds) throws InterruptedException {
        try {
            final Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            final String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return String.join(" ", cmd) + " timed out";
            }
            if (out != null) {
                out.append(text);
            }
            return p.exitValue() == 0 ? null : String.join(" ", cmd) + " exited " + p.exitValue() + ":\n" + text;
        } catch (IOException e) {
            return String.join(" ", cmd) + ": " + e;
        }
    }
}
