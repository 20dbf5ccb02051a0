package io.kvpool.examples.replay;

import io.kvpool.examples.load.Options;
import io.kvpool.examples.load.Outcome;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The incident replay both ways. With the defaults the safe server refuses the incident's pool, the replay
 * runs at the context the refusal names, and no response holds another tenant's marker. With the
 * incident's switches the same requests make foreign markers appear — the proof that the replay's leak
 * detector can fail.
 */
class ReplayTest {

    private static final ByteArrayOutputStream OUT = new ByteArrayOutputStream();
    private static final PrintStream PRINT = new PrintStream(OUT, true, StandardCharsets.UTF_8);

    private static Replay.Result replay(String... args) throws InterruptedException {
        final Replay.Result r = Replay.run(ReplayCommand.settings(Options.parse(args, Set.of("--requests", "--clients", "--tenants",
            "--seed", "--abort-ratio", "--over-capacity-ratio", "--stream-ratio"))), PRINT);
        Replay.print(r, PRINT);
        return r;
    }

    private static String details(Replay.Result r) {
        return OUT.toString(StandardCharsets.UTF_8) + "\nserver " + r.server() + "\nprefill " + r.prefill()
            + "\nunexpected " + r.run().outcomes().stream().filter(o -> o.kind() == Outcome.Kind.UNEXPECTED).limit(3).toList();
    }

    @Test
    void withTheDefaultsTheSafeServerRefusesTheIncidentsPoolAndNoResponseHoldsAnotherTenantsMarker() throws Exception {
        final Replay.Result r = replay("--requests", "240", "--clients", "12", "--seed", "3", "--fault-rate", "0.05");
        assertNotNull(r.refusal(), "the safe server must refuse a prefill pool smaller than the advertised context");
        assertTrue(r.refusal().contains("2,048") && r.refusal().contains("1,328"), r::refusal);
        assertEquals(1328, r.ran().contextTokens(), "replayed at the largest safe context the refusal names");

        assertEquals(0, r.foreignMarkers(), () -> details(r));
        assertEquals(0, r.run().kvMismatches(), () -> details(r));
        assertEquals(0, r.count(Outcome.Kind.UNEXPECTED), () -> details(r));
        assertEquals(0, r.placeholders(), () -> details(r));
        assertTrue(r.pools().ok(), () -> details(r));

        // the mix really happened: over-capacity requests refused with the reason, aborts seen by the server, faults injected
        final long overCapacity = r.run().outcomes().stream().filter(o -> o.shot().kind() == io.kvpool.examples.load.Shot.Kind.OVER_CAPACITY).count();
        assertTrue(overCapacity > 0, () -> details(r));
        assertEquals(overCapacity, r.byReason(Outcome.Kind.REJECTED).getOrDefault("400 context_too_long", 0L), () -> details(r));
        assertTrue(r.count(Outcome.Kind.ABORTED) > 0 && r.server().get("aborted") > 0, () -> details(r));
        assertTrue(r.prefill().get("injected_faults") > 0, () -> details(r));
        // Each injected fault takes the prefill link down until it reconnects; requests arriving meanwhile are
        // turned away with 503/429 and Retry-After. How many do depends on how long the reconnect takes on a
        // loaded machine (a CI run saw 101 of 240), so the bound is taken over the requests not turned away.
        final long turnedAway = r.count(Outcome.Kind.RETRY_LATER);
        assertTrue(r.count(Outcome.Kind.COMPLETED) > (240 - turnedAway) / 2, () -> details(r));
        assertEquals(240, r.run().outcomes().size());
        assertEquals(240, r.server().get("requests"), () -> details(r)); // every request reached the router exactly once
    }

    @Test
    void withTheIncidentsSwitchesOverCapacityRequestsBecomePlaceholdersAndForeignMarkersAppear() throws Exception {
        final Replay.Result r = replay("--requests", "160", "--clients", "8", "--seed", "3", "--unsafe-incident");
        assertNull(r.refusal(), "with the placeholder switch the undersized pool starts (the incident's configuration)");
        assertEquals(2048, r.ran().contextTokens());
        assertTrue(r.placeholders() > 0, () -> details(r));
        assertTrue(r.foreignMarkers() > 0, () -> "the replay's detector must catch the incident: " + details(r));
        assertTrue(r.run().kvMismatches() > 0, () -> details(r));
        // every leaking response is an over-capacity request's: a placeholder read stale pages
        final List<Outcome> leaks = r.run().outcomes().stream().filter(Outcome::leaked).toList();
        assertTrue(leaks.stream().allMatch(o -> o.shot().kind() == io.kvpool.examples.load.Shot.Kind.OVER_CAPACITY), leaks::toString);
        assertTrue(leaks.stream().allMatch(Outcome::foreignKv), leaks::toString);
        // the leak is of data, not pages: the accounting still balances
        assertTrue(r.pools().ok(), () -> details(r));
    }

    @Test
    void theCommandPrintsTheTableAndExitsOneOnALeak() throws Exception {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();
        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        final PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
        final PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8);

        assertEquals(0, new ReplayCommand().run(new String[] {"--requests", "40", "--clients", "4"}, o, e), out::toString);
        final String safe = out.toString(StandardCharsets.UTF_8);
        assertTrue(safe.contains("the safe server REFUSES this configuration") && safe.contains("RESPONSES CONTAINING ANOTHER TENANT'S MARKER")
            && safe.contains("verdict: no response contained another tenant's marker"), safe);

        out.reset();
        assertEquals(1, new ReplayCommand().run(new String[] {"--requests", "60", "--clients", "4", "--over-capacity-ratio", "0.3",
            "--unsafe-incident"}, o, e), out::toString);
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("!!! UNSAFE: safeguards switched OFF"), err::toString);
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("verdict: LEAK"), out::toString);

        assertEquals(2, new ReplayCommand().run(new String[] {"--requests", "many"}, o, e));
        out.reset();
        assertEquals(0, new ReplayCommand().run(new String[] {"--help"}, o, e));
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("--unsafe-incident"), out::toString);
    }
}
