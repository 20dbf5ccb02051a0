package io.kvpool.transfer.shm;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.KernelView;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.TransferException;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.Objects;

/**
 * Pages in a file mapped into memory, so that another process on the same host can map the same file
 * and write pages directly (the shared-memory transport, {@link ShmLink}). Put the file on a tmpfs
 * ({@code /dev/shm}) so the pages never go to disk.
 *
 * <h2>File layout (all integers little-endian)</h2>
 * <pre>
 *  offset 0     header page ({@value #HEADER_BYTES} bytes)
 *     0  u64 magic {@link #MAGIC}        (written last, after a full fence: a mapper never sees a half header)
 *     8  i32 format version {@link #FORMAT_VERSION}
 *    12  i32 page count
 *    16  i64 layout fingerprint ({@link KvLayout#fingerprint()})
 *    24  i64 bytes per page
 *    32  i32 layers, i32 kvHeads, i32 headDim, i32 dtype ordinal, i32 tokensPerPage
 *    56  i64 file identity (random, chosen at creation; region keys carry it)
 *    64  i64 pid of the creating process
 *  offset 4096  page 0, then page p at 4096 + p × bytesPerPage
 * </pre>
 *
 * Page bytes, fill, canary and copy behave exactly as {@link HostPageStorage} (this class delegates to
 * one over the mapped pages). The receiver {@link #create creates} the file and owns it (closing unmaps
 * it and deletes the file); a sender {@link #map maps} an existing file, after checking its header, and
 * closing only unmaps its own view. Another process's mapping stays valid until that process unmaps it
 * or exits: closing never revokes a peer's access (see {@link ShmLink#tearDown()}).
 */
public final class MappedPageStorage implements PageStorage {

    /** First eight bytes of the file: "KVPOOLSH" read as a little-endian long. */
    public static final long MAGIC = 0x48534C4F4F50564BL;
    /** Version of the file layout above. */
    public static final int FORMAT_VERSION = 1;
    /** Bytes before page 0 (one 4 KiB page, so page 0 is 4096-aligned in every mapping). */
    public static final long HEADER_BYTES = 4096;

    private static final long OFF_MAGIC = 0, OFF_VERSION = 8, OFF_PAGES = 12, OFF_FINGERPRINT = 16, OFF_PAGE_BYTES = 24,
        OFF_LAYERS = 32, OFF_KV_HEADS = 36, OFF_HEAD_DIM = 40, OFF_DTYPE = 44, OFF_TPP = 48, OFF_IDENTITY = 56, OFF_PID = 64;
    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final Path file;
    private final boolean owner;
    private final long identity;
    private final long creatorPid;
    private final MemorySegment mapping;
    private final HostPageStorage pages;

    private MappedPageStorage(Path file, boolean owner, long identity, long creatorPid, MemorySegment mapping, HostPageStorage pages) {
        this.file = file;
        this.owner = owner;
        this.identity = identity;
        this.creatorPid = creatorPid;
        this.mapping = mapping;
        this.pages = pages;
    }

