// kvpool batched page kernels: one launch per batch of pages, never one per page. The pool's kernels
// (io.kvpool.cuda.DevicePageStorage) and the CUDA IPC transport's put (io.kvpool.cuda.ipc.JCudaIpcEngine)
// are all here, in ONE fatbin (kvpool-cuda/build-kernels.sh).
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

// For i < n, in every plane q: page dst[i] of dstArena <- page src[i] of srcArena. Both arenas are laid
// out as drawn above, with the same pageStride and planes and each its own planeBytes (its own page
// count). The body of kvpool_copy_pages (one arena: the same pointer and planeBytes twice) and of
// kvpool_ipc_put_pages (two arenas).
__device__ __forceinline__ void copyPagesBetween(const int* src, const int* dst, int n,
                                                 const unsigned char* srcArena, long long srcPlaneBytes,
                                                 unsigned char* dstArena, long long dstPlaneBytes,
                                                 int planes, long long pageStride) {
    if (n <= 0 || planes <= 0 || pageStride <= 0) return;
    if (aligned16(srcArena, srcPlaneBytes, pageStride) && aligned16(dstArena, dstPlaneBytes, 0)) {
        const unsigned long long units = static_cast<unsigned long long>(pageStride) / 16;
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            const uint4* s = reinterpret_cast<const uint4*>(srcArena + it.q * srcPlaneBytes + src[it.i] * pageStride) + it.w;
            uint4* d = reinterpret_cast<uint4*>(dstArena + it.q * dstPlaneBytes + dst[it.i] * pageStride) + it.w;
            *d = *s;
        }
    } else {
        const unsigned long long units = static_cast<unsigned long long>(pageStride);
        const unsigned long long total = static_cast<unsigned long long>(n) * planes * units;
        for (unsigned long long idx = globalThread(); idx < total; idx += gridThreads()) {
            const Item it = split(idx, planes, units);
            dstArena[it.q * dstPlaneBytes + dst[it.i] * pageStride + it.w] = srcArena[it.q * srcPlaneBytes + src[it.i] * pageStride + it.w];
        }
    }
}

} // namespace

// For i < n, in every plane: page dst[i] <- page src[i]. Pairs never overlap (a pair with
// src[i] == dst[i] copies a page onto itself, which is harmless).
extern "C" __global__ void kvpool_copy_pages(const int* src, const int* dst, int n, unsigned char* arena,
                                             long long planeBytes, int planes, long long pageStride) {
    copyPagesBetween(src, dst, n, arena, planeBytes, arena, planeBytes, planes, pageStride);
}

