package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The engines' public API offers no way to fake what only a link may report: a write's or a flush's end (the proof
 * that COMPLETION and DRAINED rest on), a frame, a link's failure; and each engine switches off only its own side's
 * safeguards.
 */
class EngineApiTest {

    @Test
    void noEngineIsALinkListenerOrHasAPublicLinkCallback() {
        final List<String> callbacks = Arrays.stream(LinkListener.class.getMethods()).map(Method::getName).toList();
        for (Class<?> engine : new Class<?>[] {TransferSender.class, TransferReceiver.class}) {
            assertFalse(LinkListener.class.isAssignableFrom(engine), engine + " is a LinkListener");
            final List<String> exposed = Arrays.stream(engine.getMethods())
                .filter(m -> Modifier.isPublic(m.getModifiers()) && callbacks.contains(m.getName()))
                .map(Method::toString).toList();
            assertEquals(List.of(), exposed, engine.getSimpleName() + " exposes link callbacks");
        }
    }

    @Test
    void aLinkAddedTwiceIsRefusedAndItsFirstPeerKeepsIt() {
        try (KvPool pool = Kv.pool(8)) {
            final TransferSender sender = TransferSender.builder(pool, Kv.identity()).build();
            final ScriptedLink link = new ScriptedLink().hello(Kv.identity());
            assertEquals(0, sender.addPeer(link));
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> sender.addPeer(link));
            assertTrue(e.getMessage().contains("peer 0"), e.getMessage());
            assertEquals(1, sender.peers().size(), "nothing was added");
            sender.doWork();
            assertTrue(sender.peer(0).isUp(), () -> sender.peer(0).toString());
            assertTrue(link.isUp(), "the first peer's link is open");
            sender.close();
        }
    }

    @Test
    void eachEngineSwitchesOffOnlyItsOwnSidesSafeguards() {
        try (KvPool pool = Kv.pool(8)) {
            for (TransferSafeguard s : TransferSafeguard.values()) {
                final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> {
                    if (s.isSenderSide()) {
                        TransferReceiver.builder(pool, Kv.identity()).unsafeDisable(s);
                    } else {
                        TransferSender.builder(pool, Kv.identity()).unsafeDisable(s);
                    }
                }, s::toString);
                assertTrue(e.getMessage().startsWith(s + " is the " + (s.isSenderSide() ? "sender" : "receiver")
                    + "'s safeguard"), e.getMessage());
            }
            final TransferSender sender = TransferSender.builder(pool, Kv.identity())
                .unsafeDisable(TransferSafeguard.SOURCE_HOLD).build();
            assertEquals(Set.of(TransferSafeguard.SOURCE_HOLD), sender.disabledSafeguards());
            assertTrue(sender.toString().contains("UNSAFE: disabled [SOURCE_HOLD]"), sender::toString);
            sender.close();
            final TransferSender early = TransferSender.builder(pool, Kv.identity())
                .unsafeDisable(TransferSafeguard.DRAINED_AFTER_WRITES_END).build();
            assertEquals(Set.of(TransferSafeguard.DRAINED_AFTER_WRITES_END), early.disabledSafeguards());
            assertTrue(early.toString().contains("UNSAFE: disabled [DRAINED_AFTER_WRITES_END]"), early::toString);
            early.close();
            final TransferSender safe = TransferSender.builder(pool, Kv.identity()).build();
            assertEquals(Set.of(), safe.disabledSafeguards());
            safe.close();
        }
    }
}
