package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

import java.time.Duration;
import java.util.function.UnaryOperator;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A receiver on a 32-page pool with a manual clock and two senders, {@link #a} and {@link #b}, played by
 * {@link ScriptedLink}s whose HELLO has been answered: the setup of the tests that drive the receiver's side of
 * the protocol step by step. Completion and drain time out after 100 ms of the clock.
 */
abstract class TwoSenderReceiverFixture {

    ManualClock clock;
    KvPool pool;
    TransferReceiver rx;
    ScriptedLink a;
    ScriptedLink b;
    int pa;
    int pb;

    @BeforeEach
    void setUp() {
        setUp(x -> x);
    }

    /** Sets up again (after tearing down what there is) with the receiver's builder changed by {@code custom}. */
    void setUp(UnaryOperator<TransferReceiver.Builder> custom) {
        if (rx != null) {
            tearDown();
        }
        clock = new ManualClock();
        pool = Kv.pool(32);
        rx = custom.apply(TransferReceiver.builder(pool, Kv.identity()).clock(clock)
            .completionTimeout(Duration.ofMillis(100)).drainTimeout(Duration.ofMillis(100))).build();
        a = new ScriptedLink().hello(Kv.identity());
        b = new ScriptedLink().hello(Kv.identity());
        pa = rx.addPeer(a);
        pb = rx.addPeer(b);
        rx.doWork();
        assertTrue(rx.peer(pa).isUp() && rx.peer(pb).isUp());
    }

    @AfterEach
    void tearDown() {
        rx.close();
        pool.close();
        rx = null;
    }
}
