package io.kvpool.micrometer;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.ModuleConsumer;
import io.micrometer.core.instrument.MeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.File;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * kvpool-micrometer on the module path without kvpool-transfer, which it requires {@code static}: a consumer module
 * that requires {@code io.kvpool.micrometer} alone binds a pool's meters to a registry and reads them, in a child JVM
 * whose module path holds kvpool-api, kvpool-micrometer and Micrometer, and neither kvpool-transfer nor Agrona.
 */
@org.junit.jupiter.api.Timeout(120)
class ModulePathTest {

    @TempDir
    Path dir;

    private static final String MODULE_INFO = """
        module kvpool.metrics.consumer {
            requires io.kvpool.micrometer;
        }
        """;

    private static final String MAIN = """
        package kvpool.metrics.consumer;

        import io.kvpool.DType;
        import io.kvpool.KvLayout;
        import io.kvpool.KvPool;
        import io.kvpool.Sequence;
        import io.kvpool.micrometer.KvPoolMeterBinder;
        import io.micrometer.core.instrument.simple.SimpleMeterRegistry;

        public class Main {
            public static void main(String[] args) {
                final SimpleMeterRegistry registry = new SimpleMeterRegistry();
                try (KvPool pool = KvPool.builder(new KvLayout(2, 2, 8, DType.FP16, 4)).pages(8).maxContextTokens(32).build();
                     KvPoolMeterBinder binder = new KvPoolMeterBinder(pool)) {
                    binder.bindTo(registry);
                    final Sequence s = pool.admit(10, 0).sequence();
                    s.append(10);
                    System.out.println("OWNED " + (long) registry.get("kvpool.pool.pages").tag("state", "owned").gauge().value());
                    System.out.println("CAPACITY " + (long) registry.get("kvpool.pool.capacity").gauge().value());
                    s.close();
                }
                System.out.println("TRANSFER MODULE " + ModuleLayer.boot().findModule("io.kvpool.transfer").isPresent());
            }
        }
        """;

    @Test
    void aPoolIsBoundOnTheModulePathWithoutTheTransferModule() throws Exception {
        final String modulePath = ModuleConsumer.modulePath(KvPool.class, KvPoolMeterBinder.class, MeterRegistry.class,
            io.micrometer.common.util.StringUtils.class, io.micrometer.observation.Observation.class,
            org.HdrHistogram.Histogram.class, org.LatencyUtils.LatencyStats.class);
        assertTrue(ModuleConsumer.holds(modulePath, "io.kvpool.micrometer") && ModuleConsumer.holds(modulePath, "micrometer.core"), modulePath);
        assertFalse(ModuleConsumer.holds(modulePath, "io.kvpool.transfer") || ModuleConsumer.holds(modulePath, "org.agrona"), modulePath);
        final Path classes = dir.resolve("consumer");
        final ModuleConsumer.Compiled compiled = ModuleConsumer.compile(classes, modulePath, MODULE_INFO,
            "kvpool.metrics.consumer", Map.of("Main", MAIN));
        assertEquals(0, compiled.exitCode(), compiled::diagnostics);
        final String out = ModuleConsumer.run(List.of("--illegal-native-access=deny", "--module-path",
            modulePath + File.pathSeparator + classes, "-m", "kvpool.metrics.consumer/kvpool.metrics.consumer.Main"));
        assertTrue(out.contains("OWNED 3"), out);
        assertTrue(out.contains("CAPACITY 8"), out);
        assertTrue(out.contains("TRANSFER MODULE false"), out);
        assertFalse(out.contains("WARNING"), out);
    }
}
