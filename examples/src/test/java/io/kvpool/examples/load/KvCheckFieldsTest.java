package io.kvpool.examples.load;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;

import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A completion passes the load generator's checks only when its {@code kvpool} section says, in the form the server writes
 * it, that the KV was the prompt's own: a check field that is missing, {@code null}, not a number or too large for the
 * client's counters proves nothing and is a finding; so is a token count that is not one. And a whole (not
 * streamed) completion's text must be the echo of its prompt, as a streamed one's must.
 */
class KvCheckFieldsTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String TENANT = "tenant3";
    private static final String PROMPT = Mix.prompt(TENANT, 17, 9);
    private static final int TOKENS = 2;

    /** The server's answer to {@link #PROMPT} with {@link #TOKENS} tokens, as CompletionsHandler writes it. */
    private static ObjectNode answer() {
        final List<byte[]> prompt = EchoTokenizer.encode(PROMPT);
        final ObjectNode body = JSON.createObjectNode().put("id", "cmpl-1").put("object", "text_completion");
        body.putArray("choices").addObject().put("index", 0)
            .put("text", EchoTokenizer.text(prompt.get(0)) + EchoTokenizer.text(prompt.get(1))).putNull("logprobs").put("finish_reason", "length");
        body.putObject("usage").put("prompt_tokens", prompt.size()).put("completion_tokens", TOKENS).put("total_tokens", prompt.size() + TOKENS);
        final ObjectNode kv = body.putObject("kvpool").put("request_id", 1).put("tenant", TENANT).put("kv_text", PROMPT);
        kv.putArray("kv_tenants").add(TENANT);
        kv.put("kv_tokens", prompt.size()).put("kv_canary_tokens", 0).put("kv_garbage_tokens", 0).put("kv_misplaced_tokens", 0)
            .put("kv_tail_tokens", 0);
        return body;
    }

    /** @return whether the load report calls a run of this one answer clean */
    private static boolean clean(Consumer<ObjectNode> change) throws Exception {
        final ObjectNode body = answer();
        change.accept(body);
        final byte[] json = JSON.writeValueAsString(body).getBytes(StandardCharsets.UTF_8);
        final HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().add("Content-Type", "application/json");
            ex.sendResponseHeaders(200, json.length);
            ex.getResponseBody().write(json);
            ex.close();
        });
        server.start();
        try (CompletionClient client = new CompletionClient(URI.create("http://127.0.0.1:" + server.getAddress().getPort()),
            Duration.ofSeconds(10), 1 << 20)) {
            final Outcome o = client.send(new Shot(0, TENANT, Shot.Kind.NORMAL, PROMPT, EchoTokenizer.encode(PROMPT).size(), 8, false, -1, null));
            return LoadReport.clean(new LoadGenerator.Result(List.of(o), 1_000_000L, 1), new PoolCheck(true, List.of()));
        } finally {
            server.stop(0);
        }
    }

    private static ObjectNode kv(ObjectNode body) {
        return (ObjectNode) body.get("kvpool");
    }

    @Test
    void theServersOwnAnswerIsClean() throws Exception {
        assertTrue(clean(b -> { }));
        assertTrue(clean(b -> kv(b).remove("kv_tail_tokens")), "a decode role of an older build reports no tail");
    }

    @Test
    void aMisplacedCountThatIsMissingNullMalformedOrOverflowingIsNotClean() throws Exception {
        assertFalse(clean(b -> kv(b).remove("kv_misplaced_tokens")), "missing");
        assertFalse(clean(b -> kv(b).putNull("kv_misplaced_tokens")), "null");
        assertFalse(clean(b -> kv(b).put("kv_misplaced_tokens", "many")), "not a number");
        assertFalse(clean(b -> kv(b).put("kv_misplaced_tokens", 0.5)), "not an integer");
        assertFalse(clean(b -> kv(b).put("kv_misplaced_tokens", 1L << 32)), "2^32, which an int cast reads as 0");
    }

    @Test
    void aTailCountThatIsNullMalformedOrOverflowingIsNotClean() throws Exception {
        assertFalse(clean(b -> kv(b).putNull("kv_tail_tokens")), "null");
        assertFalse(clean(b -> kv(b).put("kv_tail_tokens", "3")), "a string");
        assertFalse(clean(b -> kv(b).put("kv_tail_tokens", 1L << 32)), "2^32, which an int cast reads as 0");
    }

    /** Tokens such as {@code " SECRET-"} are the same text in every tenant's prompt: only {@code kv_tenants} sees whose they are. */
    @Test
    void tenantsOfTheKvThatAreMissingOrNotAListAreNotClean() throws Exception {
        assertFalse(clean(b -> kv(b).remove("kv_tenants")), "missing");
        assertFalse(clean(b -> kv(b).put("kv_tenants", "tenant3,tenant5")), "a string, not a list");
        assertFalse(clean(b -> kv(b).putNull("kv_tenants")), "null");
        assertFalse(clean(b -> kv(b).putArray("kv_tenants")), "no tenant at all for a prompt's KV");
    }

    /** The count of generated tokens is held against {@code max_tokens}: one an int cast wraps passes that check. */
    @Test
    void aCompletionTokenCountThatIsMissingOrOverflowingIsNotClean() throws Exception {
        assertFalse(clean(b -> ((ObjectNode) b.get("usage")).remove("completion_tokens")), "missing");
        assertFalse(clean(b -> ((ObjectNode) b.get("usage")).put("completion_tokens", (1L << 32) + TOKENS)), "2^32 + 2, which an int cast reads as 2");
    }

    /** Another request's text of the same tenant holds no foreign marker: the echo check is what sees it, streamed or not. */
    @Test
    void aWholeCompletionWhoseTextIsNotTheEchoOfItsPromptIsNotClean() throws Exception {
        final List<byte[]> other = EchoTokenizer.encode(Mix.prompt(TENANT, 25, 9));
        assertFalse(clean(b -> ((ObjectNode) b.get("choices").get(0)).put("text",
            EchoTokenizer.text(other.get(0)) + EchoTokenizer.text(other.get(1)))), "request 25's text in request 17's answer");
    }
}
