/* kernels/cuda_kernels.cuh — every CUDA kernel of pd2bw, forward and backward.
 *
 * The GPU twin of kernels/cpu_kernels.h: same ops, same layouts, same
 * semantics (read that file's conventions; they hold here), float32 storage with
 * float32 arithmetic (double where the CPU sums in double). GEMMs are not here: the
 * runtime calls cuBLAS (cuda_backend.h: cuda_gemm), so linear/matmul and their
 * gradients are GEMM calls plus, for a bias, pkc_add_bias_fwd_f32 / pkc_bias_grad_f32.
 *
 * Why one header of extern "C" kernels: the CUDA code generator pastes philox.h,
 * cuda_helpers.cuh (the device helpers, shared with the stages' own kernels) and
 * then this file verbatim into a plan's kernel library, kernels.cu (the build embeds
 * the text: pkc_kernels_src.h, made by kernels/CMakeLists.txt), one module that
 * NVRTC compiles at load time beside each stage's stageN.cu. extern "C" keeps the
 * names unmangled, so the launch lists can name kernels and cuModuleGetFunction can
 * find them. The text includes no system header (NVRTC has none) and no
 * cuda_bf16.h: bfloat16 is handled as raw bits.
 *
 * The same text also compiles as host C++ under tests/cuda/cuda_emu.cpp, which
 * defines PKC_EMULATE and emulates a grid (one fibre per thread, __syncthreads as a
 * yield), so every kernel is run and compared with the CPU kernels in CI on a
 * machine with no GPU. Hence: only __syncthreads, atomicAdd, full-warp shuffles
 * (__shfl_xor_sync, __shfl_sync, __syncwarp) and cuda_mma.cuh's tensor-core helpers;
 * the emulator provides those, and no inline PTX outside cuda_mma.cuh (which gives
 * each instruction a CPU definition).
 *
 * Launch conventions (every kernel):
 *  - 1-D grids and blocks. Every kernel walks its work with a grid-stride loop, so
 *    ANY grid is correct; the grid only sets the parallelism. cuda_kernel_list.h
 *    gives each kernel's launch kind and work items, and pkc_grid() the grid;
 *    block = PKC_BLOCK.
 *  - "row" kernels (one block per row: layernorm, softmax, cross-entropy rows) and
 *    "column" kernels (bias_grad, layernorm params) need blockDim.x a power of two
 *    between 32 and PKC_MAX_BLOCK; row kernels stride over rows by gridDim.x.
 *  - Kernels that need two phases with a global barrier between them are two
 *    kernels (the caller launches both, in the order documented at each).
 *  - Sizes are long long (int64) where a tensor can exceed 2^31 elements.
 *  - `bad` counters (unsigned long long*, may be NULL) count out-of-range token ids,
 *    targets and positions, as the CPU kernels' return values do.
 *  - Random ops take (p, seed, op, mbkey) and compute the keep/drop decision
 *    exactly as philox.h and the CPU do: element e is dropped iff
 *    pk_rng_u32(seed, op, microbatch, e) < pk_rng_threshold(p), where microbatch is
 *    *mbkey, read in device memory (the runtime writes it with pkc_set_u32 before the
 *    pass, on the same stream), not passed by value: so a pass captured once as a CUDA
 *    graph replays for every microbatch. mbkey may be NULL when p is 0.
 *  - Reductions are deterministic: fixed order for a given launch configuration,
 *    except embedding_bwd (atomicAdd; see there).
 *
 * PKC_SELFTEST_PERTURB: defined when compiling, gelu_fwd multiplies its result by
 * 1.01, so tests/cuda/gpu_op_check --self-test can prove its checks catch a wrong
 * kernel. Never defined in a real build.
 */
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

/* ===== embedding, positions ==================================================== */

/* out[i,:] = table[ids[i],:] for n tokens; a bad id gives a zero row (counted). */
__global__ void pkc_embedding_fwd_f32(float *out, const float *table, const int *ids, pkc_i64 n,
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
      out[k] = table[(pkc_i64)id * C + c];
    }
  }
}

/* dtable[ids[i],:] += dy[i,:]. Accumulates: for the CPU's accumulate = 0, launch
 * pkc_fill_f32(dtable, 0, V·C) first. atomicAdd, so the summation order of a row
 * that several tokens share varies from run to run (float rounding only); bad ids
 * are skipped and counted. */
__global__ void pkc_embedding_bwd_f32(float *dtable, const float *dy, const int *ids, pkc_i64 n,
                                      int C, int V, unsigned long long *bad) {
  pkc_i64 total = n * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 i = k / C;
    int c = (int)(k - i * C);
    int id = ids[i];
    if (id < 0 || id >= V) {
      if (c == 0) pkc_count_bad(bad);
      continue;
    }
    atomicAdd(&dtable[(pkc_i64)id * C + c], dy[k]);
  }
}

/* out[b,t,:] = table[t,:]. */
__global__ void pkc_positions_fwd_f32(float *out, const float *table, int B, int T, int C) {
  pkc_i64 per = (pkc_i64)T * C, total = (pkc_i64)B * per;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) out[k] = table[k % per];
}

/* dtable[t,:] (+)= Σ_b dy[b,t,:] for t < T, summed over b in order; rows T..rows-1
 * zeroed when !accumulate. One thread per table element: deterministic. */
