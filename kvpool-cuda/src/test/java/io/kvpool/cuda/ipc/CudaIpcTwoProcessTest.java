package io.kvpool.cuda.ipc;

import io.kvpool.KvPool;
import io.kvpool.transfer.shm.MappedPageStorage;

import java.util.List;

/**
 * {@link TwoProcessScenarios} without a GPU: the real {@link CudaIpcLink}s, control sockets, pid proofs and
 * transfer engines in two JVMs, with the host-memory engine standing in for CUDA (the decode pool is a
 * {@link MappedPageStorage} file that the child's engine maps, as {@code cuIpcOpenMemHandle} would map the
 * arena). Runs in CI; {@link CudaIpcTwoProcessGpuTest} runs the same scenarios on the GPU.
 */
class CudaIpcTwoProcessTest extends TwoProcessScenarios {

    @Override
    String engine() {
        return "fake";
    }

    @Override
    KvPool decodePool(int pages) {
        return KvPool.builder(layout()).pages(pages).maxContextTokens((long) pages * layout().tokensPerPage())
            .storage((l, n) -> MappedPageStorage.create(dir.resolve("pool"), l, n)).build();
    }

    @Override
    List<String> childJvmArgs() {
        return List.of();
    }
}
