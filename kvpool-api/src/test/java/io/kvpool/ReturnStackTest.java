package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.concurrent.CyclicBarrier;

import static org.junit.jupiter.api.Assertions.*;

/** The return stack: pushes and runs pushed with one CAS come out once each, oldest first. */
class ReturnStackTest {

    @Test
    void aRunComesOutAsPushingEachInTurnWould() {
        final ReturnStack one = new ReturnStack(16);
        final ReturnStack run = new ReturnStack(16);
        one.push(9);
        run.push(9);
        for (int s : new int[] {3, 7, 1, 12}) {
            one.push(s);
        }
        run.pushAll(new int[] {3, 7, 1, 12, 99}, 4);
        one.push(5);
        run.pushAll(new int[] {5}, 1);
        assertEquals(6, run.sizeVolatile());
        final List<Integer> a = new ArrayList<>();
        final List<Integer> b = new ArrayList<>();
        assertEquals(6, one.drain(a::add));
        assertEquals(6, run.drain(b::add));
        assertEquals(List.of(9, 3, 7, 1, 12, 5), b);
        assertEquals(a, b);
        assertEquals(0, run.sizeVolatile());
    }

    @Test
    void threadsPushingRunsAndSinglesWhileTheConsumerDrainsLoseNoSlotAndDuplicateNone() throws Exception {
        final int threads = 4, perThread = 20_000, capacity = threads * perThread;
        final ReturnStack stack = new ReturnStack(capacity);
        final CyclicBarrier start = new CyclicBarrier(threads + 1);
        final Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int base = t * perThread;
            ts[t] = new Thread(() -> {
                final int[] run = new int[7];
                try {
                    start.await();
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
                int i = 0;
                while (i < perThread) {
                    final int n = Math.min(1 + (i % 7), perThread - i);
                    if (n == 1) {
                        stack.push(base + i++);
                    } else {
                        for (int k = 0; k < n; k++) {
                            run[k] = base + i++;
                        }
                        stack.pushAll(run, n);
                    }
                }
            });
            ts[t].start();
        }
        final BitSet seen = new BitSet(capacity);
        final int[] got = {0};
        final List<String> errors = new ArrayList<>();
        start.await();
        while (got[0] < capacity) {
            stack.drain(slot -> {
                if (seen.get(slot)) {
                    errors.add("slot " + slot + " came out twice");
                }
                seen.set(slot);
                got[0]++;
            });
            assertEquals(List.of(), errors);
            boolean producing = false;
            for (Thread t : ts) {
                producing |= t.isAlive();
            }
            if (!producing && got[0] < capacity && stack.sizeVolatile() == 0) {
                fail(got[0] + " of " + capacity + " slots came out and the producers are done: slots were lost");
            }
            Thread.onSpinWait();
        }
        for (Thread t : ts) {
            t.join();
        }
        assertEquals(capacity, seen.cardinality());
        assertEquals(0, stack.sizeVolatile());
    }
}
