package io.kvpool.transfer.shm;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.TransferException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

import static org.junit.jupiter.api.Assertions.*;

@Timeout(20)
class MappedPageStorageTest {

    static final KvLayout LAYOUT = new KvLayout(2, 2, 8, DType.FP16, 16); // 2048 B/page
    static final KvLayout OTHER = new KvLayout(2, 2, 8, DType.BF16, 16);  // same size, another fingerprint

    @TempDir
    Path dir;

    static byte canary(long o) {
        return (byte) (PageStorage.CANARY >>> (8 * (o & 7)));
    }

    static void assertCanaryPage(PageStorage s, int page) {
        final MemorySegment p = s.hostPage(page);
        for (long o = 0; o < p.byteSize(); o++) {
            assertEquals(canary(o), p.get(ValueLayout.JAVA_BYTE, o), "page " + page + " byte " + o);
        }
    }

    /**
     * A fault in mapped memory can be reported after the statement that caused it: one that comes after the storage
     * over the pages was made must free that storage too (its own memory, a canary page, lives until its close).
     */
    @Test
    void aLateFaultAfterTheStorageWasMadeClosesItInCreate() {
        final Path f = dir.resolve("pool");
        final io.kvpool.storage.HostPageStorage[] made = new io.kvpool.storage.HostPageStorage[1];
        MappedPageStorage.afterOverForTests = h -> {
            made[0] = h;
            throw new InternalError("injected: a late fault in mapped memory");
        };
        try {
            assertThrows(java.io.UncheckedIOException.class, () -> MappedPageStorage.create(f, LAYOUT, 3));
        } finally {
            MappedPageStorage.afterOverForTests = null;
        }
        assertNotNull(made[0]);
        assertThrows(IllegalStateException.class, () -> made[0].hostPage(0), "the storage over the mapping was closed");
        assertFalse(Files.exists(f), "a failed create leaves no file");
    }

    @Test
    void aLateFaultAfterTheStorageWasMadeClosesItInMap() {
        final Path f = dir.resolve("pool");
        try (MappedPageStorage owner = MappedPageStorage.create(f, LAYOUT, 3)) {
            final io.kvpool.storage.HostPageStorage[] made = new io.kvpool.storage.HostPageStorage[1];
            MappedPageStorage.afterOverForTests = h -> {
                made[0] = h;
                throw new InternalError("injected: a late fault in mapped memory");
            };
            try {
                assertThrows(TransferException.class, () -> MappedPageStorage.map(f));
            } finally {
                MappedPageStorage.afterOverForTests = null;
            }
            assertNotNull(made[0]);
            assertThrows(IllegalStateException.class, () -> made[0].hostPage(0), "the peer's view was closed");
            assertCanaryPage(owner, 0); // the owner's storage is untouched
        }
    }

    @Test
    void createFillsCanaryAndPagesFollowTheHeader() throws Exception {
        final Path f = dir.resolve("pool");
        try (MappedPageStorage s = MappedPageStorage.create(f, LAYOUT, 5)) {
            assertEquals(5, s.pageCount());
            assertEquals(LAYOUT, s.layout());
            assertTrue(s.isHostAccessible());
            assertEquals(MappedPageStorage.HEADER_BYTES + 5 * LAYOUT.bytesPerPage(), Files.size(f));
            for (int p = 0; p < 5; p++) {
                assertCanaryPage(s, p);
                assertEquals(0, s.firstCanaryToken(p, 0, LAYOUT.tokensPerPage()));
            }
            assertEquals(0, s.segment().address() % 4096, "page 0 is 4096-aligned");
            // token 3 of page 2 written in every layer/kv: firstCanaryToken skips exactly that token
            for (int l = 0; l < LAYOUT.layers(); l++) {
                for (int kv = 0; kv < 2; kv++) {
                    s.hostPage(2).asSlice(LAYOUT.offset(l, kv, 0), LAYOUT.bytesPerTokenVector()).fill((byte) 1);
                }
            }
            assertEquals(1, s.firstCanaryToken(2, 0, LAYOUT.tokensPerPage()));
            s.fill(2, FillMode.ZERO);
            assertEquals(-1, s.firstCanaryToken(2, 0, LAYOUT.tokensPerPage()));
            for (long o = 0; o < LAYOUT.bytesPerPage(); o++) {
                assertEquals(0, s.hostPage(2).get(ValueLayout.JAVA_BYTE, o));
            }
            s.hostPage(1).fill((byte) 0x42);
            s.copyPages(new int[] {1}, 0, new int[] {4}, 0, 1);
            assertEquals(-1L, s.hostPage(4).mismatch(s.hostPage(1)));
            s.fill(4, FillMode.CANARY);
            assertCanaryPage(s, 4);
            assertCanaryPage(s, 3); // untouched pages stay canary
        }
        assertFalse(Files.exists(f), "the owner deletes the file on close");
    }

