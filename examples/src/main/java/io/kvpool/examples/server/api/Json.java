package io.kvpool.examples.server.api;

import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

/**
 * The server's JSON mapper. Reading is strict: a document with a key given twice
 * ({@code {"prompt":"a","prompt":"b"}}, where Jackson would keep the last and another parser the first) or with
 * anything after its end ({@code {...} x}) is malformed, so every client's JSON means one thing.
 */
public final class Json {

    private Json() {
    }

    /** {@return a new mapper that refuses duplicate keys and trailing data} Thread-safe once built. */
    public static ObjectMapper strict() {
        return JsonMapper.builder()
            .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .build();
    }
}
