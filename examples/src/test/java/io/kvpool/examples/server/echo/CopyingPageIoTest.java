package io.kvpool.examples.server.echo;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.examples.server.link.CopyingPageIo;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The echo model's path for device pools ({@code --device cuda}), on the CPU: {@link CopyingPageIo} with the
 * copies a {@code DevicePageStorage}'s {@code readPage}/{@code writePage} make, done here on host pages. What
 * is written through the copies lands in the pages (a direct reader sees it), a page is copied once per run of
 * its tokens, and — the control — copies that never write back leave only the canary, which the reader reports.
 */
class CopyingPageIoTest {

    /** {@code n} one-token words */
    private static String words(String prefix, int n) {
        return java.util.stream.IntStream.range(0, n).mapToObj(i -> prefix + i).collect(java.util.stream.Collectors.joining(" "));
    }


    private static final KvLayout LAYOUT = new KvLayout(2, 2, 32, DType.FP16, 16);

    private final AtomicInteger reads = new AtomicInteger(), writes = new AtomicInteger();

    private CopyingPageIo copies(KvPool pool, boolean writeBack) {
        final long bytes = LAYOUT.bytesPerPage();
        return new CopyingPageIo(LAYOUT, (slot, buf) -> {
            reads.incrementAndGet();
            MemorySegment.copy(pool.storage().hostPage(slot), 0, buf, 0, bytes);
        }, (slot, buf) -> {
            writes.incrementAndGet();
            if (writeBack) {
                MemorySegment.copy(buf, 0, pool.storage().hostPage(slot), 0, bytes);
            }
        });
    }

    private static int tokensOf(String tenant, EchoKv kv, Sequence seq, List<byte[]> tokens) {
        int n = 0;
        for (int p = 0; p < tokens.size(); p++) {
            final EchoKv.KvToken t = kv.read(seq, p);
            if (t.kind() == EchoKv.Kind.TOKEN && tenant.equals(t.tenant()) && t.position() == p
                && java.util.Arrays.equals(t.bytes(), tokens.get(p))) {
                n++;
            }
        }
        return n;
    }

    @Test
    void whatIsWrittenThroughCopiesLandsInThePagesOneCopyPerPage() {
        try (KvPool pool = KvPool.builder(LAYOUT).pages(16).maxContextTokens(256).build();
             Sequence seq = pool.admit(40, 0).sequence()) {
            seq.append(40); // 3 pages
            final List<byte[]> tokens = EchoTokenizer.encode(words("t", 40));
            assertEquals(40, tokens.size());
            new EchoKv(LAYOUT, copies(pool, true)).writePrompt(seq, tokens, 40, "alice");
            assertEquals(3, reads.get(), "one read per page");
            assertEquals(3, writes.get(), "one write-back per page");
            assertEquals(40, tokensOf("alice", new EchoKv(LAYOUT), seq, tokens), "a direct reader sees every token");

            reads.set(0);
            final EchoKv viaCopies = new EchoKv(LAYOUT, copies(pool, true));
            assertEquals(40, tokensOf("alice", viaCopies, seq, tokens), "and so does a reader through copies");
            assertEquals(3, reads.get(), "reading a page's tokens in order copies it once");

            viaCopies.write(seq, 39, "!".getBytes(java.nio.charset.StandardCharsets.UTF_8), "alice"); // a decode step
            assertEquals("!", new EchoKv(LAYOUT).read(seq, 39).text());
        }
    }

    @Test
    void controlCopiesThatNeverWriteBackLeaveOnlyTheCanaryAndTheReaderSaysSo() {
        try (KvPool pool = KvPool.builder(LAYOUT).pages(16).maxContextTokens(256).build();
             Sequence seq = pool.admit(40, 0).sequence()) {
            seq.append(40);
            final List<byte[]> tokens = EchoTokenizer.encode(words("t", 40));
            new EchoKv(LAYOUT, copies(pool, false)).writePrompt(seq, tokens, 40, "alice");
            final EchoKv direct = new EchoKv(LAYOUT);
            assertEquals(0, tokensOf("alice", direct, seq, tokens), "nothing reached the pages");
            for (int p = 0; p < 40; p++) {
                assertEquals(EchoKv.Kind.CANARY, direct.read(seq, p).kind(), "position " + p);
            }
        }
    }
}
