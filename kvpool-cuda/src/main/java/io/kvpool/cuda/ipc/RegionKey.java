package io.kvpool.cuda.ipc;

import io.kvpool.transfer.wire.WireFormat;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Objects;

/**
 * A CUDA IPC region key, what a receiver's {@link CudaIpcLink#register} puts into the descriptor
 * (little-endian):
 * <pre>
 *   0 u32 magic 0x4B504943 ("CIPK" on the wire) · 4 u16 version 1 · 6 u16 handle bytes h (1..{@value #MAX_HANDLE_BYTES})
 *   8 i32 registration id · 12 i32 slots n (0..{@link #MAX_SLOTS})
 *  16 u8[h] the arena's export handle ({@link io.kvpool.cuda.DeviceIpc}: 96 bytes, layout fingerprint included)
 *  16+h i32[n] the registered slots, in the descriptor's page order
 * </pre>
 *
 * @param handle the export handle
 * @param id     the registration's id on its link (for messages)
 * @param slots  the registered slots
 */
record RegionKey(byte[] handle, int id, int[] slots) {

    static final int MAGIC = 0x4B504943; // "CIPK"
    static final int VERSION = 1;
    static final int FIXED_BYTES = 16;
    /** Longest export handle a key carries. */
    static final int MAX_HANDLE_BYTES = 256;
    /** Most slots one key lists: a descriptor's page limit, and it must fit {@link WireFormat#MAX_KEY_BYTES}. */
    static final int MAX_SLOTS = Math.min(WireFormat.MAX_ARRAY, (WireFormat.MAX_KEY_BYTES - FIXED_BYTES - MAX_HANDLE_BYTES) / 4);

    RegionKey {
        Objects.requireNonNull(handle, "handle");
        Objects.requireNonNull(slots, "slots");
        if (handle.length < 1 || handle.length > MAX_HANDLE_BYTES) {
            throw new IllegalArgumentException("export handle of " + handle.length + " bytes, expected 1.." + MAX_HANDLE_BYTES);
        }
        if (slots.length > MAX_SLOTS) {
            throw new IllegalArgumentException(slots.length + " slots in one region key, at most " + MAX_SLOTS);
        }
    }

    /** @return the encoded key */
    byte[] encode() {
        final ByteBuffer b = ByteBuffer.allocate(FIXED_BYTES + handle.length + 4 * slots.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putShort((short) VERSION).putShort((short) handle.length).putInt(id).putInt(slots.length).put(handle);
        for (int s : slots) {
            b.putInt(s);
        }
        return b.array();
    }

    /**
     * @return the decoded key
     * @throws IllegalArgumentException naming the bad field and its value: a short key, a bad magic or
     *                                  version, a handle or slot count out of range, a length that does
     *                                  not match them, or a negative slot
     */
    static RegionKey decode(byte[] key) {
        Objects.requireNonNull(key, "key");
        if (key.length < FIXED_BYTES) {
            throw new IllegalArgumentException("region key of " + key.length + " bytes is shorter than the " + FIXED_BYTES
                + "-byte CUDA IPC key header");
        }
        final ByteBuffer b = ByteBuffer.wrap(key).order(ByteOrder.LITTLE_ENDIAN);
        final int magic = b.getInt();
        final int version = b.getShort() & 0xFFFF;
        final int h = b.getShort() & 0xFFFF;
        final int id = b.getInt();
        final int n = b.getInt();
        if (magic != MAGIC) {
            throw new IllegalArgumentException("region key magic 0x" + Integer.toHexString(magic) + " is not a CUDA IPC key's 0x"
                + Integer.toHexString(MAGIC));
        }
        if (version != VERSION) {
            throw new IllegalArgumentException("CUDA IPC region key version " + version + ", this side reads " + VERSION);
        }
        if (h < 1 || h > MAX_HANDLE_BYTES) {
            throw new IllegalArgumentException("CUDA IPC region key " + id + " carries a " + h + "-byte handle, expected 1.."
                + MAX_HANDLE_BYTES);
        }
        if (n < 0 || n > MAX_SLOTS) {
            throw new IllegalArgumentException("CUDA IPC region key " + id + " lists " + n + " slots, expected 0.." + MAX_SLOTS);
        }
        final long expected = FIXED_BYTES + h + 4L * n;
        if (key.length != expected) {
            throw new IllegalArgumentException("CUDA IPC region key " + id + " of " + key.length + " bytes; a " + h + "-byte handle and "
                + n + " slots make " + expected);
        }
        final byte[] handle = new byte[h];
        b.get(handle);
        final int[] slots = new int[n];
        for (int i = 0; i < n; i++) {
            slots[i] = b.getInt();
            if (slots[i] < 0) {
                throw new IllegalArgumentException("CUDA IPC region key " + id + " lists slot " + slots[i] + " at index " + i);
            }
        }
        return new RegionKey(handle, id, slots);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof RegionKey k && id == k.id && Arrays.equals(handle, k.handle) && Arrays.equals(slots, k.slots);
    }

    @Override
    public int hashCode() {
        return 31 * (31 * id + Arrays.hashCode(handle)) + Arrays.hashCode(slots);
    }

    @Override
    public String toString() {
        return "RegionKey[id " + id + ", " + handle.length + "-byte handle, " + slots.length + " slots]";
    }
}