__global__ void pkc_positions_bwd_f32(float *dtable, const float *dy, int B, int T, int C, int rows,
                                      int accumulate) {
  pkc_i64 total = (pkc_i64)rows * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 t = k / C;
    if (t >= T) {
      if (!accumulate) dtable[k] = 0;
      continue;
    }
    float acc = accumulate ? dtable[k] : 0.0f;
    for (int b = 0; b < B; b++) acc += dy[(pkc_i64)b * T * C + k];
    dtable[k] = acc;
  }
}

/* ===== add, mul, scale, bias =================================================== */

__global__ void pkc_add_fwd_f32(float *y, const float *a, const float *b, pkc_i64 n) {
  pkc_map2(y, a, b, n, [](float u, float v) { return u + v; });
}

/* y[M,N] = a[M,N] + bias[N] (y may alias a): also linear's bias after the GEMM.
 * 128-bit steps (as pkc_map2) when N is a multiple of 4 and the pointers aligned. */
__global__ void pkc_add_bias_fwd_f32(float *y, const float *a, const float *bias, pkc_i64 M,
                                     int N) {
  pkc_i64 total = M * N, k0 = 0;
  if (N % 4 == 0 && pkc_aligned16(y) && pkc_aligned16(a) && pkc_aligned16(bias)) {
    pkc_i64 n4 = total >> 2;
    int N4 = N >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 u = ((const pkc_f4 *)a)[i], v = ((const pkc_f4 *)bias)[i % N4];
      u.x = u.x + v.x;
      u.y = u.y + v.y;
      u.z = u.z + v.z;
      u.w = u.w + v.w;
      ((pkc_f4 *)y)[i] = u;
    }
    k0 = n4 << 2; /* = total */
  }
  for (pkc_i64 k = k0 + pkc_tid(); k < total; k += pkc_nthreads()) y[k] = a[k] + bias[k % N];
}

__global__ void pkc_mul_fwd_f32(float *y, const float *a, const float *b, pkc_i64 n) {
  pkc_map2(y, a, b, n, [](float u, float v) { return u * v; });
}

/* da = dy ⊙ b, db = dy ⊙ a; either may be NULL. dy is read once for both. */
__global__ void pkc_mul_bwd_f32(float *da, float *db, const float *dy, const float *a,
                                const float *b, pkc_i64 n) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(da) && pkc_aligned16(db) && pkc_aligned16(dy) && pkc_aligned16(a) &&
      pkc_aligned16(b)) { /* NULL is aligned, and then never read or written */
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 g = ((const pkc_f4 *)dy)[i];
      if (da) {
        pkc_f4 v = ((const pkc_f4 *)b)[i];
        v.x = g.x * v.x;
        v.y = g.y * v.y;
        v.z = g.z * v.z;
        v.w = g.w * v.w;
        ((pkc_f4 *)da)[i] = v;
      }
      if (db) {
        pkc_f4 u = ((const pkc_f4 *)a)[i];
        u.x = g.x * u.x;
        u.y = g.y * u.y;
        u.z = g.z * u.z;
        u.w = g.w * u.w;
        ((pkc_f4 *)db)[i] = u;
      }
    }
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) {
    float g = dy[i];
    if (da) da[i] = g * b[i];
    if (db) db[i] = g * a[i];
  }
}

__global__ void pkc_scale_fwd_f32(float *y, const float *x, float s, pkc_i64 n) {
  pkc_map1(y, x, n, [=](float v) { return s * v; });
}

/* db[N] (+)= Σ_rows dy[M,N]. Column kernel: a block owns 32 columns; its
 * blockDim.x/32 thread groups sum interleaved rows, then the groups' partials are
 * added in group order. Deterministic. */
__global__ void pkc_bias_grad_f32(float *db, const float *dy, pkc_i64 M, int N, int accumulate) {
  __shared__ float sh[PKC_MAX_BLOCK];
  int lane = (int)(threadIdx.x & 31u), grp = (int)(threadIdx.x >> 5);
  int ngrp = (int)(blockDim.x >> 5);
  for (int c0 = (int)blockIdx.x * 32; c0 < N; c0 += (int)gridDim.x * 32) {
    int c = c0 + lane;
    float acc = 0;
    if (c < N)
      for (pkc_i64 r = grp; r < M; r += ngrp) acc += dy[r * N + c];
    sh[threadIdx.x] = acc;
    __syncthreads();
    if (grp == 0 && c < N) {
      float s = accumulate ? db[c] : 0.0f;
      for (int g = 0; g < ngrp; g++) s += sh[g * 32 + lane];
      db[c] = s;
    }
    __syncthreads();
  }
}

/* ===== layernorm ================================================================ */

/* Row kernel. y = (x - mean)·rstd·gamma + beta, biased variance, two passes (as the
 * CPU). stats (2·M, may be NULL) receives mean and rstd. */
__global__ void pkc_layernorm_fwd_f32(float *y, float *stats, const float *x, const float *gamma,
                                      const float *beta, pkc_i64 M, int C, float eps) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * C;
    float s = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) s += xr[c];
    float m = pkc_block_sum(s, sh) / (float)C;
    float v = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) v += (xr[c] - m) * (xr[c] - m);
    v = pkc_block_sum(v, sh) / (float)C;
    float rs = 1.0f / sqrtf(v + eps);
    float *yr = y + r * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
      yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    if (stats && threadIdx.x == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = rs;
    }
  }
}

/* Row kernel, layernorm_bwd phase 1: dx = rstd·(dxhat - mean(dxhat) - xhat·mean(dxhat·xhat)),
 * dxhat = dy·gamma. stats (2·M) is required: with have_stats it holds the forward's
 * mean/rstd, else they are recomputed into it. Phase 2 (parameter gradients):
 * pkc_layernorm_bwd_params_f32, launched after this one, reads stats. */
