package io.kvpool.cuda;

import io.kvpool.storage.FillMode;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link DevicePageStorage#fillTail} over {@link StubLibcuda}, which prints each 2D copy: one copy writes the tail of
 * every plane, from the host page of the pattern at the tail's host offset (so the canary's phase is the host layout's)
 * into the page's tail in each plane, {@code planeBytes} apart. The layout of {@link DeviceIpcFormatTest#L}: 2 layers,
 * 16-byte vectors, 4 tokens, so 4 planes of 64 bytes a page; 4 pages, 256 bytes a plane.
 */
class DeviceFillTailTest {

    private static Path stub;

    @BeforeAll
    static void buildStub() throws Exception {
        stub = StubLibcuda.build(Path.of("target/device-fill-tail-test"), 13000);
    }

    @Test
    void oneCopyWritesThePatternIntoTheTailOfEveryPlane() throws Exception {
        final String out = StubLibcuda.child(stub, Child.class, "tail");
        final String[] copies = out.lines().filter(l -> l.startsWith("memcpy2D")).toArray(String[]::new);
        assertEquals(2, copies.length, () -> "one 2D copy per call:\n" + out);
        final long arena = Long.decode(out.lines().filter(l -> l.startsWith("alloc")).findFirst().orElseThrow().substring(6));
        // page 2 from token 1: 16 bytes into page 2's 64 in each plane; 48 bytes wide, 4 planes 256 bytes apart
        final String at = "dst 0x" + Long.toHexString(arena + 2 * 64 + 16) + " dstPitch 256 srcPitch 64 width 48 height 4";
        assertTrue(copies[0].startsWith("memcpy2D " + at + " src deadbeefcafef00d"), () -> "the canary tail:\n" + out);
        assertTrue(copies[1].startsWith("memcpy2D " + at + " src 0000000000000000"), () -> "the zero tail:\n" + out);
        assertTrue(out.contains("no tail: done"), () -> out);
    }

    @Test
    void aPoolWhosePlanesPass2GiBCopiesTheTailPlaneByPlaneWithinTheDriversPitch() throws Exception {
        final String out = StubLibcuda.child(stub, BigChild.class, "tail");
        final String[] copies = out.lines().filter(l -> l.startsWith("memcpy2D")).toArray(String[]::new);
        final DeviceLayout dl = DeviceLayout.of(BigChild.LAYOUT, BigChild.PAGES);
        assertTrue(dl.planeBytes() > Integer.MAX_VALUE, "a plane past the driver's largest pitch, 2^31 − 1: " + dl.planeBytes());
        assertEquals(dl.planes(), copies.length, () -> "one copy per plane:\n" + out);
        final long arena = Long.decode(out.lines().filter(l -> l.startsWith("alloc")).findFirst().orElseThrow().substring(6));
        final long skip = 3 * BigChild.LAYOUT.bytesPerTokenVector(), width = dl.pageStride() - skip;
        for (int q = 0; q < copies.length; q++) {
            final long dst = arena + q * dl.planeBytes() + 7 * dl.pageStride() + skip;
            final String at = "memcpy2D dst 0x" + Long.toHexString(dst) + " dstPitch " + width + " srcPitch " + dl.pageStride()
                + " width " + width + " height 1";
            final int plane = q;
            assertTrue(copies[q].startsWith(at), () -> "plane " + plane + ": expected " + at + "\n" + out);
        }
    }

    /** A pool of 2^20 + 1 pages of 2 KiB a plane: each plane 2 GiB + 2 KiB (the stub allocates nothing). */
    public static final class BigChild {
        static final io.kvpool.KvLayout LAYOUT = new io.kvpool.KvLayout(1, 1, 64, io.kvpool.DType.FP16, 16);
        static final int PAGES = (1 << 20) + 1;

        public static void main(String[] args) {
            System.load(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(LAYOUT, PAGES);
            s.fillTail(7, 3, FillMode.CANARY);
            s.close();
        }
    }

    /** The child: loads the stub, fills page 2's tail from token 1 with each pattern, then asks for no tail. */
    public static final class Child {
        public static void main(String[] args) {
            System.load(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4);
            s.fillTail(2, 1, FillMode.CANARY);
            s.fillTail(2, 1, FillMode.ZERO);
            s.fillTail(2, 4, FillMode.CANARY); // no tail: no copy
            s.fillTail(2, 1, FillMode.NONE);   // nothing to write
            System.out.println("no tail: done");
            s.close();
        }
    }
}
