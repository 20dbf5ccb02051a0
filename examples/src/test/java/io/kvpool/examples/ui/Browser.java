package io.kvpool.examples.ui;

import org.openqa.selenium.OutputType;
import org.openqa.selenium.TakesScreenshot;
import org.openqa.selenium.chrome.ChromeDriver;
import org.openqa.selenium.chrome.ChromeDriverService;
import org.openqa.selenium.chrome.ChromeOptions;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/**
 * Debian's headless Chromium driven by Debian's chromedriver, for the live page's browser test.
 *
 * <p>Both binaries are given by path ({@code /usr/bin/chromium}, {@code /usr/bin/chromedriver}; override
 * with {@code -Dkvpool.chromium=} / {@code -Dkvpool.chromedriver=}), so Selenium Manager is never run and
 * nothing is downloaded ({@code SE_OFFLINE=true} is set as well, which Selenium hands to Selenium Manager
 * should anything call it). Each browser gets a fresh profile directory, deleted on {@link #close()}.
 *
 * <p>When a binary is missing the test skips with the reason, unless the environment variable
 * {@code KVPOOL_BROWSER_REQUIRED=true} (set by {@code .ci/run} once it installed them) or
 * {@code -Dkvpool.browser.required=true} is set: then it fails.
 */
final class Browser implements AutoCloseable {
    static final Path CHROMIUM = Path.of(System.getProperty("kvpool.chromium", "/usr/bin/chromium"));
    static final Path CHROMEDRIVER = Path.of(System.getProperty("kvpool.chromedriver", "/usr/bin/chromedriver"));
    /** Generous for a loaded 2-core machine; every wait ends as soon as its condition holds. */
    static final Duration START_TIMEOUT = Duration.ofSeconds(60);
    static final Duration PAGE_TIMEOUT = Duration.ofSeconds(30);

    /**
     * Selenium warns at every start that it has no CDP implementation for Debian's Chromium version; the
     * test uses WebDriver only, never CDP. Held here so the setting is not garbage-collected.
     */
    private static final java.util.logging.Logger CDP_LOG = java.util.logging.Logger.getLogger("org.openqa.selenium.devtools");

    final ChromeDriver driver;
    private final ChromeDriverService service;
    private final Path profile;
    private final List<ProcessHandle> processes = new ArrayList<>();
    private boolean closed;

    private Browser(ChromeDriver driver, ChromeDriverService service, Path profile) {
        this.driver = driver;
        this.service = service;
        this.profile = profile;
    }

    /** @return whether CI demands the browser test (env or system property) */
    static boolean required() {
        return "true".equalsIgnoreCase(System.getenv("KVPOOL_BROWSER_REQUIRED")) || Boolean.getBoolean("kvpool.browser.required");
    }

    /** Skips the calling test, or fails it when required, if Chromium or chromedriver is not installed. */
    static void assumeInstalled() {
        final List<String> missing = missing();
        if (!missing.isEmpty() && !warned) {
            warned = true; // surefire's summary shows only a count of skips: say why once on the console
            System.err.println("WARNING: the live page's browser test " + (required() ? "FAILS" : "SKIPS") + ": " + missing);
        }
        decide(missing, required());
    }

    private static boolean warned;

    /** @return the binaries that are not there or cannot be run, with why; empty when both are fine */
    static List<String> missing() {
        final List<String> missing = new ArrayList<>();
        for (Path p : List.of(CHROMIUM, CHROMEDRIVER)) {
            if (!Files.isExecutable(p)) {
                missing.add(p + (Files.exists(p) ? " (not executable)" : " (missing)"));
            }
        }
        return missing;
    }

    /** The rule itself (tested on its own): missing + required fails, missing alone skips with the reason. */
    static void decide(List<String> missing, boolean required) {
        if (missing.isEmpty()) {
            return;
        }
        final String reason = "the headless browser test needs Debian's chromium and chromium-driver: " + String.join(", ", missing)
            + " (.ci/run installs them: apt-get install chromium chromium-driver)";
        if (required) {
            throw new AssertionFailedError("KVPOOL_BROWSER_REQUIRED / kvpool.browser.required is set but " + reason);
        }
        throw new TestAbortedException("skipping: " + reason);
    }

    /** Starts chromedriver and a headless Chromium with a fresh profile; logs go to {@code target/chromedriver.log}. */
    static Browser start() {
        System.setProperty("SE_OFFLINE", "true"); // handed to Selenium Manager as env, should anything run it
        System.setProperty("SE_AVOID_STATS", "true");
        CDP_LOG.setLevel(java.util.logging.Level.SEVERE);
        final Path profile;
        try {
            profile = Files.createTempDirectory("kvpool-chromium-");
            Files.createDirectories(Path.of("target"));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        final ChromeDriverService service = new ChromeDriverService.Builder()
            .usingDriverExecutable(CHROMEDRIVER.toFile())
            .usingAnyFreePort()
            .withLogFile(Path.of("target", "chromedriver.log").toFile())
            .withTimeout(START_TIMEOUT)
            .build();
        final ChromeOptions options = new ChromeOptions();
        options.setBinary(CHROMIUM.toFile());
        options.addArguments(
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
            "--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
            "--disable-features=Translate,OptimizationHints,MediaRouter", "--mute-audio",
            "--window-size=1280,1000", "--force-device-scale-factor=1",
            "--user-data-dir=" + profile.toAbsolutePath());
        options.setPageLoadTimeout(PAGE_TIMEOUT);
        options.setScriptTimeout(PAGE_TIMEOUT);
        final ChromeDriver driver;
        try {
            driver = new ChromeDriver(service, options);
        } catch (RuntimeException e) {
            service.stop();
            deleteTree(profile);
            throw e;
        }
        final Browser b = new Browser(driver, service, profile);
        b.processes.addAll(ProcessHandle.current().descendants().toList());
        return b;
    }

    /** Records the chromedriver and browser processes alive now, so {@link #close()} can check they all ended. */
    void recordProcesses() {
        ProcessHandle.current().descendants().filter(p -> !processes.contains(p)).forEach(processes::add);
    }

    /** Writes a PNG of the viewport to {@code target/<name>.png} and returns its path. */
    Path screenshot(String name) {
        final Path out = Path.of("target", name + ".png");
        try {
            Files.write(out, ((TakesScreenshot) driver).getScreenshotAs(OutputType.BYTES));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out;
    }

    /**
     * Quits the browser and the driver, deletes the profile, and checks that every process they started
     * has ended (killing and failing on any that has not). Idempotent.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        recordProcesses();
        try {
            driver.quit();
        } finally {
            service.stop();
            try {
                CompletableFuture.allOf(processes.stream().map(ProcessHandle::onExit).toArray(CompletableFuture[]::new))
                    .get(15, TimeUnit.SECONDS);
            } catch (TimeoutException | ExecutionException e) {
                // reported below
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            final List<String> left = processes.stream().filter(ProcessHandle::isAlive)
                .map(p -> p.pid() + " " + p.info().command().orElse("?")).toList();
            processes.stream().filter(ProcessHandle::isAlive).forEach(ProcessHandle::destroyForcibly);
            deleteTree(profile);
            if (!left.isEmpty()) {
                throw new AssertionFailedError("browser processes still running 15 s after quit (killed now): " + left);
            }
        }
    }

    private static void deleteTree(Path root) {
        try (Stream<Path> s = Files.walk(root)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // best effort: a temp profile left behind is harmless
        }
    }
}
