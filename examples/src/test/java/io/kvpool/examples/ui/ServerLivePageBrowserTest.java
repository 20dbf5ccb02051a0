package io.kvpool.examples.ui;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.KvServer;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.LinkGate;
import org.junit.jupiter.api.Test;
import org.openqa.selenium.Dimension;
import org.openqa.selenium.TimeoutException;
import org.openqa.selenium.support.ui.WebDriverWait;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The live page of the REAL server in headless Chromium (the goal: "it loads, shows both pools, and changes
 * when requests run"). {@link LivePageBrowserTest} checks every square against pools the test drives by
 * hand; this one checks the wiring: {@link KvServer}'s own page, fed by its own roles, follows a request
 * through the disaggregated path. A {@link LinkGate} holds the transfer's writes so the page is read while
 * decode's pages are RECEIVING, deterministically, then lets them go and reads the page again.
 */
class ServerLivePageBrowserTest {
    private static final Duration WAIT = Duration.ofSeconds(30); // ends as soon as the page matches
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int PREFILL_PAGES = 64;
    private static final int DECODE_PAGES = 128;

    /** Per pool: the per-state counts the page shows; and the server counters. */
    private static final String READ = """
        const n = sel => { const o = {}; for (const e of document.querySelectorAll(sel)) o[e.dataset.counter || e.dataset.count] = +e.innerText.trim(); return o; };
        const out = { status: document.getElementById('status').dataset.status, pools: {}, server: n('#server-counters dd[data-counter]') };
        for (const sec of document.querySelectorAll('section.pool')) {
          out.pools[sec.dataset.role] = n('#pools section.pool[data-role="' + CSS.escape(sec.dataset.role) + '"] [data-count]');
        }
        return JSON.stringify(out);
        """;

    @Test
    void theServersOwnPageShowsBothPoolsAndFollowsARequestThroughTransferAndRelease() throws Exception {
        Browser.assumeInstalled();
        final LinkGate gate = LinkGate.create(true);
        final ServerConfig config = ServerConfig.builder().port(0).contextTokens(512).prefillPages(PREFILL_PAGES)
            .decodePages(DECODE_PAGES).tokensPerPage(16).tokenDelay(Duration.ZERO).heartbeat(Duration.ofMillis(20))
            .transferTimeout(Duration.ofSeconds(60)).requestTimeout(Duration.ofSeconds(60)).reconnectDelay(Duration.ofMillis(20))
            .gate(gate).build();
        try (KvServer server = KvServer.start(config); Browser browser = Browser.start()) {
            browser.driver.get(server.baseUri().toString());
            browser.recordProcesses();
            try {
                await(browser, "showing both pools all free", r -> r.path("status").asText().equals("live")
                    && count(r, "prefill", "free") == PREFILL_PAGES && count(r, "decode", "free") == DECODE_PAGES
                    && r.path("server").path("requests").asLong(-1) == 0);

                final String prompt = "the live page follows this request ".repeat(12); // 72 words: several pages
                final CompletableFuture<HttpResponse<String>> answer = HttpClient.newHttpClient().sendAsync(
                    HttpRequest.newBuilder(server.baseUri().resolve("v1/completions"))
                        .header("Authorization", "Bearer sk-alice").header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString(JSON.writeValueAsString(
                            JSON.createObjectNode().put("prompt", prompt).put("max_tokens", 4).put("stream", false))))
                        .build(), HttpResponse.BodyHandlers.ofString());
                assertTrue(gate.awaitHeld(1, Duration.ofSeconds(30)), "the transfer's writes were never posted");

                final JsonNode during = await(browser, "showing the transfer in flight", r ->
                    count(r, "decode", "receiving") > 0 && count(r, "prefill", "owned") > 0
                        && r.path("server").path("requests").asLong() == 1 && r.path("server").path("requests_completed").asLong() == 0);
                assertEquals(PREFILL_PAGES, count(during, "prefill", "free") + count(during, "prefill", "owned"), during::toString);

                // who holds the pages: /api/state's holders, from each role's own bookkeeping, and the page's table
                final LiveState state = StateJson.read(HttpClient.newHttpClient().send(HttpRequest.newBuilder(
                    server.baseUri().resolve("api/state")).build(), HttpResponse.BodyHandlers.ofByteArray()).body());
                final PoolView prefillView = state.pools().get(0), decodeView = state.pools().get(1);
                assertEquals(1, prefillView.holders().size(), prefillView::toString);
                final PoolView.Holder sending = prefillView.holders().get(0);
                assertEquals("alice", sending.tenant());
                assertEquals("prefill", sending.phase());
                assertEquals(prefillView.pages().chars().filter(c -> c == 'O').count(), sending.pages(), "the request holds every owned page");
                assertEquals(sending.pages(), sending.slots().size());
                for (int slot : sending.slots()) {
                    assertEquals('O', prefillView.pages().charAt(slot), "slot " + slot + " of " + sending);
                }
                assertEquals(1, decodeView.holders().size(), decodeView::toString);
                final PoolView.Holder receiving = decodeView.holders().get(0);
                assertEquals(List.of(sending.requestId(), "alice", "receiving", List.of()),
                    List.of(receiving.requestId(), receiving.tenant(), receiving.phase(), receiving.slots()));
                assertEquals(decodeView.pages().chars().filter(c -> c == 'R').count(), receiving.pages(), "pages being received into");
                final String row = new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d -> (String) browser.driver.executeScript(
                    "const r = document.querySelector('section.pool[data-role=\"prefill\"] table.holders tr[data-request=\"' + arguments[0] + '\"]');"
                        + " return r ? r.dataset.tenant + ' ' + r.dataset.phase + ' ' + r.dataset.pages : null;", String.valueOf(sending.requestId())));
                assertEquals("alice prefill " + sending.pages(), row, "the page lists the holder");

                gate.open();
                final HttpResponse<String> done = answer.get(60, TimeUnit.SECONDS);
                assertEquals(200, done.statusCode(), done::body);
                assertTrue(done.body().contains("live page follows"), done::body);

                await(browser, "showing the request completed and every page free again", r ->
                    r.path("server").path("requests_completed").asLong() == 1
                        && count(r, "prefill", "free") == PREFILL_PAGES && count(r, "decode", "free") == DECODE_PAGES);
                LiveState after = server.liveState();
                for (long end = System.nanoTime() + 10_000_000_000L; !noHolders(after) && System.nanoTime() - end < 0; ) {
                    Thread.onSpinWait(); // the roles drop a request's booking as they retire it, right around its last page going free
                    after = server.liveState();
                }
                assertEquals(List.of(List.of(), List.of()), List.of(after.pools().get(0).holders(), after.pools().get(1).holders()),
                    "a finished request holds nothing");
            } catch (RuntimeException | Error e) {
                e.addSuppressed(new Throwable("screenshot: " + browser.screenshot("server-live-page-FAILED")));
                throw e;
            }
            browser.screenshot("server-live-page");
        }
    }

    /**
     * At 1280 px the server's long counter names must not run into their neighbours' values (as they once did:
     * {@code prefill_transfers_completed 19prefill_transfers_drained}), and at 420 px the page must not scroll
     * sideways. The real server's page, after a request ran (so counters are non-zero and long numbers too), is
     * measured at both widths: the text of every label and value ({@link #TEXT_BOXES}) must not intersect any
     * other's, must lie inside the viewport, and the document must not be wider than the viewport.
     */
    @Test
    void theServersPageFitsAt1280And420Pixels_noLabelOrValueOverlapsAnother_noSidewaysScroll() throws Exception {
        Browser.assumeInstalled();
        final LinkGate gate = LinkGate.create(false);
        final ServerConfig config = ServerConfig.builder().port(0).contextTokens(512).prefillPages(PREFILL_PAGES)
            .decodePages(DECODE_PAGES).tokensPerPage(16).tokenDelay(Duration.ZERO).heartbeat(Duration.ofMillis(20))
            .transferTimeout(Duration.ofSeconds(120)).requestTimeout(Duration.ofSeconds(120))
            .reconnectDelay(Duration.ofMillis(20)).gate(gate).build();
        try (KvServer server = KvServer.start(config); Browser browser = Browser.start()) {
            browser.recordProcesses();
            try {
                final HttpResponse<String> done = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(server.baseUri().resolve("v1/completions"))
                        .header("Authorization", "Bearer sk-alice").header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"fit the page\",\"max_tokens\":4}")).build(),
                    HttpResponse.BodyHandlers.ofString());
                assertEquals(200, done.statusCode(), done::body);
                // a second request held mid-transfer, by a tenant with a long name: the holder tables are measured too
                gate.close();
                final String tenant = "a-tenant-with-a-name-as-long-as-the-server-takes-0123456789abcde";
                assertEquals(64, tenant.length());
                final CompletableFuture<HttpResponse<String>> held = HttpClient.newHttpClient().sendAsync(
                    HttpRequest.newBuilder(server.baseUri().resolve("v1/completions"))
                        .header("Authorization", "Bearer sk-" + tenant).header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"" + "held while the page is measured ".repeat(8)
                            + "\",\"max_tokens\":4}")).build(),
                    HttpResponse.BodyHandlers.ofString());
                assertTrue(gate.awaitHeld(1, Duration.ofSeconds(30)), "the held request's writes were never posted");
                // loaded wide, then narrowed as an operator does (the page must re-lay itself out), then loaded narrow
                browser.driver.manage().window().setSize(new Dimension(1280, 1000));
                browser.driver.get(server.baseUri().toString());
                for (String step : new String[] {"1280", "420 after 1280", "420 loaded"}) {
                    final int width = Integer.parseInt(step.substring(0, step.indexOf(' ') < 0 ? step.length() : step.indexOf(' ')));
                    if (step.equals("420 after 1280")) {
                        browser.driver.manage().window().setSize(new Dimension(width, 1000));
                    } else if (step.equals("420 loaded")) {
                        browser.driver.navigate().refresh();
                    }
                    await(browser, "live at " + step + " px with the request counted", r -> r.path("status").asText().equals("live")
                        && r.path("server").path("requests_completed").asLong() == 1);
                    new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(50)).until(d -> ((Number) browser.driver.executeScript(
                        "return document.querySelectorAll('table.holders tr[data-tenant=\"' + arguments[0] + '\"]').length", tenant))
                        .intValue() == 2); // both pools list the held request
                    final long polls = ((Number) browser.driver.executeScript("return +document.getElementById('polls').textContent")).longValue();
                    new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(50)).until(d -> ((Number) browser.driver.executeScript(
                        "return +document.getElementById('polls').textContent")).longValue() >= polls + 2); // redrawn since
                    final JsonNode m = JSON.readTree((String) browser.driver.executeScript(TEXT_BOXES));
                    browser.screenshot("server-live-page-" + step.replace(' ', '-'));
                    assertTrue(m.path("viewport").asInt() <= width && m.path("viewport").asInt() > width - 40,
                        "the viewport is about " + width + " px: " + m.path("viewport"));
                    assertTrue(m.path("boxes").asInt() > 100, "measured the page's labels and values: " + m.path("boxes"));
                    assertEquals("[]", m.path("overlaps").toString(), step + " px: labels/values that overlap another");
                    assertEquals("[]", m.path("outside").toString(), step + " px: labels/values outside the viewport");
                    assertTrue(m.path("scrollWidth").asInt() <= m.path("viewport").asInt(),
                        step + " px: the document scrolls sideways: scrollWidth " + m.path("scrollWidth") + " > clientWidth " + m.path("viewport"));

                    // the tooltip of the map's rightmost square (hovered: a real mousemove on the canvas) stays inside too
                    final JsonNode tip = JSON.readTree((String) browser.driver.executeScript(HOVER_RIGHTMOST));
                    assertEquals("block", tip.path("display").asText(), step + " px: the tooltip shows: " + tip);
                    assertTrue(tip.path("right").asDouble() <= tip.path("viewport").asDouble() + 0.5
                        && tip.path("scrollWidth").asInt() <= tip.path("viewport").asInt(),
                        step + " px: the tooltip of the rightmost square leaves the viewport or widens the page: " + tip);
                    browser.driver.executeScript("document.querySelector('section.pool[data-role=\"decode\"] canvas.map')"
                        + ".dispatchEvent(new MouseEvent('mouseleave'))");
                }
                gate.open();
                final HttpResponse<String> after = held.get(60, TimeUnit.SECONDS);
                assertEquals(200, after.statusCode(), after::body);
            } catch (RuntimeException | Error e) {
                e.addSuppressed(new Throwable("screenshot: " + browser.screenshot("server-live-page-layout-FAILED")));
                throw e;
            }
        }
    }

    /** Hovers the decode map's last square of its first row; answers the tooltip's display, right edge, and the page's widths. */
    static final String HOVER_RIGHTMOST = """
        const c = document.querySelector('section.pool[data-role="decode"] canvas.map');
        const cols = +c.dataset.cols, cell = +c.dataset.cell, r = c.getBoundingClientRect();
        c.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: r.left + (cols - 1) * cell + cell / 2, clientY: r.top + cell / 2 }));
        const tip = c.parentNode.querySelector('.tip');
        return JSON.stringify({ display: getComputedStyle(tip).display, text: tip.textContent, right: tip.getBoundingClientRect().right,
                                viewport: document.documentElement.clientWidth, scrollWidth: document.documentElement.scrollWidth });
        """;

    /**
     * Every visible element (checkVisibility: not in a closed {@code <details>}, not display:none) with text of its own (a label or a value): the boxes of that text (a Range over its text
     * nodes, getClientRects: one per line), then every pair of boxes of different elements that intersect by more
     * than half a pixel, and every box that reaches outside the viewport horizontally.
     */
    static final String TEXT_BOXES = """
        const boxes = [];
        const all = document.body.querySelectorAll('*');
        for (const e of all) {
          if (e.closest('script, style, .tip') || !e.checkVisibility({ visibilityProperty: true })) continue; // e.g. in a closed <details>
          const texts = [...e.childNodes].filter(n => n.nodeType === 3 && n.data.trim() !== '');
          if (!texts.length) continue;
          for (const t of texts) {
            const range = document.createRange();
            range.selectNodeContents(t);
            for (const r of range.getClientRects()) {
              if (r.width > 0 && r.height > 0) boxes.push({ e, text: t.data.trim(), r });
            }
          }
        }
        const name = b => b.e.tagName.toLowerCase() + (b.e.dataset.counter ? '[' + b.e.dataset.counter + ']' : '') + ' "' + b.text + '"';
        const overlaps = [], outside = [];
        const vw = document.documentElement.clientWidth;
        for (let i = 0; i < boxes.length; i++) {
          const a = boxes[i];
          if (a.r.left < -0.5 || a.r.right > vw + 0.5) outside.push(name(a) + ' ' + Math.round(a.r.left) + '..' + Math.round(a.r.right));
          for (let j = i + 1; j < boxes.length; j++) {
            const b = boxes[j];
            if (a.e === b.e) continue;
            const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
            const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
            if (w > 0.5 && h > 0.5) overlaps.push(name(a) + ' × ' + name(b));
          }
        }
        return JSON.stringify({ viewport: vw, scrollWidth: document.documentElement.scrollWidth, boxes: boxes.length,
                                overlaps: overlaps.slice(0, 20), outside: outside.slice(0, 20) });
        """;

    private static boolean noHolders(LiveState s) {
        return s.pools().stream().allMatch(p -> p.holders().isEmpty());
    }

    private static long count(JsonNode r, String role, String state) {
        return r.path("pools").path(role).path(state).asLong(-1);
    }

    private static JsonNode await(Browser browser, String what, Predicate<JsonNode> condition) {
        final JsonNode[] last = new JsonNode[1];
        try {
            return new WebDriverWait(browser.driver, WAIT, Duration.ofMillis(100)).until(d -> {
                try {
                    last[0] = JSON.readTree((String) browser.driver.executeScript(READ));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
                return condition.test(last[0]) ? last[0] : null;
            });
        } catch (TimeoutException e) {
            throw new AssertionError("page not " + what + " within " + WAIT.toSeconds() + " s; it shows " + last[0], e);
        }
    }
}
