package io.kvpool.examples.load;

import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Secret markers: every prompt the generator sends is made of {@code SECRET-<tenant>-<request>} words, so
 * any response text that holds a marker of <em>another</em> tenant is proof that it was built from that
 * tenant's KV — the 2026 incident's symptom. A correct server can never produce one: no prompt contains
 * another tenant's marker.
 *
 * <p>Tenants are {@code tenant0 … tenant99}. A response built from stale pages splices tokens of
 * different prompts. The echo tokenizer cuts a word into pieces of at most 8 bytes: {@code " SECRET-tenant12-7"}
 * into {@code " SECRET-"}, {@code "tenant12"}, {@code "-7"}; {@code " SECRET-tenant3-17"} into {@code " SECRET-"},
 * {@code "tenant3-"}, {@code "17"}; a prompt's first word {@code "SECRET-tenant3-17"} into {@code "SECRET-t"},
 * {@code "enant3-1"}, {@code "7"}. So a name's digits are always in the token that ends its letters, and a
 * one-digit name's {@code '-'} too: in KV text a digit never follows a one-digit name, while any token may follow a
 * two-digit one. A name is therefore read as {@code tenant} and two digits, else {@code tenant} and one digit that no
 * digit follows (in JSON, {@code "kv_tenants":["tenant2"]}, a quote does). Each name then comes from one token of
 * that tenant's own KV, and a splice can neither hide a name ({@code "tenant12"} + {@code "17"}) nor make one
 * tenant's data read as another's.
 */
public final class Markers {

    /** Most tenants a run can have: their names stay within one token. */
    public static final int MAX_TENANTS = 100;

    /**
     * A whole tenant name, with the rest of its marker where the text has it: a stream cut off right after a
     * foreign name ({@code "… SECRET-tenant3-"}, an aborted client's last token) is proof enough.
     */
    private static final Pattern MARKER = Pattern.compile("(?:SECRET-)?(tenant(?:\\d\\d|\\d(?!\\d)))(?:-\\d+)?");

    private Markers() {
    }

    /** @return the name of tenant {@code i}, 0 ≤ i &lt; {@value #MAX_TENANTS} */
    public static String tenant(int i) {
        if (i < 0 || i >= MAX_TENANTS) {
            throw new IllegalArgumentException("tenant index must be in [0, " + MAX_TENANTS + "), was " + i);
        }
        return "tenant" + i;
    }

    /** @return the marker of one request of one tenant */
    public static String of(String tenant, long request) {
        return "SECRET-" + tenant + "-" + request;
    }

    /** @return every marker (or bare tenant name) in {@code text} that names a tenant other than {@code tenant}, sorted */
    public static Set<String> foreign(String tenant, CharSequence text) {
        final Set<String> out = new TreeSet<>();
        final Matcher m = MARKER.matcher(text);
        while (m.find()) {
            if (!m.group(1).equals(tenant)) {
                out.add(m.group());
            }
        }
        return out;
    }
}
