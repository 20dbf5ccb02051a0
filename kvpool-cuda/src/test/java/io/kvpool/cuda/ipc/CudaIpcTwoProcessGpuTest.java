package io.kvpool.cuda.ipc;

import io.kvpool.KvPool;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.cuda.GpuAssume;
import org.junit.jupiter.api.BeforeEach;

import java.util.List;

/**
 * {@link TwoProcessScenarios} on the GPU: both pools are {@link DevicePageStorage}s, the child (prefill)
 * opens this process's arena with {@code cuIpcOpenMemHandle} and writes it with one
 * {@code kvpool_ipc_put_pages} launch per batch; bytes are checked by reading the decode pages back.
 * Checksums are off (no device checksum yet). Skips with the reason without a usable CUDA device, and
 * fails instead under {@code -Dkvpool.gpu.required=true} (as {@code kvpool-cuda/gpu-visit.sh} runs it).
 */
class CudaIpcTwoProcessGpuTest extends TwoProcessScenarios {

    @BeforeEach
    void gpu() {
        GpuAssume.gpu();
    }

    @Override
    String engine() {
        return "cuda";
    }

    @Override
    KvPool decodePool(int pages) {
        return KvPool.builder(layout()).pages(pages).maxContextTokens((long) pages * layout().tokensPerPage())
            .storage(DevicePageStorage::allocate).build();
    }

    @Override
    List<String> childJvmArgs() {
        final List<String> args = new java.util.ArrayList<>(List.of("--enable-native-access=ALL-UNNAMED"));
        if (System.getProperty("kvpool.gpu.required") != null) {
            args.add("-Dkvpool.gpu.required=" + System.getProperty("kvpool.gpu.required"));
        }
        return args;
    }
}
