package io.kvpool.examples.ui;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.KvServer;
import io.kvpool.examples.server.LinkGate;
import io.kvpool.examples.server.ServerConfig;
import org.junit.jupiter.api.Test;
import org.openqa.selenium.TimeoutException;
import org.openqa.selenium.support.ui.WebDriverWait;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The live page of the REAL server in headless Chromium (issue #5: "it loads, shows both pools, and changes
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
                        && r.path("server").path("requests").asLong() == 1 && r.path("server").path("completed").asLong() == 0);
                assertEquals(PREFILL_PAGES, count(during, "prefill", "free") + count(during, "prefill", "owned"), during::toString);

                gate.open();
                final HttpResponse<String> done = answer.get(60, TimeUnit.SECONDS);
                assertEquals(200, done.statusCode(), done::body);
                assertTrue(done.body().contains("live page follows"), done::body);

                await(browser, "showing the request completed and every page free again", r ->
                    r.path("server").path("completed").asLong() == 1
                        && count(r, "prefill", "free") == PREFILL_PAGES && count(r, "decode", "free") == DECODE_PAGES);
            } catch (RuntimeException | Error e) {
                e.addSuppressed(new Throwable("screenshot: " + browser.screenshot("server-live-page-FAILED")));
                throw e;
            }
            browser.screenshot("server-live-page");
        }
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