__global__ void pkc_layernorm_bwd_dx_f32(float *dx, float *stats, int have_stats, const float *dy,
                                         const float *x, const float *gamma, pkc_i64 M, int C,
                                         float eps) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * C, *g = dy + r * C;
    float m, rs;
    if (have_stats) {
      m = stats[2 * r];
      rs = stats[2 * r + 1];
    } else {
      float s = 0;
      for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) s += xr[c];
      m = pkc_block_sum(s, sh) / (float)C;
      float v = 0;
      for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) v += (xr[c] - m) * (xr[c] - m);
      v = pkc_block_sum(v, sh) / (float)C;
      rs = 1.0f / sqrtf(v + eps);
      if (threadIdx.x == 0) {
        stats[2 * r] = m;
        stats[2 * r + 1] = rs;
      }
    }
    float s1 = 0, s2 = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
      float dxh = g[c] * gamma[c];
      s1 += dxh;
      s2 += dxh * (xr[c] - m) * rs;
    }
    s1 = pkc_block_sum(s1, sh) / (float)C;
    s2 = pkc_block_sum(s2, sh) / (float)C;
    float *dr = dx + r * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
      float xh = (xr[c] - m) * rs;
      dr[c] = rs * (g[c] * gamma[c] - s1 - xh * s2);
    }
  }
}

/* Column kernel, layernorm_bwd phase 2: dgamma (+)= Σ_rows dy·xhat, dbeta (+)= Σ_rows dy
 * (either may be NULL), with the stats phase 1 left. Same scheme as bias_grad. */
__global__ void pkc_layernorm_bwd_params_f32(float *dgamma, float *dbeta, const float *stats,
                                             const float *dy, const float *x, pkc_i64 M, int C,
                                             int accumulate) {
  __shared__ float shg[PKC_MAX_BLOCK];
  __shared__ float shb[PKC_MAX_BLOCK];
  int lane = (int)(threadIdx.x & 31u), grp = (int)(threadIdx.x >> 5);
  int ngrp = (int)(blockDim.x >> 5);
  for (int c0 = (int)blockIdx.x * 32; c0 < C; c0 += (int)gridDim.x * 32) {
    int c = c0 + lane;
    float ag = 0, ab = 0;
    if (c < C)
      for (pkc_i64 r = grp; r < M; r += ngrp) {
        float g = dy[r * C + c];
        ag += g * (x[r * C + c] - stats[2 * r]) * stats[2 * r + 1];
        ab += g;
      }
    shg[threadIdx.x] = ag;
    shb[threadIdx.x] = ab;
    __syncthreads();
    if (grp == 0 && c < C) {
      float sg = accumulate && dgamma ? dgamma[c] : 0.0f;
      float sb = accumulate && dbeta ? dbeta[c] : 0.0f;
      for (int k = 0; k < ngrp; k++) {
        sg += shg[k * 32 + lane];
        sb += shb[k * 32 + lane];
      }
      if (dgamma) dgamma[c] = sg;
      if (dbeta) dbeta[c] = sb;
    }
    __syncthreads();
  }
}

/* ===== gelu, relu, softmax ====================================================== */

__global__ void pkc_gelu_fwd_f32(float *y, const float *x, pkc_i64 n) {
  pkc_map1(y, x, n, [](float v) {
    float r = 0.5f * v * (1.0f + tanhf(PKC_GELU_K * (v + PKC_GELU_A * v * v * v)));
#ifdef PKC_SELFTEST_PERTURB
    r *= 1.01f;
#endif
    return r;
  });
}

__global__ void pkc_gelu_bwd_f32(float *dx, const float *dy, const float *x, pkc_i64 n) {
  pkc_map2(dx, dy, x, n, [](float g, float v) {
    float th = tanhf(PKC_GELU_K * (v + PKC_GELU_A * v * v * v));
    float du = PKC_GELU_K * (1.0f + 3.0f * PKC_GELU_A * v * v);
    float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    return g * d;
  });
}

__global__ void pkc_relu_fwd_f32(float *y, const float *x, pkc_i64 n) {
  pkc_map1(y, x, n, [](float v) { return v > 0 ? v : 0.0f; });
}

__global__ void pkc_relu_bwd_f32(float *dx, const float *dy, const float *x, pkc_i64 n) {
  pkc_map2(dx, dy, x, n, [](float g, float v) { return v > 0 ? g : 0.0f; });
}

/* Row kernel: softmax over each row of N, max-subtracted. */
__global__ void pkc_softmax_fwd_f32(float *y, const float *x, pkc_i64 M, int N) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * N;
    float *yr = y + r * N;
    float mx = -3.402823466e38f;
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) mx = xr[c] > mx ? xr[c] : mx;
    mx = pkc_block_max(mx, sh);
    float s = 0;
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) s += (yr[c] = expf(xr[c] - mx));
    float inv = 1.0f / pkc_block_sum(s, sh);
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) yr[c] *= inv;
  }
}

/* Row kernel: dx = y ⊙ (dy - Σ dy⊙y). */
__global__ void pkc_softmax_bwd_f32(float *dx, const float *dy, const float *y, pkc_i64 M, int N) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *g = dy + r * N, *yr = y + r * N;
    float s = 0;
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) s += g[c] * yr[c];
    s = pkc_block_sum(s, sh);
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) dx[r * N + c] = yr[c] * (g[c] - s);
  }
}

