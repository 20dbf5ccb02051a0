// kvpool batched page kernels: one launch per batch of pages, never one per page.
//
// Device arena (ONE allocation):
//   planes = layers * 2, plane q = layer * 2 + kv (K = 0, V = 1)
//   plane q starts at  arena + q * planeBytes
//   page p of plane q: the pageStride bytes at  arena + q * planeBytes + p * pageStride
//   inside a page:     [tokensPerPage][kvHeads][headDim], token t at plane offset t * tokenVectorBytes
// Host page layout of the same page: the planes one after another,
//   host offset of (plane q, plane offset o) = q * pageStride + o.
//
// The Java side guarantees that arena, planeBytes, pageStride (and tokenVectorBytes) and every
// host buffer are multiples of 16 bytes, so the kernels move uint4 (16-byte) vectors. Each kernel
// still checks that and falls back to a byte loop if a caller breaks it (a uniform branch, free).
//
// All kernels use grid-stride loops: any grid size is correct (launch at least one block).
// Fill patterns have the phase of the host offset: byte at host offset h = (pattern >> 8*(h & 7));
// since pageStride % 16 == 0 the plane offset has the same phase.

#include <climits>

namespace {

__device__ __forceinline__ bool aligned16(const void* p, long long a, long long b) {
    return ((reinterpret_cast<unsigned long long>(p) | static_cast<unsigned long long>(a)
             | static_cast<unsigned long long>(b)) & 15ULL) == 0;
}

__device__ __forceinline__ unsigned long long globalThread() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ unsigned long long gridThreads() {
    return static_cast<unsigned long long>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ unsigned char patternByte(unsigned long long pattern, long long h) {
    return static_cast<unsigned char>(pattern >> (8 * (h & 7)));
}

// The 16 pattern bytes of a 16-byte vector that starts at a multiple of 8 (little-endian).
__device__ __forceinline__ uint4 patternVector(unsigned long long pattern) {
    const unsigned int lo = static_cast<unsigned int>(pattern);
    const unsigned int hi = static_cast<unsigned int>(pattern >> 32);
    return make_uint4(lo, hi, lo, hi);
}

// Work item idx of a batch of n pages × planes × units: page index i, plane q, unit w.
struct Item { int i; int q; long long w; };

__device__ __forceinline__ Item split(unsigned long long idx, int planes, unsigned long long units) {
    const unsigned long long perPage = static_cast<unsigned long long>(planes) * units;
    Item it;
    it.i = static_cast<int>(idx / perPage);
    const unsigned long long r = idx % perPage;
    it.q = static_cast<int>(r / units);
    it.w = static_cast<long long>(r % units);
    return it;
}

} // namespace

// For i < n, in every plane: page dst[i] <- page src[i]. Pairs never overlap (a pair with
// src[i] == dst[i] copies a page onto itself, which is harmless).
extern "C" __global__ void kvpool_copy_pages(const int* src, const int* dst, int n, unsigned char* arena,
                                             long long planeBytes, int planes, long long pageStride) {
    if (n <= 0 || planes <= 0 || pageStride <= 0) return;
    if (aligned16(arena, planeBytes, pageStride)) {
        const unsigned long long units = static_cast<unsigned long long>(pageStride) / 16;
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            unsigned char* plane = arena + it.q * planeBytes;
            const uint4* s = reinterpret_cast<const uint4*>(plane + src[it.i] * pageStride) + it.w;
            uint4* d = reinterpret_cast<uint4*>(plane + dst[it.i] * pageStride) + it.w;
            *d = *s;
        }
    } else {
        const unsigned long long units = static_cast<unsigned long long>(pageStride);
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            unsigned char* plane = arena + it.q * planeBytes;
            plane[dst[it.i] * pageStride + it.w] = plane[src[it.i] * pageStride + it.w];
        }
    }
}

// out (contiguous; may be mapped pinned host memory) receives page pages[i] in HOST layout at
// out + i * planes * pageStride, plane q at + q * pageStride. The flat work index times the unit
// size is exactly the output offset, so stores are fully coalesced.
extern "C" __global__ void kvpool_gather_pages(const int* pages, int n, const unsigned char* arena,
                                               long long planeBytes, int planes, long long pageStride,
                                               unsigned char* out) {
    if (n <= 0 || planes <= 0 || pageStride <= 0) return;
    if (aligned16(arena, planeBytes, pageStride) && aligned16(out, 0, 0)) {
        const unsigned long long units = static_cast<unsigned long long>(pageStride) / 16;
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            const uint4* s = reinterpret_cast<const uint4*>(arena + it.q * planeBytes + pages[it.i] * pageStride) + it.w;
            reinterpret_cast<uint4*>(out)[idx] = *s;
        }
    } else {
        const unsigned long long units = static_cast<unsigned long long>(pageStride);
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            out[idx] = arena[it.q * planeBytes + pages[it.i] * pageStride + it.w];
        }
    }
}

