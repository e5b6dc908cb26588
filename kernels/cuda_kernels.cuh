/* kernels/cuda_kernels.cuh — every CUDA kernel of pd2bw, forward and backward.
 *
 * The GPU twin of kernels/cpu_kernels.h: same ops, same layouts, same semantics,
 * float32 storage with float32 arithmetic (double where the CPU sums in double). GEMMs
 * are not here: the runtime calls cuBLAS (cuda_backend.h: cuda_gemm). One header of
 * extern "C" kernels because the CUDA code generator pastes philox.h, cuda_helpers.cuh
 * and this text verbatim (with its parts, cuda_kernels_<family>.cuh, in place of their
 * #include: pkc_kernels_src.h) into a plan's kernel library, kernels.cu, which NVRTC
 * compiles at load time; unmangled names let launch lists name the kernels. The same
 * text compiles as host C++ under tests/cuda/cuda_emu.cpp (PKC_EMULATE), so every
 * kernel is checked against its CPU twin in CI without a GPU. Invariants (all of them,
 * and why: docs/kernels.md): no system header and no inline PTX outside cuda_mma.cuh;
 * 1-D grid-stride loops, so any grid is correct; row and column kernels need a block
 * of 2^k threads; deterministic reductions but embedding_bwd's; random kernels read the
 * microbatch index through mbkey, so a captured CUDA graph replays for every microbatch. */
#ifndef PD2BW_CUDA_KERNELS_CUH
#define PD2BW_CUDA_KERNELS_CUH

#ifndef PD2BW_CUDA_HELPERS_CUH
#include "cuda_helpers.cuh"
#endif
/* The tensor-core kernels, each its own file (the build embeds them before this one,
 * so in the library text these includes are already satisfied). */
#ifndef PD2BW_CUDA_FLASH_FWD_CUH
#include "cuda_flash_fwd.cuh"
#endif
#ifndef PD2BW_CUDA_FLASH_BWD_CUH
#include "cuda_flash_bwd.cuh"
#endif
/* AdamW's element step and the multi-tensor AdamW kernel (embedded before this file too). */
#ifndef PD2BW_CUDA_ADAMW_MULTI_CUH
#include "cuda_adamw_multi.cuh"
#endif

/* Head size of the attention kernels. Defining PKC_ATT_HS (the code generator knows
 * the model's head size) makes it a compile-time constant, so the per-thread q/o
 * arrays and their loops can live in registers; the kernels then refuse (NaN
 * outputs) any other C/NH. Without it, hs = C/NH at run time, up to PKC_ATT_HS_MAX
 * (the arrays' size, in local memory). */
#ifdef PKC_ATT_HS
#undef PKC_ATT_HS_MAX
#define PKC_ATT_HS_MAX PKC_ATT_HS
#define PKC_ATT_HS_OK(C, NH) ((C) / (NH) == PKC_ATT_HS && (C) % (NH) == 0)
#define PKC_ATT_HS_OF(C, NH) PKC_ATT_HS
#else
#ifndef PKC_ATT_HS_MAX
#define PKC_ATT_HS_MAX 128
#endif
#define PKC_ATT_HS_OK(C, NH) ((C) / (NH) <= PKC_ATT_HS_MAX)
#define PKC_ATT_HS_OF(C, NH) ((C) / (NH))
#endif

/* ===== 128-bit elementwise maps ================================================ */

/* The elementwise kernels' loop: y[i] = f(x[i]) (pkc_map1) or y[i] = f(a[i], b[i])
 * (pkc_map2) for i < n. The kernels are memory-bound, so when every pointer is 16-byte
 * aligned each step of the grid-stride loop takes four elements with one 128-bit load
 * per input and one 128-bit store (LDG.E.128 / STG.E.128: a quarter of the memory
 * instructions); the n % 4 elements after the last group of four, or all n when a
 * pointer is not aligned, take the scalar loop. The same f computes each element
 * alone on both paths, so the bits never depend on the path (nor on the grid). y may
 * alias an input. Their launch kind is PKC_ELEM4: a thread per four elements. */
/* A table element as float: itself, or a bfloat16 one widened exactly. */
static __device__ __forceinline__ float pkc_table_f32(float x) { return x; }
static __device__ __forceinline__ float pkc_table_f32(unsigned short x) { return pkc_bf16_to_f32(x); }

/* out[i,:] = table[ids[i],:] for n tokens, of a float or bf16 table (the embedding
 * kernels, cuda_kernels_layers.cuh); a bad id gives a zero row (counted). */
