/*
 * What MemcpyBatch (Panama downcall of cuMemcpyBatchAsync) must agree with, read from the installed cuda.h
 * by MemcpyBatchAbiTest:
 *   - the signatures: _Static_asserts, so a mismatch does not compile. The CUDA 13 one always; the CUDA
 *     12.8/12.9 one (with failIdx) only when compiled with -D__CUDA_API_VERSION_INTERNAL, under which
 *     cuda.h declares the older exported symbols by their plain names;
 *   - the symbol cuda.h maps cuMemcpyBatchAsync to, CUmemcpyAttributes' size and field offsets, the enum
 *     values used, printed as "key value" lines.
 *
 * With -DKVPOOL_ABI_CONTROL it must NOT compile (the test's proof that the asserts can fail).
 *
 *   gcc -Wall -Werror -I/usr/local/cuda/include -o abi memcpy_batch_abi.c && ./abi
 */
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>

#define STR(x) #x
#define XSTR(x) STR(x)

#ifdef __CUDA_API_VERSION_INTERNAL
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuMemcpyBatchAsync),
    CUresult (*)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, size_t *, CUstream)),
    "cuMemcpyBatchAsync (CUDA 12.8) is not (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, stream)");
#else
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuMemcpyBatchAsync_v2),
    CUresult (*)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, CUstream)),
    "cuMemcpyBatchAsync_v2 is not (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream)");
#endif

#ifdef KVPOOL_ABI_CONTROL
/* the control: the CUDA 12.8 shape must NOT match _v2, or the asserts above could not tell them apart */
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuMemcpyBatchAsync_v2),
    CUresult (*)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, size_t *, CUstream)),
    "control: the failIdx shape is not cuMemcpyBatchAsync_v2's");
#endif

int main(void) {
    printf("symbol %s\n", XSTR(cuMemcpyBatchAsync));
    printf("CUresult.size %zu\n", sizeof(CUresult));
    printf("CUdeviceptr.size %zu\n", sizeof(CUdeviceptr));
    printf("size_t.size %zu\n", sizeof(size_t));
    printf("CUstream.size %zu\n", sizeof(CUstream));
    printf("CUmemLocation.size %zu\n", sizeof(CUmemLocation));
    printf("CUmemLocation.type %zu\n", offsetof(CUmemLocation, type));
    printf("CUmemLocation.id %zu\n", offsetof(CUmemLocation, id));
    printf("CUmemcpyAttributes.size %zu\n", sizeof(CUmemcpyAttributes));
    printf("CUmemcpyAttributes.align %zu\n", _Alignof(CUmemcpyAttributes));
    printf("CUmemcpyAttributes.srcAccessOrder %zu\n", offsetof(CUmemcpyAttributes, srcAccessOrder));
    printf("CUmemcpyAttributes.srcLocHint %zu\n", offsetof(CUmemcpyAttributes, srcLocHint));
    printf("CUmemcpyAttributes.dstLocHint %zu\n", offsetof(CUmemcpyAttributes, dstLocHint));
    printf("CUmemcpyAttributes.flags %zu\n", offsetof(CUmemcpyAttributes, flags));
    printf("CU_MEMCPY_SRC_ACCESS_ORDER_STREAM %d\n", (int) CU_MEMCPY_SRC_ACCESS_ORDER_STREAM);
    printf("CU_MEMCPY_FLAG_DEFAULT %d\n", (int) CU_MEMCPY_FLAG_DEFAULT);
    printf("CU_MEM_LOCATION_TYPE_INVALID %d\n", (int) CU_MEM_LOCATION_TYPE_INVALID);
    return 0;
}
