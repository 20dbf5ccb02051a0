package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;

/** The second process of {@link DeviceIpcGpuTest}: opens the exported arena and writes page 3 with a pattern. */
public final class IpcWriterMain {
    private IpcWriterMain() {
    }

    static final KvLayout LAYOUT = new KvLayout(4, 8, 128, DType.BF16, 16);

    static long pattern(long offset) {
        return 0x1DEA_0000_0000_0000L ^ offset * 0x9E3779B97F4A7C15L;
    }

    public static void main(String[] args) throws Exception {
        final byte[] handle = Files.readAllBytes(Path.of(args[0]));
        try (DeviceIpc.OpenedArena a = DeviceIpc.open(handle, LAYOUT); Arena arena = Arena.ofConfined()) {
            final MemorySegment page = arena.allocate(LAYOUT.bytesPerPage(), 16);
            for (long o = 0; o < page.byteSize(); o += 8) {
                page.set(ValueLayout.JAVA_LONG_UNALIGNED, o, pattern(o));
            }
            a.writePage(3, page);
        }
        System.out.println("WROTE page 3");
    }
}
