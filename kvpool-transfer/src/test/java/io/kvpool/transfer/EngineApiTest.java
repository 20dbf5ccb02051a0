package io.kvpool.transfer;

import io.kvpool.transfer.spi.LinkListener;
import org.junit.jupiter.api.Test;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * The engines' public API offers no way to fake what only a link may report: a write's or a flush's end (the proof
 * that COMPLETION and DRAINED rest on), a frame, a link's failure.
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
}