/* ===== dropout ================================================================== */

/* y = x ⊙ mask / (1-p), the CPU's mask bit for bit (y may alias x); the forward's
 * and the backward's one loop. One thread per
 * block of four elements: one Philox call each, and one 128-bit load and store when
 * the pointers are 16-byte aligned. */
static __device__ __forceinline__ void pkc_dropout_apply(float *y, const float *x, pkc_i64 n, double p,
                                                         pkc_u64 seed, pkc_u32 op,
                                                         const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  pkc_u64 thr = pk_rng_threshold(p);
  float ks = pkc_keep_scale(p);
  pkc_i64 nblk = (n + 3) / 4;
  pkc_i64 nvec = pkc_aligned16(y) && pkc_aligned16(x) ? n >> 2 : 0; /* whole aligned blocks */
  for (pkc_i64 blk = pkc_tid(); blk < nblk; blk += pkc_nthreads()) {
    PhiloxCtr r;
    if (p > 0) r = pk_rng_block(seed, op, microbatch, (pkc_u64)blk);
    if (blk < nvec) { /* the block's four elements in one 128-bit load and store */
      pkc_f4 v = ((const pkc_f4 *)(x))[blk];
      if (p > 0) {
        v.x = (pkc_u64)r.v[0] >= thr ? v.x * ks : 0.0f;
        v.y = (pkc_u64)r.v[1] >= thr ? v.y * ks : 0.0f;
        v.z = (pkc_u64)r.v[2] >= thr ? v.z * ks : 0.0f;
        v.w = (pkc_u64)r.v[3] >= thr ? v.w * ks : 0.0f;
      }
      ((pkc_f4 *)(y))[blk] = v;
      continue;
    }
    for (int j = 0; j < 4 && blk * 4 + j < n; j++) {
      pkc_i64 i = blk * 4 + j;
      if (!(p > 0))
        y[i] = x[i];
      else
        y[i] = (pkc_u64)r.v[j] >= thr ? x[i] * ks : 0.0f;
    }
  }
}


/* y = x ⊙ mask / (1-p). */
__global__ void pkc_dropout_fwd_f32(float *y, const float *x, pkc_i64 n, double p, pkc_u64 seed,
                                    pkc_u32 op, const pkc_u32 *mbkey) {
  pkc_dropout_apply(y, x, n, p, seed, op, mbkey);
}

/* dx = dy ⊙ mask / (1-p) with the forward's (p, seed, op, microbatch). */
__global__ void pkc_dropout_bwd_f32(float *dx, const float *dy, pkc_i64 n, double p, pkc_u64 seed,
                                    pkc_u32 op, const pkc_u32 *mbkey) {
  pkc_dropout_apply(dx, dy, n, p, seed, op, mbkey);
}

/* ===== gather =================================================================== */

/* y[b,j,:] = x[b,pos[b,j],:]; a bad position gives a zero row (counted). */
__global__ void pkc_gather_fwd_f32(float *y, const float *x, const int *pos, int B, int T, int P,
                                   int C, unsigned long long *bad) {
  pkc_i64 total = (pkc_i64)B * P * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 row = k / C; /* b·P + j */
    int c = (int)(k - row * C);
    int b = (int)(row / P);
    int t = pos[row];
    if (t < 0 || t >= T) {
      y[k] = 0;
      if (c == 0) pkc_count_bad(bad);
    } else {
      y[k] = x[((pkc_i64)b * T + t) * C + c];
    }
  }
}

/* dx = 0, then dx[b,pos[b,j],:] += dy[b,j,:] over j in order. One thread per (b, c)
 * owns dx[b,:,c], so repeated positions need no atomics and the sum is ordered. */
__global__ void pkc_gather_bwd_f32(float *dx, const float *dy, const int *pos, int B, int T, int P,
                                   int C, unsigned long long *bad) {
  pkc_i64 total = (pkc_i64)B * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    int b = (int)(k / C), c = (int)(k % C);
    float *d = dx + (pkc_i64)b * T * C + c;
    for (int t = 0; t < T; t++) d[(pkc_i64)t * C] = 0;
    for (int j = 0; j < P; j++) {
      int t = pos[(pkc_i64)b * P + j];
      if (t < 0 || t >= T) {
        if (c == 0) pkc_count_bad(bad);
        continue;
      }
      d[(pkc_i64)t * C] += dy[((pkc_i64)b * P + j) * C + c];
    }
  }
}

/* ===== fused softmax cross-entropy ============================================== */
/* Forward: pkc_cross_entropy_rows_f32 (row kernel), then pkc_cross_entropy_reduce_f32
 * (one block). Backward: pkc_cross_entropy_count_f32 (one block; or reuse the nvalid
 * the forward's reduce wrote), then pkc_cross_entropy_bwd_f32 (row kernel). */

/* Both row kernels read V columns of rows ld elements apart (ld >= V: the layout pads
 * the logits' rows so that the LM-head GEMMs are aligned; the padding is never read
 * or written). */

/* rowloss[r] = logsumexp(logits[r,:]) - logits[r,target] in double for counted rows,
 * 0 for ignored and bad-target rows. */
