package io.kvpool.examples.server;

import io.kvpool.cuda.Cuda;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.fail;

/**
 * {@link DeviceRolesScenario} on the GPU: both pools on device 0, KV by CUDA IPC, checksums on the device, the
 * echo model's KV through {@code readPage}/{@code writePage}. Skipped without a usable GPU (with the reason);
 * failed then under {@code -Dkvpool.gpu.required=true}. {@link SimulatedDeviceRolesTest} runs the same scenario
 * without a GPU.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DeviceRolesGpuTest {

    @TempDir
    Path dir;

    /** kvpool-cuda's GpuAssume rule: skip with the reason, or fail when a GPU is required. */
    static void assumeGpu() {
        final String reason = Cuda.unavailableReason();
        if (reason == null) {
            return;
        }
        if (Boolean.getBoolean("kvpool.gpu.required")) {
            fail("kvpool.gpu.required=true but " + reason);
        }
        Assumptions.abort("no GPU: " + reason);
    }

    @Test
    void twoTenantsAndAPrefillProcessKilledMidTransferWithBothPoolsOnTheGpu() throws Exception {
        assumeGpu();
        DeviceRolesScenario.run(KvServerMain.class, dir, "on the GPU");
    }
}
