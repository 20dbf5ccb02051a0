package io.kvpool.transfer.shm;

import java.nio.file.Path;

/** The child of {@link ShmControlOnlyTest}: connects to a control-only listener, then lives until killed (at most 30 s). */
public final class ShmControlChildMain {
    private ShmControlChildMain() {
    }

    public static void main(String[] args) throws Exception {
        try (ShmLink link = ShmTransport.connect(Path.of(args[0]))) {
            final long deadline = System.nanoTime() + 30_000_000_000L;
            while (System.nanoTime() < deadline) {
                link.poll(new ShmLinkTest.Recorder(), 10);
                Thread.sleep(5);
            }
        }
    }
}
