package io.kvpool.transfer.ucx;

import org.junit.jupiter.api.Test;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** JUCX is optional: without it on the class path, asking for the UCX transport says what to add. */
class JucxOptionalTest {

    /** Run in a child JVM whose class path lacks JUCX: prints what opening a UCX transport threw. */
    public static final class OpenWithoutJucx {
        public static void main(String[] args) {
            try {
                UcxTransport.open("no-jucx").close();
                System.out.println("OPENED");
            } catch (UcxUnavailableException e) {
                System.out.println("REFUSED " + e.getMessage());
            } catch (Throwable t) {
                System.out.println("OTHER " + t);
            }
            System.out.println("probe: " + UcxTransport.unavailableReason().orElse("available"));
        }
    }

    @Test
    void withoutJucxTheUcxTransportSaysWhichDependencyToAdd() throws Exception {
        final String classPath = Arrays.stream(System.getProperty("java.class.path").split(File.pathSeparator))
            .filter(e -> !new File(e).getName().startsWith("jucx"))
            .collect(Collectors.joining(File.pathSeparator));
        assertTrue(!classPath.contains("jucx-"), "JUCX left out of the child's class path");
        final Process child = new ProcessBuilder(System.getProperty("java.home") + "/bin/java", "-cp", classPath,
            OpenWithoutJucx.class.getName()).redirectErrorStream(true).start();
        final String out = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(child.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, child.exitValue(), out);
        assertTrue(out.contains("REFUSED UCX transport 'no-jucx' needs JUCX") && out.contains("org.openucx:jucx:1.12.1"), out);
        assertTrue(out.contains("probe: UCX transport 'probe' needs JUCX"), out);
    }
}