    /**
     * Creates the file, maps it, fills every page with the canary and writes the header. The file is made under a
     * temporary name next to {@code file} and renamed onto it once whole, so nothing half-made ever sits at the path. A
     * pool file already there is replaced (a receiver restarted on its path while its predecessor shuts down); if its
     * creator still runs, a WARNING names it, since two receivers given one path cut the first off its new senders.
     * Anything else at the path is not replaced: a wrong path must not delete someone's data. The file is readable
     * and writable by its owner only (where the file system supports POSIX permissions). Usable as a pool's storage
     * factory:
     * {@code KvPool.builder(layout).storage((l, n) -> MappedPageStorage.create(path, l, n))}.
     *
     * @param file   where to create the file (on tmpfs, ideally)
     * @param layout the page layout
     * @param pages  number of pages, ≥ 1
     * @return the storage, owning the file
     * @throws IllegalArgumentException if {@code pages < 1} or the size overflows
     * @throws UncheckedIOException     if the file cannot be created or mapped, or its file system has less room than
     *                                  the file needs (both numbers in the message): the pages are written at once, and
     *                                  a tmpfs that runs out while they are would fault instead; or if the path holds
     *                                  something other than a pool file
     * @throws InternalError            rarely, if the room went elsewhere after the check: a fault of the fill that
     *                                  the JVM reports after this method's own handler ({@link #map(Path)})
     */
    public static MappedPageStorage create(Path file, KvLayout layout, int pages) {
        Objects.requireNonNull(file, "file");
        Objects.requireNonNull(layout, "layout");
        if (pages < 1) {
            throw new IllegalArgumentException("a storage needs at least 1 page, was " + pages);
        }
        final long size = fileSize(layout.bytesPerPage(), pages);
        final Arena arena = Arena.ofShared();
        boolean created = false;
        HostPageStorage host = null;
        FileChannel held = null;
        final long pid = ProcessHandle.current().pid();
        final Path building = file.resolveSibling("." + file.getFileName() + CREATING + StaleFiles.owner() + "-"
            + Long.toHexString(new SecureRandom().nextLong() >>> 1));
        try {
            requirePoolFileOrNothing(file); // before the work, and again before the rename
            sweepStaleTemporaries(file, Bootstrap.OWN_PID_NAMESPACE);
            // Made and locked by one channel, and locked until it is renamed into place: the sweep of any process, in any
            // pid namespace, sees the create alive (the lock dies with this process). One channel for the lock and the
            // mapping: closing another channel of the file would drop this process's lock on it.
            final java.util.Set<StandardOpenOption> options =
                java.util.EnumSet.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ, StandardOpenOption.WRITE);
            held = FileSystems.getDefault().supportedFileAttributeViews().contains("posix")
                ? FileChannel.open(building, options, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")))
                : FileChannel.open(building, options);
            created = true;
            final java.util.function.Consumer<Path> stall = beforeLockForTests;
            if (stall != null) {
                stall.accept(building);
            }
            StaleFiles.lockQuietly(held);
            if (!Files.exists(building, LinkOption.NOFOLLOW_LINKS)) {
                // this create stalled at least LOCK_TEST_MIN_AGE between making the file and locking it, and another
                // process's sweep took it for a dead create's: the name is unique, so the file there now is ours or none
                throw new IOException("its temporary " + building.getFileName() + " was deleted before this create locked it "
                    + "(a stall of " + StaleFiles.LOCK_TEST_MIN_AGE.toSeconds() + " s or more let another process's sweep take it for a "
                    + "dead create's); create it again");
            }
            // The canary fill below writes every page of a sparse file: on a tmpfs without room for them that write
            // faults (an InternalError from mapped memory), so the room is checked first, with the numbers
            // (a file system that reports no size at all, as hugetlbfs without size= and some FUSE mounts do, is not
            // checked: its room is unknown, not zero)
            final java.nio.file.FileStore store = Files.getFileStore(building);
            final long usable = store.getUsableSpace();
            if (store.getTotalSpace() > 0 && usable < size) {
                throw new IOException("its file system has " + usable + " bytes free");
            }
            // a rename keeps the file (and so its key): the owner's close deletes the path only while it names this file
            final Object fileKey = Objects.requireNonNullElse(Files.readAttributes(building, BasicFileAttributes.class).fileKey(), ANY_FILE);
            final MemorySegment mapping = held.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
            final long identity = new SecureRandom().nextLong() | 1; // never 0 (0 means "no pool" in the bootstrap)
            // the header first, all but its magic: after the storage over the pages exists, as little as possible
            // may fault (a late fault of the fill is caught below, and must close that storage too)
            mapping.set(INT, OFF_VERSION, FORMAT_VERSION);
            mapping.set(INT, OFF_PAGES, pages);
            mapping.set(LONG, OFF_FINGERPRINT, layout.fingerprint());
            mapping.set(LONG, OFF_PAGE_BYTES, layout.bytesPerPage());
            mapping.set(INT, OFF_LAYERS, layout.layers());
            mapping.set(INT, OFF_KV_HEADS, layout.kvHeads());
            mapping.set(INT, OFF_HEAD_DIM, layout.headDim());
            mapping.set(INT, OFF_DTYPE, layout.dtype().ordinal());
            mapping.set(INT, OFF_TPP, layout.tokensPerPage());
            mapping.set(LONG, OFF_IDENTITY, identity);
            mapping.set(LONG, OFF_PID, pid);
            host = HostPageStorage.over(layout, pages, mapping.asSlice(HEADER_BYTES), true, closer(arena, file, fileKey));
            afterOver(host);
            VarHandle.fullFence();
            mapping.set(LONG, OFF_MAGIC, MAGIC);
            warnIfCreatorRuns(file, requirePoolFileOrNothing(file));
            moveOnto(building, file);
            created = false; // it is the file at the path now
            return new MappedPageStorage(file, true, identity, pid, mapping, host);
        } catch (IOException e) {
            closeQuietly(host, arena);
            deleteIfCreated(created, building);
            throw new UncheckedIOException("cannot create the mapped pool file " + file + " of " + size + " bytes ("
                + pages + " pages of " + layout.bytesPerPage() + " bytes): " + e.getMessage(), e);
        } catch (InternalError e) { // a fault in mapped memory: the room went to someone else after the check
            closeQuietly(host, arena);
            deleteIfCreated(created, building);
            throw new UncheckedIOException("cannot fill the mapped pool file " + file + " of " + size + " bytes (" + pages
                + " pages of " + layout.bytesPerPage() + " bytes): a write faulted; is its file system full?",
                new IOException(e.toString(), e));
        } catch (RuntimeException | Error e) {
            closeQuietly(host, arena);
            deleteIfCreated(created, building);
            throw e;
        } finally {
            closeQuietly(held); // the lock goes with it (after a failed create's delete); a mapping stays
        }
    }

