package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.ModuleConsumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * kvpool on the module path, as a modular application uses it: a consumer module that requires
 * {@code io.kvpool.transfer} alone (JUCX absent) is compiled and run in a child JVM with the built modules
 * of kvpool-api and kvpool-transfer and Agrona's automatic module. It admits a request, writes its KV,
 * moves it to a decode pool over the shared-memory transport and reads it back, under
 * {@code --illegal-native-access=deny} (no restricted FFM call on that path, so no flag is needed). The
 * writer-pin SPI ({@code io.kvpool.spi}) is exported to the transport modules only: the consumer cannot
 * compile against it, and a reflective call through {@link KvPool#handles()} is refused.
 */
@org.junit.jupiter.api.Timeout(120)
class ModulePathTest {

    @TempDir
    Path dir;

    private static final String MODULE_INFO = """
        module kvpool.consumer {
            requires io.kvpool.transfer;
        }
        """;

    private static final String MAIN = """
        package kvpool.consumer;

        import io.kvpool.DType;
        import io.kvpool.KvLayout;
        import io.kvpool.KvPool;
        import io.kvpool.Sequence;
        import io.kvpool.transfer.IncomingTransfer;
        import io.kvpool.transfer.PeerIdentity;
        import io.kvpool.transfer.TransferReceiver;
        import io.kvpool.transfer.TransferSender;
        import io.kvpool.transfer.shm.MappedPageStorage;
        import io.kvpool.transfer.shm.ShmLink;
        import io.kvpool.transfer.shm.ShmListener;
        import io.kvpool.transfer.shm.ShmTransport;
        import io.kvpool.transfer.spi.LinkListener;
        import io.kvpool.transfer.spi.PeerLink;
        import java.lang.foreign.ValueLayout;
        import java.nio.ByteBuffer;
        import java.nio.file.Path;

        public class Main {
            public static void main(String[] args) throws Exception {
                final Path dir = Path.of(args[0]);
                final KvLayout layout = new KvLayout(2, 2, 8, DType.FP16, 4);
                try (KvPool prefill = KvPool.builder(layout).pages(8).maxContextTokens(32).build();
                     KvPool decode = KvPool.builder(layout).pages(8).maxContextTokens(32)
                         .storage((l, n) -> MappedPageStorage.create(dir.resolve("pool"), l, n)).build()) {
                    final Sequence source = prefill.admit(10, 0).sequence();
                    source.append(10);
                    for (int p = 0; p < source.pageCount(); p++) {
                        source.page(p).fill((byte) (0x40 + p));
                    }
                    final PeerIdentity id = PeerIdentity.of(layout, "model", "env", "1");
                    final TransferSender sender = TransferSender.builder(prefill, id).build();
                    final TransferReceiver receiver = TransferReceiver.builder(decode, id).build();
                    final ShmListener listener = ShmTransport.listen(dir.resolve("sock"), (MappedPageStorage) decode.storage());
                    final ShmLink out = ShmTransport.connect(dir.resolve("sock"));
                    final LinkListener none = new LinkListener() {
                        public void onFrame(PeerLink l, ByteBuffer f) { }
                        public void onWriteDone(PeerLink l, long t, int s) { }
                        public void onFlushDone(PeerLink l, long t, boolean ok) { }
                        public void onLinkFailed(PeerLink l, String r) { throw new IllegalStateException(r); }
                    };
                    ShmLink in = null;
                    final long deadline = System.nanoTime() + 20_000_000_000L;
                    while (in == null || !out.isReady()) {
                        in = in == null ? listener.accept() : in;
                        out.poll(none, 16);
                        if (System.nanoTime() > deadline) throw new IllegalStateException("no bootstrap");
                    }
                    sender.addPeer(out);
                    final int peer = receiver.addPeer(in);
                    while (!receiver.peer(peer).isUp() || !sender.peer(0).isUp()) {
                        sender.doWork();
                        receiver.doWork();
                        if (System.nanoTime() > deadline) throw new IllegalStateException("no handshake");
                    }
                    final long[] handles = new long[source.pageCount()];
                    for (int p = 0; p < handles.length; p++) {
                        handles[p] = source.pageHandle(p);
                    }
                    sender.offer(1, handles, 10);
                    final IncomingTransfer t = receiver.start(1, 10, 0, peer);
                    while (t.state() == IncomingTransfer.State.RECEIVING) {
                        sender.doWork();
                        receiver.doWork();
                        if (System.nanoTime() > deadline) throw new IllegalStateException("no commit: " + t);
                    }
                    System.out.println("STATE " + t.state());
                    final Sequence got = t.sequence();
                    for (int p = 0; p < got.pageCount(); p++) {
                        final byte b = got.page(p).get(ValueLayout.JAVA_BYTE, 0);
                        System.out.println("PAGE " + p + " " + Integer.toHexString(b));
                    }
                    try { // through the public interface: on the class path this call is allowed
                        final Object spi = decode.handles();
                        Class.forName("io.kvpool.spi.TransportHandles").getMethod("beginDrain", long.class)
                            .invoke(spi, got.pageHandle(0));
                        System.out.println("SPI REACHED");
                    } catch (IllegalAccessException e) {
                        System.out.println("SPI REFUSED " + e.getMessage());
                    } catch (java.lang.reflect.InvocationTargetException e) {
                        System.out.println("SPI REACHED, it threw " + e.getCause());
                    }
                    got.close();
                    source.close();
                    receiver.close();
                    sender.close();
                    listener.close();
                }
                System.out.println("DONE");
            }
        }
        """;

    private static final String USES_SPI = """
        package kvpool.consumer;

        public class UsesSpi {
            static void pin(io.kvpool.KvPool pool, long handle) {
                io.kvpool.spi.TransportHandles h = pool.handles();
                h.pinWriter(handle);
            }
        }
        """;

    private static String modulePath() {
        return ModuleConsumer.modulePath(KvPool.class, TransferSender.class, org.agrona.collections.Long2ObjectHashMap.class);
    }

    private static ModuleConsumer.Compiled compile(Path out, String name, String source) throws Exception {
        return ModuleConsumer.compile(out, modulePath(), MODULE_INFO, "kvpool.consumer", Map.of(name, source));
    }

    /** Runs the consumer's main in a child JVM with {@code launch} (module or class path). @return its output */
    private String runConsumer(List<String> launch) throws Exception {
        final Path work = Files.createTempDirectory(dir, "work");
        final List<String> args = new ArrayList<>(List.of("--illegal-native-access=deny"));
        args.addAll(launch);
        args.add(work.toString());
        final String out = ModuleConsumer.run(args);
        assertTrue(out.contains("STATE COMMITTED"), out);
        assertTrue(out.contains("PAGE 0 40") && out.contains("PAGE 1 41") && out.contains("PAGE 2 42"), out);
        assertFalse(out.contains("WARNING"), "no JVM warning (restricted methods, Unsafe):\n" + out);
        assertTrue(out.contains("DONE"), out);
        return out;
    }

    @Test
    void aModularApplicationMovesKvWithoutTheSpiOrANativeAccessFlag() throws Exception {
        final Path classes = dir.resolve("consumer");
        final ModuleConsumer.Compiled compiled = compile(classes, "Main", MAIN);
        assertEquals(0, compiled.exitCode(), () -> "the consumer module compiles on the module path:\n" + compiled.diagnostics());
        final String modular = runConsumer(List.of("--module-path", modulePath() + File.pathSeparator + classes,
            "-m", "kvpool.consumer/kvpool.consumer.Main"));
        assertTrue(modular.contains("SPI REFUSED") && modular.contains("does not export io.kvpool.spi"),
            "a reflective call into io.kvpool.spi is refused on the module path:\n" + modular);
        // the control: the same program on the class path reaches the SPI (what docs/pool.md warns of)
        final String plain = runConsumer(List.of("-cp", modulePath() + File.pathSeparator + classes, "kvpool.consumer.Main"));
        assertTrue(plain.contains("SPI REACHED") && !plain.contains("SPI REFUSED"), plain);
    }

    @Test
    void aModularApplicationCannotCompileAgainstTheWriterPinSpi() throws Exception {
        final ModuleConsumer.Compiled compiled = compile(dir.resolve("bad"), "UsesSpi", USES_SPI);
        assertNotEquals(0, compiled.exitCode(), "io.kvpool.spi is not exported to the consumer");
        assertTrue(compiled.diagnostics().contains("package io.kvpool.spi is not visible"), compiled.diagnostics());
    }
}