__global__ void pkc_cross_entropy_rows_f32(double *rowloss, const float *logits, const int *targets,
                                           pkc_i64 M, int V, int ld, int ignore_index) {
  __shared__ float sh[PKC_MAX_BLOCK];
  __shared__ double shd[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    int tg = targets[r];
    if (tg == ignore_index || tg < 0 || tg >= V) {
      if (threadIdx.x == 0) rowloss[r] = 0;
      continue; /* uniform across the block: no barrier is skipped by some threads only */
    }
    const float *x = logits + r * ld;
    float mx = -3.402823466e38f;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) mx = x[c] > mx ? x[c] : mx;
    mx = pkc_block_max(mx, sh);
    double s = 0;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) s += (double)expf(x[c] - mx);
    s = pkc_block_sum_d(s, shd);
    if (threadIdx.x == 0) rowloss[r] = log(s) + (double)mx - (double)x[tg];
  }
}

/* One block: *loss = Σ rowloss / nvalid (0 if none), *nvalid = counted rows, *bad +=
 * bad targets (rows that are neither ignore_index nor in [0,V)). nvalid/bad may be
 * NULL. Launch with gridDim.x = 1. */
__global__ void pkc_cross_entropy_reduce_f32(float *loss, int *nvalid, unsigned long long *bad,
                                             const double *rowloss, const int *targets, pkc_i64 M,
                                             int V, int ignore_index) {
  __shared__ double shd[PKC_MAX_BLOCK];
  __shared__ float sh[PKC_MAX_BLOCK];
  double s = 0;
  float cnt = 0, nbad = 0; /* counts < 2^24 rows are exact in float */
  for (pkc_i64 r = threadIdx.x; r < M; r += blockDim.x) {
    int tg = targets[r];
    if (tg == ignore_index) continue;
    if (tg < 0 || tg >= V) {
      nbad += 1;
      continue;
    }
    s += rowloss[r];
    cnt += 1;
  }
  s = pkc_block_sum_d(s, shd);
  cnt = pkc_block_sum(cnt, sh);
  nbad = pkc_block_sum(nbad, sh);
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    *loss = cnt > 0 ? (float)(s / (double)cnt) : 0.0f;
    if (nvalid) *nvalid = (int)cnt;
    if (bad && nbad > 0) *bad += (unsigned long long)nbad;
  }
}

/* One block: *nvalid = rows whose target is counted (for a backward without the
 * forward's reduce). Launch with gridDim.x = 1. */
__global__ void pkc_cross_entropy_count_f32(int *nvalid, const int *targets, pkc_i64 M, int V,
                                            int ignore_index) {
  __shared__ float sh[PKC_MAX_BLOCK];
  float cnt = 0;
  for (pkc_i64 r = threadIdx.x; r < M; r += blockDim.x) {
    int tg = targets[r];
    cnt += tg != ignore_index && tg >= 0 && tg < V;
  }
  cnt = pkc_block_sum(cnt, sh);
  if (threadIdx.x == 0 && blockIdx.x == 0) *nvalid = (int)cnt;
}

/* Row kernel: dlogits = dloss·(softmax(logits) - onehot(target))/nvalid on counted
 * rows, 0 elsewhere. dlogits may alias logits (each thread reads an element before
 * writing the same element). */
__global__ void pkc_cross_entropy_bwd_f32(float *dlogits, const float *logits, const int *targets,
                                          pkc_i64 M, int V, int ld, int ignore_index, float dloss,
                                          const int *nvalid) {
  __shared__ float sh[PKC_MAX_BLOCK];
  int nv = *nvalid;
  float w = nv ? dloss / (float)nv : 0.0f;
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    int tg = targets[r];
    const float *x = logits + r * ld;
    float *d = dlogits + r * ld;
    if (tg == ignore_index || tg < 0 || tg >= V) {
      for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) d[c] = 0;
      continue;
    }
    float mx = -3.402823466e38f;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) mx = x[c] > mx ? x[c] : mx;
    mx = pkc_block_max(mx, sh);
    float s = 0;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) s += expf(x[c] - mx);
    float inv = w / pkc_block_sum(s, sh);
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) d[c] = expf(x[c] - mx) * inv;
    __syncthreads();
    if (threadIdx.x == 0) d[tg] -= w;
    __syncthreads();
  }
}

/* The classifier in one pass over the logits (llm.c's fused classifier): the
 * forward's pkc_cross_entropy_rows_f32 and, when training, the backward's
 * pkc_cross_entropy_bwd_f32 at once, so the backward never reads the logits again.
 * rowloss[r] as the rows kernel; with training != 0 also dlogits[r,:] =
 * dloss·(softmax - onehot)/nvalid as the bwd kernel (nvalid: the count kernel's,
 * launched before). dlogits may alias logits (the code generator fuses only when the
 * layout put the gradient over the logits): each row's target logit is read before
 * any thread writes the row. V columns of rows ld apart, as the row kernels. */
__global__ void pkc_classifier_f32(double *rowloss, float *dlogits, const float *logits, const int *targets,
                                   pkc_i64 M, int V, int ld, int ignore_index, float dloss, const int *nvalid,
                                   int training) {
  __shared__ float sh[PKC_MAX_BLOCK];
  __shared__ double shd[PKC_MAX_BLOCK];
  int nv = *nvalid;
  float w = nv ? dloss / (float)nv : 0.0f;
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    int tg = targets[r];
    const float *x = logits + r * ld;
    float *d = dlogits + r * ld;
    if (tg == ignore_index || tg < 0 || tg >= V) {
      if (threadIdx.x == 0) rowloss[r] = 0;
      if (training)
        for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) d[c] = 0;
      continue; /* uniform across the block */
    }
    float xt = x[tg];
    float mx = -3.402823466e38f;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) mx = x[c] > mx ? x[c] : mx;
    mx = pkc_block_max(mx, sh);
    double s = 0;
    float sf = 0;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) {
      float ex = expf(x[c] - mx);
      s += (double)ex;
      sf += ex;
    }
    s = pkc_block_sum_d(s, shd);
    float inv = w / pkc_block_sum(sf, sh); /* its barriers order every read of xt before the writes */
    if (threadIdx.x == 0) rowloss[r] = log(s) + (double)mx - (double)xt;
    if (!training) continue;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) d[c] = expf(x[c] - mx) * inv;
    __syncthreads();
    if (threadIdx.x == 0) d[tg] -= w;
    __syncthreads();
  }
}

