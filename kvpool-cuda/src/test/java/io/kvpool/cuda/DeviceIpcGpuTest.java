package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.FillMode;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/** CUDA IPC between two processes: the child writes a page of this process's arena one-sidedly. */
class DeviceIpcGpuTest {

    @TempDir
    Path dir;

    @BeforeEach
    void gpu() {
        GpuAssume.gpu();
    }

    @Test
    void aSecondProcessWritesAPageOfThisProcesssPool() throws Exception {
        final KvLayout l = IpcWriterMain.LAYOUT;
        try (DevicePageStorage dev = DevicePageStorage.allocate(l, 8); Arena arena = Arena.ofConfined()) {
            for (int p = 0; p < 8; p++) {
                dev.fill(p, FillMode.CANARY);
            }
            final Path handle = dir.resolve("handle");
            final DeviceIpc.ExportLease lease = DeviceIpc.exportLease(dev);
            Files.write(handle, lease.handle());
            final Process child = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"), IpcWriterMain.class.getName(),
                handle.toString()).redirectErrorStream(true).start();
            assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child did not finish");
            final String out = new String(child.getInputStream().readAllBytes());
            assertEquals(0, child.exitValue(), out);
            lease.close(); // the only importer has exited: the pool's close may free the arena
            final MemorySegment page = arena.allocate(l.bytesPerPage(), 16);
            dev.readPage(3, page);
            for (long o = 0; o < page.byteSize(); o += 8) {
                assertEquals(IpcWriterMain.pattern(o), page.get(ValueLayout.JAVA_LONG_UNALIGNED, o), "offset " + o);
            }
            for (int p : new int[] {0, 1, 2, 4, 5, 6, 7}) {
                assertEquals(0, dev.firstCanaryToken(p, 0, l.tokensPerPage()), "page " + p + " must be untouched");
            }
        }
    }

    @Test
    void aClosedStorageIsNotExported() {
        final DevicePageStorage dev = DevicePageStorage.allocate(IpcWriterMain.LAYOUT, 4);
        assertTrue(DeviceIpc.export(dev).length > 0);
        dev.close();
        final IllegalStateException e = assertThrows(IllegalStateException.class, () -> DeviceIpc.export(dev),
            "no handle to an arena that was freed");
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }

    @Test
    void aHandleForAnotherLayoutIsRefusedNamingBothFingerprints() {
        try (DevicePageStorage dev = DevicePageStorage.allocate(IpcWriterMain.LAYOUT, 4)) {
            final byte[] h = DeviceIpc.export(dev);
            final KvLayout other = new KvLayout(4, 8, 128, DType.FP16, 16);
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> DeviceIpc.open(h, other));
            assertTrue(e.getMessage().contains(Long.toHexString(other.fingerprint())), e.getMessage());
        }
    }
}
