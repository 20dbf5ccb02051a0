package io.kvpool.examples.server.echo;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class EchoModelTest {

    static final KvLayout LAYOUT = new KvLayout(4, 2, 32, DType.FP16, 16);

    @Test
    void tokensRoundTripAnyTextAndStayWithinTheirBytes() {
        final List<String> texts = new ArrayList<>(List.of("Hello world", "  two  spaces ", "Überstraßenbahnhaltestelle",
            "日本語のテキスト", "emoji 🧪🚀 mixed", "tab\tnew\nline", "a", "x".repeat(100)));
        final SplittableRandom r = new SplittableRandom(5);
        for (int i = 0; i < 200; i++) {
            final StringBuilder sb = new StringBuilder();
            for (int j = r.nextInt(40); j > 0; j--) {
                sb.appendCodePoint(r.nextInt(4) == 0 ? ' ' : r.nextInt(3) == 0 ? 0x1F300 + r.nextInt(500) : 0x20 + r.nextInt(0x3000));
            }
            texts.add(sb.toString());
        }
        for (String t : texts) {
            final List<byte[]> tokens = EchoTokenizer.encode(t);
            final StringBuilder back = new StringBuilder();
            for (byte[] tok : tokens) {
                assertTrue(tok.length >= 1 && tok.length <= EchoTokenizer.MAX_TOKEN_BYTES, () -> tok.length + " bytes in " + t);
                back.append(EchoTokenizer.text(tok));
            }
            assertEquals(t, back.toString());
        }
        assertEquals(List.of("Hello", " world"), EchoTokenizer.encode("Hello world").stream().map(EchoTokenizer::text).toList());
        assertTrue(EchoTokenizer.encode("").isEmpty());
    }

    @Test
    void kvHoldsEachTokensTextPositionAndTenantInEveryLayer() {
        try (KvPool pool = KvPool.builder(LAYOUT).pages(8).maxContextTokens(128).build();
             Sequence seq = pool.admit(40, 4).sequence()) {
            final List<byte[]> tokens = EchoTokenizer.encode("the quick brown fox jumps over the lazy dog, twice: the quick brown fox");
            seq.append(tokens.size());
            final EchoKv kv = new EchoKv(LAYOUT);
            kv.writePrompt(seq, tokens, tokens.size(), "alice");
            final EchoDecoder.Reconstruction r = EchoDecoder.reconstruct(kv, seq, tokens.size());
            assertEquals("the quick brown fox jumps over the lazy dog, twice: the quick brown fox", r.text());
            assertEquals(List.of("alice"), r.tenants());
            assertEquals(0, r.canary() + r.garbage() + r.misplaced());

            final List<String> streamed = new ArrayList<>();
            final String gen;
            try {
                gen = EchoDecoder.generate(kv, seq, 4, "alice", Duration.ZERO, streamed::add);
            } catch (Exception e) {
                throw new AssertionError(e);
            }
            assertEquals("the quick brown fox", gen, "generation echoes the KV in order");
            assertEquals(List.of("the", " quick", " brown", " fox"), streamed);
            assertEquals(tokens.size() + 4, seq.tokenCount(), "generated tokens are appended to the sequence");
            assertEquals(" quick", kv.read(seq, tokens.size() + 1).text(), "and their KV written");
        }
    }

    @Test
    void unwrittenCorruptedAndForeignKvReadAsWhatTheyAre() {
        try (KvPool pool = KvPool.builder(LAYOUT).pages(8).maxContextTokens(128).build();
             Sequence seq = pool.admit(48, 0).sequence()) {
            seq.append(48);
            final EchoKv kv = new EchoKv(LAYOUT);
            // page 0 never written: it still holds the free-page canary
            assertEquals(EchoKv.Kind.CANARY, kv.read(seq, 3).kind());
            assertEquals(EchoKv.CANARY_TEXT, kv.read(seq, 3).text());
            // zeros are garbage
            seq.page(1).fill((byte) 0);
            assertEquals(EchoKv.Kind.GARBAGE, kv.read(seq, 16).kind());
            assertEquals(EchoKv.GARBAGE_TEXT, kv.read(seq, 16).text());
            // a token whose last layer's V disagrees (a torn write) is garbage
            kv.write(seq, 32, "secret".getBytes(StandardCharsets.UTF_8), "bob");
            assertEquals("secret", kv.read(seq, 32).text());
            final MemorySegment p2 = seq.page(2);
            final long off = LAYOUT.offset(LAYOUT.layers() - 1, 1, 0) + 10;
            p2.set(ValueLayout.JAVA_BYTE, off, (byte) (p2.get(ValueLayout.JAVA_BYTE, off) ^ 1));
            assertEquals(EchoKv.Kind.GARBAGE, kv.read(seq, 32).kind());
            // another tenant's token at this position reads as theirs, and a token written for another position is flagged
            kv.write(seq, 33, "Eve".getBytes(StandardCharsets.UTF_8), "eve");
            kv.write(seq, 34, "moved".getBytes(StandardCharsets.UTF_8), "bob");
            final int vec = (int) LAYOUT.bytesPerTokenVector();
            for (int layer = 0; layer < LAYOUT.layers(); layer++) {
                for (int k = 0; k < 2; k++) { // token 34's KV copied to token 35: valid, but for another position
                    MemorySegment.copy(p2, LAYOUT.offset(layer, k, 2), p2, LAYOUT.offset(layer, k, 3), vec);
                }
            }
            final EchoDecoder.Reconstruction r = EchoDecoder.reconstruct(kv, seq, 36);
            assertEquals(List.of("eve", "bob"), r.tenants(), r::toString);
            assertEquals(16, r.canary(), r::toString);
            assertEquals(17, r.garbage(), r::toString);
            assertEquals(1, r.misplaced(), r::toString);
            assertEquals(0, r.tail(), "the tail, 36 to 47, still holds the canary");
            assertTrue(r.text().endsWith(EchoKv.GARBAGE_TEXT + "Evemovedmoved"), r::text);
        }
    }

    @Test
    void tokensOfAnEarlierTenancyInTheLastPagesTailAreCounted() {
        // one page, no fill on free: the second request's page still holds the first one's KV past its own prompt
        try (KvPool pool = KvPool.builder(LAYOUT).pages(1).maxContextTokens(LAYOUT.tokensPerPage())
            .fillMode(io.kvpool.storage.FillMode.NONE).build()) {
            final EchoKv kv = new EchoKv(LAYOUT);
            final List<byte[]> earlier = EchoTokenizer.encode("the quick brown fox jumps over the lazy dog again");
            final int tpp = LAYOUT.tokensPerPage();
            try (Sequence first = pool.admit(tpp, 0).sequence()) {
                first.append(tpp);
                for (int p = 0; p < tpp; p++) {
                    kv.write(first, p, earlier.get(p % earlier.size()), "eve");
                }
                assertEquals(0, EchoDecoder.reconstruct(kv, first, tpp).tail(), "a full page has no tail");
            }
            final List<byte[]> prompt = EchoTokenizer.encode("hi there");
            try (Sequence second = pool.admit(prompt.size(), 0).sequence()) {
                second.append(prompt.size());
                kv.writePrompt(second, prompt, prompt.size(), "alice");
                final EchoDecoder.Reconstruction r = EchoDecoder.reconstruct(kv, second, prompt.size());
                assertEquals("hi there", r.text(), "the prompt itself reads back whole");
                assertEquals(List.of("alice"), r.tenants());
                assertEquals(tpp - prompt.size(), r.tail(), r::toString);
            }
        }
    }

    @Test
    void aLayoutTooSmallForTheRecordIsRefusedWithBothSizes() {
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> new EchoKv(new KvLayout(2, 1, 16, DType.FP16, 16)));
        assertTrue(e.getMessage().contains("84") && e.getMessage().contains("32"), e::getMessage);
    }
}
