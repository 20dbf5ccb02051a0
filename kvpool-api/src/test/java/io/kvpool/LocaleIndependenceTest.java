package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.Locale;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Messages carry the same numbers whatever the JVM's default locale. */
class LocaleIndependenceTest {

    @Test
    void theCapacityMessageIsTheSameUnderAGermanDefaultLocale() {
        final Locale before = Locale.getDefault();
        Locale.setDefault(Locale.GERMANY); // would print 1.601 and 1.600 with the default locale's grouping
        try {
            final PoolCapacityException e = assertThrows(PoolCapacityException.class,
                () -> KvPool.builder(TestPools.SMALL).pages(400).maxContextTokens(1601).build());
            assertTrue(e.getMessage().contains("1,601 tokens") && e.getMessage().contains("1,600 tokens"), e.getMessage());
        } finally {
            Locale.setDefault(before);
        }
    }
}
