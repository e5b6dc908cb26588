/* kernels/cuda_helpers.cuh — the device helpers every pd2bw CUDA module shares.
 *
 * What both kinds of generated module need, and nothing with a __global__: the
 * integer types, block sizes, grid-stride ids, block reductions, dropout's keep
 * decision and scale, the bad-id counter, bfloat16 bits and the GELU constants.
 * A plan's GPU program is two modules (codegen/cgen_cuda.c): the kernel library,
 * kernels.cu = philox.h + this file + cuda_mma.cuh + cuda_flash_*.cuh + cuda_kernels.cuh,
 * the same text for every plan with the same attention head size (so NVRTC's disk cache
 * shares it), and each stageN.cu = philox.h + this file + the stage's own fused kernels.
 * Keeping the helpers apart is what lets a stage skip the library's ~40 kernels, which
 * are most of NVRTC's time. Static device functions only: each module gets its own copy.
 * cuda_kernels.cuh includes this file, so the host emulator (tests/cuda/cuda_emu.cpp)
 * and the op checks still see one header; the rules of cuda_kernels.cuh hold here (no
 * system header, PKC_EMULATE on the host). */
#ifndef PD2BW_CUDA_HELPERS_CUH
#define PD2BW_CUDA_HELPERS_CUH

#ifndef PD2BW_PHILOX_H
#include "philox.h"
#endif

/* Recommended block size, and the largest a row/column kernel accepts (its static
 * shared scratch is sized by it). */
#define PKC_BLOCK 256
#define PKC_MAX_BLOCK 1024

typedef long long pkc_i64;
typedef unsigned long long pkc_u64;
typedef unsigned int pkc_u32;

#if defined(PKC_EMULATE)
#define PKC_NAN (__builtin_nanf(""))
#else
#define PKC_NAN (__int_as_float(0x7fffffff))
#endif

/* 128-bit accesses, the elementwise kernels' fast path: pkc_f4 is CUDA's float4 and
 * pkc_u4 its uint4 (one LDG.E.128 / STG.E.128 each at a 16-byte-aligned address);
 * the emulator has no vector types and gets the same layout. */
#if defined(PKC_EMULATE)
struct __align__(16) pkc_f4 {
  float x, y, z, w;
};
struct __align__(16) pkc_u4 {
  unsigned x, y, z, w;
};
#else
typedef float4 pkc_f4;
typedef uint4 pkc_u4;
#endif

/* ---- device helpers ---------------------------------------------------------- */

/* The flat id of this thread and the grid's total thread count (grid-stride loops). */
static __device__ __forceinline__ pkc_i64 pkc_tid(void) {
  return (pkc_i64)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ pkc_i64 pkc_nthreads(void) {
  return (pkc_i64)gridDim.x * blockDim.x;
}

/* Whether p is 16-byte aligned (a pkc_f4 / pkc_u4 may be read or written there). */
static __device__ __forceinline__ bool pkc_aligned16(const void *p) {
  return ((pkc_u64)p & 15u) == 0;
}

/* Sum of v over the block, the same in every thread; sh holds blockDim.x floats.
 * A fixed tree (blockDim.x a power of two), so the order never varies. */
static __device__ float pkc_block_sum(float v, float *sh) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

static __device__ double pkc_block_sum_d(double v, double *sh) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

static __device__ float pkc_block_max(float v, float *sh) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = sh[t + s] > sh[t] ? sh[t + s] : sh[t];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

/* Dropout's scale for kept elements, as the CPU computes it (in double, then
 * rounded): 1/(1-p) for 0 < p < 1, 0 for p >= 1, 1 for p <= 0. */
static __device__ __forceinline__ float pkc_keep_scale(double p) {
  return p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : (p > 0 ? 0.0f : 1.0f);
}

/* Element e's keep decision, caching the current Philox block of four (the CPU's
 * pk_keep_). *blk_id starts at ~0ull. */
static __device__ __forceinline__ int pkc_keep(pkc_u64 seed, pkc_u32 op, pkc_u32 mb, pkc_u64 thr,
                                               pkc_u64 e, PhiloxCtr *blk, pkc_u64 *blk_id) {
  if ((e >> 2) != *blk_id) {
    *blk_id = e >> 2;
    *blk = pk_rng_block(seed, op, mb, e >> 2);
  }
  return (pkc_u64)blk->v[e & 3] >= thr;
}

static __device__ __forceinline__ void pkc_count_bad(unsigned long long *bad) {
  if (bad) atomicAdd(bad, 1ull);
}

/* float -> bfloat16 bits, round to nearest even (as __float2bfloat16_rn); NaN stays
 * a quiet NaN. */
static __device__ __forceinline__ unsigned short pkc_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

static __device__ __forceinline__ float pkc_bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}

/* GELU (tanh form), as cpu_kernels.h: 0.5·x·(1 + tanh(K·(x + A·x³))). */
/* SiLU of one element: what pkc_silu_fwd_f32 and a stage's fused chains compute. */
static __device__ __forceinline__ float pkc_silu_(float v) { return v / (1.0f + expf(-v)); }
#define PKC_GELU_K 0.7978845608028654f
#define PKC_GELU_A 0.044715f

#endif /* PD2BW_CUDA_HELPERS_CUH */
