/* tests/cuda/cuda_emu.h — run the CUDA kernels on the CPU, for tests without a GPU.
 *
 * cuda_emu.cpp compiles kernels/cuda_kernels.cuh as host C++ (PKC_EMULATE) and
 * runs a launch block after block; inside a block, each CUDA thread is a fibre
 * (tests/cuda/emu_fiber.h) on one OS thread, and __syncthreads() switches to the next fibre, so a
 * block's threads meet at every barrier exactly as on a GPU (threads that returned
 * count as arrived). Warp collectives (__shfl_xor_sync, __shfl_sync, __syncwarp and
 * the tensor-core helpers of kernels/cuda_mma.cuh) are a rendezvous of the warp's
 * 32 lanes (threads 32w..32w+31): each lane waits until all its warp's lanes arrive,
 * so data moves between lanes as on a GPU; a collective that some lane of the warp
 * never reaches (it returned, or waits at __syncthreads) fails the launch instead of
 * hanging. __shared__ arrays become function statics: shared by the
 * block's fibres, and blocks never overlap (they run first-to-last, or last-to-first
 * to expose blocks that depend on each other). atomicAdd is a plain add (one OS
 * thread). What it cannot show: races between blocks, or between a warp's lanes
 * between two collectives (lanes run one after another), that a GPU would expose, and
 * the GPU's floating-point library (and mma's accumulation order); gpu_op_check covers
 * those.
 */
#ifndef PD2BW_TESTS_CUDA_EMU_H
#define PD2BW_TESTS_CUDA_EMU_H

#ifdef __cplusplus
extern "C" {
#endif

/* Runs kernel `name` with a 1-D grid; args as for cuLaunchKernel. Returns 0, -1
 * when there is no such kernel, or -2 when a warp collective diverged (the block is
 * abandoned; emu_last_error() says why, and it is printed to stderr). */
int emu_launch(const char *name, unsigned grid, unsigned block, void **args);

/* Why the last emu_launch returned -2 (NULL after a launch that succeeded). */
const char *emu_last_error(void);

/* Runs the blocks of later launches last-to-first when reverse != 0. A kernel whose
 * blocks race (write what another block reads or writes) gives different results in
 * the two orders, which the checks then catch. */
void emu_set_reverse_blocks(int reverse);

/* cuBLAS's mixed-precision GEMM as pd2bw calls it (cuda_gemm GEMM_BF16: A and B
 * CUDA_R_16BF, C CUDA_R_32F, CUBLAS_COMPUTE_32F), row-major with cuda_gemm's
 * semantics: C[M,N] = alpha·op(A)·op(B) + beta·C where A and B hold bfloat16 bits
 * (leading dimensions in elements). Each bf16 value widens exactly to float, the
 * products are accumulated in float in k order; beta == 0 ignores C's old value. */
void emu_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B, int ldb,
                   float beta, float *C, int ldc);

#ifdef __cplusplus
}
#endif

#endif /* PD2BW_TESTS_CUDA_EMU_H */