/* ===== fused multi-head self-attention ========================================== */
/* qkv[B,T,3C] packed as GPT-2's c_attn (q | k | v), head h in columns h·hs..(h+1)·hs,
 * hs = C/NH ≤ PKC_ATT_HS_MAX; scores scaled by 1/sqrt(hs); causal masks keys after
 * the query; dropout p on the probabilities, element ((b·NH+h)·T + t)·T + t2 of the
 * stream. One thread per query row (forward, dq) or key row (dk, dv), walking the
 * other rows with an online softmax (Milakov & Gimelshein; FlashAttention): no T×T
 * matrix is ever stored. The forward keeps lse = log Σ exp(s) per query row (natural
 * log, lse[row], row = (b·NH+h)·T + t: the IR's second output of attention); the
 * backward is FlashAttention-2's, from the forward's out and lse:
 *   1. pkc_attention_bwd_delta_f32: D[row] = dy·out, into work
 *      (PKC_ATTENTION_WORK_ELEMS(B,T,NH) = B·NH·T floats, NOT the CPU's T×T scratch);
 *   2. pkc_attention_bwd_dq_f32:  dq = scale·Σ_j P_j(dP_j - D)·k_j;
 *   3. pkc_attention_bwd_dkv_f32: dv = Σ_t P'_tj·dy_t, dk = scale·Σ_t dS_tj·q_t.
 * with P = exp(s - lse), P' = P·mask/(1-p), dP = (dy·v)·mask/(1-p), dS = P(dP - D)
 * (D = Σ_j P'_j (dy·v_j) = dy·out, with dropout too).
 * 2 and 3 write disjoint columns of dqkv and may run in either order. A head size
 * the kernels were not compiled for (PKC_ATT_HS, PKC_ATT_HS_MAX above) gives NaN
 * outputs, which any check catches. These are the fp32 kernels, exact to the CPU;
 * a bf16 plan whose head size is a multiple of 16 launches their tensor-core twins
 * instead (cuda_flash_fwd.cuh, cuda_flash_bwd.cuh: mma.sync on bf16 operands, tiles
 * in shared memory, the same dropout masks), codegen/cgen_cuda.c emit_attention. */

/* Fills a whole output with NaN (a head size the kernels were not compiled for). */
static __device__ void pkc_attention_poison(float *x, pkc_i64 n) {
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) x[i] = PKC_NAN;
}

/* Scratch floats the backward needs (D; the forward needs none). */
#define PKC_ATTENTION_WORK_ELEMS(B, T, NH) ((pkc_i64)(B) * (NH) * (T))

__global__ void pkc_attention_fwd_f32(float *out, float *lse, const float *qkv, int B, int T, int C,
                                      int NH, int causal, double p, pkc_u64 seed, pkc_u32 op,
                                      const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  const int hs = PKC_ATT_HS_OF(C, NH);
  pkc_i64 C3 = 3 * (pkc_i64)C;
  float scale = (float)(1.0 / sqrt((double)hs));
  pkc_u64 thr = pk_rng_threshold(p);
  float ks = pkc_keep_scale(p);
  pkc_i64 rows = (pkc_i64)B * NH * T;
  if (!PKC_ATT_HS_OK(C, NH)) { /* not the head size compiled for: poison, don't guess */
    pkc_attention_poison(out, (pkc_i64)B * T * C);
    pkc_attention_poison(lse, rows);
    return;
  }
  for (pkc_i64 row = pkc_tid(); row < rows; row += pkc_nthreads()) {
    int t = (int)(row % T);
    pkc_i64 bh = row / T;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    const float *base = qkv + (pkc_i64)b * T * C3 + (pkc_i64)h * hs;
    float *o = out + ((pkc_i64)b * T + t) * C + (pkc_i64)h * hs;
    float q[PKC_ATT_HS_MAX], acc[PKC_ATT_HS_MAX];
    for (int d = 0; d < hs; d++) {
      q[d] = base[(pkc_i64)t * C3 + d];
      acc[d] = 0;
    }
    int n = causal ? t + 1 : T;
    float m = -3.402823466e38f, l = 0;
    PhiloxCtr blk;
    pkc_u64 blk_id = ~0ull, e0 = (pkc_u64)row * (pkc_u64)T;
    for (int t2 = 0; t2 < n; t2++) {
      const float *k = base + (pkc_i64)t2 * C3 + C;
      float s = 0;
      for (int d = 0; d < hs; d++) s += q[d] * k[d];
      s *= scale;
      if (s > m) { /* rescale what was summed against the old maximum */
        float corr = expf(m - s);
        l *= corr;
        for (int d = 0; d < hs; d++) acc[d] *= corr;
        m = s;
      }
      float w = expf(s - m);
      l += w;
      if (p > 0)
        w = pkc_keep(seed, op, microbatch, thr, e0 + (pkc_u64)t2, &blk, &blk_id) ? w * ks : 0.0f;
      if (w != 0.0f) {
        const float *v = base + (pkc_i64)t2 * C3 + 2 * C;
        for (int d = 0; d < hs; d++) acc[d] += w * v[d];
      }
    }
    float inv = 1.0f / l;
    for (int d = 0; d < hs; d++) o[d] = acc[d] * inv;
    lse[row] = m + logf(l);
  }
}

