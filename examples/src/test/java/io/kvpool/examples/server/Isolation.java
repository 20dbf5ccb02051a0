package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.echo.EchoTokenizer;

import java.util.ArrayList;
import java.util.List;

/**
 * The isolation check every server test applies to a completion: it must hold its own tenant's data and
 * nothing else — {@code kv_tenants} is exactly the tenant, {@code kv_text} is exactly the prompt, and the
 * text is exactly what the echo model makes of that prompt.
 */
final class Isolation {

    private Isolation() {
    }

    /** @return what the echo model generates for {@code prompt}: the prompt's tokens, in order, cycling through prompt and output */
    static String expectedText(String prompt, int maxTokens) {
        final List<String> seq = new ArrayList<>(EchoTokenizer.encode(prompt).stream().map(EchoTokenizer::text).toList());
        final StringBuilder out = new StringBuilder();
        for (int i = 0; i < maxTokens; i++) {
            seq.add(seq.get(i));
            out.append(seq.get(i));
        }
        return out.toString();
    }

    /** @return every way the response breaks isolation (empty if none) */
    static List<String> violations(String tenant, String prompt, int maxTokens, JsonNode response) {
        final List<String> v = new ArrayList<>();
        final JsonNode kv = response.get("kvpool");
        if (kv == null) {
            v.add("no kvpool section: " + response);
            return v;
        }
        if (!tenant.equals(kv.path("tenant").asText())) {
            v.add("answered as tenant " + kv.path("tenant") + " to " + tenant);
        }
        final List<String> tenants = new ArrayList<>();
        kv.path("kv_tenants").forEach(t -> tenants.add(t.asText()));
        if (!tenants.equals(List.of(tenant))) {
            v.add(tenant + "'s KV names tenants " + tenants);
        }
        if (!prompt.equals(kv.path("kv_text").asText())) {
            v.add(tenant + "'s KV holds '" + kv.path("kv_text").asText() + "', the prompt was '" + prompt + "'");
        }
        if (kv.path("kv_misplaced_tokens").asInt(0) != 0) {
            v.add(tenant + "'s KV holds " + kv.path("kv_misplaced_tokens") + " of its tokens at other positions");
        }
        if (kv.path("kv_tail_tokens").asInt(0) != 0) {
            v.add(tenant + "'s last page holds " + kv.path("kv_tail_tokens") + " tokens past its prompt (an earlier tenancy's KV)");
        }
        final String text = response.path("choices").path(0).path("text").asText();
        if (!expectedText(prompt, maxTokens).equals(text)) {
            v.add(tenant + "'s completion is '" + text + "', expected '" + expectedText(prompt, maxTokens) + "'");
        }
        return v;
    }
}