    @Test
    void aPoolLargerThanItsFileSystemsRoomIsRefusedWithBothNumbersAndLeavesNoFile() throws Exception {
        final Path f = dir.resolve("pool");
        final KvLayout big = new KvLayout(64, 8, 128, DType.FP16, 16); // 4 MiB a page
        final int pages = Integer.MAX_VALUE; // 8 PiB: no file system here has that room
        final long size = MappedPageStorage.HEADER_BYTES + (long) pages * big.bytesPerPage();
        final long usable = Files.getFileStore(dir).getUsableSpace();
        assertTrue(usable < size, "this test needs a file system with less than " + size + " bytes free");
        final java.io.UncheckedIOException e = assertThrows(java.io.UncheckedIOException.class,
            () -> MappedPageStorage.create(f, big, pages));
        assertTrue(e.getMessage().contains(size + " bytes") && e.getMessage().contains(" bytes free"), e.getMessage());
        assertFalse(Files.exists(f), "the file it created is gone");
    }

    @Test
    void aSecondMappingSharesTheBytesAndChecksTheHeader() {
        final Path f = dir.resolve("pool");
        try (MappedPageStorage owner = MappedPageStorage.create(f, LAYOUT, 3);
             MappedPageStorage view = MappedPageStorage.map(f, LAYOUT)) {
            assertFalse(view.isOwner());
            assertEquals(owner.identity(), view.identity());
            assertEquals(LAYOUT, view.layout());
            assertEquals(3, view.pageCount());
            assertCanaryPage(view, 1); // mapping does not fill
            view.hostPage(1).fill((byte) 7);
            assertEquals(7, owner.hostPage(1).get(ValueLayout.JAVA_BYTE, LAYOUT.bytesPerPage() - 1));
            assertCanaryPage(owner, 0);
            assertCanaryPage(owner, 2);
            view.close();
            assertCanaryPage(owner, 0); // closing the view leaves the owner's mapping alone
        }
    }

    @Test
    void mappingRefusesAnotherLayoutNamingBothFingerprints() {
        final Path f = dir.resolve("pool");
        try (MappedPageStorage owner = MappedPageStorage.create(f, LAYOUT, 3)) {
            final TransferException e = assertThrows(TransferException.class, () -> MappedPageStorage.map(f, OTHER));
            assertTrue(e.getMessage().contains(Long.toHexString(LAYOUT.fingerprint())), e.getMessage());
            assertTrue(e.getMessage().contains(Long.toHexString(OTHER.fingerprint())), e.getMessage());
        }
    }

