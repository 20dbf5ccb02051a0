package io.kvpool.cuda.ipc;

import io.kvpool.KvPool;
import io.kvpool.transfer.shm.MappedPageStorage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.opentest4j.AssertionFailedError;

import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

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

    /** The lost-link scenario catches a decode side that claims teardown while the importer lives. */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void aTearDownClaimedWhileTheImporterLivesIsCaught() {
        decodeUnsafe = Set.of(CudaIpcLink.Unsafe.TEARDOWN_WITHOUT_PROOF);
        final AssertionFailedError e = assertThrows(AssertionFailedError.class,
            this::lostLinkToALiveImporterKeepsItsPagesQuarantinedUntilTheProcessIsGone);
        assertTrue(e.getMessage().contains("expected: <QUARANTINED> but was: <RELEASED>"), e.getMessage());
    }
}