__global__ void pkc_attention_bwd_delta_f32(float *D, const float *dy, const float *out, int B, int T,
                                            int C, int NH) {
  const int hs = C / NH;
  pkc_i64 rows = (pkc_i64)B * NH * T;
  for (pkc_i64 row = pkc_tid(); row < rows; row += pkc_nthreads()) {
    int t = (int)(row % T);
    pkc_i64 bh = row / T;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    pkc_i64 at = ((pkc_i64)b * T + t) * C + (pkc_i64)h * hs;
    float d = 0;
    for (int k = 0; k < hs; k++) d += dy[at + k] * out[at + k];
    D[row] = d;
  }
}

__global__ void pkc_attention_bwd_dq_f32(float *dqkv, const float *lse, const float *Dv, const float *dy,
                                         const float *qkv, int B, int T, int C, int NH, int causal,
                                         double p, pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  const int hs = PKC_ATT_HS_OF(C, NH);
  pkc_i64 C3 = 3 * (pkc_i64)C;
  float scale = (float)(1.0 / sqrt((double)hs));
  pkc_u64 thr = pk_rng_threshold(p);
  float ks = pkc_keep_scale(p);
  pkc_i64 rows = (pkc_i64)B * NH * T;
  if (!PKC_ATT_HS_OK(C, NH)) {
    pkc_attention_poison(dqkv, (pkc_i64)B * T * C3);
    return;
  }
  for (pkc_i64 row = pkc_tid(); row < rows; row += pkc_nthreads()) {
    int t = (int)(row % T);
    pkc_i64 bh = row / T;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    const float *base = qkv + (pkc_i64)b * T * C3 + (pkc_i64)h * hs;
    float *dq = dqkv + ((pkc_i64)b * T + t) * C3 + (pkc_i64)h * hs;
    const float *g = dy + ((pkc_i64)b * T + t) * C + (pkc_i64)h * hs;
    float q[PKC_ATT_HS_MAX], acc[PKC_ATT_HS_MAX];
    for (int d = 0; d < hs; d++) {
      q[d] = base[(pkc_i64)t * C3 + d];
      acc[d] = 0;
    }
    float L = lse[row], D = Dv[row];
    int n = causal ? t + 1 : T;
    PhiloxCtr blk;
    pkc_u64 blk_id = ~0ull, e0 = (pkc_u64)row * (pkc_u64)T;
    for (int t2 = 0; t2 < n; t2++) {
      const float *k = base + (pkc_i64)t2 * C3 + C;
      const float *v = k + C;
      float s = 0, gv = 0;
      for (int d = 0; d < hs; d++) {
        s += q[d] * k[d];
        gv += g[d] * v[d];
      }
      float P = expf(s * scale - L);
      float mk =
          p > 0 ? (pkc_keep(seed, op, microbatch, thr, e0 + (pkc_u64)t2, &blk, &blk_id) ? ks : 0.0f)
                : 1.0f;
      float ds = P * (gv * mk - D) * scale;
      for (int d = 0; d < hs; d++) acc[d] += ds * k[d];
    }
    for (int d = 0; d < hs; d++) dq[d] = acc[d];
  }
}

__global__ void pkc_attention_bwd_dkv_f32(float *dqkv, const float *lse, const float *Dv, const float *dy,
                                          const float *qkv, int B, int T, int C, int NH, int causal,
                                          double p, pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  const int hs = PKC_ATT_HS_OF(C, NH);
  pkc_i64 C3 = 3 * (pkc_i64)C;
  float scale = (float)(1.0 / sqrt((double)hs));
  pkc_u64 thr = pk_rng_threshold(p);
  float ks = pkc_keep_scale(p);
  pkc_i64 rows = (pkc_i64)B * NH * T;
  if (!PKC_ATT_HS_OK(C, NH)) {
    pkc_attention_poison(dqkv, (pkc_i64)B * T * C3);
    return;
  }
  for (pkc_i64 krow = pkc_tid(); krow < rows; krow += pkc_nthreads()) {
    int j = (int)(krow % T); /* the key/value row this thread owns */
    pkc_i64 bh = krow / T;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    const float *base = qkv + (pkc_i64)b * T * C3 + (pkc_i64)h * hs;
    float *dk = dqkv + ((pkc_i64)b * T + j) * C3 + C + (pkc_i64)h * hs;
    float *dv = dk + C;
    float k[PKC_ATT_HS_MAX], v[PKC_ATT_HS_MAX], ak[PKC_ATT_HS_MAX], av[PKC_ATT_HS_MAX];
    for (int d = 0; d < hs; d++) {
      k[d] = base[(pkc_i64)j * C3 + C + d];
      v[d] = base[(pkc_i64)j * C3 + 2 * C + d];
      ak[d] = av[d] = 0;
    }
    for (int t = causal ? j : 0; t < T; t++) {
      const float *q = base + (pkc_i64)t * C3;
      const float *g = dy + ((pkc_i64)b * T + t) * C + (pkc_i64)h * hs;
      pkc_i64 qrow = bh * T + t;
      float s = 0, gv = 0;
      for (int d = 0; d < hs; d++) {
        s += q[d] * k[d];
        gv += g[d] * v[d];
      }
      float P = expf(s * scale - lse[qrow]);
      float mk = 1.0f;
      if (p > 0) {
        pkc_u64 e = (pkc_u64)qrow * (pkc_u64)T + (pkc_u64)j;
        mk = (pkc_u64)pk_rng_u32(seed, op, microbatch, e) >= thr ? ks : 0.0f;
      }
      float pd = P * mk; /* P' */
      float ds = P * (gv * mk - Dv[qrow]) * scale;
      for (int d = 0; d < hs; d++) {
        av[d] += pd * g[d];
        ak[d] += ds * q[d];
      }
    }
    for (int d = 0; d < hs; d++) {
      dk[d] = ak[d];
      dv[d] = av[d];
    }
  }
}

