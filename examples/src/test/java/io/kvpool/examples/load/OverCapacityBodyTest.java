package io.kvpool.examples.load;

import io.kvpool.examples.server.KvServer;
import io.kvpool.examples.server.config.ServerConfig;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The load client files a server's correct size refusal of an over-capacity request as expected, not unexpected. */
class OverCapacityBodyTest {

    /**
     * Was (a fix of the same day): a 400/413 counted as REJECTED only for the reasons context_too_long and exceeds_pool. But an over-capacity
     * prompt larger than the server's body limit is refused, correctly and for its size, with 413 body_too_large —
     * the load client filed that correct answer as UNEXPECTED, and a run against a correct server failed its
     * verdict (any server whose --max-body-bytes is below its context in prompt bytes — about 6 bytes a token: with the default
     * 1 MiB, every context above ~180k tokens).
     */
    @Test
    void anOverCapacityPromptRefusedForItsBodySizeIsARejectionNotUnexpected() throws Exception {
        final ServerConfig.Builder b = LoadGeneratorTest.small().maxBodyBytes(1024); // context 1024 tokens ≈ 1 KiB of prompt
        try (KvServer server = KvServer.start(b.build());
             CompletionClient client = new CompletionClient(server.baseUri(), Duration.ofSeconds(30), server.config().maxBodyBytes())) {
            final Mix mix = new Mix(4, new int[] {8, 16}, new int[] {1, 4}, 0, 0, 1.0, new int[] {1025, 1300}, 0,
                server.config().maxBodyBytes(), 1);
            final Shot s = mix.shot(0);
            assertEquals(Shot.Kind.OVER_CAPACITY, s.kind());
            final Outcome o = client.send(s);
            assertEquals(413, o.status(), o.statusAndReason());
            assertEquals(Outcome.Kind.REJECTED, o.kind(), "a correct " + o.statusAndReason() + " for an over-limit body was filed as " + o.kind());
        }
    }
}