    /**
     * Infix of the name a pool file is built under, next to it: {@code .<name>.creating-<pid>@<pid namespace>-<random>}
     * (no {@code @} in names older builds made). A create locks it until the rename: {@link StaleFiles} sweeps the
     * temporaries of creates that died.
     */
    private static final String CREATING = ".creating-";

    private static final System.Logger LOG = System.getLogger("io.kvpool.transfer.shm");

    /**
     * Maps an existing pool file read-write (the sender's view), taking the layout from its header.
     * Nothing is filled: the pages keep the receiver's bytes.
     *
     * @param file a file made by {@link #create}
     * @return a storage over the same pages; closing it only unmaps this view
     * @throws TransferException    if the header is not a valid pool header, the file size does not match it, or the
     *                              file shrank while its header was read
     * @throws UncheckedIOException if the file cannot be opened or mapped
     * @throws InternalError        rarely, if the file shrank under the header reads: the JVM reports such a fault in
     *                              compiled code at its next safepoint check, which may come after this method's own
     *                              handler; callers that map a peer's file treat it as a refusal too
     */
    public static MappedPageStorage map(Path file) {
        return map(file, null);
    }

    /**
     * Like {@link #map(Path)}, and also checks the file holds pages of the expected layout.
     *
     * @param file     a file made by {@link #create}
     * @param expected the layout the caller will write, or {@code null} to accept the file's
     * @return a storage over the same pages
     * @throws TransferException    if the header is invalid or its layout fingerprint differs from
     *                              {@code expected}'s (the message names both fingerprints), or the file shrank
     *                              while its header was read
     * @throws UncheckedIOException if the file cannot be opened or mapped
     * @throws InternalError        rarely, as {@link #map(Path)} says
     */
    public static MappedPageStorage map(Path file, KvLayout expected) {
        Objects.requireNonNull(file, "file");
        final Arena arena = Arena.ofShared();
        HostPageStorage host = null;
        try {
            final MemorySegment mapping;
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                final long size = ch.size();
                if (size < HEADER_BYTES) {
                    throw new TransferException("mapped pool file " + file + " has " + size + " bytes, less than its "
                        + HEADER_BYTES + "-byte header");
                }
                mapping = ch.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
            }
            final long magic = mapping.get(LONG, OFF_MAGIC);
            if (magic != MAGIC) {
                throw new TransferException("file " + file + " is not a kvpool mapped pool: magic 0x" + Long.toHexString(magic)
                    + ", expected 0x" + Long.toHexString(MAGIC));
            }
            VarHandle.fullFence();
            final int version = mapping.get(INT, OFF_VERSION);
            if (version != FORMAT_VERSION) {
                throw new TransferException("mapped pool file " + file + " has format version " + version + ", this side reads "
                    + FORMAT_VERSION);
            }
            final long fingerprint = mapping.get(LONG, OFF_FINGERPRINT);
            if (expected != null && fingerprint != expected.fingerprint()) {
                throw new TransferException("mapped pool file " + file + " holds layout fingerprint 0x" + Long.toHexString(fingerprint)
                    + ", expected 0x" + Long.toHexString(expected.fingerprint()) + " (" + expected + ")");
            }
            final int dtype = mapping.get(INT, OFF_DTYPE);
            if (dtype < 0 || dtype >= DType.values().length) {
                throw new TransferException("mapped pool file " + file + " names dtype " + dtype + ", only 0.."
                    + (DType.values().length - 1) + " exist");
            }
            final KvLayout layout;
            try {
                layout = new KvLayout(mapping.get(INT, OFF_LAYERS), mapping.get(INT, OFF_KV_HEADS), mapping.get(INT, OFF_HEAD_DIM),
                    DType.values()[dtype], mapping.get(INT, OFF_TPP));
            } catch (IllegalArgumentException e) {
                throw new TransferException("mapped pool file " + file + " holds an invalid layout: " + e.getMessage(), e);
            }
            if (layout.fingerprint() != fingerprint) {
                throw new TransferException("mapped pool file " + file + " holds layout fingerprint 0x" + Long.toHexString(fingerprint)
                    + " but its layout fields (" + layout + ") fingerprint 0x" + Long.toHexString(layout.fingerprint()));
            }
            final int pages = mapping.get(INT, OFF_PAGES);
            final long pageBytes = mapping.get(LONG, OFF_PAGE_BYTES);
            if (pages < 1 || pageBytes != layout.bytesPerPage()) {
                throw new TransferException("mapped pool file " + file + " declares " + pages + " pages of " + pageBytes
                    + " bytes, its layout has " + layout.bytesPerPage() + " bytes per page");
            }
            final long want = fileSize(pageBytes, pages);
            if (mapping.byteSize() != want) {
                throw new TransferException("mapped pool file " + file + " has " + mapping.byteSize() + " bytes, its header ("
                    + pages + " pages of " + pageBytes + " bytes) needs " + want);
            }
            final long identity = mapping.get(LONG, OFF_IDENTITY);
            final long pid = mapping.get(LONG, OFF_PID);
            host = HostPageStorage.over(layout, pages, mapping.asSlice(HEADER_BYTES), false, closer(arena, file, null));
            afterOver(host);
            return new MappedPageStorage(file, false, identity, pid, mapping, host);
        } catch (IOException e) {
            closeQuietly(host, arena);
            throw new UncheckedIOException("cannot map pool file " + file + ": " + e.getMessage(), e);
        } catch (InternalError e) { // SIGBUS: the file shrank between its size check and a header read
            closeQuietly(host, arena);
            throw new TransferException("mapped pool file " + file + " faulted while its header was read (it shrank under "
                + "the mapping): " + e.getMessage(), e);
        } catch (RuntimeException | Error e) {
            closeQuietly(host, arena);
            throw e;
        }
    }

    private static long fileSize(long pageBytes, int pages) {
        try {
            return Math.addExact(HEADER_BYTES, Math.multiplyExact(pageBytes, (long) pages));
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException(pages + " pages of " + pageBytes + " bytes overflow a long", e);
        }
    }

    /**
     * @param ownFile the created file's key ({@code fileKey()}: device and inode), or {@code null} for a mapping
     *                that does not own the file; the owner deletes the file at the path only if it is still that
     *                file — a successor created at the same path (a restarted receiver) is not its to delete
     */
    private static Runnable closer(Arena arena, Path file, Object ownFile) {
        return () -> {
            arena.close();
            if (ownFile != null) {
                try {
                    if (ownFile == ANY_FILE || ownFile.equals(Files.readAttributes(file, BasicFileAttributes.class).fileKey())) {
                        Files.deleteIfExists(file);
                    }
                } catch (IOException ignored) {
                    // gone already, or best effort: the mapping is gone either way
                }
            }
        };
    }

    /**
     * Refuses a path that holds something other than a pool file: a directory, a link, or a file without the
     * magic. Reads the header only; maps nothing.
     *
     * @return the creating process's pid from the pool file's header; 0 if nothing is at the path
     * @throws IOException saying what is there
     */
    private static long requirePoolFileOrNothing(Path file) throws IOException {
        final BasicFileAttributes a;
        try {
            a = Files.readAttributes(file, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        } catch (NoSuchFileException e) {
            return 0;
        }
        if (!a.isRegularFile()) {
            throw new IOException("the path holds a " + (a.isSymbolicLink() ? "symbolic link" : a.isDirectory() ? "directory"
                : "special file") + ", not a pool file; refusing to replace it");
        }
        final ByteBuffer header = ByteBuffer.allocate((int) OFF_PID + 8).order(ByteOrder.LITTLE_ENDIAN);
        // NOFOLLOW: a link swapped in since the check is refused by the open, not followed
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
            while (header.hasRemaining() && ch.read(header) >= 0) {
                // a file shorter than the header ends the loop with a partial read
            }
        }
        if (header.position() < 8 || header.getLong((int) OFF_MAGIC) != MAGIC) {
            throw new IOException("the path holds a " + a.size() + "-byte file that is not a kvpool pool file (no magic 0x"
                + Long.toHexString(MAGIC) + "); refusing to replace it");
        }
        return header.hasRemaining() ? 0 : header.getLong((int) OFF_PID);
    }

    /** Logs a WARNING if {@code pid}, a pool file's creator about to lose its path, still runs (or was reused). */
    private static void warnIfCreatorRuns(Path file, long pid) {
        if (StaleFiles.runs(pid)) {
            LOG.log(System.Logger.Level.WARNING, "replacing the pool file " + file + " of process " + pid + ", which still runs"
                + (pid == ProcessHandle.current().pid() ? " (this process)" : "") + ": right if it is the receiver this one "
                + "succeeds and is shutting down; if not, two receivers share one path, and new senders of that one map this "
                + "file and are refused (the pool identity differs)");
        }
    }

    /** Renames the finished file onto {@code file}, atomically where the file system can. */
    private static void moveOnto(Path building, Path file) throws IOException {
        try {
            Files.move(building, file, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(building, file, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    /** Deletes the temporaries that creates of {@code file} which died left next to it ({@link StaleFiles}). */
    static void sweepStaleTemporaries(Path file, long ownNamespace) {
        StaleFiles.sweep(file.toAbsolutePath().getParent(), "." + file.getFileName() + CREATING, ownNamespace);
    }

    /** The file key of a file system without file keys: the owner deletes whatever is at the path, as before. */
    private static final Object ANY_FILE = new Object();

    /** A create that failed after making its file leaves nothing behind. */
    private static void deleteIfCreated(boolean created, Path file) {
        if (created) {
            try {
                Files.deleteIfExists(file);
            } catch (IOException ignored) {
                // best effort
            }
        }
    }

    /** Closes a channel (and so the lock this process holds through it), if there is one. */
    private static void closeQuietly(FileChannel ch) {
        if (ch != null) {
            try {
                ch.close();
            } catch (IOException ignored) {
                // best effort: the lock dies with the process anyway
            }
        }
    }

    /**
     * A create or map that failed frees what it made: the storage over the mapping, if it was made before the failure
     * (a fault in mapped memory can be reported after the statement that caused it; the storage's own memory is freed
     * only by its close), then the mapping's arena.
     *
     * @param host the storage, or {@code null} if none was made
     */
    private static void closeQuietly(HostPageStorage host, Arena arena) {
        if (host != null) {
            try {
                host.close();
            } catch (RuntimeException ignored) {
                // the mapping's arena is closed below either way
            }
        }
        try {
            arena.close();
        } catch (IllegalStateException ignored) {
            // already closed by the storage, which took it over
        }
    }

    /** Test seam: runs on a create's temporary between its making and its lock; null in production. */
    static volatile java.util.function.Consumer<Path> beforeLockForTests;

    /** Test seam: runs on the storage just made over the mapping, before create or map returns; null in production. */
    static volatile java.util.function.Consumer<HostPageStorage> afterOverForTests;

    private static void afterOver(HostPageStorage host) {
        final java.util.function.Consumer<HostPageStorage> hook = afterOverForTests;
        if (hook != null) {
            hook.accept(host);
        }
    }

    /** {@return the mapped file's path} */
    public Path file() {
        return file;
    }

    /** {@return whether this storage created the file (the receiver's) rather than mapped it} */
    public boolean isOwner() {
        return owner;
    }

    /** {@return the random identity written into the header at creation; region keys carry it} */
    public long identity() {
        return identity;
    }

    /** {@return the pid of the process that created the file, as its header records it} */
    public long creatorPid() {
        return creatorPid;
    }

    /**
     * {@return the segment over all pages (page {@code p} at {@code p × bytesPerPage}), without the header}
     *
     * @throws IllegalStateException if closed
     */
    public MemorySegment segment() {
        return pages.segment();
    }

    @Override
    public KvLayout layout() {
        return pages.layout();
    }

    @Override
    public int pageCount() {
        return pages.pageCount();
    }

    @Override
    public boolean isHostAccessible() {
        return true;
    }

    @Override
    public MemorySegment hostPage(int page) {
        return pages.hostPage(page);
    }

    @Override
    public long address(int page, int layer, int kv) {
        return pages.address(page, layer, kv);
    }

    /**
     * The kernel view of one layer's K or V over the mapped pages: whole pages apart, as in
     * {@link HostPageStorage#kernelView(int, int)} (the header is not part of it).
     *
     * @param layer layer index
     * @param kv    0 for K, 1 for V
     * @return the view
     * @throws IndexOutOfBoundsException if {@code layer} or {@code kv} is out of range
     * @throws IllegalStateException     if the storage is closed
     */
    @Override
    public KernelView kernelView(int layer, int kv) {
        return pages.kernelView(layer, kv);
    }

    @Override
    public void fill(int page, FillMode mode) {
        pages.fill(page, mode);
    }

    @Override
    public int firstCanaryToken(int page, int fromToken, int toToken) {
        return pages.firstCanaryToken(page, fromToken, toToken);
    }

    @Override
    public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
        pages.copyPages(src, srcOff, dst, dstOff, count);
    }

    /** Unmaps this process's view (and, for the owner, deletes the file). Idempotent; use afterwards throws {@link IllegalStateException}. */
    @Override
    public void close() {
        pages.close();
    }

    @Override
    public String toString() {
        return "MappedPageStorage[" + file + ", " + pageCount() + " pages, " + (owner ? "owner" : "mapped") + ", identity 0x"
            + Long.toHexString(identity) + "]";
    }
}
