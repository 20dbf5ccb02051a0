// Host emulation of src/main/cuda/kvpool_kernels.cu, for machines without a GPU: the CUDA builtins
// are stubbed and every thread of a launch runs serially, so this checks the kernels' indexing,
// uint4 and byte fallback paths, fill phase and first-canary answers, and the CUDA IPC put between
// two arenas of different page counts, against a byte-by-byte reference over several layouts, grid
// and block sizes. It does NOT check concurrency (barriers,
// the shared atomicMin with blockDim > 1): first_canary_token is emulated with one thread per block.
// (kvpool_page_checksums, which needs real barriers, has its own emulator: emulate_checksums.cpp.)
// Run by KernelEmulationTest#theOtherKernelsMatchTheirByteReference.
//
//   g++ -O2 -std=c++17 -o /tmp/emulate_kernels kvpool-cuda/src/test/cuda/emulate_kernels.cpp && /tmp/emulate_kernels

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <random>
#include <algorithm>
#include "cuda_host_shims.h"
static D3 blockIdx, threadIdx, blockDim, gridDim;
static inline void __syncthreads() {}
static inline int atomicMin(int* a, int v) { int o = *a; if (v < o) *a = v; return o; }
#include "../../main/cuda/kvpool_kernels.cu"

template <class F> void launch(unsigned grid, unsigned block, F f) {
  gridDim.x = grid; blockDim.x = block;
  for (unsigned b = 0; b < grid; b++) for (unsigned t = 0; t < block; t++) { blockIdx.x = b; threadIdx.x = t; f(); }
}
static unsigned char pb(unsigned long long pat, long long h) { return (unsigned char)(pat >> (8 * (h & 7))); }
int fails = 0;
#define CHECK(c) do { if (!(c)) { fails++; if (fails < 10) printf("FAIL %s line %d\n", #c, __LINE__); } } while (0)