/* ===== optimizers ================================================================ */

/* AdamW's element loop, shared by the by-value and _dev kernels. */
static __device__ __forceinline__ void pkc_adamw_apply(float *w_out, const float *w_in,
                                                       const float *grad, float *m, float *v,
                                                       pkc_i64 n, double lr, double beta1,
                                                       double beta2, double eps,
                                                       double weight_decay, int decay, float bc1,
                                                       float bc2, double grad_scale,
                                                       double delay_comp) {
  pkc_adamw_c c = pkc_adamw_consts(lr, beta1, beta2, eps, weight_decay, decay, bc1, bc2,
                                   grad_scale, delay_comp);
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) {
    float mi = m[i], vi = v[i];
    /* w_out holds W(t-1) on entry (2bw) */
    float wo = pkc_adamw_elem(c, grad[i], w_in[i], c.dc != 0.0f ? w_out[i] : 0.0f, mi, vi);
    m[i] = mi;
    v[i] = vi;
    w_out[i] = wo;
  }
}

/* AdamW, as the CPU's pk_adamw_step_f32 (same arguments, same float arithmetic;
 * the bias corrections in double, once per block). w_out may alias w_in; with
 * delay_comp > 0 it holds W(t-1) on entry (the CPU's comment says what is done). */
__global__ void pkc_adamw_step_f32(float *w_out, const float *w_in, const float *grad, float *m,
                                   float *v, pkc_i64 n, double lr, double beta1, double beta2,
                                   double eps, double weight_decay, int decay, pkc_i64 t,
                                   double grad_scale, double delay_comp) {
  __shared__ float bc[2];
  if (threadIdx.x == 0) {
    bc[0] = (float)(1.0 - pow(beta1, (double)t));
    bc[1] = (float)(1.0 - pow(beta2, (double)t));
  }
  __syncthreads();
  pkc_adamw_apply(w_out, w_in, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, decay, bc[0],
                  bc[1], grad_scale, delay_comp);
}

/* pkc_adamw_step_f32 with lr, t and grad_scale read from s (bit for bit the same). */
__global__ void pkc_adamw_step_dev_f32(float *w_out, const float *w_in, const float *grad, float *m,
                                       float *v, pkc_i64 n, double beta1, double beta2, double eps,
                                       double weight_decay, int decay, double delay_comp,
                                       const pkc_step_scalars *s) {
  __shared__ float bc[2];
  if (threadIdx.x == 0) {
    bc[0] = (float)(1.0 - pow(beta1, (double)s->t));
    bc[1] = (float)(1.0 - pow(beta2, (double)s->t));
  }
  __syncthreads();
  pkc_adamw_apply(w_out, w_in, grad, m, v, n, s->lr, beta1, beta2, eps, weight_decay, decay,
                  bc[0], bc[1], s->grad_scale, delay_comp);
}

/* SGD's element loop, shared by the by-value and _dev kernels. */
static __device__ __forceinline__ void pkc_sgd_apply(float *w_out, const float *w_in,
                                                     const float *grad, float *buf, pkc_i64 n,
                                                     double lr, double momentum,
                                                     double weight_decay, int decay,
                                                     double grad_scale) {
  float lr_ = (float)lr, mu = (float)momentum, gs = (float)grad_scale;
  float wd = decay ? (float)weight_decay : 0.0f;
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) {
    float w = w_in[i];
    float g = grad[i] * gs + wd * w;
    if (buf) {
      buf[i] = mu * buf[i] + g;
      g = buf[i];
    }
    w_out[i] = w - lr_ * g;
  }
}

/* SGD with momentum, as pk_sgd_step_f32 (buf may be NULL when momentum == 0). */
__global__ void pkc_sgd_step_f32(float *w_out, const float *w_in, const float *grad, float *buf,
                                 pkc_i64 n, double lr, double momentum, double weight_decay,
                                 int decay, double grad_scale) {
  pkc_sgd_apply(w_out, w_in, grad, buf, n, lr, momentum, weight_decay, decay, grad_scale);
}

/* pkc_sgd_step_f32 with lr and grad_scale read from s. */
__global__ void pkc_sgd_step_dev_f32(float *w_out, const float *w_in, const float *grad, float *buf,
                                     pkc_i64 n, double momentum, double weight_decay, int decay,
                                     const pkc_step_scalars *s) {
  pkc_sgd_apply(w_out, w_in, grad, buf, n, s->lr, momentum, weight_decay, decay, s->grad_scale);
}

} /* extern "C" */

#endif /* PD2BW_CUDA_KERNELS_CUH */