    @Test
    void mappingRefusesFilesThatAreNotPools() throws Exception {
        final Path small = dir.resolve("small");
        Files.write(small, new byte[100]);
        assertTrue(assertThrows(TransferException.class, () -> MappedPageStorage.map(small)).getMessage().contains("100 bytes"));
        final Path garbage = dir.resolve("garbage");
        Files.write(garbage, new byte[8192]);
        assertTrue(assertThrows(TransferException.class, () -> MappedPageStorage.map(garbage)).getMessage().contains("magic"));
        // a pool file cut short: the header's page count no longer matches the size
        final Path f = dir.resolve("pool");
        try (MappedPageStorage owner = MappedPageStorage.create(f, LAYOUT, 3)) {
            final Path copy = dir.resolve("truncated");
            Files.write(copy, java.util.Arrays.copyOf(Files.readAllBytes(f), (int) (Files.size(f) - LAYOUT.bytesPerPage())));
            final TransferException e = assertThrows(TransferException.class, () -> MappedPageStorage.map(copy));
            assertTrue(e.getMessage().contains("3 pages of 2048 bytes"), e.getMessage());
        }
    }

    @Test
    void closeIsIdempotentAndUseAfterCloseThrows() {
        final MappedPageStorage s = MappedPageStorage.create(dir.resolve("pool"), LAYOUT, 2);
        final MemorySegment page = s.hostPage(0);
        s.close();
        s.close();
        assertThrows(IllegalStateException.class, () -> s.hostPage(0));
        assertThrows(IllegalStateException.class, () -> s.fill(0, FillMode.CANARY));
        assertThrows(IllegalStateException.class, () -> s.firstCanaryToken(0, 0, 1));
        assertThrows(IllegalStateException.class, () -> page.get(ValueLayout.JAVA_BYTE, 0), "the mapping is gone");
    }

    @Test
    void servesAsAPoolsStorage() {
        final Path f = dir.resolve("pool");
        try (KvPool pool = KvPool.builder(LAYOUT).pages(4).maxContextTokens(64).storage((l, n) -> MappedPageStorage.create(f, l, n)).build()) {
            final MappedPageStorage s = assertInstanceOf(MappedPageStorage.class, pool.storage());
            final long h = pool.tryAllocate();
            pool.page(h).fill((byte) 3);
            try (MappedPageStorage view = MappedPageStorage.map(f)) {
                assertEquals(3, view.hostPage(io.kvpool.PageHandle.slot(h)).get(ValueLayout.JAVA_BYTE, 0));
            }
            assertTrue(pool.release(h));
            assertCanaryPage(s, io.kvpool.PageHandle.slot(h)); // the pool refilled the freed page in the file
        }
        assertFalse(Files.exists(f));
    }

    @Test
    @Timeout(60)
    void aPoolFileShrinkingWhileItIsMappedIsRefusedNotAnError() throws Exception {
        // A peer's pool file truncated between map's size check and its header reads: each read then faults (SIGBUS),
        // which the JVM reports as an InternalError. map must refuse the file as it refuses any bad one.
        final Path f = dir.resolve("copy");
        try (MappedPageStorage s = MappedPageStorage.create(dir.resolve("pool"), LAYOUT, 2)) {
            Files.write(f, Files.readAllBytes(dir.resolve("pool")));
        }
        final byte[] image = Files.readAllBytes(f);
        final java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        final java.util.concurrent.CompletableFuture<Void> shrinker = java.util.concurrent.CompletableFuture.runAsync(() -> {
            try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(f, java.nio.file.StandardOpenOption.WRITE)) {
                while (!stop.get()) {
                    ch.truncate(0);
                    java.util.concurrent.locks.LockSupport.parkNanos(20_000); // a map now may be caught mid-way
                    ch.write(java.nio.ByteBuffer.wrap(image), 0);
                    java.util.concurrent.locks.LockSupport.parkNanos(20_000);
                }
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }, r -> new Thread(r, "shrinker").start());
        int mapped = 0;
        int refused = 0;
        int faulted = 0;
        int late = 0;
        try {
            final long end = System.nanoTime() + 3_000_000_000L;
            while ((System.nanoTime() < end || faulted == 0 && System.nanoTime() < end + 27_000_000_000L) && !shrinker.isDone()) {
                try (MappedPageStorage m = MappedPageStorage.map(f)) {
                    assertEquals(2, m.pageCount());
                    mapped++;
                } catch (TransferException e) {
                    refused++; // too short, zeros, or faulted mid-way
                    if (e.getCause() instanceof InternalError) {
                        faulted++;
                    }
                } catch (InternalError e) {
                    // compiled code gets the fault at its next safepoint check, which can come after map's handler (map's
                    // Javadoc): not what this test is about, which is the faults map itself sees
                    late++;
                }
            }
        } finally {
            stop.set(true);
        }
        shrinker.get(); // the shrinker itself did not fail
        assertTrue(mapped > 0 && faulted > 0, "mapped " + mapped + ", refused " + refused + " (" + faulted
            + " for a fault), " + late + " faults reported after map returned: the fault under a map was never reproduced");
    }

