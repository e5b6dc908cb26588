/* tests/cuda/op_check.h — every CUDA kernel against its CPU kernel, on any "device".
 *
 * The checks (op_check.c) run each op of kernels/cuda_kernels.cuh (plus the
 * GEMMs that linear/matmul become) on random inputs through an OpDev, run the same
 * op with kernels/cpu_kernels.h, and compare with a bound per op and dtype.
 * Two OpDevs exist:
 *   - the real GPU (gpu_op_check.c: NVRTC + the driver API + cuBLAS), run by
 *     scripts/gpu-check.sh on a machine with a GPU;
 *   - the emulator (cuda_emu.cpp: the same kernel text compiled as host C++, a
 *     block's threads as fibres), run by CTest everywhere.
 * So the checks themselves, and every kernel's logic, are exercised in CI; only the
 * GPU's arithmetic and cuBLAS need the GPU.
 *
 * Error measure: err = max_i |gpu_i - cpu_i| / max(max_i |cpu_i|, tiny), i.e. relative
 * to the tensor's scale; an op passes when err <= its bound. Masks and integer-like
 * results (dropout decisions, bad-index counts, bf16 bits) must match exactly.
 */
#ifndef PD2BW_TESTS_OP_CHECK_H
#define PD2BW_TESTS_OP_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "contract/contract.h" /* GemmType */

/* A device address as the kernels see it (CUdeviceptr, or a host pointer in the
 * emulator). */
typedef uint64_t DevPtr;


typedef struct OpDev {
  void *ctx;
  const char *name; /* "emulator", "NVIDIA H200 (sm_90)" */
  /* Bump allocation from one arena (256-byte aligned); reset frees everything. */
  DevPtr (*alloc)(void *ctx, size_t bytes);
  void (*reset)(void *ctx);
  void (*upload)(void *ctx, DevPtr dst, const void *src, size_t bytes);
  void (*download)(void *ctx, void *dst, DevPtr src, size_t bytes);
  /* 1-D launch of a kernel by name; args as for cuLaunchKernel. Synchronous enough
   * that a following download sees the result. */
  void (*launch)(void *ctx, const char *kernel, unsigned grid, unsigned block, void **args);
  void (*gemm)(void *ctx, GemmType type, int ta, int tb, int M, int N, int K, float alpha,
               DevPtr A, int lda, DevPtr B, int ldb, float beta, DevPtr C, int ldc);
  unsigned block;    /* threads per block for every launch (a power of two >= 32) */
  unsigned max_grid; /* cap on blocks per launch (small in the emulator, to exercise
                        the grid-stride loops) */
} OpDev;

/* Runs every check whose name contains `only` (NULL: all). Prints one line per check
 * ("ok   gelu_fwd   err 1.2e-07 <= 1e-05") when verbose, and every failure always.
 * Returns the number of failed checks; *nchecked gets how many ran. */
int op_check_all(const OpDev *d, const char *only, int verbose, int *nchecked);

#endif /* PD2BW_TESTS_OP_CHECK_H */
