package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import static org.junit.jupiter.api.Assertions.*;

/** The IPC handle is checked before any CUDA call (no GPU needed). */
class DeviceIpcFormatTest {

    static final KvLayout L = new KvLayout(2, 1, 4, DType.FP32, 4);

    static byte[] handle(int magic, long fingerprint, int pages, long arenaBytes) {
        return ByteBuffer.allocate(DeviceIpc.EXPORT_BYTES).order(ByteOrder.LITTLE_ENDIAN).putInt(magic).putInt(DeviceIpc.VERSION)
            .putLong(fingerprint).putInt(pages).putInt(0).putLong(arenaBytes).array();
    }

    @Test
    void notAHandleIsRefusedWithWhatWasReadAndWhatWasExpected() {
        final IllegalArgumentException size = assertThrows(IllegalArgumentException.class, () -> DeviceIpc.open(new byte[10], L));
        assertTrue(size.getMessage().contains("10 bytes, a handle has " + DeviceIpc.EXPORT_BYTES), size.getMessage());
        final IllegalArgumentException magic = assertThrows(IllegalArgumentException.class,
            () -> DeviceIpc.open(handle(0x1234, L.fingerprint(), 4, 1024), L));
        assertTrue(magic.getMessage().contains("magic 0x00001234 version " + DeviceIpc.VERSION)
            && magic.getMessage().contains(String.format("expected 0x%08x", DeviceIpc.MAGIC)), magic.getMessage());
    }

    @Test
    void anotherLayoutIsRefusedNamingBothFingerprints() {
        final KvLayout other = new KvLayout(2, 1, 4, DType.FP16, 8);
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> DeviceIpc.open(handle(DeviceIpc.MAGIC, other.fingerprint(), 4, 1024), L));
        assertTrue(e.getMessage().contains(Long.toHexString(other.fingerprint())) && e.getMessage().contains(Long.toHexString(L.fingerprint())),
            e.getMessage());
    }

    @Test
    void anArenaOfTheWrongSizeIsRefused() {
        final long right = DeviceLayout.of(L, 4).arenaBytes();
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> DeviceIpc.open(handle(DeviceIpc.MAGIC, L.fingerprint(), 4, right + 16), L));
        assertTrue(e.getMessage().contains(Long.toString(right)), e.getMessage());
    }

    @Test
    void aValidHandleReachesCudaOnlyThen() {
        final long right = DeviceLayout.of(L, 4).arenaBytes();
        if (!Cuda.available()) {
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> DeviceIpc.open(handle(DeviceIpc.MAGIC, L.fingerprint(), 4, right), L));
            assertTrue(e.getMessage().contains("CUDA is not available"), e.getMessage());
        }
    }
}
