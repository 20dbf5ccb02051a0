package io.kvpool.cuda;

import jcuda.driver.CUcontext;
import jcuda.driver.CUevent;
import jcuda.driver.JCudaDriver;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * kvpool-cuda and JCuda's JVM-wide exception switch:
 * kvpool-cuda neither changes the host application's setting nor depends on it — every driver call goes through
 * {@link CudaException#code}, which turns JCuda's exception back into the {@code CUresult}.
 *
 * <p>No GPU here, and JCuda's natives need {@code libcuda.so.1}: a child JVM runs each scenario over
 * {@link StubLibcuda} (a batch is always still running) and prints one line, which the test checks.
 */
class JCudaExceptionsTest {

    private static final Path WORK = Path.of("target/jcuda-exceptions-test");
    private static Path stub;
    /** The same stub, its driver of CUDA 12.8: older than the release that built the kernels. */
    private static Path oldDriverStub;

    @BeforeAll
    static void buildStub() throws IOException, InterruptedException {
        stub = StubLibcuda.build(WORK, 13000);
        oldDriverStub = StubLibcuda.build(WORK.resolve("old-driver"), 12080);
    }

    /** Runs {@link Child} with the scenario in a fresh JVM over the stub; returns its output. */
    private static String child(String scenario) throws InterruptedException {
        return child(stub, scenario);
    }

    private static String child(Path libcuda, String scenario) throws InterruptedException {
        return StubLibcuda.child(libcuda, Child.class, scenario);
    }

    /**
     * {@code Cuda}'s probe must not call {@code JCudaDriver.setExceptionsEnabled(false)}: a JVM-wide JCuda switch.
     * A host application that embeds kvpool and uses JCuda itself (the README: the pool shares the primary context with
     * "a host application's own CUDA code") and turned JCuda's exceptions on would find them silently off once
     * kvpool's {@code Cuda} class initialises: its own failing driver calls would then return codes it never checks.
     * Control first: with kvpool not involved the app's setting holds (the driver call throws).
     */
    @Test
    void cudaProbeLeavesTheHostApplicationsJCudaExceptionSettingAlone() throws InterruptedException {
        assertEquals("app call threw jcuda.CudaException: CUDA_ERROR_NOT_READY", child("control"), "control: the harness sees the app's setting");
        assertEquals("app call threw jcuda.CudaException: CUDA_ERROR_NOT_READY", child("probe"),
            "after Cuda.available() the host application's JCudaDriver.setExceptionsEnabled(true) no longer holds");
    }

    /**
     * kvpool must work whatever JCuda's exception setting: reading JCuda return codes alone works only with JCuda's
     * exceptions off. A host application that turns them on after kvpool initialised (JCuda's own samples start with
     * {@code setExceptionsEnabled(true)}) would make {@link DeviceBatch#isDone()} throw
     * {@code jcuda.CudaException: CUDA_ERROR_NOT_READY} for a batch that is simply still running, instead of returning
     * {@code false} (and would bypass every other return-code path the same way: close()'s ignored codes, the
     * constructor's cleanup, CudaException's messages with the numbers).
     */
    @Test
    void isDoneOfARunningBatchIsFalseWhatEverTheHostApplicationsJCudaSetting() throws InterruptedException {
        assertEquals("isDone=false", child("isDoneDefault"), "control: with kvpool's own setting a running batch polls false");
        assertEquals("isDone=false", child("isDoneAppExceptions"), "the app enabled JCuda exceptions after kvpool initialised");
    }

    /**
     * A thread waiting for a batch ({@code await()}, inside {@code cuEventSynchronize}) does not hold up another
     * thread's poll: {@code isDone()} answers while the wait is still under way. Were the batch's monitor held during
     * the wait, an event loop polling a batch would stall behind any thread that awaits it.
     */
    @Test
    void aPollIsAnsweredWhileAnotherThreadAwaitsTheBatch() throws InterruptedException {
        assertEquals("isDone=false while awaiting=true", child("isDoneDuringAwait"));
    }

    /**
     * The page count in an exported handle is the peer's word, and the kernels index the opened arena by it: a handle
     * claiming more pages than the allocation it maps holds is refused, and what the open took is given back.
     */
    @Test
    void anIpcHandleClaimingMoreThanItsAllocationIsRefused() throws InterruptedException {
        final String out = child("openOversized");
        assertTrue(out.contains("threw java.lang.IllegalArgumentException: the exported arena claims 64 pages")
            && out.contains("maps holds 4096 bytes"), out);
        assertTrue(out.contains("closed mapping") && out.contains("released context"), "the open left its mapping or context: " + out);
    }

    /**
     * The kernels are built by CUDA 13.0: a driver of an older release reads as no device, naming both versions,
     * rather than failing at the first module load after a pool was sized.
     */
    @Test
    void aDriverOlderThanTheKernelsReadsAsNoDeviceNamingBothVersions() throws InterruptedException {
        assertEquals("reason=null", child("reason"), "control: a CUDA 13.0 driver with one device can be used");
        final String old = child(oldDriverStub, "reason");
        assertTrue(old.contains("CUDA 12.8") && old.contains("12080") && old.contains("CUDA 13.0"), old);
    }

    /** The child JVM's scenarios (args: stub path, scenario); prints one line. */
    public static final class Child {
        public static void main(String[] args) {
            System.load(args[0]);
            try {
                switch (args[1]) {
                    case "control" -> {
                        JCudaDriver.setExceptionsEnabled(true); // the host application's choice
                        appCall();
                    }
                    case "probe" -> {
                        JCudaDriver.setExceptionsEnabled(true); // the host application's choice
                        Cuda.available();                       // kvpool initialises (e.g. DevicePageStorage.allocate)
                        appCall();
                    }
                    case "reason" -> System.out.println("reason=" + Cuda.unavailableReason());
                    case "isDoneDefault" -> {
                        Cuda.available();
                        System.out.println("isDone=" + new DeviceBatch(new CUcontext(), new jcuda.driver.CUdevice(), null, 0, new CUevent()).isDone());
                    }
                    case "openOversized" -> { // a handle that claims 64 pages of a layout over a 4 KiB allocation
                        final io.kvpool.KvLayout l = DeviceIpcFormatTest.L;
                        DeviceIpc.open(DeviceIpcFormatTest.handle(DeviceIpc.MAGIC, l.fingerprint(), 64, DeviceLayout.of(l, 64).arenaBytes()), l);
                        System.out.println("opened");
                    }
                    case "isDoneDuringAwait" -> {
                        Cuda.available();
                        final DeviceBatch batch = new DeviceBatch(new CUcontext(), new jcuda.driver.CUdevice(), null, 0, new CUevent());
                        final Thread waiter = new Thread(batch::await, "waiter");
                        waiter.start();
                        while (!insideEventSynchronize(waiter)) { // the barrier: the waiter is in the driver call
                            Thread.onSpinWait();
                        }
                        final boolean done = batch.isDone();
                        System.out.println("isDone=" + done + " while awaiting=" + insideEventSynchronize(waiter));
                        waiter.join();
                    }
                    case "isDoneAppExceptions" -> {
                        Cuda.available();
                        JCudaDriver.setExceptionsEnabled(true); // the host application's choice, made later
                        System.out.println("isDone=" + new DeviceBatch(new CUcontext(), new jcuda.driver.CUdevice(), null, 0, new CUevent()).isDone());
                    }
                    default -> throw new IllegalArgumentException(args[1]);
                }
            } catch (Throwable t) {
                System.out.println("threw " + t);
            }
        }

        /** @return whether {@code t} is inside JCuda's cuEventSynchronize */
        private static boolean insideEventSynchronize(Thread t) {
            for (StackTraceElement e : t.getStackTrace()) {
                if (e.getMethodName().startsWith("cuEventSynchronize")) {
                    return true;
                }
            }
            return false;
        }

        /** A driver call of the host application's own that fails (the stub's cuEventQuery: NOT_READY). */
        private static void appCall() {
            try {
                System.out.println("app call returned " + JCudaDriver.cuEventQuery(new CUevent()));
            } catch (jcuda.CudaException e) {
                System.out.println("app call threw " + e);
            }
        }
    }
}
