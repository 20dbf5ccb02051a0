package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** HTTP helpers for the server tests: java.net.http for ordinary calls, a raw socket to vanish mid-request. */
final class TestClient {

    static final ObjectMapper JSON = new ObjectMapper();

    private final URI base;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    TestClient(KvServer server) {
        this.base = server.baseUri();
    }

    /** A response: status, headers we look at, and the body. */
    record Response(int status, String retryAfter, String contentType, String body) {
        JsonNode json() {
            try {
                return JSON.readTree(body);
            } catch (IOException e) {
                throw new AssertionError("not JSON (" + status + "): " + body, e);
            }
        }

        JsonNode error() {
            final JsonNode e = json().get("error");
            if (e == null) {
                throw new AssertionError("no error object (" + status + "): " + body);
            }
            return e;
        }

        /** The SSE data payloads, in order. */
        List<String> events() {
            final List<String> out = new ArrayList<>();
            for (String block : body.split("\n\n")) {
                for (String line : block.split("\n")) {
                    if (line.startsWith("data: ")) {
                        out.add(line.substring(6));
                    }
                }
            }
            return out;
        }
    }

    static String body(String prompt, int maxTokens, boolean stream) {
        try {
            return JSON.writeValueAsString(Map.of("prompt", prompt, "max_tokens", maxTokens, "stream", stream));
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    Response complete(String tenant, String prompt, int maxTokens, boolean stream) throws IOException, InterruptedException {
        return post("/v1/completions", "Bearer sk-" + tenant, body(prompt, maxTokens, stream));
    }

    Response post(String path, String authorization, String body) throws IOException, InterruptedException {
        final HttpRequest.Builder b = HttpRequest.newBuilder(base.resolve(path)).timeout(Duration.ofSeconds(30))
            .POST(HttpRequest.BodyPublishers.ofString(body));
        if (authorization != null) {
            b.header("Authorization", authorization);
        }
        return send(b.build());
    }

    /** Closes the client's pooled connections (and waits for its exchanges to end). */
    void closeConnections() {
        http.close();
    }

    Response get(String path) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(base.resolve(path)).timeout(Duration.ofSeconds(30)).GET().build());
    }

    Response send(HttpRequest r) throws IOException, InterruptedException {
        final HttpResponse<String> res = http.send(r, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        return new Response(res.statusCode(), res.headers().firstValue("Retry-After").orElse(null),
            res.headers().firstValue("Content-Type").orElse(null), res.body());
    }

    /**
     * Opens a raw connection and sends a completion request on it; the caller reads as much as it likes
     * and then closes the socket — a client that goes away mid-request.
     */
    Socket openRaw(String tenant, String prompt, int maxTokens, boolean stream) throws IOException {
        final Socket s = new Socket(base.getHost(), base.getPort());
        s.setSoTimeout(10_000);
        final byte[] body = body(prompt, maxTokens, stream).getBytes(StandardCharsets.UTF_8);
        final OutputStream out = s.getOutputStream();
        out.write(("POST /v1/completions HTTP/1.1\r\nHost: " + base.getHost() + "\r\nAuthorization: Bearer sk-" + tenant
            + "\r\nContent-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(body);
        out.flush();
        return s;
    }

    /**
     * Reads from a raw connection until one of the markers appeared (or fails after the socket's timeout).
     *
     * @return everything read
     */
    static String readUntil(Socket s, String... markers) throws IOException {
        final InputStream in = s.getInputStream();
        final StringBuilder sb = new StringBuilder();
        final byte[] buf = new byte[4096];
        while (java.util.Arrays.stream(markers).noneMatch(m -> sb.toString().contains(m))) {
            final int n = in.read(buf);
            if (n < 0) {
                throw new IOException("connection closed before " + java.util.Arrays.toString(markers) + "; got: " + sb);
            }
            sb.append(new String(buf, 0, n, StandardCharsets.UTF_8));
        }
        return sb.toString();
    }
}
