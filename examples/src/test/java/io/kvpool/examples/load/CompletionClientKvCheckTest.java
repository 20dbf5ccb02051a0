package io.kvpool.examples.load;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.examples.server.echo.EchoDecoder;
import io.kvpool.examples.server.echo.EchoKv;
import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The load generator's KV check (also replay's): a completed answer's KV must be exactly the prompt, in place (the server
 * counts {@code kv_misplaced_tokens}: a generator prompt repeats one marker, so the request's own pages swapped leave its
 * text unchanged) and hold no tokens past the prompt in its last page ({@code kv_tail_tokens}), and a stream that ends
 * early must echo the prompt, so that another request's text of the same
 * tenant is a finding there too.
 */
class CompletionClientKvCheckTest {

    @Test
    void theRequestsOwnKvAtOtherPositionsIsAMismatch() throws Exception {
        final KvLayout layout = new KvLayout(2, 1, 32, DType.FP32, 4); // 128-byte vectors, 4 tokens a page
        final String tenant = "tenant3";
        final String prompt = Mix.prompt(tenant, 17, 40);
        final List<byte[]> tokens = EchoTokenizer.encode(prompt);
        final int n = tokens.size();
        final EchoDecoder.Reconstruction rec;
        try (KvPool pool = KvPool.builder(layout).pages(64).maxContextTokens(256).build();
             Sequence seq = pool.admit(n, 0).sequence()) {
            seq.append(n);
            final EchoKv kv = EchoKv.of(pool);
            kv.writePrompt(seq, tokens, n, tenant);
            // find two full pages holding the same token texts, and swap their bytes
            final int tpp = layout.tokensPerPage();
            int a = -1, b = -1;
            outer:
            for (int i = 0; (i + 1) * tpp <= n; i++) {
                for (int j = i + 1; (j + 1) * tpp <= n; j++) {
                    boolean same = true;
                    for (int t = 0; t < tpp && same; t++) {
                        same = Arrays.equals(tokens.get(i * tpp + t), tokens.get(j * tpp + t));
                    }
                    if (same) {
                        a = i;
                        b = j;
                        break outer;
                    }
                }
            }
            assertTrue(a >= 0, "no two pages with the same text");
            try (Arena arena = Arena.ofConfined()) {
                final MemorySegment tmp = arena.allocate(layout.bytesPerPage());
                tmp.copyFrom(seq.page(a));
                seq.page(a).copyFrom(seq.page(b));
                seq.page(b).copyFrom(tmp);
            }
            rec = EchoDecoder.reconstruct(kv, seq, n);
        }
        assertEquals(prompt, rec.text());
        assertEquals(List.of(tenant), rec.tenants());
        assertEquals(2 * layout.tokensPerPage(), rec.misplaced(), "the server knows: every token of both pages is misplaced");

        // the server's answer, as CompletionsHandler writes it, through the load generator's client
        final Map<String, Object> k = new LinkedHashMap<>();
        k.put("request_id", "r-1");
        k.put("tenant", tenant);
        k.put("kv_text", rec.text());
        k.put("kv_tenants", rec.tenants());
        k.put("kv_tokens", rec.tokens());
        k.put("kv_canary_tokens", rec.canary());
        k.put("kv_garbage_tokens", rec.garbage());
        k.put("kv_misplaced_tokens", rec.misplaced());
        final Map<String, Object> body = new LinkedHashMap<>();
        body.put("id", "cmpl-1");
        body.put("object", "text_completion");
        body.put("choices", List.of(Map.of("index", 0, "text", rec.text().substring(0, 8), "finish_reason", "length")));
        body.put("usage", Map.of("prompt_tokens", n, "completion_tokens", 2, "total_tokens", n + 2));
        body.put("kvpool", k);
        final byte[] json = new ObjectMapper().writeValueAsString(body).getBytes(StandardCharsets.UTF_8);
        final HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().add("Content-Type", "application/json");
            ex.sendResponseHeaders(200, json.length);
            ex.getResponseBody().write(json);
            ex.close();
        });
        server.start();
        try {
            final CompletionClient client = new CompletionClient(URI.create("http://127.0.0.1:" + server.getAddress().getPort()),
                Duration.ofSeconds(10), 1 << 20);
            final Outcome o = client.send(new Shot(0, tenant, Shot.Kind.NORMAL, prompt, n, 2, false, -1, null));
            assertEquals(Outcome.Kind.COMPLETED, o.kind(), o::toString);
            assertFalse(o.leaked());
            assertFalse(o.foreignKv());
            assertTrue(o.kvMismatch(), "KV at the wrong positions is a mismatch, though its text is the prompt");
        } finally {
            server.stop(0);
        }
    }

    @Test
    void tokensInTheLastPagePastThePromptAreAMismatch() {
        // an earlier tenancy's KV in the tail of the request's last page: its text is the prompt, its own KV in place
        final String prompt = Mix.prompt("tenant3", 17, 9);
        final Shot shot = new Shot(0, "tenant3", Shot.Kind.NORMAL, prompt, EchoTokenizer.encode(prompt).size(), 2, false, -1, null);
        final com.fasterxml.jackson.databind.node.ObjectNode kv = new ObjectMapper().createObjectNode()
            .put("kv_text", prompt).put("kv_misplaced_tokens", 0);
        assertFalse(CompletionClient.kvMismatch(shot, kv), "a decode role of an older build reports no tail");
        kv.put("kv_tail_tokens", 0);
        assertFalse(CompletionClient.kvMismatch(shot, kv));
        kv.put("kv_tail_tokens", 3);
        assertTrue(CompletionClient.kvMismatch(shot, kv));
    }

    /** Text of another request of the same tenant carries no foreign marker; the echo check finds it. */
    @Test
    void anotherRequestsTextOfTheSameTenantInAnAbortedStreamIsAMismatch() throws Exception {
        final String tenant = "tenant3";
        final String mine = Mix.prompt(tenant, 17, 9), other = Mix.prompt(tenant, 18, 9);
        final List<byte[]> otherTokens = EchoTokenizer.encode(other);
        final StringBuilder sse = new StringBuilder(": admitted\n\n");
        final ObjectMapper json = new ObjectMapper();
        for (byte[] t : otherTokens) {
            final Map<String, Object> choice = new LinkedHashMap<>();
            choice.put("index", 0);
            choice.put("text", EchoTokenizer.text(t));
            choice.put("finish_reason", null);
            sse.append("data: ").append(json.writeValueAsString(Map.of("choices", List.of(choice)))).append("\n\n");
        }
        final byte[] body = sse.toString().getBytes(StandardCharsets.UTF_8);
        final HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, body.length);
            ex.getResponseBody().write(body);
            ex.close();
        });
        server.start();
        try {
            final CompletionClient client = new CompletionClient(URI.create("http://127.0.0.1:" + server.getAddress().getPort()),
                Duration.ofSeconds(10), 1 << 20);
            final int n = EchoTokenizer.encode(mine).size();
            final Outcome o = client.send(new Shot(1, tenant, Shot.Kind.NORMAL, mine, n, 12, true, otherTokens.size(), null));
            assertEquals(Outcome.Kind.ABORTED, o.kind(), o::toString);
            assertFalse(o.leaked(), "request 18's text in request 17's stream is not a foreign marker");
            assertTrue(o.kvMismatch(), "it is a mismatch");
        } finally {
            server.stop(0);
        }
    }
}