    @Test
    void aCreateReplacesOnlyAPoolFileAndNeverShowsAHalfMadeOne() throws Exception {
        final Path f = dir.resolve("pool");
        final boolean[] atPathWhileFilling = new boolean[1];
        MappedPageStorage.afterOverForTests = h -> atPathWhileFilling[0] = Files.exists(f);
        try {
            MappedPageStorage.create(f, LAYOUT, 3).close();
        } finally {
            MappedPageStorage.afterOverForTests = null;
        }
        assertFalse(atPathWhileFilling[0], "the file is built under another name and renamed onto the path once whole");

        try (MappedPageStorage predecessor = MappedPageStorage.create(f, LAYOUT, 3);
             MappedPageStorage successor = MappedPageStorage.create(f, LAYOUT, 3)) { // a restart on the same path
            try (MappedPageStorage view = MappedPageStorage.map(f)) {
                assertEquals(successor.identity(), view.identity());
                assertNotEquals(predecessor.identity(), view.identity());
            }
        }
        try (java.util.stream.Stream<Path> left = Files.list(dir)) {
            assertEquals(java.util.List.of(), left.toList(), "no pool file and no temporary left");
        }

        // a wrong path must not delete someone's data
        final Path notOurs = dir.resolve("notes.txt");
        final String text = "somebody's data, at a path a receiver was wrongly given\n".repeat(4);
        Files.writeString(notOurs, text);
        final java.io.UncheckedIOException e = assertThrows(java.io.UncheckedIOException.class,
            () -> MappedPageStorage.create(notOurs, LAYOUT, 3));
        assertTrue(e.getMessage().contains(text.length() + "-byte file that is not a kvpool pool file"), e::getMessage);
        assertEquals(text, Files.readString(notOurs), "left as it was");
        for (String content : new String[] {"", "x", "\0".repeat(4096)}) { // short, empty or zeros: not ours either
            final Path p = Files.writeString(dir.resolve("other"), content);
            assertThrows(java.io.UncheckedIOException.class, () -> MappedPageStorage.create(p, LAYOUT, 3), content.length() + " bytes");
            assertEquals(content, Files.readString(p));
            Files.delete(p);
        }
        final Path target = Files.writeString(dir.resolve("target"), "data");
        final Path link = Files.createSymbolicLink(dir.resolve("link"), target);
        final java.io.UncheckedIOException viaLink = assertThrows(java.io.UncheckedIOException.class,
            () -> MappedPageStorage.create(link, LAYOUT, 3));
        assertTrue(viaLink.getMessage().contains("symbolic link"), viaLink::getMessage);
        assertEquals("data", Files.readString(target));
        final java.io.UncheckedIOException onDir = assertThrows(java.io.UncheckedIOException.class,
            () -> MappedPageStorage.create(dir, LAYOUT, 3));
        assertTrue(onDir.getMessage().contains("directory"), onDir::getMessage);
        assertTrue(Files.isDirectory(dir));
    }

