// What the CPU emulators (emulate_kernels.cpp, emulate_checksums.cpp) give src/main/cuda/kvpool_kernels.cu
// in place of CUDA: the vector type it uses, the builtins' type, and the qualifiers as plain C++ (a
// __shared__ variable becomes a function-static one: shared by whatever runs the kernel's body). Each
// emulator then declares threadIdx, blockIdx, blockDim and gridDim (D3), __syncthreads and atomicMin in
// its own way (threads one after another, or real threads with a barrier) before it includes the .cu.
#pragma once

struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct D3 { unsigned x = 0, y = 0, z = 0; };
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
