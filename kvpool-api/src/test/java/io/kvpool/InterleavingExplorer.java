package io.kvpool;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Semaphore;

/**
 * A small stateless model checker: runs real code on several threads, lets exactly one thread run at a
 * time, and switches threads only at <em>yield points</em> — every access to the shared state words
 * ({@link ControlledWords}). It enumerates every schedule depth-first (each run replays a prefix of
 * choices and extends it), so for bounded programs it explores <em>all</em> interleavings of their
 * shared-memory steps.
 */
final class InterleavingExplorer {

    /** One thread's program: a list of operations, each returning a {@code long} result. */
    interface Op {
        long run(SlotTable table);

        String name();
    }

    /** What one execution observed. */
    record Execution(long[][] results, int[][] startStep, int[][] endStep, long[] finalWords, List<Integer> schedule) {
    }

    /** Memory whose every access is a yield point of the explorer. */
    static class ControlledWords implements SlotWords {
        final long[] words;
        InterleavingExplorer explorer;

        ControlledWords(long[] initial) {
            this.words = initial.clone();
        }

        @Override
        public long getVolatile(int i) {
            explorer.yieldPoint();
            return words[i];
        }

        @Override
        public boolean compareAndSet(int i, long expected, long update) {
            explorer.yieldPoint();
            if (words[i] == expected) { // atomic: no yield point between compare and set
                words[i] = update;
                return true;
            }
            return false;
        }

        @Override
        public void setRelease(int i, long value) {
            explorer.yieldPoint();
            words[i] = value;
        }

        @Override
        public int length() {
            return words.length;
        }
    }

    /** A deliberately broken CAS (compare, yield, set) to prove the explorer finds atomicity bugs. */
    static final class NonAtomicCasWords extends ControlledWords {
        NonAtomicCasWords(long[] initial) {
            super(initial);
        }

        @Override
        public boolean compareAndSet(int i, long expected, long update) {
            explorer.yieldPoint();
            if (words[i] == expected) {
                explorer.yieldPoint(); // another thread may write here: a lost update
                words[i] = update;
                return true;
            }
            return false;
        }
    }

    private final Semaphore back = new Semaphore(0);
    private Semaphore[] go;
    private volatile int current = -1;
    private int step;
    private int[] pendingStart;
    private int[][] startStep;

    private InterleavingExplorer() {
    }

    private void yieldPoint() {
        final int me = current;
        back.release();
        go[me].acquireUninterruptibly();
        if (pendingStart[me] >= 0) {
            startStep[me][pendingStart[me]] = step;
            pendingStart[me] = -1;
        }
    }

    /**
     * Runs every interleaving of the programs on fresh copies of {@code initial}.
     *
     * @param wordsFactory makes the controlled memory for one execution
     * @param checkGeneration passed to {@link SlotTable}
     * @param programs     one list of operations per thread
     * @param visitor      sees each execution; throw to report a violation
     * @return the number of executions explored
     */
    static long exploreAll(java.util.function.Supplier<ControlledWords> wordsFactory, boolean checkGeneration,
                           List<List<Op>> programs, java.util.function.Consumer<Execution> visitor) {
        final List<Integer> prefix = new ArrayList<>();
        long executions = 0;
        while (true) {
            final List<int[]> decisions = new ArrayList<>(); // {choice, enabledCount}
            final Execution e = new InterleavingExplorer().runOnce(wordsFactory.get(), checkGeneration, programs, prefix, decisions);
            executions++;
            visitor.accept(e);
            int k = decisions.size() - 1;
            while (k >= 0 && decisions.get(k)[0] + 1 >= decisions.get(k)[1]) {
                k--;
            }
            if (k < 0) {
                return executions;
            }
            prefix.clear();
            for (int i = 0; i < k; i++) {
                prefix.add(decisions.get(i)[0]);
            }
            prefix.add(decisions.get(k)[0] + 1);
        }
    }

