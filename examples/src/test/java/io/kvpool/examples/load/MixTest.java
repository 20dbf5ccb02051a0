package io.kvpool.examples.load;

import io.kvpool.examples.server.echo.EchoTokenizer;
import org.junit.jupiter.api.Test;

import java.util.EnumMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class MixTest {

    static Mix mix(long seed) {
        return new Mix(16, new int[] {8, 256}, new int[] {0, 32}, 0.5, 0.1, 0.05, new int[] {1000, 1200}, 0.05, 4096, seed);
    }

    @Test
    void aShotIsAFunctionOfSeedAndIndexAlone() {
        final Mix a = mix(7), b = mix(7), c = mix(8);
        int differ = 0;
        for (long i = 0; i < 200; i++) {
            assertEquals(a.shot(i), b.shot(i));
            differ += a.shot(i).equals(c.shot(i)) ? 0 : 1;
        }
        assertTrue(differ > 190, differ + " of 200 shots differ between seeds");
        assertEquals(a.shot(5), a.shot(5)); // and not of the order asked
    }

    @Test
    void everyPromptHasExactlyItsTokensAndOnlyItsOwnTenantsMarkers() {
        final Mix m = mix(1);
        final Map<Shot.Kind, Integer> kinds = new EnumMap<>(Shot.Kind.class);
        int aborts = 0, streams = 0;
        final int n = 5_000;
        for (long i = 0; i < n; i++) {
            final Shot s = m.shot(i);
            kinds.merge(s.kind(), 1, Integer::sum);
            if (s.kind() == Shot.Kind.GARBAGE) {
                continue;
            }
            assertEquals(s.promptTokens(), EchoTokenizer.encode(s.prompt()).size(), s::toString);
            final int[] range = s.kind() == Shot.Kind.NORMAL ? new int[] {8, 256} : new int[] {1000, 1200};
            assertTrue(s.promptTokens() >= range[0] && s.promptTokens() <= range[1], s::toString);
            assertTrue(s.prompt().contains(Markers.of(s.tenant(), i)), s::toString);
            assertEquals(java.util.Set.of(), Markers.foreign(s.tenant(), s.prompt()));
            if (s.aborts()) {
                aborts++;
                assertTrue(s.stream() && s.kind() == Shot.Kind.NORMAL && s.abortAfter() < s.maxTokens(), s::toString);
            } else if (s.stream()) {
                streams++;
            }
        }
        // within about 4 standard deviations of the asked shares
        assertEquals(0.05, kinds.get(Shot.Kind.GARBAGE) / (double) n, 0.013, kinds::toString);
        assertEquals(0.05, kinds.get(Shot.Kind.OVER_CAPACITY) / (double) n, 0.013, kinds::toString);
        assertEquals(0.10, aborts / (double) n, 0.017);
        assertEquals(0.5, streams / (double) (n - aborts - kinds.get(Shot.Kind.GARBAGE)), 0.03);
    }

    @Test
    void aPromptIsPaddedToTheExactLength() {
        for (int t = Mix.MIN_PROMPT_TOKENS; t < 60; t++) {
            assertEquals(t, EchoTokenizer.encode(Mix.prompt("tenant42", 123, t)).size(), "tokens " + t);
        }
    }

    @Test
    void badMixesAreRefusedWithTheNumbers() {
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> new Mix(4, new int[] {8, 16}, new int[] {0, 4}, 0.5, 0.6, 0.3, new int[] {100, 200}, 0.2, 4096, 1));
        assertTrue(e.getMessage().contains("abort 0.6") && e.getMessage().contains("≤ 1"), e::getMessage);
        assertThrows(IllegalArgumentException.class, () -> new Mix(101, new int[] {8, 16}, new int[] {0, 4}, 0, 0, 0, new int[] {9, 9}, 0, 1, 1));
        assertThrows(IllegalArgumentException.class, () -> new Mix(1, new int[] {2, 16}, new int[] {0, 4}, 0, 0, 0, new int[] {9, 9}, 0, 1, 1));
        assertThrows(IllegalArgumentException.class, () -> new Mix(1, new int[] {20, 16}, new int[] {0, 4}, 0, 0, 0, new int[] {9, 9}, 0, 1, 1));
        assertNotEquals(mix(1), mix(2));
    }
}