template <class E>
static __device__ __forceinline__ void pkc_embedding_rows(float *out, const E *table, const int *ids, pkc_i64 n,
                                                          int C, int V, unsigned long long *bad) {
  pkc_i64 total = n * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 i = k / C;
    int c = (int)(k - i * C);
    int id = ids[i];
    if (id < 0 || id >= V) {
      out[k] = 0;
      if (c == 0) pkc_count_bad(bad);
    } else {
      out[k] = pkc_table_f32(table[(pkc_i64)id * C + c]);
    }
  }
}

template <class F>
static __device__ __forceinline__ void pkc_map1(float *y, const float *x, pkc_i64 n, F f) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(y) && pkc_aligned16(x)) {
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 v = ((const pkc_f4 *)x)[i];
      v.x = f(v.x);
      v.y = f(v.y);
      v.z = f(v.z);
      v.w = f(v.w);
      ((pkc_f4 *)y)[i] = v;
    }
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) y[i] = f(x[i]);
}

template <class F>
static __device__ __forceinline__ void pkc_map2(float *y, const float *a, const float *b,
                                                pkc_i64 n, F f) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(y) && pkc_aligned16(a) && pkc_aligned16(b)) {
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 u = ((const pkc_f4 *)a)[i], v = ((const pkc_f4 *)b)[i];
      u.x = f(u.x, v.x);
      u.y = f(u.y, v.y);
      u.z = f(u.z, v.z);
      u.w = f(u.w, v.w);
      ((pkc_f4 *)y)[i] = u;
    }
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) y[i] = f(a[i], b[i]);
}

extern "C" {

/* ===== elementwise helpers ===================================================== */

/* y[i] = v (v = 0 zeroes a gradient before a non-accumulating atomic kernel). */
__global__ void pkc_fill_f32(float *y, float v, pkc_i64 n) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(y)) { /* pkc_map1's two paths, with no input */
    pkc_f4 v4;
    v4.x = v4.y = v4.z = v4.w = v;
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) ((pkc_f4 *)y)[i] = v4;
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) y[i] = v;
}

/* *dst = v, one thread: the runtime's stream-ordered write of a pass's microbatch key
 * (runtime/cuda/exec/cuda_exec_list.c), which the random kernels then read through mbkey. */
__global__ void pkc_set_u32(pkc_u32 *dst, pkc_u32 v) {
  if (pkc_tid() == 0) *dst = v;
}

/* y = x (no overlap). */
__global__ void pkc_copy_f32(float *y, const float *x, pkc_i64 n) {
  pkc_map1(y, x, n, [](float v) { return v; });
}

/* x *= s in place (1/accumulation, gradient clipping). */
__global__ void pkc_scale_inplace_f32(float *x, float s, pkc_i64 n) {
  pkc_map1(x, x, n, [=](float v) { return v * s; });
}

/* y += a·x: gradient accumulation, and gradients meeting at a fork. */
__global__ void pkc_axpy_f32(float *y, float a, const float *x, pkc_i64 n) {
  pkc_map2(y, y, x, n, [=](float yi, float xi) { return yi + a * xi; });
}

/* y = ((s0 + s1) + s2) + ... + s(k-1) per element, for the first k of at most
 * PKC_SUM_SRCS = 8 sources (the rest unused, may be NULL): the ordered sum of the
 * interpreter's devices (runtime/exec/exec.h sum_ordered: a tied weight's gradient
 * over its stages, the replica all-reduce), the CPU's loop (exec_cpu.c) bit for bit:
 * float adds, one rounding each, in ascending source order, no multiply to contract
 * into an FMA and nothing reassociated. Each thread reads every source of its
 * elements before it writes them, so y may be any source. More sources: the caller
 * launches again with y as the first (y = y + the next ones: still ascending).
 * Separate pointer parameters, not an array: each is one 8-byte argument, as every
 * launch list and the emulator pass them; the loops over q have a constant bound, so
 * the compiler can unroll them and keep s[] in registers. */