    private Execution runOnce(ControlledWords words, boolean checkGeneration, List<List<Op>> programs,
                              List<Integer> prefix, List<int[]> decisions) {
        words.explorer = this;
        final SlotTable table = new SlotTable(words, 0, checkGeneration, true);
        final int n = programs.size();
        go = new Semaphore[n];
        pendingStart = new int[n];
        startStep = new int[n][];
        final long[][] results = new long[n][];
        final int[][] endStep = new int[n][];
        final boolean[] finished = new boolean[n];
        final Thread[] threads = new Thread[n];
        final List<Integer> schedule = new ArrayList<>();
        for (int t = 0; t < n; t++) {
            go[t] = new Semaphore(0);
            results[t] = new long[programs.get(t).size()];
            startStep[t] = new int[programs.get(t).size()];
            endStep[t] = new int[programs.get(t).size()];
            final int me = t;
            threads[t] = Thread.ofVirtual().unstarted(() -> {
                go[me].acquireUninterruptibly(); // wait for the first turn
                final List<Op> ops = programs.get(me);
                for (int i = 0; i < ops.size(); i++) {
                    pendingStart[me] = i;
                    startStep[me][i] = step; // replaced at the op's first yield point, if it has one
                    results[me][i] = ops.get(i).run(table);
                    pendingStart[me] = -1;
                    endStep[me][i] = step;
                }
                finished[me] = true;
                back.release();
            });
            threads[t].start();
        }
        while (true) {
            final int[] enabled = new int[n];
            int count = 0;
            for (int t = 0; t < n; t++) {
                if (!finished[t]) {
                    enabled[count++] = t;
                }
            }
            if (count == 0) {
                break;
            }
            final int d = decisions.size();
            final int choice = d < prefix.size() ? prefix.get(d) : 0;
            decisions.add(new int[] {choice, count});
            final int pick = enabled[choice];
            schedule.add(pick);
            step++;
            current = pick;
            go[pick].release();
            back.acquireUninterruptibly();
        }
        for (Thread t : threads) {
            try {
                t.join();
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(ie);
            }
        }
        return new Execution(results, startStep, endStep, words.words.clone(), schedule);
    }

    /**
     * Checks an execution for linearizability against the sequential specification
     * {@link SlotStateMachine#next}: some order of all operations that respects each thread's program
     * order and real time (an operation that ended before another started comes first) must produce the
     * same result for every operation and the same final word.
     *
     * @return null if linearizable, else a description of the violation
     */
    static String checkLinearizable(Execution e, long[] initial, List<List<SequentialOp>> spec) {
        final int n = spec.size();
        final int[] next = new int[n];
        final int total = spec.stream().mapToInt(List::size).sum();
        if (search(e, spec, next, initial.clone(), 0, total)) {
            return null;
        }
        return "not linearizable: results " + Arrays.deepToString(e.results()) + " final "
            + Arrays.toString(Arrays.stream(e.finalWords()).mapToObj(SlotStateMachine::describe).toArray())
            + " schedule " + e.schedule();
    }

    /** The sequential meaning of an operation on the words. */
    interface SequentialOp {
        /** Applies to {@code words}; @return the result the concurrent operation must have returned. */
        long apply(long[] words);
    }

    private static boolean search(Execution e, List<List<SequentialOp>> spec, int[] next, long[] words, int done, int total) {
        if (done == total) {
            return Arrays.equals(words, e.finalWords());
        }
        for (int t = 0; t < spec.size(); t++) {
            final int i = next[t];
            if (i >= spec.get(t).size() || !minimal(e, spec, next, t)) {
                continue;
            }
            final long[] copy = words.clone();
            final long r = spec.get(t).get(i).apply(copy);
            if (r != e.results()[t][i]) {
                continue;
            }
            next[t]++;
            if (search(e, spec, next, copy, done + 1, total)) {
                return true;
            }
            next[t]--;
        }
        return false;
    }

    /** @return whether no pending operation of another thread ended before thread t's next operation started */
    private static boolean minimal(Execution e, List<List<SequentialOp>> spec, int[] next, int t) {
        final int start = e.startStep()[t][next[t]];
        for (int u = 0; u < spec.size(); u++) {
            if (u != t && next[u] < spec.get(u).size() && e.endStep()[u][next[u]] < start) {
                return false;
            }
        }
        return true;
    }
}
