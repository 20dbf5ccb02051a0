package io.kvpool.examples.server.echo;

import io.kvpool.Sequence;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * The decode half of the echo model. {@link #reconstruct} reads every page of a committed sequence's
 * block table and rebuilds the prompt's text and tenants from the KV alone, and reads the last page's tail past the
 * prompt, which must hold no one's tokens; {@link #generate} then
 * produces tokens that are a function of that KV: generated token {@code i} is the token at position
 * {@code i} of the sequence as read back from its pages (so the prompt is echoed, then the echo itself),
 * and each generated token's KV is appended to the sequence as a real decode step would.
 */
public final class EchoDecoder {

    /**
     * The prompt as the KV holds it.
     *
     * @param text      the concatenated token texts (markers for canary or garbage tokens)
     * @param tenants   every tenant named by a token, in order of first appearance
     * @param tokens    tokens read
     * @param canary    tokens that still held the free-page canary
     * @param garbage   tokens that decoded to nothing
     * @param misplaced tokens whose record names another position than the one they were read at
     * @param tail      tokens found in the last page past the prompt: KV of an earlier tenancy of that page, which the
     *                  receiver's tail fill must have wiped; {@link #TAIL_NOT_READ} where a role of an older build did not
     *                  read the tail
     */
    public record Reconstruction(String text, List<String> tenants, int tokens, int canary, int garbage, int misplaced, int tail) {
    }

    /** {@link Reconstruction#tail()} of a reconstruction that did not read the tail. */
    public static final int TAIL_NOT_READ = -1;

    /** Receives generated tokens; throws when the client is gone. */
    @FunctionalInterface
    public interface TokenSink {
        void token(String text) throws IOException;
    }

    private EchoDecoder() {
    }

    /**
     * Reads the prompt back from the sequence's KV, and the last page's tail past it.
     *
     * @param promptTokens the prompt's length, at most the sequence's token count
     * @return what the KV holds
     */
    public static Reconstruction reconstruct(EchoKv kv, Sequence seq, int promptTokens) {
        final StringBuilder text = new StringBuilder();
        final Set<String> tenants = new LinkedHashSet<>();
        int canary = 0, garbage = 0, misplaced = 0;
        for (int p = 0; p < promptTokens; p++) {
            final EchoKv.KvToken t = kv.read(seq, p);
            text.append(t.text());
            switch (t.kind()) {
                case TOKEN -> {
                    tenants.add(t.tenant());
                    if (t.position() != p) {
                        misplaced++;
                    }
                }
                case CANARY -> canary++;
                case GARBAGE -> garbage++;
            }
        }
        int tail = 0;
        final int end = seq.pageCount() * seq.pool().layout().tokensPerPage();
        for (int p = promptTokens; p < end; p++) { // a prompt that fills its last page has no tail
            if (kv.read(seq, p).kind() == EchoKv.Kind.TOKEN) {
                tail++;
            }
        }
        return new Reconstruction(text.toString(), new ArrayList<>(tenants), promptTokens, canary, garbage, misplaced, tail);
    }

    /**
     * Generates {@code maxTokens} tokens into the sequence (which must hold {@code promptTokens} tokens and
     * have room for {@code maxTokens} more, as admission reserved).
     *
     * @param delay pause after each token (a stand-in for a model's step time); zero for none
     * @return the generated text
     */
    public static String generate(EchoKv kv, Sequence seq, int maxTokens, String tenant, Duration delay, TokenSink sink)
        throws IOException, InterruptedException {
        final StringBuilder out = new StringBuilder();
        for (int i = 0; i < maxTokens; i++) {
            final EchoKv.KvToken source = kv.read(seq, i);
            final String text = source.text();
            final byte[] bytes = source.kind() == EchoKv.Kind.TOKEN ? source.bytes() : text.getBytes(StandardCharsets.UTF_8);
            final int position = seq.tokenCount();
            seq.append(1);
            kv.write(seq, position, bytes, tenant);
            out.append(text);
            sink.token(text);
            if (!delay.isZero()) {
                Thread.sleep(delay);
            }
        }
        return out.toString();
    }
}
