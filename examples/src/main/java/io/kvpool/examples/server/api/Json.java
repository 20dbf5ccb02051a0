package io.kvpool.examples.server.api;

import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

import java.io.CharConversionException;
import java.io.IOException;

/**
 * The server's JSON mapper. Reading is strict: a document with a key given twice
 * ({@code {"prompt":"a","prompt":"b"}}, where Jackson would keep the last and another parser the first) or with
 * anything after its end ({@code {...} x}) is malformed, so every client's JSON means one thing. A body is read as
 * UTF-8 only ({@link #read}).
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

    /**
     * Reads a body as JSON in UTF-8, the one encoding of JSON between systems (RFC 8259 §8.1). Jackson, given bytes,
     * guesses UTF-16 or UTF-32 from a byte-order mark or NULs among the first four bytes; such a body is refused here,
     * since every UTF-8 reader (a proxy's filter, a log scanner) sees it as NULs and garbage, not as the request Jackson
     * would read. Those guesses need a 0x00, 0xFE or 0xFF byte there, none of which UTF-8 JSON text holds; invalid UTF-8
     * further on is Jackson's own parse error.
     *
     * @param json a mapper from {@link #strict()}
     * @return the document; {@code null} for a body of whitespace only, as {@link ObjectMapper#readTree(byte[])}
     * @throws CharConversionException if the body starts as UTF-16 or UTF-32 text does (names the byte)
     * @throws IOException             if it is not JSON
     */
    public static JsonNode read(ObjectMapper json, byte[] body) throws IOException {
        for (int i = 0; i < Math.min(4, body.length); i++) {
            final int b = body[i] & 0xFF;
            if (b == 0x00 || b == 0xFE || b == 0xFF) {
                throw new CharConversionException("JSON must be UTF-8 (RFC 8259 §8.1); byte " + i + " of the body is 0x"
                    + String.format("%02X", b) + ", as in UTF-16 or UTF-32 text");
            }
        }
        return json.readTree(body);
    }
}
