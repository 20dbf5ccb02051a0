package io.kvpool.cuda;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.opentest4j.AssertionFailedError;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A device pool whose arena another process may map keeps it past its close: freeing memory under another process's
 * {@code cuIpcOpenMemHandle} is undefined, and the next allocation here may get the same memory while that process can
 * still write it. Runs {@link DevicePageStorage} over {@link StubLibcuda} in a child JVM, which prints its steps between
 * the stub's {@code alloc}/{@code free} lines; the tests read when the arena was freed.
 */
class ExportedArenaLifetimeTest {

    private static Path stub;

    @BeforeAll
    static void buildStub() throws IOException, InterruptedException {
        stub = StubLibcuda.build(Path.of("target/exported-arena-test"), 13000);
    }

    /** @return the child's output lines, each stripped */
    private static List<String> run(String scenario) throws InterruptedException {
        return StubLibcuda.child(stub, Child.class, scenario).lines().map(String::strip).toList();
    }

    /** @return the index of the line that frees the arena the child named ("arena 0x..."), -1 if none; fails on two */
    private static int arenaFreedAt(List<String> out) {
        final String arena = out.stream().filter(l -> l.startsWith("arena ")).findFirst()
            .orElseThrow(() -> new AssertionFailedError("the child named no arena: " + out)).substring("arena ".length());
        int at = -1;
        for (int i = 0; i < out.size(); i++) {
            if (out.get(i).equals("free " + arena)) {
                assertEquals(-1, at, () -> "the arena was freed twice: " + out);
                at = i;
            }
        }
        return at;
    }

    private static int indexOf(List<String> out, String line) {
        final int i = out.indexOf(line);
        assertTrue(i >= 0, () -> "no line '" + line + "' in " + out);
        return i;
    }

    @Test
    void anArenaNeverExportedIsFreedByClose() throws InterruptedException {
        final List<String> out = run("noExport");
        final int freed = arenaFreedAt(out);
        assertTrue(freed > indexOf(out, "closing storage") && freed < indexOf(out, "closed storage"), () -> "control: " + out);
    }

    void checkCloseKeepsALeasedArenaUntilItsLastLeaseEnds(String scenario) throws InterruptedException {
        final List<String> out = run(scenario);
        final int freed = arenaFreedAt(out);
        assertTrue(freed < 0 || freed > indexOf(out, "ending the second lease"),
            () -> "the arena was freed while a peer could still map it: " + out);
        assertTrue(freed > 0 && freed < indexOf(out, "ended the second lease"), () -> "the last lease's end did not free the arena: " + out);
        assertTrue(out.stream().anyMatch(l -> l.startsWith("handle after close: java.lang.IllegalStateException")),
            () -> "a closed pool's handle was handed out: " + out);
        assertTrue(out.stream().anyMatch(l -> l.contains("2 IPC export lease(s) are open")), () -> "no warning with the numbers: " + out);
    }

    @Test
    void closeKeepsALeasedArenaUntilItsLastLeaseEnds() throws InterruptedException {
        checkCloseKeepsALeasedArenaUntilItsLastLeaseEnds("twoLeases");
    }

    @Test
    void anArenaFreedUnderItsLeasesIsCaught() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            () -> checkCloseKeepsALeasedArenaUntilItsLastLeaseEnds("twoLeasesUnsafe"));
        assertTrue(e.getMessage().contains("freed while a peer could still map it"), e.getMessage());
    }

    @Test
    void anArenaExportedUntrackedIsKeptUntilTheProcessEnds() throws InterruptedException {
        final List<String> out = run("untracked");
        assertEquals(-1, arenaFreedAt(out), () -> "nothing proves the importers are done: " + out);
        indexOf(out, "closed storage");
        assertTrue(out.stream().anyMatch(l -> l.contains("until this process ends")), () -> "no warning: " + out);
        assertTrue(out.contains("export after close: java.lang.IllegalStateException: device page storage is closed"), out::toString);
    }

    /** The child JVM (args: stub path, scenario); prints its steps. */
    public static final class Child {
        public static void main(String[] args) {
            System.load(args[0]);
            final String scenario = args[1];
            DevicePageStorage.unsafeFreeExportedArenaForTests = scenario.endsWith("Unsafe");
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4);
            say("arena 0x" + Long.toHexString(((DevicePageStorage.DevicePtr) s.arenaPointer()).address()));
            switch (scenario) {
                case "noExport" -> close(s);
                case "twoLeases", "twoLeasesUnsafe" -> {
                    final DeviceIpc.ExportLease first = DeviceIpc.exportLease(s);
                    final DeviceIpc.ExportLease second = DeviceIpc.exportLease(s);
                    close(s);
                    try {
                        first.handle();
                        say("handle after close: none thrown");
                    } catch (RuntimeException e) {
                        say("handle after close: " + e);
                    }
                    say("ending the first lease");
                    first.close();
                    first.close(); // idempotent: not the second's end
                    say("ending the second lease");
                    second.close();
                    say("ended the second lease");
                }
                case "untracked" -> {
                    DeviceIpc.export(s);
                    close(s);
                    try {
                        DeviceIpc.export(s);
                        say("export after close: none thrown");
                    } catch (RuntimeException e) {
                        say("export after close: " + e);
                    }
                }
                default -> throw new IllegalArgumentException(scenario);
            }
        }

        private static void close(DevicePageStorage s) {
            say("closing storage");
            s.close();
            say("closed storage");
        }

        private static void say(String line) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
