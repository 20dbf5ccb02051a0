// kvpool CUDA IPC transport kernel (io.kvpool.cuda.ipc): one launch per put batch, never one per page.
//
// Copies whole pages from this process's arena into ANOTHER arena (a peer process's, opened with
// cuIpcOpenMemHandle) of the same page layout. Both arenas are laid out as io.kvpool.cuda.DeviceLayout
// draws; only their page counts (so their planeBytes) differ:
//   plane q of an arena starts at  arena + q * planeBytes        (planes = layers * 2)
//   page p of plane q:             the pageStride bytes at  + p * pageStride
//
// For i < n, in every plane q: dstArena page dst[i] <- srcArena page src[i].
// The Java side checks every index against both arenas' page counts before the launch, and guarantees
// that arenas, planeBytes and pageStride are multiples of 16 bytes (DeviceLayout.ALIGNMENT): the kernel
// then moves uint4 (16-byte) vectors, else (a caller broke that) a byte loop, still correct.
// Grid-stride loop: any grid size is correct (launch at least one block).

namespace {

__device__ __forceinline__ bool aligned16(const void* a, const void* b, long long x, long long y, long long z) {
    return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)
             | static_cast<unsigned long long>(x) | static_cast<unsigned long long>(y)
             | static_cast<unsigned long long>(z)) & 15ULL) == 0;
}

__device__ __forceinline__ unsigned long long globalThread() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ unsigned long long gridThreads() {
    return static_cast<unsigned long long>(gridDim.x) * blockDim.x;
}

} // namespace

extern "C" __global__ void kvpool_ipc_put_pages(const int* src, const int* dst, int n,
                                                const unsigned char* srcArena, long long srcPlaneBytes,
                                                unsigned char* dstArena, long long dstPlaneBytes,
                                                int planes, long long pageStride) {
    if (n <= 0 || planes <= 0 || pageStride <= 0) return;
    const bool vec16 = aligned16(srcArena, dstArena, srcPlaneBytes, dstPlaneBytes, pageStride);
    const unsigned long long units = static_cast<unsigned long long>(vec16 ? pageStride / 16 : pageStride);
    const unsigned long long perPage = static_cast<unsigned long long>(planes) * units;
    const unsigned long long total = static_cast<unsigned long long>(n) * perPage;
    for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
        const int i = static_cast<int>(idx / perPage);
        const unsigned long long r = idx % perPage;
        const long long q = static_cast<long long>(r / units);
        const long long w = static_cast<long long>(r % units);
        const unsigned char* s = srcArena + q * srcPlaneBytes + src[i] * pageStride;
        unsigned char* d = dstArena + q * dstPlaneBytes + dst[i] * pageStride;
        if (vec16) {
            reinterpret_cast<uint4*>(d)[w] = reinterpret_cast<const uint4*>(s)[w];
        } else {
            d[w] = s[w];
        }
    }
}