    @Test
    void aCreateSweepsTheTemporariesOfCreatesThatDied() throws Exception {
        final Path f = dir.resolve("pool");
        final Path dead = Files.createFile(dir.resolve(".pool.creating-" + FileLockProbe.aPidThatExited() + "-1f"));
        final Path alive = Files.createFile(dir.resolve(".pool.creating-" + ProcessHandle.current().pid() + "-2f"));
        final Path otherPool = Files.createFile(dir.resolve(".pool2.creating-" + FileLockProbe.aPidThatExited() + "-3f"));
        MappedPageStorage.create(f, LAYOUT, 3).close();
        assertFalse(Files.exists(dead), "its process is gone");
        assertTrue(Files.exists(alive), "a create of a running process may still be filling it");
        assertTrue(Files.exists(otherPool), "another path's temporary is not this create's to sweep");
    }

    @Test
    void aTemporaryNoProcessHoldsIsADeadCreatesWhateverItsPidNamespace() throws Exception {
        final Path f = dir.resolve("pool");
        final long dead = FileLockProbe.aPidThatExited(); // here; in another namespace it may well be a create still running
        final Path fresh = Files.createFile(dir.resolve(".pool.creating-" + dead + "@1-4f"));
        final Path unheld = FileLockProbe.aged(Files.createFile(dir.resolve(".pool.creating-" + dead + "@1-5f")));
        final Path heldElsewhere = FileLockProbe.aged(Files.createFile(dir.resolve(".pool.creating-" + dead + "@1-6f")));
        final Path oursDead = FileLockProbe.aged(Files.createFile(dir.resolve(".pool.creating-" + dead + StaleFiles.PID_NAMESPACE + "-7f")));
        final Path oursAlive = FileLockProbe.aged(Files.createFile(dir.resolve(".pool.creating-" + ProcessHandle.current().pid()
            + StaleFiles.PID_NAMESPACE + "-8f")));
        final Process holder = FileLockProbe.lockHolder(heldElsewhere);
        try {
            MappedPageStorage.create(f, LAYOUT, 3).close();
            assertTrue(Files.exists(fresh), "just made: its creator may not hold its lock yet");
            assertFalse(Files.exists(unheld), "no process holds it: its creator is gone, whatever its pid meant");
            assertTrue(Files.exists(heldElsewhere), "a live process holds it: a create still filling it");
            assertFalse(Files.exists(oursDead), "nobody holds it");
            assertTrue(Files.exists(oursAlive), "this process's: never tested (a test would drop its lock)");
        } finally {
            holder.getOutputStream().close();
            holder.waitFor();
        }
        MappedPageStorage.create(f, LAYOUT, 3).close();
        assertFalse(Files.exists(heldElsewhere), "its holder exited");
    }

    @Test
    void aFifoNamedLikeADeadCreatesTemporaryDoesNotHoldUpACreate() throws Exception {
        // anyone who can write the pool's directory (/dev/shm) can make one; opening it to test a lock would block
        final Path f = dir.resolve("pool");
        final Path fifo = dir.resolve(".pool.creating-1" + StaleFiles.PID_NAMESPACE + "-af");
        assertEquals(0, new ProcessBuilder("mkfifo", fifo.toString()).inheritIO().start().waitFor());
        // aged without opening it (setLastModifiedTime would block on the FIFO too)
        assertEquals(0, new ProcessBuilder("touch", "-h", "-d", "1 minute ago", fifo.toString()).inheritIO().start().waitFor());
        final java.util.concurrent.CompletableFuture<MappedPageStorage> create =
            java.util.concurrent.CompletableFuture.supplyAsync(() -> MappedPageStorage.create(f, LAYOUT, 2));
        try {
            create.get(5, java.util.concurrent.TimeUnit.SECONDS).close();
        } catch (java.util.concurrent.TimeoutException e) {
            try (FileChannel reader = FileChannel.open(fifo, StandardOpenOption.READ)) { // lets the stuck open go on
                create.get(5, java.util.concurrent.TimeUnit.SECONDS).close();
            }
            fail("the create blocked 5 s on a FIFO named like a dead create's temporary");
        }
        assertTrue(Files.exists(fifo, java.nio.file.LinkOption.NOFOLLOW_LINKS), "not a create's file: left alone");
    }

