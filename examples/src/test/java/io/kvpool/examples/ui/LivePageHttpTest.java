package io.kvpool.examples.ui;

import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.http.HttpLimits;
import io.kvpool.SlotState;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@link LivePage}'s routes over real HTTP (the example's HTTP front and the JDK client), without a browser. */
class LivePageHttpTest {
    private final HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    private final AtomicInteger calls = new AtomicInteger();
    private final AtomicReference<Supplier<LiveState>> source = new AtomicReference<>();
    private PoolScene prefill;
    private PoolScene decode;
    private HttpFront server;
    private String base;

    @BeforeEach
    void start() throws IOException {
        prefill = new PoolScene(8);
        decode = new PoolScene(12);
        source.set(() -> new LiveState(List.of(PoolView.of("prefill", prefill.pool), PoolView.of("decode", decode.pool)),
            Map.of("requests", 3L)));
        server = HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, LivePage.handler(() -> {
            calls.incrementAndGet();
            return source.get().get();
        }));
        base = "http://127.0.0.1:" + server.port();
    }

    @AfterEach
    void stop() {
        if (server != null) {
            server.close();
        }
        prefill.close();
        decode.close();
    }

    @Test
    void state_isTheSuppliersStateAsJson_neverCached_andFollowsThePools() throws Exception {
        HttpResponse<byte[]> r = get("/api/state");
        assertEquals(200, r.statusCode());
        assertEquals("application/json", r.headers().firstValue("Content-Type").orElseThrow());
        assertEquals("no-store", r.headers().firstValue("Cache-Control").orElseThrow());
        LiveState s = StateJson.read(r.body());
        assertEquals(List.of("prefill", "decode"), s.pools().stream().map(PoolView::role).toList());
        assertEquals("FFFFFFFF", s.pools().get(0).pages());
        assertEquals("FFFFFFFFFFFF", s.pools().get(1).pages());
        assertEquals(Map.of("requests", 3L), s.counters());
        assertEquals(1, calls.get(), "the supplier is called once per request");

        final int[] slots = prefill.own(3);
        prefill.receive(slots[1]);
        decode.sequence(10); // 3 pages
        r = get("/api/state?ts=123"); // a query string changes nothing
        assertEquals(200, r.statusCode());
        s = StateJson.read(r.body());
        assertEquals(prefill.expected(), s.pools().get(0).pages());
        assertEquals(decode.expected(), s.pools().get(1).pages());
        assertEquals(1, prefill.expected(SlotState.RECEIVING));
        assertEquals(3L, s.pools().get(1).counters().get("owned"));
        assertEquals(1L, s.pools().get(1).counters().get("open_sequences"));
        assertEquals(2, calls.get());
    }

    @Test
    void page_isTheResource_withAPolicyThatAllowsOnlyItsOwnOrigin() throws Exception {
        final byte[] html = LivePage.indexHtml();
        for (String path : List.of("/", "/index.html", "/?x=1")) {
            final HttpResponse<byte[]> r = get(path);
            assertEquals(200, r.statusCode(), path);
            assertEquals("text/html; charset=utf-8", r.headers().firstValue("Content-Type").orElseThrow(), path);
            assertArrayEquals(html, r.body(), path);
            final String csp = r.headers().firstValue("Content-Security-Policy").orElseThrow();
            assertTrue(csp.startsWith("default-src 'none'") && csp.contains("connect-src 'self'"), csp);
        }
        assertEquals(0, calls.get(), "serving the page does not read the pools");
        final HttpResponse<byte[]> head = send(HttpRequest.newBuilder(URI.create(base + "/")).method("HEAD", HttpRequest.BodyPublishers.noBody()));
        assertEquals(200, head.statusCode());
        assertEquals(0, head.body().length);
        assertEquals(String.valueOf(html.length), head.headers().firstValue("Content-Length").orElseThrow());
    }

    @Test
    void otherMethods_are405_withAllow() throws Exception {
        for (String path : List.of("/", "/index.html", "/api/state")) {
            for (String method : List.of("POST", "PUT", "DELETE", "PATCH")) {
                final HttpResponse<byte[]> r = send(HttpRequest.newBuilder(URI.create(base + path))
                    .method(method, HttpRequest.BodyPublishers.ofString("{\"x\":1}")));
                assertEquals(405, r.statusCode(), method + " " + path);
                assertEquals("GET, HEAD", r.headers().firstValue("Allow").orElseThrow(), method + " " + path);
                assertEquals("{\"error\":{\"type\":\"method_not_allowed\",\"reason\":\"method_not_allowed\",\"message\":\""
                    + method + " " + path + " is not allowed; use GET, HEAD\"}}", text(r));
            }
        }
        assertEquals(0, calls.get(), "a refused request does not read the pools");
    }

    @Test
    void unknownPaths_are404() throws Exception {
        for (String path : List.of("/nope", "/api", "/api/", "/api/state/", "/api/state/x", "/api/states", "/index.htm", "/%2E%2E/etc", "/favicon.ico")) {
            final HttpResponse<byte[]> r = get(path);
            assertEquals(404, r.statusCode(), path);
            assertEquals("application/json", r.headers().firstValue("Content-Type").orElseThrow());
            assertTrue(text(r).startsWith("{\"error\":{\"type\":\"not_found\",\"reason\":\"no_such_path\",\"message\":\"no endpoint at "), text(r));
        }
        assertEquals(0, calls.get());
    }

    @Test
    void aSupplierThatThrows_is500_andTheNextPollWorks() throws Exception {
        final Supplier<LiveState> good = source.get();
        source.set(() -> {
            throw new IllegalStateException("decode role unreachable");
        });
        final HttpResponse<byte[]> r = get("/api/state");
        assertEquals(500, r.statusCode());
        assertEquals("no-store", r.headers().firstValue("Cache-Control").orElseThrow());
        final String body = text(r);
        final java.util.regex.Matcher m = Pattern.compile("\"error_id\":\"([0-9a-f]{16})\"").matcher(body);
        assertTrue(m.find(), body);
        assertTrue(body.startsWith("{\"error\":{\"type\":\"server_error\",\"reason\":\"state_unavailable\",\"message\":"
            + "\"state unavailable: internal error " + m.group(1) + ": "), body);
        assertFalse(body.contains("unreachable") || body.contains("IllegalStateException"), "the exception's text stays in the log: " + body);
        source.set(good);
        assertEquals(200, get("/api/state").statusCode());
    }

    @Test
    void theResource_loadsNothingFromElsewhere_andDecodesEveryStateLikePoolView() {
        final String html = new String(LivePage.indexHtml(), StandardCharsets.UTF_8);
        assertFalse(Pattern.compile("(?i)(src|href)\\s*=").matcher(html).find(), "the page references no other file");
        assertFalse(Pattern.compile("(?i)https?://|@import|url\\(").matcher(html).find(), "the page names no other origin");
        // the page's state table, in SlotState order, must match PoolView.code
        final Matcher m = Pattern.compile("\\{ code: '(.)', name: '([a-z]+)' \\}").matcher(html);
        final Map<String, String> table = new LinkedHashMap<>();
        while (m.find()) {
            table.put(m.group(1), m.group(2));
        }
        final Map<String, String> expected = new LinkedHashMap<>();
        for (SlotState s : SlotState.values()) {
            expected.put(String.valueOf(PoolView.code(s)), s.name().toLowerCase(java.util.Locale.ROOT));
        }
        assertEquals(expected, table);
        final List<String> colours = new ArrayList<>();
        for (String name : expected.values()) {
            final Matcher c = Pattern.compile("--" + name + ": (#[0-9a-f]{6});").matcher(html);
            assertTrue(c.find(), "a colour for " + name);
            colours.add(c.group(1));
        }
        assertEquals(colours.size(), colours.stream().distinct().count(), "one colour per state: " + colours);
    }

    private HttpResponse<byte[]> get(String path) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(URI.create(base + path)).GET());
    }

    private HttpResponse<byte[]> send(HttpRequest.Builder b) throws IOException, InterruptedException {
        return client.send(b.timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    private static String text(HttpResponse<byte[]> r) {
        return new String(r.body(), StandardCharsets.UTF_8);
    }

    @Test
    void aHugeBodyIsAnswered413BeforeItIsRead() throws Exception {
        // declared 64 MiB, of which 1 MiB is sent: the front refuses it by its Content-Length, before reading it
        try (java.net.Socket s = new java.net.Socket(java.net.InetAddress.getLoopbackAddress(), server.port())) {
            s.setSoTimeout(5_000);
            final Thread writer = Thread.ofVirtual().start(() -> {
                try {
                    final java.io.OutputStream out = s.getOutputStream();
                    out.write(("POST /api/state HTTP/1.1\r\nHost: x\r\nContent-Length: " + (64 << 20) + "\r\n\r\n")
                        .getBytes(StandardCharsets.US_ASCII));
                    final byte[] chunk = new byte[64 << 10];
                    for (int i = 0; i < 16; i++) {
                        out.write(chunk);
                    }
                    out.flush();
                } catch (IOException cutOff) {
                    // the server answered and closed: expected once it stopped reading
                }
            });
            final String head = new String(s.getInputStream().readNBytes(12), StandardCharsets.US_ASCII);
            assertEquals("HTTP/1.1 413", head, "the answer came while most of the body was still unread");
            writer.join(5_000);
        }
    }
}