#define PKC_SUM_SRCS 8
__global__ void pkc_sum_ordered_f32(float *y, int k, pkc_i64 n, const float *s0, const float *s1,
                                    const float *s2, const float *s3, const float *s4,
                                    const float *s5, const float *s6, const float *s7) {
  const float *s[PKC_SUM_SRCS] = {s0, s1, s2, s3, s4, s5, s6, s7};
  bool vec = pkc_aligned16(y);
  for (int q = 0; q < PKC_SUM_SRCS; q++)
    if (q < k) vec = vec && pkc_aligned16(s[q]);
  pkc_i64 i0 = 0;
  if (vec) { /* pkc_map1's two paths: the same adds per element on each */
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 a = ((const pkc_f4 *)s0)[i];
      for (int q = 1; q < PKC_SUM_SRCS; q++)
        if (q < k) {
          pkc_f4 v = ((const pkc_f4 *)s[q])[i];
          a.x = a.x + v.x;
          a.y = a.y + v.y;
          a.z = a.z + v.z;
          a.w = a.w + v.w;
        }
      ((pkc_f4 *)y)[i] = a;
    }
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) {
    float a = s0[i];
    for (int q = 1; q < PKC_SUM_SRCS; q++)
      if (q < k) a = a + s[q][i];
    y[i] = a;
  }
}

/* Σ x², phase 1: part[blockIdx.x] = this block's share, in double. Phase 2
 * (pkc_sumsq_final_f32) sums the gridDim.x partials in order. Deterministic for a
 * fixed grid (the grad norm must not depend on timing). */
__global__ void pkc_sumsq_partial_f32(double *part, const float *x, pkc_i64 n) {
  __shared__ double sh[PKC_MAX_BLOCK];
  double acc = 0;
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) acc += (double)x[i] * (double)x[i];
  acc = pkc_block_sum_d(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* *out = Σ part[0..nparts) (one block; any block size). */
__global__ void pkc_sumsq_final_f32(double *out, const double *part, int nparts) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < nparts; i++) s += part[i];
    *out = s;
  }
}

/* bfloat16 <-> float32 (mixed-precision GEMM operands; bits as unsigned short). Eight
 * elements a step when both pointers are 16-byte aligned: two 128-bit float accesses
 * and one 128-bit access of eight bf16 (element 2k in the low half of word k, as
 * memory holds them on the little-endian GPU); the rest scalar. Launch kind PKC_ELEM8. */
static __device__ __forceinline__ unsigned pkc_bf16_pair(float lo, float hi) {
  return (unsigned)pkc_f32_to_bf16(lo) | ((unsigned)pkc_f32_to_bf16(hi) << 16);
}

__global__ void pkc_cast_f32_to_bf16(unsigned short *y, const float *x, pkc_i64 n) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(y) && pkc_aligned16(x)) {
    pkc_i64 n8 = n >> 3;
    for (pkc_i64 i = pkc_tid(); i < n8; i += pkc_nthreads()) {
      pkc_f4 a = ((const pkc_f4 *)x)[2 * i], b = ((const pkc_f4 *)x)[2 * i + 1];
      pkc_u4 h;
      h.x = pkc_bf16_pair(a.x, a.y);
      h.y = pkc_bf16_pair(a.z, a.w);
      h.z = pkc_bf16_pair(b.x, b.y);
      h.w = pkc_bf16_pair(b.z, b.w);
      ((pkc_u4 *)y)[i] = h;
    }
    i0 = n8 << 3;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) y[i] = pkc_f32_to_bf16(x[i]);
}

__global__ void pkc_cast_bf16_to_f32(float *y, const unsigned short *x, pkc_i64 n) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(y) && pkc_aligned16(x)) {
    pkc_i64 n8 = n >> 3;
    for (pkc_i64 i = pkc_tid(); i < n8; i += pkc_nthreads()) {
      pkc_u4 h = ((const pkc_u4 *)x)[i];
      pkc_f4 a, b;
      a.x = __uint_as_float(h.x << 16);
      a.y = __uint_as_float(h.x & 0xffff0000u);
      a.z = __uint_as_float(h.y << 16);
      a.w = __uint_as_float(h.y & 0xffff0000u);
      b.x = __uint_as_float(h.z << 16);
      b.y = __uint_as_float(h.z & 0xffff0000u);
      b.z = __uint_as_float(h.w << 16);
      b.w = __uint_as_float(h.w & 0xffff0000u);
      ((pkc_f4 *)y)[2 * i] = a;
      ((pkc_f4 *)y)[2 * i + 1] = b;
    }
    i0 = n8 << 3;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) y[i] = pkc_bf16_to_f32(x[i]);
}

/* ===== the kernels by family, each its own file ================================ */
#include "cuda_kernels_layers.cuh"
#include "cuda_kernels_activations.cuh"
#include "cuda_kernels_fused.cuh"
#include "cuda_kernels_optim.cuh"

} /* extern "C" */

#endif /* PD2BW_CUDA_KERNELS_CUH */
