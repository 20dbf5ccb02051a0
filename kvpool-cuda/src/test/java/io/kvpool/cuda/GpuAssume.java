package io.kvpool.cuda;

import org.junit.jupiter.api.Assumptions;

import static org.junit.jupiter.api.Assertions.fail;

/** GPU tests skip with the reason when no device can be used, and fail instead under {@code -Dkvpool.gpu.required=true}. */
public final class GpuAssume {
    private GpuAssume() {
    }

    public static void gpu() {
        final String reason = Cuda.unavailableReason();
        if (reason == null) {
            return;
        }
        if (Boolean.getBoolean("kvpool.gpu.required")) {
            fail("kvpool.gpu.required=true but " + reason);
        }
        Assumptions.abort("no GPU: " + reason);
    }
}
