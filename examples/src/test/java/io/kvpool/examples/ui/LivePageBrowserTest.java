package io.kvpool.examples.ui;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.http.HttpLimits;
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
    private HttpFront server;
    private int port;
    private String testName;
    private int[] setupSlots; // prefill: 5 pages, the last two receiving
    private Sequence firstSequence; // decode: 40 tokens, 10 pages
    private final PageHolders decodeHolders = new PageHolders(); // what the decode role would book; empty unless a test books

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
        for (String c : List.of("requests", "requests_completed", "requests_rejected", "requests_aborted", "transfers")) {
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
        port = server.port();
    }

    private HttpFront startServer(int port) throws IOException {
        return HttpFront.start("127.0.0.1", port, HttpLimits.DEFAULTS, LivePage.handler(() -> {
            final Map<String, Long> c = new LinkedHashMap<>();
            counters.forEach((k, v) -> c.put(k, v.get()));
            return new LiveState(List.of(PoolView.of("prefill", prefill.pool),
                PoolView.of("decode", decode.pool).withHolders(decodeHolders.snapshot())), c);
        }));
    }

    @AfterEach
    void stopServer() {
        if (server != null) {
            server.close();
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
            assertEquals("1", r.pools.get("decode").counters.get("open_sequences"), "the pool's own counters are shown");
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
            counters.get("requests_completed").addAndGet(1);
            counters.get("requests_aborted").addAndGet(1);
            counters.get("transfers").addAndGet(2);
            assertEquals(1, prefill.expected(SlotState.DRAINING));
            assertEquals(1, prefill.expected(SlotState.QUARANTINED));
            assertEquals(250, decode.expected(SlotState.OWNED));

            final Reading after = await("the changed pools", this::matchesThePools);
            assertTrue(after.polls > before.polls, "polls " + before.polls + " → " + after.polls);
            assertEquals("5", after.server.get("requests"));
            assertEquals("1", after.server.get("requests_aborted"));
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
            server.close();
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

    @Test
    void showsRatesAsTheCountersIncreaseOverTheLastMinuteAndFiveMinutes() {
        scenario(() -> {
            load();
            await("the first picture", this::matchesThePools);
            counters.get("requests").addAndGet(30);
            prefill.own(10); // 10 pages allocated
            await("the new requests and pages", this::matchesThePools);
            // a rate needs samples a second apart at least ('–' before)
            final JsonNode rates = new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d -> {
                final JsonNode r = readJson(READ_RATES);
                return r.path("requests").path("60").path("seconds").asDouble() >= 1 ? r : null;
            });
            assertTrue(matchesThePools(read()), "nothing changed since");
            for (String window : List.of("60", "300")) {
                final JsonNode req = rates.path("requests").path(window);
                assertEquals(30, req.path("delta").asLong(), "requests over " + window + " s: " + rates);
                final double seconds = req.path("seconds").asDouble();
                assertTrue(seconds >= 1 && seconds < 300, "the window spans the page's samples so far: " + rates);
                assertEquals(30 / seconds, Double.parseDouble(req.path("text").asText().replace(",", "")), 30 / seconds * 0.01 + 0.005,
                    "the rate shown is delta / seconds: " + rates);
                assertEquals(10, rates.path("allocations").path(window).path("delta").asLong(), "pages allocated: " + rates);
                assertEquals(0, rates.path("completed").path(window).path("delta").asLong(), rates::toString);
                assertEquals("0", rates.path("completed").path(window).path("text").asText(), rates::toString);
            }
            assertEquals(List.of("requests", "completed", "unsuccessful", "transfers", "allocations", "quarantines"),
                rates.propertyStream().map(Map.Entry::getKey).toList(), "one row per rate whose counters the state has (no tokens here)");
        });
    }

    @Test
    void countersThatReadZeroAllAlongSitOnOneCompactLine_andMoveUpWhenTheyRise() {
        scenario(() -> {
            load();
            await("the first picture", this::matchesThePools);
            assertEquals(List.of("requests", "transfers"), serverCounterNames("#server-counters dl.counters"), "counters above 0, in the grid");
            assertEquals(List.of("requests_completed", "requests_rejected", "requests_aborted"), serverCounterNames("#server-counters .zeros dl.zero-list"),
                "counters at 0, on the compact line");
            final WebElement zeros = browser.driver.findElement(By.cssSelector("#server-counters .zeros"));
            assertTrue(zeros.isDisplayed(), "still in sight");
            assertTrue(zeros.getText().startsWith("at 0 since this page opened:"), zeros.getText());
            assertTrue(zeros.getRect().getHeight() <= 24, "three zeros take one line of 12 px text: " + zeros.getRect().getHeight() + " px high");
            assertTrue(browser.driver.findElement(By.cssSelector("section.pool[data-role='decode'] .zeros dd[data-counter='quarantine_events']"))
                .isDisplayed(), "a pool's zero counters are on its compact line too");

            counters.get("requests_aborted").incrementAndGet();
            await("the abort counted", this::matchesThePools);
            assertEquals(List.of("requests", "requests_aborted", "transfers"), serverCounterNames("#server-counters dl.counters"),
                "a counter that rose joins the grid, in the server's order");
            assertEquals(List.of("requests_completed", "requests_rejected"), serverCounterNames("#server-counters .zeros dl.zero-list"));
        });
    }

    private List<String> serverCounterNames(String container) {
        return browser.driver.findElements(By.cssSelector(container + " dd[data-counter]")).stream()
            .map(e -> e.getAttribute("data-counter")).toList();
    }

    @Test
    void drainsAndQuarantinesShowAsEventsWhenTheyHappen_andTheirCountFlashes() {
        scenario(() -> {
            load();
            await("the first picture", this::matchesThePools);
            assertEquals(0, browser.driver.findElements(By.cssSelector("#events li[data-kind]")).size(), "nothing happened yet");
            final int slot = setupSlots[3]; // RECEIVING
            prefill.drain(slot);
            final WebElement drained = awaitEvent("draining", "prefill", slot);
            assertTrue(flashed("draining"), "the draining count flashes");
            assertEquals("1", browser.driver.findElement(By.cssSelector("section.pool[data-role='prefill'] [data-count='draining']")).getText());
            assertTrue(drained.isDisplayed() && drained.getText().contains("prefill: 1 page → draining (slot " + slot + ")"), drained.getText());
            await("the draining page in its colour", this::matchesThePools);

            prefill.quarantine(slot);
            final WebElement quarantined = awaitEvent("quarantined", "prefill", slot);
            assertTrue(flashed("quarantined"), "the quarantined count flashes");
            assertTrue(!flashed("receiving"), "a count that did not rise does not flash");
            assertTrue(quarantined.getText().contains("prefill: 1 page → quarantined (slot " + slot + ")"), quarantined.getText());
            await("the quarantined page in its colour", this::matchesThePools);

            prefill.free(slot);
            final WebElement released = awaitEvent("released", "prefill", slot);
            assertTrue(released.getText().contains("left quarantine"), released.getText());
            await("the page free again", this::matchesThePools);
            final List<String> kinds = browser.driver.findElements(By.cssSelector("#events li[data-slots]")).stream()
                .map(e -> e.getAttribute("data-kind")).toList();
            assertEquals(List.of("released", "quarantined", "draining"), kinds, "newest first");
            final WebElement counted = browser.driver.findElement(By.cssSelector("#events li[data-kind='counter'][data-name='pool:prefill:quarantine_events']"));
            assertEquals("1", counted.getAttribute("data-delta"));
            assertTrue(counted.getText().endsWith("prefill quarantine_events +1"), counted.getText());
            assertEquals(List.of("pool:prefill:quarantine_events"), browser.driver.findElements(By.cssSelector("#events li[data-kind='counter']"))
                .stream().map(e -> e.getAttribute("data-name")).toList(), "the pool's state gauges (quarantined ...) are not counter events");
            browser.screenshot("live-page-events");
        });
    }

    @Test
    void hoveringASquareSaysWhichRequestAndTenantHoldsIt_andATableListsTheHolders() {
        scenario(() -> {
            decodeHolders.hold(7, "alice", "decoding", firstSequence);
            load();
            await("the first picture", this::matchesThePools);
            final WebElement row = new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d ->
                d.findElements(By.cssSelector("section.pool[data-role='decode'] table.holders tr[data-request='7']")).stream().findFirst().orElse(null));
            assertEquals("alice", row.getAttribute("data-tenant"));
            assertEquals("10", row.getAttribute("data-pages"));
            assertEquals("7 alice decoding 10", row.getText());

            final int held = firstSequence.pageIndex(3);
            assertEquals("slot " + held + ": owned · request 7 · tenant alice · decoding", hover("decode", held));
            final int free = decode.expected().indexOf('F');
            assertEquals("slot " + free + ": free", hover("decode", free));
            assertEquals("slot " + setupSlots[0] + ": owned", hover("prefill", setupSlots[0]), "prefill books no holders here");

            decodeHolders.release(7);
            new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d ->
                d.findElements(By.cssSelector("section.pool[data-role='decode'] table.holders")).isEmpty());
            assertEquals("slot " + held + ": owned", hover("decode", held), "a released request no longer shows");
        });
    }

    private WebElement serverCounter(String name) {
        return browser.driver.findElement(By.cssSelector("#server-counters dd[data-counter='" + name + "']"));
    }

    private WebElement awaitEvent(String kind, String role, int slot) {
        final String css = "#events li[data-kind='" + kind + "'][data-role='" + role + "'][data-slots='" + slot + "']";
        try {
            return new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d -> d.findElements(By.cssSelector(css)).stream()
                .findFirst().orElse(null));
        } catch (TimeoutException e) {
            throw new AssertionError("no event " + css + "; the strip shows: "
                + browser.driver.findElement(By.id("events")).getText(), e);
        }
    }

    private boolean flashed(String state) {
        return browser.driver.findElement(By.cssSelector("section.pool[data-role='prefill'] [data-count='" + state + "']"))
            .getAttribute("class").contains("flash");
    }

    /** Moves the mouse over the centre of a slot's square (a real mousemove on the canvas) and returns the tooltip's text. */
    private String hover(String role, int slot) {
        return (String) browser.driver.executeScript("""
            const c = document.querySelector('section.pool[data-role="' + arguments[0] + '"] canvas.map');
            const cols = +c.dataset.cols, cell = +c.dataset.cell, r = c.getBoundingClientRect();
            c.dispatchEvent(new MouseEvent('mousemove', { bubbles: true,
              clientX: r.left + (arguments[1] % cols) * cell + cell / 2, clientY: r.top + Math.floor(arguments[1] / cols) * cell + cell / 2 }));
            const tip = c.parentNode.querySelector('.tip');
            return tip.style.display === 'block' && tip.dataset.slot === String(arguments[1]) ? tip.textContent : 'no tooltip';
            """, role, slot);
    }

    private JsonNode readJson(String script) {
        try {
            return JSON.readTree((String) browser.driver.executeScript(script));
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Each rate row: per window, its data-delta, data-seconds and text. */
    private static final String READ_RATES = """
        const out = {};
        for (const tr of document.querySelectorAll('#rates tr[data-rate]')) {
          const r = out[tr.dataset.rate] = {};
          for (const td of tr.querySelectorAll('td[data-window]')) {
            r[td.dataset.window] = { delta: +td.dataset.delta, seconds: +td.dataset.seconds, text: td.innerText.trim() };
          }
        }
        return JSON.stringify(out);
        """;

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
