package io.kvpool.examples.ui;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.openqa.selenium.By;
import org.openqa.selenium.TimeoutException;
import org.openqa.selenium.WebElement;
import org.openqa.selenium.support.ui.WebDriverWait;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The live page in a real headless Chromium (Debian's, through chromedriver): it loads, shows both
 * pools of two real {@link io.kvpool.KvPool}s with the right counts and the right colour in every
 * square, follows the pools as their pages change state, and says "disconnected" when the server goes
 * (and recovers when it is back).
 *
 * <p>Every wait is a {@link WebDriverWait} on a condition; none sleeps. Skips when Chromium is not
 * installed, fails instead under {@code KVPOOL_BROWSER_REQUIRED=true} (see {@link Browser}).
 * Screenshots: {@code target/live-page.png}, {@code target/live-page-disconnected.png}, and
 * {@code target/live-page-FAILED-<test>.png} when a test fails.
 */
class LivePageBrowserTest {
    private static final Duration WAIT = Duration.ofSeconds(30); // ends as soon as the page matches; generous for a loaded 2-core machine
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final List<String> STATES = List.of("free", "owned", "receiving", "draining", "quarantined", "retired");

    private static Browser browser;

    private PoolScene prefill;
    private PoolScene decode;
    private final Map<String, AtomicLong> counters = new LinkedHashMap<>();
    private HttpServer server;
    private int port;
    private String testName;
    private int[] setupSlots; // prefill: 5 pages, the last two receiving
    private Sequence firstSequence; // decode: 40 tokens, 10 pages

    @AfterAll
    static void quitBrowser() {
        if (browser != null) {
            browser.close(); // fails if any chromium or chromedriver process outlives it
        }
    }

    @BeforeEach
    void startServer(TestInfo info) throws IOException {
        Browser.assumeInstalled(); // per test, so a skip is reported on each test with its reason
        if (browser == null) {
            browser = Browser.start(); // one browser for the class, closed in @AfterAll
        }
        testName = info.getTestMethod().orElseThrow().getName();
        prefill = new PoolScene(64);
        decode = new PoolScene(4096); // thousands of pages: the map must stay light
        for (String c : List.of("requests", "completed", "rejected", "aborted", "transfers")) {
            counters.put(c, new AtomicLong());
        }
        // what a server shows: a prefill pool with a transfer in flight, a decode pool with one request
        setupSlots = prefill.own(5);
        prefill.receive(setupSlots[3]);
        prefill.receive(setupSlots[4]);
        firstSequence = decode.sequence(40); // 10 pages
        counters.get("requests").set(2);
        counters.get("transfers").set(1);
        server = startServer(0);
        port = server.getAddress().getPort();
    }

    private HttpServer startServer(int port) throws IOException {
        final HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 0);
        LivePage.mount(s, () -> {
            final Map<String, Long> c = new LinkedHashMap<>();
            counters.forEach((k, v) -> c.put(k, v.get()));
            return new LiveState(List.of(PoolView.of("prefill", prefill.pool), PoolView.of("decode", decode.pool)), c);
        });
        s.start();
        return s;
    }

    @AfterEach
    void stopServer() {
        if (server != null) {
            server.stop(0);
        }
        try {
            if (browser != null) {
                browser.recordProcesses();
                browser.driver.get("about:blank"); // stop the page's polling before the next test's server
            }
        } finally {
            if (prefill != null) {
                prefill.close();
            }
            if (decode != null) {
                decode.close();
            }
        }
    }

    @Test
    void showsBothPools_theirCountsAndEverySquareInItsStatesColour() {
        scenario(() -> {
            load();
            final Reading r = await("both pools shown with the pools' counts", this::matchesThePools);
            assertEquals("kvpool live", browser.driver.getTitle());
            assertEquals(List.of("prefill", "decode"), r.order(), "pools in the server's order");
            assertEquals("64 pages", r.pools.get("prefill").capacity);
            assertEquals("4,096 pages", r.pools.get("decode").capacity);
            // the numbers, spelled out once (the model is checked against the same numbers)
            assertEquals(Map.of("free", 59L, "owned", 3L, "receiving", 2L, "draining", 0L, "quarantined", 0L, "retired", 0L),
                r.pools.get("prefill").counts);
            assertEquals(Map.of("free", 4086L, "owned", 10L, "receiving", 0L, "draining", 0L, "quarantined", 0L, "retired", 0L),
                r.pools.get("decode").counts);
            assertEquals("2", r.server.get("requests"));
            assertEquals("1", r.server.get("transfers"));
            assertEquals("1", r.pools.get("decode").counters.get("openSequences"), "the pool's own counters are shown");
            assertEquals("4,086", r.pools.get("decode").counters.get("free"));
            for (String role : List.of("prefill", "decode")) {
                final WebElement sec = browser.driver.findElement(By.cssSelector("section.pool[data-role='" + role + "']"));
                assertTrue(sec.isDisplayed(), role + " is visible");
                assertTrue(sec.findElement(By.cssSelector("canvas.map")).isDisplayed(), role + "'s map is visible");
            }
            // the legend: one entry per state, with PoolView's code and a colour of its own
            final List<WebElement> legend = browser.driver.findElements(By.cssSelector("#legend li"));
            assertEquals(SlotState.values().length, legend.size());
            for (SlotState s : SlotState.values()) {
                final WebElement li = legend.get(s.ordinal());
                assertEquals(s.name().toLowerCase(Locale.ROOT), li.getAttribute("data-state"));
                assertEquals(String.valueOf(PoolView.code(s)), li.getAttribute("data-code"));
                assertTrue(li.getText().startsWith(s.name().toLowerCase(Locale.ROOT)), li.getText());
            }
            assertEquals(STATES.size(), legendColours().values().stream().distinct().count(), "one colour per state: " + legendColours());
        });
    }

    @Test
    void followsThePoolsAsRequestsRun() {
        scenario(() -> {
            load();
            final Reading before = await("the first picture", this::matchesThePools);

            // a transfer fails and is drained, another is quarantined, a finished request frees its page,
            // a long request arrives at decode and the first one completes
            final int[] p = prefill.own(10);
            prefill.drain(setupSlots[3]);
            prefill.quarantine(setupSlots[4]);
            prefill.free(setupSlots[0]);
            prefill.receive(p[0]);
            final Sequence big = decode.sequence(1000); // 250 pages
            decode.close(firstSequence);
            counters.get("requests").addAndGet(3);
            counters.get("completed").addAndGet(1);
            counters.get("aborted").addAndGet(1);
            counters.get("transfers").addAndGet(2);
            assertEquals(1, prefill.expected(SlotState.DRAINING));
            assertEquals(1, prefill.expected(SlotState.QUARANTINED));
            assertEquals(250, decode.expected(SlotState.OWNED));

            final Reading after = await("the changed pools", this::matchesThePools);
            assertTrue(after.polls > before.polls, "polls " + before.polls + " → " + after.polls);
            assertEquals("5", after.server.get("requests"));
            assertEquals("1", after.server.get("aborted"));
            assertEquals(Map.of("free", 50L, "owned", 11L, "receiving", 1L, "draining", 1L, "quarantined", 1L, "retired", 0L),
                after.pools.get("prefill").counts);
            assertEquals(3846L, after.pools.get("decode").counts.get("free"));
            assertEquals("live", after.status);
            browser.screenshot("live-page");

            decode.close(big);
            await("the long request's pages back to free", this::matchesThePools);
        });
    }

    @Test
    void saysDisconnectedWhenTheServerGoes_andRecoversWhenItIsBack() {
        scenario(() -> {
            load();
            await("live", this::matchesThePools);
            server.stop(0);
            server = null;
            final Reading down = await("disconnected", r -> "disconnected".equals(r.status));
            assertTrue(down.statusText.startsWith("disconnected: server unreachable"), down.statusText);
            assertTrue(down.failures > 0, "failed polls are counted");
            final WebElement status = browser.driver.findElement(By.id("status"));
            assertTrue(status.isDisplayed());
            assertEquals(down.statusText, status.getText(), "the status says it in plain sight");
            assertEquals("rgb(176, 0, 32)", status.getCssValue("background-color").replace("rgba", "rgb").replace(", 1)", ")"),
                "the disconnected status is red");
            browser.screenshot("live-page-disconnected");

            prefill.own(1); // changed while the page could not see it
            try {
                server = startServer(port);
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
            final Reading back = await("live again, with the change", r -> "live".equals(r.status) && matchesThePools(r));
            assertEquals(4L, back.pools.get("prefill").counts.get("owned"));
        });
    }

    // ---- page access

    private void load() {
        browser.driver.get("http://127.0.0.1:" + port + "/");
        browser.recordProcesses();
    }

    /** One reading of everything the page shows, in one script call. */
    private Reading read() {
        final Object json = browser.driver.executeScript(READ_PAGE);
        try {
            return Reading.of(JSON.readTree((String) json));
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Waits until the page's reading satisfies the condition; on timeout the message holds the last reading. */
    private Reading await(String what, Predicate<Reading> condition) {
        final Reading[] last = new Reading[1];
        try {
            return new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d -> {
                last[0] = read();
                return condition.test(last[0]) ? last[0] : null;
            });
        } catch (TimeoutException e) {
            throw new AssertionError("page not " + what + " within " + WAIT.toSeconds() + " s; expected prefill "
                + prefill.expected() + " decode " + summary(decode.expected()) + " counters " + counters + "; page shows " + last[0], e);
        }
    }

    /** Whether the page shows the pools exactly as the scenes model them: counts, every square's colour, counters. */
    private boolean matchesThePools(Reading r) {
        if (!"live".equals(r.status) || !r.order().equals(List.of("prefill", "decode"))) {
            return false;
        }
        for (Map.Entry<String, PoolScene> e : Map.of("prefill", prefill, "decode", decode).entrySet()) {
            final PoolReading p = r.pools.get(e.getKey());
            for (SlotState s : SlotState.values()) {
                if (p.counts.get(s.name().toLowerCase(Locale.ROOT)) != e.getValue().expected(s)) {
                    return false;
                }
            }
            if (!e.getValue().expected().equals(p.squares)) { // the canvas, read back pixel by pixel
                return false;
            }
        }
        for (Map.Entry<String, AtomicLong> c : counters.entrySet()) {
            if (!String.valueOf(c.getValue().get()).equals(r.server.get(c.getKey()))) {
                return false;
            }
        }
        return true;
    }

    private Map<String, String> legendColours() {
        final Map<String, String> m = new LinkedHashMap<>();
        for (WebElement li : browser.driver.findElements(By.cssSelector("#legend li"))) {
            m.put(li.getAttribute("data-state"), li.findElement(By.cssSelector(".swatch")).getCssValue("background-color"));
        }
        return m;
    }

    private void scenario(Runnable body) {
        try {
            body.run();
        } catch (RuntimeException | Error e) {
            try {
                e.addSuppressed(new Throwable("screenshot: " + browser.screenshot("live-page-FAILED-" + testName)));
            } catch (RuntimeException shot) {
                e.addSuppressed(shot);
            }
            throw e;
        }
    }

    private static String summary(String pages) {
        final Map<Character, Integer> n = new java.util.TreeMap<>();
        for (char c : pages.toCharArray()) {
            n.merge(c, 1, Integer::sum);
        }
        return n.toString();
    }

    // ---- what the page shows

    record PoolReading(String capacity, Map<String, Long> counts, Map<String, String> counters, String squares) {
    }

    record Reading(String status, String statusText, long polls, long failures, Map<String, PoolReading> pools,
                   Map<String, String> server) {
        List<String> order() {
            return List.copyOf(pools.keySet());
        }

        static Reading of(JsonNode n) {
            final Map<String, PoolReading> pools = new LinkedHashMap<>();
            for (JsonNode p : n.get("pools")) {
                final Map<String, Long> counts = new LinkedHashMap<>();
                p.get("counts").properties().forEach(e -> counts.put(e.getKey(), Long.parseLong(e.getValue().asText().replace(",", ""))));
                pools.put(p.get("role").asText(), new PoolReading(p.get("capacity").asText(), counts, strings(p.get("counters")),
                    p.get("squares").asText()));
            }
            return new Reading(n.get("status").asText(), n.get("statusText").asText(), n.get("polls").asLong(),
                n.get("failures").asLong(), pools, strings(n.get("server")));
        }

        private static Map<String, String> strings(JsonNode o) {
            final Map<String, String> m = new LinkedHashMap<>();
            o.properties().forEach(e -> m.put(e.getKey(), e.getValue().asText()));
            return m;
        }

        @Override
        public String toString() {
            final List<String> ps = new ArrayList<>();
            pools.forEach((role, p) -> ps.add(role + " " + p.capacity + " " + p.counts + " squares "
                + (p.squares.length() <= 80 ? p.squares : summary(p.squares))));
            return "status=" + status + " '" + statusText + "' polls=" + polls + " failures=" + failures + " " + ps + " server=" + server;
        }
    }

    /**
     * Reads the page as a person would: the visible texts (innerText) of the status, counts and counters,
     * and each pool's canvas pixel by pixel, each square decoded to the state whose legend colour it has
     * ('?' for a colour the legend does not have).
     */
    private static final String READ_PAGE = """
        const rgb = c => { const m = c.match(/\\d+/g); return m.slice(0, 3).join(','); };
        const legend = new Map();
        for (const li of document.querySelectorAll('#legend li')) {
          legend.set(rgb(getComputedStyle(li.querySelector('.swatch')).backgroundColor), li.dataset.code);
        }
        const numbers = sel => { const o = {}; for (const e of document.querySelectorAll(sel)) o[e.dataset.counter || e.dataset.count] = e.innerText.trim(); return o; };
        const out = { status: document.getElementById('status').dataset.status,
                      statusText: document.getElementById('status').innerText.trim(),
                      polls: +document.getElementById('polls').innerText, failures: +document.getElementById('failures').innerText,
                      pools: [], server: numbers('#server-counters dd[data-counter]') };
        for (const sec of document.querySelectorAll('section.pool')) {
          const role = sec.dataset.role, q = '#pools section.pool[data-role="' + CSS.escape(role) + '"] ';
          const c = sec.querySelector('canvas.map');
          const cols = +c.dataset.cols, cell = +c.dataset.cell, n = +sec.querySelector('.capacity').dataset.value;
          const scale = c.width / (cols * cell);
          const img = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let squares = '';
          for (let i = 0; i < n; i++) {
            const x = Math.floor(((i % cols) * cell + (cell - 1) / 2) * scale), y = Math.floor((Math.floor(i / cols) * cell + (cell - 1) / 2) * scale);
            const o = (y * c.width + x) * 4;
            squares += legend.get(img[o] + ',' + img[o + 1] + ',' + img[o + 2]) || '?';
          }
          out.pools.push({ role, capacity: sec.querySelector('.capacity').innerText.trim(), counts: numbers(q + '[data-count]'),
                           counters: numbers(q + '.pool-counters dd[data-counter]'), squares });
        }
        return JSON.stringify(out);
        """;
}