// The reverse of kvpool_gather_pages: page pages[i] <- the host-layout page at in + i * planes * pageStride.
extern "C" __global__ void kvpool_scatter_pages(const int* pages, int n, unsigned char* arena,
                                                long long planeBytes, int planes, long long pageStride,
                                                const unsigned char* in) {
    if (n <= 0 || planes <= 0 || pageStride <= 0) return;
    if (aligned16(arena, planeBytes, pageStride) && aligned16(in, 0, 0)) {
        const unsigned long long units = static_cast<unsigned long long>(pageStride) / 16;
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            uint4* d = reinterpret_cast<uint4*>(arena + it.q * planeBytes + pages[it.i] * pageStride) + it.w;
            *d = reinterpret_cast<const uint4*>(in)[idx];
        }
    } else {
        const unsigned long long units = static_cast<unsigned long long>(pageStride);
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            arena[it.q * planeBytes + pages[it.i] * pageStride + it.w] = in[idx];
        }
    }
}

// Every byte at host offset h of each listed page becomes (unsigned char)(pattern >> 8*(h & 7));
// pattern 0 is a zero fill.
extern "C" __global__ void kvpool_fill_pages(const int* pages, int n, unsigned char* arena,
                                             long long planeBytes, int planes, long long pageStride,
                                             unsigned long long pattern) {
    if (n <= 0 || planes <= 0 || pageStride <= 0) return;
    if (aligned16(arena, planeBytes, pageStride)) {
        const uint4 v = patternVector(pattern); // every unit starts at a host offset ≡ 0 (mod 16)
        const unsigned long long units = static_cast<unsigned long long>(pageStride) / 16;
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            reinterpret_cast<uint4*>(arena + it.q * planeBytes + pages[it.i] * pageStride)[it.w] = v;
        }
    } else {
        const unsigned long long units = static_cast<unsigned long long>(pageStride);
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            const long long h = it.q * pageStride + it.w; // host offset: the phase of the pattern
            arena[it.q * planeBytes + pages[it.i] * pageStride + it.w] = patternByte(pattern, h);
        }
    }
}

// out[i] = the smallest token t in [fromToken, toToken) of page pages[i] such that in ANY plane
// the whole token vector (tokenVectorBytes at plane offset t * tokenVectorBytes) equals the
// pattern bytes (phase as in fill), else -1. Same answer as HostPageStorage.firstCanaryToken.
//
// Design: one block per page (grid-stride over pages by blockIdx.x, so any grid size works).
// The block's threads share the (token, plane) vectors of the page, token-major so a warp looks
// at the lowest tokens first; each thread compares its whole vectors (exiting at the first
// differing 16 bytes, which for real data is the first load) and atomicMin's a matching token
// into a __shared__ int that thread 0 set to INT_MAX. Vectors at tokens >= the current best are
// skipped (a volatile read: only an optimisation, the atomicMin makes the result exact). After a
// barrier thread 0 writes the minimum (or -1); a second barrier lets the next page reuse it.
extern "C" __global__ void kvpool_first_canary_token(const int* pages, int n, const unsigned char* arena,
                                                     long long planeBytes, int planes, long long pageStride,
                                                     long long tokenVectorBytes, int fromToken, int toToken,
                                                     unsigned long long pattern, int* out) {
    __shared__ int best;
    const bool vec16 = aligned16(arena, planeBytes, pageStride) && (tokenVectorBytes & 15) == 0;
    const uint4 pv = patternVector(pattern);
    const long long tokens = toToken > fromToken ? static_cast<long long>(toToken) - fromToken : 0;
    const long long items = planes > 0 ? tokens * planes : 0;
    for (int i = blockIdx.x; i < n; i += gridDim.x) { // uniform per block: barriers are safe
        if (threadIdx.x == 0) best = INT_MAX;
        __syncthreads();
        const long long pageOff = pages[i] * pageStride;
        for (long long k = threadIdx.x; k < items; k += blockDim.x) {
            const int t = fromToken + static_cast<int>(k / planes);
            if (t >= *static_cast<volatile int*>(&best)) break; // k only grows: nothing smaller is left
            const int q = static_cast<int>(k % planes);
            const long long off = static_cast<long long>(t) * tokenVectorBytes; // plane offset
            const unsigned char* p = arena + q * planeBytes + pageOff + off;
            bool match = true;
            if (vec16) {
                const uint4* v = reinterpret_cast<const uint4*>(p);
                for (long long u = 0, m = tokenVectorBytes / 16; u < m; u++) {
                    const uint4 x = v[u];
                    if (x.x != pv.x || x.y != pv.y || x.z != pv.z || x.w != pv.w) { match = false; break; }
                }
            } else {
                const long long h0 = q * pageStride + off; // host offset of the vector
                for (long long b = 0; b < tokenVectorBytes; b++) {
                    if (p[b] != patternByte(pattern, h0 + b)) { match = false; break; }
                }
            }
            if (match) atomicMin(&best, t);
        }
        __syncthreads();
        if (threadIdx.x == 0) out[i] = best == INT_MAX ? -1 : best;
        __syncthreads();
    }
}
