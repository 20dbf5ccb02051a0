package io.kvpool.examples.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.util.LinkedHashMap;
import java.util.Map;

/** The documented error body, {@code {"error":{"type":…,"reason":…,"message":…, numbers…}}}, for errors the front answers itself. */
final class ErrorBodies {

    private static final ObjectMapper JSON = new ObjectMapper();

    private ErrorBodies() {
    }

    /** @return the body's bytes: {@code type}, {@code reason}, {@code message}, then {@code fields} in their order */
    static byte[] of(String type, String reason, String message, Map<String, ?> fields) {
        final Map<String, Object> e = new LinkedHashMap<>();
        e.put("type", type);
        e.put("reason", reason);
        e.put("message", message);
        e.putAll(fields);
        try {
            return JSON.writeValueAsBytes(Map.of("error", e));
        } catch (JsonProcessingException impossible) { // strings and numbers only
            throw new IllegalStateException(impossible);
        }
    }
}
