package io.kvpool.transfer;

import org.junit.jupiter.api.Test;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** The engines' metrics say every counter in their {@code toString}, by the name of its getter. */
class MetricsToStringTest {

    @Test
    void senderMetricsNameEveryCounter() {
        assertNamesEveryGetter(new SenderMetrics());
    }

    @Test
    void receiverMetricsNameEveryCounter() {
        assertNamesEveryGetter(new ReceiverMetrics());
    }

    private static void assertNamesEveryGetter(Object metrics) {
        final String text = metrics.toString();
        int getters = 0;
        for (Method m : metrics.getClass().getDeclaredMethods()) {
            if (Modifier.isPublic(m.getModifiers()) && !Modifier.isStatic(m.getModifiers()) && m.getReturnType() == long.class) {
                getters++;
                assertTrue(text.contains(m.getName() + "="), metrics.getClass().getSimpleName() + ".toString() does not name "
                    + m.getName() + ": " + text);
            }
        }
        assertTrue(getters >= 9, "only " + getters + " getters found");
    }
}
