package io.kvpool.examples.server.echo;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The echo model's tokenizer: cuts text into word pieces of at most {@value #MAX_TOKEN_BYTES} UTF-8 bytes,
 * never inside a code point, so that concatenating the tokens gives back the text exactly.
 *
 * <p>A new token starts before a whitespace character that follows a non-whitespace one (so a word
 * carries its leading space, {@code "Hello world"} → {@code "Hello", " world"}), and wherever the next
 * code point would make the token longer than {@value #MAX_TOKEN_BYTES} bytes.
 */
public final class EchoTokenizer {

    /** Longest token in UTF-8 bytes; a code point is at most 4, so every text can be cut. */
    public static final int MAX_TOKEN_BYTES = 8;

    private EchoTokenizer() {
    }

    /**
     * @param text any text (unpaired surrogates are encoded as {@code '?'} by UTF-8, as {@link String#getBytes} does)
     * @return the tokens, each 1..{@value #MAX_TOKEN_BYTES} bytes of UTF-8; empty for an empty text
     */
    public static List<byte[]> encode(String text) {
        final List<byte[]> tokens = new ArrayList<>();
        final byte[] buf = new byte[MAX_TOKEN_BYTES];
        int len = 0;
        boolean lastWhitespace = false;
        for (int i = 0; i < text.length(); ) {
            final int cp = text.codePointAt(i);
            i += Character.charCount(cp);
            final byte[] b = cp <= 0xFFFF && Character.isSurrogate((char) cp) ? new byte[] {'?'} // a lone surrogate only
                : new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8);
            final boolean ws = Character.isWhitespace(cp);
            if (len > 0 && (len + b.length > MAX_TOKEN_BYTES || ws && !lastWhitespace)) {
                tokens.add(java.util.Arrays.copyOf(buf, len));
                len = 0;
            }
            System.arraycopy(b, 0, buf, len, b.length);
            len += b.length;
            lastWhitespace = ws;
        }
        if (len > 0) {
            tokens.add(java.util.Arrays.copyOf(buf, len));
        }
        return tokens;
    }

    /** @return the text of one token (malformed UTF-8 becomes U+FFFD) */
    public static String text(byte[] token) {
        return new String(token, StandardCharsets.UTF_8);
    }
}
