package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

/** Writing responses with the JDK's HTTP server. */
final class Http {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private Http() {
    }

    static void sendJson(HttpExchange ex, ObjectMapper json, int status, Object body) throws IOException {
        send(ex, status, "application/json", json.writeValueAsBytes(body));
    }

    static void send(HttpExchange ex, int status, String contentType, byte[] body) throws IOException {
        ex.getResponseHeaders().set("Content-Type", contentType);
        ex.sendResponseHeaders(status, body.length == 0 ? -1 : body.length);
        if (body.length > 0) {
            try (OutputStream out = ex.getResponseBody()) {
                out.write(body);
            }
        }
    }

    /** Sends a JSON error (with {@code Retry-After} when it has one); a client already gone is only logged. */
    static void sendError(HttpExchange ex, ObjectMapper json, ApiError e) {
        try {
            if (e.retryAfterSeconds() > 0) {
                ex.getResponseHeaders().set("Retry-After", Integer.toString(e.retryAfterSeconds()));
            }
            if (e.status() == 401) {
                ex.getResponseHeaders().set("WWW-Authenticate", "Bearer realm=\"kvpool-example\""); // RFC 9110 §11.6.1, RFC 6750
            }
            if (e.status() == 413) {
                ex.getResponseHeaders().set("Connection", "close"); // the rest of a huge body is not read
            }
            sendJson(ex, json, e.status(), e.body());
        } catch (IOException gone) {
            LOG.log(System.Logger.Level.DEBUG, "error response not delivered: " + gone);
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
