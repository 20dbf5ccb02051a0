package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link DeviceRolesScenario} without a GPU: the role processes run {@code --device cuda} through
 * {@link SimulatedDevice}, so every device branch of the server (pools, checksums, page copies, the CUDA IPC
 * transport and its teardown proof) runs in CI, with host memory where the GPU would be.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SimulatedDeviceRolesTest {

    @TempDir
    Path dir;

    @Test
    void twoTenantsAndAPrefillProcessKilledMidTransferOnTheSimulatedDevice() throws Exception {
        DeviceRolesScenario.run(SimulatedDevice.class, dir, "on the simulated device");
        // the device branch made decode's pool, not the shm one
        assertTrue(Files.exists(dir.resolve(SimulatedDevice.POOL_FILE)), "no " + SimulatedDevice.POOL_FILE + " in " + dir);
        assertFalse(Files.exists(dir.resolve("decode.pool")), "the shm branch made decode.pool");
    }
}