// The CUDA IPC transport's put (io.kvpool.cuda.ipc): copies whole pages from this process's arena into
// ANOTHER arena (a peer process's, opened with cuIpcOpenMemHandle) of the same page layout; only the two
// arenas' page counts (so their planeBytes) differ. For i < n, in every plane q:
//   the pageStride bytes at dstArena + q * dstPlaneBytes + dst[i] * pageStride
//     <- those at         srcArena + q * srcPlaneBytes + src[i] * pageStride
// The Java side checks every index against both arenas' page counts before the launch.
extern "C" __global__ void kvpool_ipc_put_pages(const int* src, const int* dst, int n,
                                                const unsigned char* srcArena, long long srcPlaneBytes,
                                                unsigned char* dstArena, long long dstPlaneBytes,
                                                int planes, long long pageStride) {
    copyPagesBetween(src, dst, n, srcArena, srcPlaneBytes, dstArena, dstPlaneBytes, planes, pageStride);
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

// ---------------------------------------------------------------------------------------------
// Position-keyed page checksums: exactly io.kvpool.transfer.KvChecksum, for a batch of pages.
//
// KvChecksum of logical page p of request r holding tokens [t0, t0 + v), v = min(tpp, tokenCount - t0):
//   CRC32C( key ‖ body ),  key  = r i64 LE ‖ t0 i32 LE ‖ v i32 LE           (16 bytes, given per page)
//                          body = for plane q = 0 .. planes-1 (layer-major, K then V: the host order):
//                                   the S = v · tokenVectorBytes bytes at plane offset 0 of the page
// i.e. the host page's planes in order, each cut to its first v tokens. B = planes · S body bytes.
//
// CRC32C is the JDK's java.util.zip.CRC32C: reflected Castagnoli polynomial 0x82F63B78, register
// initialised to 0xFFFFFFFF, result xor 0xFFFFFFFF. Write f(c, M) for the register after feeding the
// bytes M to a register holding c (table-driven, no final xor). Over GF(2), modulo P, with polynomials
// in the reflected representation (bit 31 = x^0 ... bit 0 = x^31):
//   f(c, M)      = c · x^(8|M|) ⊕ f(0, M)              (affine in c)
//   f(0, A ‖ B)  = f(0, A) · x^(8|B|) ⊕ f(0, B)         (linear in the message)
//   CRC32C(M)    = f(0xFFFFFFFF, M) ⊕ 0xFFFFFFFF
// So the body can be cut into ranges hashed independently and combined by multiplying each partial
// by x^(8 · bytes after it) ("CRC shift", crc32cMulMod) and xoring.
//
// One block per page (grid-stride over pages by blockIdx.x; any grid and block size is correct).
// With T = blockDim.x threads, a chunk of C = 2^c bytes, C the smallest power of two >= max(512, B / T),
// thread j hashes the body range that ENDS (T-1-j)·C bytes before the body's end:
//
//   body  |<------------------------------- B bytes -------------------------------->|
//         |  j = T-3: ≤ C  |   j = T-2: C bytes   |   j = T-1: C bytes   |
//                          lo                    hi = B - 1·C           B   (threads j with hi ≤ 0 idle)
//
// so every partial is shifted by a whole number m = T-1-j of chunks: x^(8·m·C) = the product of
// x^(2^(3+c+k)) over the set bits k of m, read from a compile-time table (≤ log2(T) multiplications
// per thread, no per-page setup). The thread whose range starts at body offset 0 starts its register
// at f(0xFFFFFFFF, key) instead of 0, which puts the key (and the initial register) in front of the
// body. The partials are xored through shared memory; thread 0 writes the result ⊕ 0xFFFFFFFF.
// Ranges are split where they cross planes; inside a plane 16-byte-aligned stretches are read as
// uint4 and hashed by slicing-by-8 (tables in shared memory, built per block), the rest byte by byte.

#define KVPOOL_CRC32C_POLY 0x82F63B78u

namespace {

// a · b mod P, reflected representation (zlib's multmodp, over all 32 bits of a).
__host__ __device__ constexpr unsigned crc32cMulMod(unsigned a, unsigned b) {
    unsigned p = 0;
    for (int i = 0; i < 32; i++) {
        p ^= b & (0u - ((a >> (31 - i)) & 1u));               // a's coefficient of x^i
        b = (b >> 1) ^ (KVPOOL_CRC32C_POLY & (0u - (b & 1u))); // b ·= x
    }
    return p;
}

struct Crc32cPowers { unsigned x2k[64]; }; // x2k[k] = x^(2^k) mod P

constexpr Crc32cPowers crc32cPowers() {
    Crc32cPowers t{};
    unsigned p = 0x40000000u; // x^1
    for (int k = 0; k < 64; k++) {
        t.x2k[k] = p;
        p = crc32cMulMod(p, p);
    }
    return t;
}

__constant__ Crc32cPowers kCrc32cPowers = crc32cPowers();

// The smallest chunk a thread hashes: below it the ≤ log2(T) shift multiplications would cost more
// than the bytes (a small page then keeps only some threads busy; other blocks fill the SM).
#ifndef KVPOOL_CHECKSUM_MIN_CHUNK_LOG2
#define KVPOOL_CHECKSUM_MIN_CHUNK_LOG2 9 // 512 bytes (the CPU emulation test also builds it with 16)
#endif
constexpr int kChecksumMinChunkLog2 = KVPOOL_CHECKSUM_MIN_CHUNK_LOG2;

__device__ __forceinline__ unsigned crc32cByte(const unsigned (*t)[256], unsigned z, unsigned char b) {
    return t[0][(z ^ b) & 0xFFu] ^ (z >> 8);
}

// Eight bytes, a = the register ⊕ bytes 0..3 (little-endian), b = bytes 4..7 (slicing-by-8).
__device__ __forceinline__ unsigned crc32cSlice8(const unsigned (*t)[256], unsigned a, unsigned b) {
    return t[7][a & 0xFFu] ^ t[6][(a >> 8) & 0xFFu] ^ t[5][(a >> 16) & 0xFFu] ^ t[4][a >> 24]
         ^ t[3][b & 0xFFu] ^ t[2][(b >> 8) & 0xFFu] ^ t[1][(b >> 16) & 0xFFu] ^ t[0][b >> 24];
}

__device__ __forceinline__ unsigned crc32cVector(const unsigned (*t)[256], unsigned z, uint4 v) {
    z = crc32cSlice8(t, z ^ v.x, v.y);
    return crc32cSlice8(t, z ^ v.z, v.w);
}

// f(z, the len bytes at p): bytes up to a 16-byte boundary, then 64-byte steps (four independent
// loads in flight), 16-byte steps, and the tail byte by byte.
__device__ unsigned crc32cUpdate(const unsigned (*t)[256], unsigned z, const unsigned char* p, long long len) {
    while (len > 0 && (reinterpret_cast<unsigned long long>(p) & 15ULL) != 0) {
        z = crc32cByte(t, z, *p++);
        len--;
    }
    for (; len >= 64; len -= 64, p += 64) {
        const uint4* v = reinterpret_cast<const uint4*>(p);
        const uint4 a = v[0], b = v[1], c = v[2], d = v[3];
        z = crc32cVector(t, z, a);
        z = crc32cVector(t, z, b);
        z = crc32cVector(t, z, c);
        z = crc32cVector(t, z, d);
    }
    for (; len >= 16; len -= 16, p += 16) {
        z = crc32cVector(t, z, *reinterpret_cast<const uint4*>(p));
    }
    for (; len > 0; len--) {
        z = crc32cByte(t, z, *p++);
    }
    return z;
}

} // namespace

// out[i] = KvChecksum of page pages[i] under the 16-byte key at keys + 16·i (requestId i64 LE,
// firstToken i32 LE, validTokens i32 LE: exactly the checksum's first 16 input bytes). validTokens
// outside [1, tokensPerPage] (which the Java side refuses) gives out[i] = 0 without reading the page.
extern "C" __global__ void kvpool_page_checksums(const int* pages, const unsigned char* keys, int n,
                                                 const unsigned char* arena, long long planeBytes, int planes,
                                                 long long pageStride, long long tokenVectorBytes, int tokensPerPage,
                                                 unsigned int* out) {
    __shared__ unsigned table[8][256]; // slicing-by-8: table[0] the byte table, table[k][e] = e shifted by k more bytes
    __shared__ unsigned partial[1024]; // one per thread (blockDim.x <= 1024)
    for (int e = threadIdx.x; e < 256; e += blockDim.x) {
        unsigned c = static_cast<unsigned>(e);
        for (int b = 0; b < 8; b++) c = (c >> 1) ^ (KVPOOL_CRC32C_POLY & (0u - (c & 1u)));
        table[0][e] = c;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 256; e += blockDim.x) {
        unsigned c = table[0][e];
        for (int k = 1; k < 8; k++) {
            c = (c >> 8) ^ table[0][c & 0xFFu];
            table[k][e] = c;
        }
    }
    __syncthreads();
    const unsigned (*t)[256] = table;
    const long long T = blockDim.x;
    const long long j = threadIdx.x;
    for (int i = blockIdx.x; i < n; i += gridDim.x) { // uniform per block: the barriers below are safe
        const unsigned char* key = keys + 16LL * i;
        const int valid = static_cast<int>(static_cast<unsigned>(key[12]) | static_cast<unsigned>(key[13]) << 8
                                           | static_cast<unsigned>(key[14]) << 16 | static_cast<unsigned>(key[15]) << 24);
        if (valid < 1 || valid > tokensPerPage || planes <= 0 || tokenVectorBytes <= 0) { // uniform too
            if (j == 0) out[i] = 0;
            continue;
        }
        const long long S = valid * tokenVectorBytes; // body bytes per plane
        const long long B = S * planes;               // body bytes
        int c = kChecksumMinChunkLog2;
        while ((T << c) < B) c++;
        const long long C = 1LL << c;
        const long long hi = B - (T - 1 - j) * C;
        unsigned z = 0;
        if (hi > 0) {
            const long long lo = hi > C ? hi - C : 0;
            if (lo == 0) { // the key and the initial register go in front of the body
                z = 0xFFFFFFFFu;
                for (int b = 0; b < 16; b++) z = crc32cByte(t, z, key[b]);
            }
            const unsigned char* page = arena + pages[i] * pageStride;
            for (long long at = lo; at < hi;) {
                const long long q = at / S;
                const long long o = at - q * S;
                const long long len = hi - at < S - o ? hi - at : S - o;
                z = crc32cUpdate(t, z, page + q * planeBytes + o, len);
                at += len;
            }
            int k = 3 + c; // x^(2^(3+c)) = x^(8·C): one chunk
            for (long long m = T - 1 - j; m != 0; m >>= 1, k++) {
                if (m & 1) z = crc32cMulMod(kCrc32cPowers.x2k[k], z);
            }
        }
        partial[j] = z;
        __syncthreads();
        if (j < 32) { // thread j folds partials j, j+32, ...: it alone reads and writes those slots
            unsigned x = 0;
            for (long long k = j; k < T; k += 32) x ^= partial[k];
            partial[j] = x;
        }
        __syncthreads();
        if (j == 0) {
            unsigned x = 0;
            for (long long k = 0; k < 32 && k < T; k++) x ^= partial[k];
            out[i] = x ^ 0xFFFFFFFFu;
        }
        __syncthreads(); // partial[] is reused by the next page
    }
}
