package io.kvpool;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * A batch's block table in the shape paged-attention kernels take, kept in the caller's memory and
 * brought up to date cheaply as the sequences grow: a padded int32 table of slot indices, one row per
 * sequence, and an int32 length per row.
 *
 * <h2>Layout (little-endian int32, in the two segments given at construction)</h2>
 * <pre>
 *  table  (rows × maxPages × 4 bytes, row-major)        lengths (rows × 4 bytes)
 *  +--------+--------+-----+--------+-----+--------+     +-----------+
 *  | slot   | slot   | ... | slot   | PAD | PAD    |     | tokens    |   row 0: sequence 0
 *  +--------+--------+-----+--------+-----+--------+     +-----------+
 *  | slot   | PAD    | PAD | ...            | PAD  |     | tokens    |   row 1
 *  +--------+--------+-----+----------------+------+     +-----------+
 *  | PAD    | PAD    | ...                  | PAD  |     | 0         |   row 2: no sequence
 *  +--------+--------+----------------------+------+     +-----------+
 *   entry (r, i) at byte (r · maxPages + i) · 4 = the slot of page i of row r's sequence ({@link Sequence#pageIndex})
 *   lengths[r] at byte r · 4 = row r's {@link Sequence#tokenCount()} (tokens whose KV is cached, the
 *   "seq_lens" / "context_lens" a kernel masks with; pages [0, ceil(len / tokensPerPage)) are valid)
 * </pre>
 *
 * <h2>Padding: {@value #PAD}</h2>
 * Entries past a row's pages hold {@link #PAD} = 0, as vLLM's zero-initialized block tables do: a kernel
 * reads only the pages its length covers, and one that loads whole rows or rounds its loop up to a tile
 * still computes an address inside the arena (slot 0), where -1 would send it before the arena's start.
 * The lengths are what say which entries are real; a row without a sequence has length 0.
 *
 * <h2>Refreshing only what changed</h2>
 * {@link #refresh()} rewrites a row only when it must: a row whose sequence was {@link #set} since the
 * last refresh, or whose {@link Sequence#structureVersion()} changed (a page replaced by copy-on-write or
 * removed by truncate), or that now holds fewer pages (closed), is rewritten and padded; any other row
 * gets only the entries of pages appended since (from its previously written page count on). Lengths are
 * written for every row. Between refreshes the table's memory must not be written by anyone else: what
 * a row already holds is trusted. A closed sequence's row becomes empty (length 0, all padding), so the
 * table never names pages a closed sequence gave back.
 *
 * <p>Threads: not thread-safe; use it on the thread that owns the sequences (a scheduler), and hand the
 * memory to the kernel (or copy it to the device) after {@link #refresh()} returns. Allocation-free after
 * construction.
 */
public final class BlockTable {

    /** The value of every entry past a row's pages (see the class comment). */
    public static final int PAD = 0;

    private static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** {@link #written} value: the row's contents are unknown, rewrite all of it. */
    private static final int UNKNOWN = -1;

    private final int rows;
    private final int maxPages;
    private final MemorySegment table;
    private final MemorySegment lengths;
    private final Sequence[] sequences;
    /** Per row: entries {@code [0, written)} are the sequence's pages as of {@link #versions}; the rest is {@link #PAD}. */
    private final int[] written;
    private final long[] versions;
    /** The lengths as the last refresh wrote them: built here, then copied to {@link #lengths} in one bulk copy. */
    private final int[] lengthValues;
    /** Scratch for {@link #refresh()}: the rows whose entries it rewrites. */
    private final int[] dirtyRows;

    /**
     * A table of {@code rows} empty rows over the caller's memory (pinned, mapped or plain). Nothing is
     * written until the first {@link #refresh()}, which writes every row.
     *
     * @param rows     rows (sequences in the batch), ≥ 0
     * @param maxPages entries per row, ≥ 1: the most pages any row's sequence may hold
     * @param table    at least {@link #tableBytes(int, int) tableBytes(rows, maxPages)} bytes
     * @param lengths  at least {@link #lengthsBytes(int) lengthsBytes(rows)} bytes
     * @throws IllegalArgumentException if a count is out of range or a segment is too small or read-only
     */
    public BlockTable(int rows, int maxPages, MemorySegment table, MemorySegment lengths) {
        if (rows < 0 || maxPages < 1) {
            throw new IllegalArgumentException("rows must be ≥ 0 and maxPages ≥ 1, were " + rows + " and " + maxPages);
        }
        Objects.requireNonNull(table, "table");
        Objects.requireNonNull(lengths, "lengths");
        if (table.byteSize() < tableBytes(rows, maxPages) || lengths.byteSize() < lengthsBytes(rows)) {
            throw new IllegalArgumentException("a table of " + rows + " rows × " + maxPages + " pages needs " + tableBytes(rows, maxPages)
                + " table bytes and " + lengthsBytes(rows) + " length bytes; got " + table.byteSize() + " and " + lengths.byteSize());
        }
        if (table.isReadOnly() || lengths.isReadOnly()) {
            throw new IllegalArgumentException("the table and lengths segments must be writable");
        }
        this.rows = rows;
        this.maxPages = maxPages;
        this.table = table;
        this.lengths = lengths;
        this.sequences = new Sequence[rows];
        this.written = new int[rows];
        this.versions = new long[rows];
        this.lengthValues = new int[rows];
        this.dirtyRows = new int[rows];
        java.util.Arrays.fill(written, UNKNOWN);
    }

    /**
     * The size of a table segment.
     *
     * @param rows     rows, ≥ 0
     * @param maxPages entries per row, ≥ 1
     * @return bytes of the table segment: {@code rows × maxPages × 4}
     */
    public static long tableBytes(int rows, int maxPages) {
        return 4L * rows * maxPages;
    }

    /**
     * The size of a lengths segment.
     *
     * @param rows rows, ≥ 0
     * @return bytes of the lengths segment: {@code rows × 4}
     */
    public static long lengthsBytes(int rows) {
        return 4L * rows;
    }

    /**
     * The number of rows, fixed at construction.
     *
     * @return rows
     */
    public int rows() {
        return rows;
    }

    /**
     * The entries per row, fixed at construction.
     *
     * @return entries per row
     */
    public int maxPages() {
        return maxPages;
    }

    /**
     * Puts a sequence in a row (or empties it); the next {@link #refresh()} rewrites the whole row.
     *
     * @param row row index
     * @param seq the sequence, or {@code null} for an empty row (length 0, all padding)
     * @throws IndexOutOfBoundsException if {@code row} is out of range
     */
    public void set(int row, Sequence seq) {
        Objects.checkIndex(row, rows);
        sequences[row] = seq;
        written[row] = UNKNOWN;
    }

    /**
     * The sequence a row holds.
     *
     * @param row row index
     * @return the row's sequence, or {@code null} if the row is empty
     * @throws IndexOutOfBoundsException if {@code row} is out of range
     */
    public Sequence sequence(int row) {
        return sequences[Objects.checkIndex(row, rows)];
    }

    /**
     * Brings the table and lengths up to date with the rows' sequences, writing only what changed (see the
     * class comment). Checks every row before writing any.
     *
     * @return table entries written by this call, padding included (lengths not counted)
     * @throws IllegalStateException if a row's sequence holds more than {@link #maxPages()} pages (nothing is
     *                               written)
     */
    public int refresh() {
        // one pass over the rows reads each sequence once and notes the rows whose entries must change (in a decode
        // step, one row in 16 at 16 tokens a page); nothing reaches the caller's memory before every row is checked
        int dirty = 0;
        for (int r = 0; r < rows; r++) {
            final Sequence seq = sequences[r];
            if (seq == null) {
                lengthValues[r] = 0;
                if (written[r] != 0) {
                    dirtyRows[dirty++] = r;
                }
                continue;
            }
            final int pages = seq.pageCount();
            lengthValues[r] = seq.tokenCount();
            if (pages != written[r] || seq.structureVersion() != versions[r]) {
                if (pages > maxPages) {
                    throw new IllegalStateException("row " + r + "'s sequence holds " + pages + " pages (" + seq.tokenCount()
                        + " tokens); the table has room for " + maxPages + " pages per row");
                }
                dirtyRows[dirty++] = r;
            }
        }
        int entries = 0;
        for (int i = 0; i < dirty; i++) {
            entries += rewrite(dirtyRows[i]);
        }
        // every length changes in a decode step: one bulk copy beats a bounds-checked store per row
        MemorySegment.copy(lengthValues, 0, lengths, INT_LE, 0, rows);
        return entries;
    }

    /** Brings one row's entries up to date with its sequence. @return entries written, padding included */
    private int rewrite(int r) {
        final Sequence seq = sequences[r];
        final long rowAt = 4L * r * maxPages;
        final int before = written[r];
        if (seq == null) {
            written[r] = 0;
            return pad(rowAt, 0, before == UNKNOWN ? maxPages : before);
        }
        final int pages = seq.pageCount();
        final long version = seq.structureVersion();
        final int from;
        int padTo = 0;
        if (before == UNKNOWN || version != versions[r] || pages < before) {
            from = 0; // a page already in the table may have changed: the whole row again
            padTo = before == UNKNOWN ? maxPages : before; // entries at and past `before` are padding already
        } else {
            from = before; // appends only: the pages from the old end on
        }
        for (int i = from; i < pages; i++) {
            table.set(INT_LE, rowAt + 4L * i, seq.pageIndex(i));
        }
        written[r] = pages;
        versions[r] = version;
        return pages - from + pad(rowAt, pages, padTo);
    }

    /** Writes {@link #PAD} into entries {@code [from, to)} of the row at {@code rowAt}. @return entries written */
    private int pad(long rowAt, int from, int to) {
        for (int i = from; i < to; i++) {
            table.set(INT_LE, rowAt + 4L * i, PAD);
        }
        return Math.max(0, to - from);
    }
}
