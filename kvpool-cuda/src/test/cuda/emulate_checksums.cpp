// CPU emulation of kvpool_page_checksums (src/main/cuda/kvpool_kernels.cu), compiled from the REAL
// kernel source with g++ and run by KernelEmulationTest, which compares every result with
// io.kvpool.transfer.KvChecksum computed in Java on the same bytes.
//
// Unlike emulate_kernels.cpp (threads run one after another, barriers are no-ops), a block here runs
// as blockDim.x real std::threads: threadIdx/blockIdx are thread_local, __shared__ variables are
// function-static (shared by the block's threads; blocks run one after another), and __syncthreads
// is a std::barrier over the block's threads. So the kernel's barriers and shared-memory reduction are
// exercised as written; what is not emulated is the GPU's memory model (a missing barrier may still
// pass here by luck of scheduling) and warp-level behaviour (the kernel uses none).
//
//   g++ -O2 -std=c++20 -pthread -fno-strict-aliasing [-DKVPOOL_CHECKSUM_MIN_CHUNK_LOG2=4]
//       -o emulate_checksums src/test/cuda/emulate_checksums.cpp
//   emulate_checksums input.bin   → one line per launch: "<grid> <block> <arenaShift>: <hex> <hex> ..."
//
// input.bin, little-endian:
//   i32 planes · i64 pageStride · i64 planeBytes · i64 tokenVectorBytes · i32 tokensPerPage
//   i32 n (pages in the batch) · i32 launches
//   launches × (i32 grid · i32 block · i32 arenaShift)      arenaShift: arena placed that many bytes
//                                                            past a 16-byte boundary (byte-path check)
//   i64 arenaBytes · arena bytes (planes · planeBytes)
//   n × i32 page (slot) · n × 16 bytes key
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_host_shims.h"
static thread_local D3 threadIdx, blockIdx;
static D3 blockDim, gridDim;
static std::barrier<>* blockBarrier;
static inline void __syncthreads() { blockBarrier->arrive_and_wait(); }
static inline int atomicMin(int* a, int v) { // (the canary kernel's; not launched here)
  int o = __atomic_load_n(a, __ATOMIC_SEQ_CST);
  while (v < o && !__atomic_compare_exchange_n(a, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return o;
}
#include "../../main/cuda/kvpool_kernels.cu"

template <class F> static void launch(unsigned grid, unsigned block, F kernel) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; b++) {
    std::barrier<> bar(block);
    blockBarrier = &bar;
    std::vector<std::thread> threads;
    threads.reserve(block);
    for (unsigned t = 0; t < block; t++) {
      threads.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; kernel(); });
    }
    for (auto& th : threads) th.join();
  }
}

static FILE* in;
static void readAll(void* p, size_t n) {
  if (fread(p, 1, n, in) != n) { fprintf(stderr, "emulate_checksums: short input\n"); exit(2); }
}
template <class T> static T get() { T v; readAll(&v, sizeof v); return v; }

int main(int argc, char** argv) {
  if (argc != 2 || !(in = fopen(argv[1], "rb"))) { fprintf(stderr, "usage: emulate_checksums input.bin\n"); return 2; }
  const int planes = get<int32_t>();
  const long long pageStride = get<int64_t>(), planeBytes = get<int64_t>(), tokenVectorBytes = get<int64_t>();
  const int tokensPerPage = get<int32_t>(), n = get<int32_t>(), launches = get<int32_t>();
  std::vector<int> cfg(3 * launches);
  readAll(cfg.data(), cfg.size() * 4);
  const long long arenaBytes = get<int64_t>();
  std::vector<unsigned char> raw(arenaBytes + 64);
  unsigned char* aligned = raw.data() + (16 - (reinterpret_cast<uintptr_t>(raw.data()) & 15)) % 16;
  readAll(aligned, arenaBytes);
  std::vector<int> pages(n);
  readAll(pages.data(), 4 * n);
  std::vector<unsigned char> keyRaw(16 * n + 16);
  unsigned char* keys = keyRaw.data() + (16 - (reinterpret_cast<uintptr_t>(keyRaw.data()) & 15)) % 16;
  readAll(keys, 16 * n);
  std::vector<unsigned char> shifted(arenaBytes + 64);
  for (int l = 0; l < launches; l++) {
    const unsigned grid = cfg[3 * l], block = cfg[3 * l + 1];
    const int shift = cfg[3 * l + 2];
    unsigned char* arena = aligned;
    if (shift != 0) {
      arena = shifted.data() + (16 - (reinterpret_cast<uintptr_t>(shifted.data()) & 15)) % 16 + shift;
      memcpy(arena, aligned, arenaBytes);
    }
    std::vector<unsigned> out(n, 0xA5A5A5A5u);
    launch(grid, block, [&] {
      kvpool_page_checksums(pages.data(), keys, n, arena, planeBytes, planes, pageStride, tokenVectorBytes,
                            tokensPerPage, out.data());
    });
    printf("%u %u %d:", grid, block, shift);
    for (int i = 0; i < n; i++) printf(" %08x", out[i]);
    printf("\n");
  }
  return 0;
}
