// Page-copy kernel shapes against one contiguous cudaMemcpyAsync, on a GPU, kernel time only (the index
// lists are on the device before timing), plus what uploading the lists costs. A measuring tool for choosing
// kvpool_copy_pages's shape; not part of the build or the tests. Build here, run on the GPU host (the CUDA
// runtime is linked statically, so the host needs only the driver):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o copy_sweep kvpool-cuda/src/test/cuda/copy_sweep.cu
//   ./copy_sweep     # one line per shape and segment size: ms, GB/s (read + written), % of the memcpy
// Shapes: "kvpool" is kvpool_copy_pages itself (included from src/main/cuda: one 16-byte vector per thread
// per iteration over the flat work index, divisions per vector); "seg<U>x<T>" takes one (page, plane) segment
// per block, T threads a block, each with U vectors loaded before it stores them; "persist<U>x<T>" is that
// shape on a grid of (resident blocks per SM × SMs) looping over the segments. Measured on an H200
// (2026-12-04, docs/gpu.md): 8 KiB segments, kvpool 88.7 %, seg1x256 92.4 %, seg2x128 92.9 %, seg4x256
// 89.2 %; 32 KiB segments not yet.
#include "../../main/cuda/kvpool_kernels.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <random>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

template <int U>
__global__ void seg(const int* src, const int* dst, int n, unsigned char* arena, long long planeBytes, int planes, long long pageStride) {
    const long long segments = (long long)n * planes, units = pageStride / 16, T = blockDim.x;
    for (long long g = blockIdx.x; g < segments; g += gridDim.x) {
        const int i = g / planes, q = g - (long long)i * planes;
        const uint4* s = reinterpret_cast<const uint4*>(arena + q * planeBytes + src[i] * pageStride);
        uint4* d = reinterpret_cast<uint4*>(arena + q * planeBytes + dst[i] * pageStride);
        for (long long w = threadIdx.x; w < units; w += U * T) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++) { const long long k = w + u * T; if (k < units) v[u] = s[k]; }
#pragma unroll
            for (int u = 0; u < U; u++) { const long long k = w + u * T; if (k < units) d[k] = v[u]; }
        }
    }
}

int main() {
    int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const long long opBytes = 2LL << 30;
    for (long long stride : {8192LL, 32768LL}) {
        const int planes = 2;
        const long long pageBytes = stride * planes;
        const int n = opBytes / pageBytes, pages = n * 5 / 2;
        const long long planeBytes = stride * pages;
        unsigned char *arena, *a, *b; int *dsrc, *ddst;
        CK(cudaMalloc(&arena, planeBytes * planes)); CK(cudaMalloc(&a, opBytes)); CK(cudaMalloc(&b, opBytes));
        CK(cudaMemset(arena, 0x5a, planeBytes * planes)); CK(cudaMemset(a, 1, opBytes));
        std::vector<int> perm(pages); for (int i = 0; i < pages; i++) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), std::mt19937(4));
        CK(cudaMalloc(&dsrc, 4LL * n)); CK(cudaMalloc(&ddst, 4LL * n));
        CK(cudaMemcpy(dsrc, perm.data(), 4LL * n, cudaMemcpyHostToDevice)); CK(cudaMemcpy(ddst, perm.data() + n, 4LL * n, cudaMemcpyHostToDevice));
        cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        auto time = [&](auto launch) { // best of 10 after 3 warm-ups, ms
            float best = 1e9f;
            for (int r = 0; r < 13; r++) {
                CK(cudaEventRecord(e0)); launch(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (r >= 3) best = std::min(best, ms);
            }
            return best;
        };
        const float ref = time([&] { cudaMemcpyAsync(b, a, opBytes, cudaMemcpyDeviceToDevice); });
        auto report = [&](const char* name, float ms) {
            printf("segment %6lld B  %-14s %8.3f ms  %7.0f GB/s  %5.1f %%\n", stride, name, ms, 2.0 * opBytes / (ms * 1e6), 100.0 * ref / ms);
        };
        report("memcpy", ref);
        const long long segs = (long long)n * planes;
        const int grid = (int)std::min<long long>(segs, 65535LL * 16);
        report("kvpool", time([&] { kvpool_copy_pages<<<grid, 256>>>(dsrc, ddst, n, arena, planeBytes, planes, stride); }));
        char name[32];
#define SWEEP(U, T) do { \
            snprintf(name, sizeof name, "seg%dx%d", U, T); \
            report(name, time([&] { seg<U><<<grid, T>>>(dsrc, ddst, n, arena, planeBytes, planes, stride); })); \
            int per = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, seg<U>, T, 0)); \
            snprintf(name, sizeof name, "persist%dx%d", U, T); \
            report(name, time([&] { seg<U><<<per * sms, T>>>(dsrc, ddst, n, arena, planeBytes, planes, stride); })); \
        } while (0)
        SWEEP(1, 256); SWEEP(2, 256); SWEEP(4, 256); SWEEP(8, 256);
        SWEEP(2, 128); SWEEP(4, 128); SWEEP(8, 128);
        SWEEP(2, 512); SWEEP(4, 512);
        // the index lists' upload, as copyPagesAsync does it (pageable, two calls) and from pinned memory (one call)
        int* pinned; CK(cudaMallocHost(&pinned, 8LL * n));
        int* lists; CK(cudaMalloc(&lists, 8LL * n)); // both lists, one after the other
        const float pageableMs = time([&] { cudaMemcpy(lists, perm.data(), 4LL * n, cudaMemcpyHostToDevice); cudaMemcpy(lists + n, perm.data() + n, 4LL * n, cudaMemcpyHostToDevice); });
        const float pinnedMs = time([&] { cudaMemcpyAsync(lists, pinned, 8LL * n, cudaMemcpyHostToDevice); });
        CK(cudaFree(lists));
        printf("segment %6lld B  index lists %d pages: pageable 2 calls %.3f ms, pinned 1 call %.3f ms (%.1f %% / %.1f %% of memcpy)\n",
               stride, n, pageableMs, pinnedMs, 100.0 * pageableMs / ref, 100.0 * pinnedMs / ref);
        CK(cudaFreeHost(pinned));
        CK(cudaFree(arena)); CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(dsrc)); CK(cudaFree(ddst));
    }
    return 0;
}