    @Test
    void theLockTestOfASweepDoesNotBlockOnAFifo() throws Exception {
        // the sweep checks that an entry is a regular file, then opens it to test its lock: an entry swapped for a FIFO
        // between the two (anyone who can write /dev/shm can loop that swap) must not hold up the create either
        final Path fifo = dir.resolve(".pool.creating-1" + StaleFiles.PID_NAMESPACE + "-swapped");
        assertEquals(0, new ProcessBuilder("mkfifo", fifo.toString()).inheritIO().start().waitFor());
        final java.lang.reflect.Method lockHeld = StaleFiles.class.getDeclaredMethod("lockHeld", Path.class);
        lockHeld.setAccessible(true);
        final java.util.concurrent.CompletableFuture<Object> tested = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            try {
                return lockHeld.invoke(null, fifo);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        });
        try {
            tested.get(5, java.util.concurrent.TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            try (FileChannel reader = FileChannel.open(fifo, StandardOpenOption.READ)) { // lets the stuck open go on
                tested.get(5, java.util.concurrent.TimeUnit.SECONDS);
            }
            fail("the sweep's lock test blocked 5 s opening a FIFO");
        }
    }

    @Test
    void aSweepWherePidNamespacesAreUnknownLeavesThisProcesssOwnCreateLocked() throws Exception {
        final Path f = dir.resolve("pool");
        // a create of this process under the name a process with no /proc/self/ns/pid gives it, at least 10 s in
        final Path ours = FileLockProbe.aged(Files.createFile(dir.resolve(".pool.creating-" + ProcessHandle.current().pid() + "@0-9f")));
        try (FileChannel ch = FileChannel.open(ours, StandardOpenOption.READ, StandardOpenOption.WRITE); var lock = ch.lock()) {
            MappedPageStorage.sweepStaleTemporaries(f, 0);
            assertTrue(Files.exists(ours), "this process's create is alive");
            assertTrue(FileLockProbe.lockedElsewhere(ours), "a test of its lock from this process would have dropped it (POSIX)");
        }
    }

    @Test
    void aCreateWhoseTemporaryASweepDeletedBeforeItsLockFailsSayingSo() {
        final Path f = dir.resolve("pool");
        // as if this create stalled 10 s between making the file and locking it, and another process's sweep ran
        MappedPageStorage.beforeLockForTests = building -> {
            try {
                Files.delete(building);
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        };
        try {
            final var e = assertThrows(java.io.UncheckedIOException.class, () -> MappedPageStorage.create(f, LAYOUT, 3));
            assertTrue(e.getMessage().contains("was deleted before this create locked it"), e::getMessage);
        } finally {
            MappedPageStorage.beforeLockForTests = null;
        }
        assertFalse(Files.exists(f), "no pool file");
        MappedPageStorage.create(f, LAYOUT, 3).close(); // the next create is not hindered
    }

    @Test
    void aCreateHoldsALockOnItsTemporaryUntilItIsRenamedIntoPlace() throws Exception {
        final Path f = dir.resolve("pool");
        final Boolean[] heldWhileFilling = new Boolean[1];
        MappedPageStorage.afterOverForTests = h -> {
            try (var names = Files.list(dir)) {
                final Path building = names.filter(n -> n.getFileName().toString().startsWith(".pool.creating-")).findFirst().orElseThrow();
                heldWhileFilling[0] = FileLockProbe.lockedElsewhere(building);
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        };
        try {
            MappedPageStorage.create(f, LAYOUT, 3).close();
        } finally {
            MappedPageStorage.afterOverForTests = null;
        }
        assertEquals(Boolean.TRUE, heldWhileFilling[0], "a sweep elsewhere would take the create for dead");
        try (MappedPageStorage again = MappedPageStorage.create(f, LAYOUT, 3)) {
            assertFalse(FileLockProbe.lockedElsewhere(f), "the pool file itself is not left locked");
        }
    }
}