void run(int layers, int tpp, int tvb, int pages, int extraPlanePad, unsigned grid, unsigned block, unsigned seed, int misalign) {
  std::mt19937_64 rng(seed);
  const int planes = layers * 2;
  const long long pageStride = (long long)tpp * tvb;
  const long long planeBytes = pageStride * pages + extraPlanePad;
  std::vector<unsigned char> store(planeBytes * planes + 64);
  unsigned char* arena = store.data() + (misalign ? 1 : 0) + (16 - ((uintptr_t)store.data() & 15)) % 16;
  for (long long i = 0; i < planeBytes * planes; i++) arena[i] = (unsigned char)rng();
  std::vector<unsigned char> ref(arena, arena + planeBytes * planes);
  auto at = [&](std::vector<unsigned char>& a, int q, int p, long long o) -> unsigned char& { return a[q * planeBytes + p * pageStride + o]; };
  // copy: disjoint pairs
  std::vector<int> perm(pages); for (int i = 0; i < pages; i++) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  int n = pages / 2; std::vector<int> src(perm.begin(), perm.begin() + n), dst(perm.begin() + n, perm.begin() + 2 * n);
  for (int i = 0; i < n; i++) for (int q = 0; q < planes; q++) for (long long o = 0; o < pageStride; o++) at(ref, q, dst[i], o) = at(ref, q, src[i], o);
  launch(grid, block, [&] { kvpool_copy_pages(src.data(), dst.data(), n, arena, planeBytes, planes, pageStride); });
  CHECK(memcmp(arena, ref.data(), ref.size()) == 0);
  // IPC put: arena's pages src[i] into a peer arena of 3 more pages (its own planeBytes), at random distinct
  // pages; the peer aligned or not independently of the arena (each side's byte path)
  for (int peerMis = 0; peerMis < 2; peerMis++) {
    const int peerPages = pages + 3;
    const long long peerPlaneBytes = pageStride * peerPages + extraPlanePad;
    std::vector<unsigned char> peerStore(peerPlaneBytes * planes + 64);
    unsigned char* peer = peerStore.data() + peerMis + (16 - ((uintptr_t)peerStore.data() & 15)) % 16;
    for (long long i = 0; i < peerPlaneBytes * planes; i++) peer[i] = (unsigned char)rng();
    std::vector<unsigned char> peerRef(peer, peer + peerPlaneBytes * planes);
    std::vector<int> peerPerm(peerPages); for (int i = 0; i < peerPages; i++) peerPerm[i] = i;
    std::shuffle(peerPerm.begin(), peerPerm.end(), rng);
    std::vector<int> to(peerPerm.begin(), peerPerm.begin() + n);
    for (int i = 0; i < n; i++) for (int q = 0; q < planes; q++) for (long long o = 0; o < pageStride; o++)
      peerRef[q * peerPlaneBytes + to[i] * pageStride + o] = at(ref, q, src[i], o);
    launch(grid, block, [&] { kvpool_ipc_put_pages(src.data(), to.data(), n, arena, planeBytes, peer, peerPlaneBytes, planes, pageStride); });
    CHECK(memcmp(peer, peerRef.data(), peerRef.size()) == 0);
    CHECK(memcmp(arena, ref.data(), ref.size()) == 0); // the source is only read
  }
  // gather
  std::vector<int> sel; for (int i = 0; i < pages; i += 2) sel.push_back(perm[i]);
  int m = sel.size();
  std::vector<unsigned char> outs(m * planes * pageStride + 32);
  unsigned char* out = outs.data() + (16 - ((uintptr_t)outs.data() & 15)) % 16;
  launch(grid, block, [&] { kvpool_gather_pages(sel.data(), m, arena, planeBytes, planes, pageStride, out); });
  for (int i = 0; i < m; i++) for (int q = 0; q < planes; q++) for (long long o = 0; o < pageStride; o++)
    CHECK(out[(i * planes + q) * pageStride + o] == at(ref, q, sel[i], o));
  // scatter (into other pages, reversed)
  std::vector<int> sel2(sel.rbegin(), sel.rend());
  for (int i = 0; i < m; i++) for (int q = 0; q < planes; q++) for (long long o = 0; o < pageStride; o++)
    at(ref, q, sel2[i], o) = out[(i * planes + q) * pageStride + o];
  launch(grid, block, [&] { kvpool_scatter_pages(sel2.data(), m, arena, planeBytes, planes, pageStride, out); });
  CHECK(memcmp(arena, ref.data(), ref.size()) == 0);
  // fill
  const unsigned long long pat = 0xDEADBEEFCAFEF00DULL ^ rng();
  std::vector<int> fsel = {perm[0], perm[pages - 1]};
  for (int p : fsel) for (int q = 0; q < planes; q++) for (long long o = 0; o < pageStride; o++) at(ref, q, p, o) = pb(pat, q * pageStride + o);
  launch(grid, block, [&] { kvpool_fill_pages(fsel.data(), 2, arena, planeBytes, planes, pageStride, pat); });
  CHECK(memcmp(arena, ref.data(), ref.size()) == 0);
  // canary: fill some pages, then overwrite random bytes, plant canary vectors
  for (int p = 0; p < pages; p++) {
    int mode = rng() % 4; // 0 random data, 1 canary page, 2 random with a few planted vectors
    for (int q = 0; q < planes; q++) for (long long o = 0; o < pageStride; o++) at(ref, q, p, o) = mode == 1 ? pb(pat, q * pageStride + o) : (unsigned char)rng();
    if (mode == 1) for (int k = 0; k < 3; k++) at(ref, rng() % planes, p, rng() % pageStride) ^= 1 + rng() % 255;
    if (mode == 3) { for (int q = 0; q < planes; q++) for (int t = 0; t < tpp; t++) { for (long long b = 0; b < tvb; b++) at(ref, q, p, t * (long long)tvb + b) = pb(pat, q * pageStride + t * (long long)tvb + b); at(ref, q, p, t * (long long)tvb + rng() % tvb) ^= 1 + rng() % 255; } }
    if (mode == 3 && rng() % 2) { int q = rng() % planes, t = rng() % tpp; for (long long b = 0; b < tvb; b++) at(ref, q, p, t * (long long)tvb + b) = pb(pat, q * pageStride + t * (long long)tvb + b); }
    if (mode == 2) for (int k = 0; k < 2; k++) { int q = rng() % planes, t = rng() % tpp; for (long long b = 0; b < tvb; b++) at(ref, q, p, t * (long long)tvb + b) = pb(pat, q * pageStride + t * (long long)tvb + b); }
  }
  memcpy(arena, ref.data(), ref.size());
  std::vector<int> all(pages); for (int i = 0; i < pages; i++) all[i] = perm[i];
  for (int from = 0; from <= tpp; from += (tpp > 3 ? tpp / 3 : 1)) for (int to = from; to <= tpp; to += (tpp > 2 ? tpp / 2 : 1)) {
    std::vector<int> got(pages, 12345);
    launch(grid, 1, [&] { kvpool_first_canary_token(all.data(), pages, arena, planeBytes, planes, pageStride, tvb, from, to, pat, got.data()); });
    for (int i = 0; i < pages; i++) {
      int want = -1;
      for (int t = from; t < to && want < 0; t++) for (int q = 0; q < planes && want < 0; q++) {
        bool eq = true; for (long long b = 0; b < tvb; b++) if (at(ref, q, all[i], t * (long long)tvb + b) != pb(pat, q * pageStride + t * (long long)tvb + b)) { eq = false; break; }
        if (eq) want = t;
      }
      CHECK(got[i] == want);
    }
  }
}
int main() {
  unsigned seed = 1;
  for (int mis = 0; mis < 2; mis++)
  for (auto cfg : std::vector<std::vector<int>>{{1, 4, 16, 6, 0}, {2, 8, 64, 9, 32}, {3, 16, 256, 5, 16}, {2, 3, 48, 7, 0}, {1, 2, 24, 6, 8}})
    for (unsigned grid : {1u, 3u, 7u}) for (unsigned block : {1u, 5u, 64u})
      run(cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], grid, block, seed++, mis);
  printf("%s (%d failures)\n", fails ? "FAILED" : "OK", fails);
  return fails != 0;
}
