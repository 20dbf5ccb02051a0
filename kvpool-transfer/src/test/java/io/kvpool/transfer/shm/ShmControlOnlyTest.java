package io.kvpool.transfer.shm;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A listener that exposes no pool ({@link ShmTransport#listen(Path)}): control frames only, for transports
 * that move pages another way (kvpool-cuda's CUDA IPC transport), and {@link ShmLink#peerProcessGone()},
 * the proof such a transport's teardown rests on.
 */
@Timeout(30)
class ShmControlOnlyTest {

    @TempDir
    Path dir;

    @Test
    void framesFlowBothWaysAndNeitherSideCanRegister() {
        try (ShmListener listener = ShmTransport.listen(dir.resolve("sock"));
             ShmLink sender = ShmTransport.connect(dir.resolve("sock"))) {
            final ShmLink[] receiver = new ShmLink[1];
            ShmLinkTest.await("bootstrap", () -> receiver[0] != null && sender.isReady(), () -> {
                if (receiver[0] == null) {
                    receiver[0] = listener.accept();
                }
                sender.poll(new ShmLinkTest.Recorder(), 10);
            });
            try (ShmLink r = receiver[0]) {
                sender.send(WireCodec.encode(new Message.Refuse("to decode")));
                r.send(WireCodec.encode(new Message.Refuse("to prefill")));
                final ShmLinkTest.Recorder atR = new ShmLinkTest.Recorder(), atS = new ShmLinkTest.Recorder();
                ShmLinkTest.await("a frame each way", () -> atR.frames.size() == 1 && atS.frames.size() == 1, () -> {
                    r.poll(atR, 10);
                    sender.poll(atS, 10);
                });
                assertEquals(new Message.Refuse("to decode"), atR.frames.get(0));
                assertEquals(new Message.Refuse("to prefill"), atS.frames.get(0));
                try (HostPageStorage s = HostPageStorage.allocate(ShmLinkTest.LAYOUT, 4)) {
                    final IllegalStateException e = assertThrows(IllegalStateException.class, () -> r.register(s, new int[] {0}));
                    assertTrue(e.getMessage().contains("exposes no mapped pool"), e.getMessage());
                }
                assertThrows(LinkFailedException.class, r::remoteLayout);
                // the peer is this very process: never proven gone
                assertEquals(ProcessHandle.current().pid(), r.peerPid());
                assertFalse(r.peerProcessGone());
                assertFalse(sender.peerProcessGone());
            }
        }
    }

    @Test
    void peerProcessGoneIsFalseWhileTheChildLivesAndTrueOnceItIsKilled() throws Exception {
        try (ShmListener listener = ShmTransport.listen(dir.resolve("sock"))) {
            final Process child = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx32m",
                "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"), ShmControlChildMain.class.getName(),
                dir.resolve("sock").toString()).redirectErrorStream(true).redirectOutput(dir.resolve("child.log").toFile()).start();
            try {
                final ShmLink[] link = new ShmLink[1];
                ShmLinkTest.await("the child's link", () -> link[0] != null, () -> {
                    link[0] = listener.accept();
                    assertTrue(child.isAlive(), "the child died before connecting");
                });
                try (ShmLink l = link[0]) {
                    assertEquals(child.pid(), l.peerPid());
                    assertFalse(l.peerProcessGone(), "the child lives");
                    child.destroyForcibly();
                    assertTrue(child.waitFor(10, TimeUnit.SECONDS));
                    assertTrue(l.peerProcessGone(), "the child was killed and reaped");
                }
            } finally {
                child.destroyForcibly();
            }
        }
    }
}
