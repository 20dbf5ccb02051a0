package io.kvpool.examples.server.api;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.http.HttpLimits;
import io.kvpool.examples.server.config.ServerConfig;

import java.io.IOException;
import java.nio.charset.StandardCharsets;

/** Answering a {@link HttpCall} with JSON and {@link ApiError}s, and the front's limits from a {@link ServerConfig}. */
public final class Http {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private Http() {
    }

    /**
     * @return the HTTP limits {@code config} asks for ({@code --max-connections}, {@code --max-header-bytes},
     *         {@code --header-timeout-ms}, {@code --idle-timeout-ms}, {@code --stall-timeout-ms}), with
     *         {@code maxBodyBytes} as the body limit
     */
    public static HttpLimits limits(ServerConfig config, long maxBodyBytes) {
        return new HttpLimits(config.maxConnections(), config.maxHeaderBytes(), maxBodyBytes, config.headerTimeout(),
            config.idleTimeout(), config.stallTimeout());
    }

    public static void sendJson(HttpCall call, ObjectMapper json, int status, Object body) throws IOException {
        call.respond(status, "application/json", json.writeValueAsBytes(body));
    }

    /** Sends a JSON error (with {@code Retry-After} when it has one); a client already gone is only logged. */
    public static void sendError(HttpCall call, ObjectMapper json, ApiError e) {
        try {
            if (e.status() == 401) {
                call.setHeader("WWW-Authenticate", "Bearer realm=\"kvpool-example\""); // RFC 9110 §11.6.1, RFC 6750
            }
            call.respondError(e.status(), e.type(), e.reason(), e.getMessage(), e.fields(), e.retryAfterSeconds());
        } catch (IOException gone) {
            LOG.log(System.Logger.Level.DEBUG, "error response not delivered: " + gone);
        }
    }

    /** @throws ApiError 405 (with {@code Allow}) unless the request uses {@code method} */
    public static void method(HttpCall call, String method) throws ApiError {
        if (!call.method().equals(method)) {
            call.setHeader("Allow", method);
            throw ApiError.of(405, "method_not_allowed", "method_not_allowed", call.method() + " " + call.path()
                + " is not allowed; use " + method);
        }
    }

    public static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
