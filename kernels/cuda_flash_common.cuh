/* kernels/cuda_flash_common.cuh — what the tensor-core attention kernels share
 * (cuda_flash_fwd.cuh, cuda_flash_bwd.cuh): tile sizes, the head sizes compiled, tile
 * loads, the Philox dropout context, and the kernels' refusal of what they were not
 * compiled for (PKC_FLASH_THREADS).
 *
 * Semantics are the fp32 kernels' (cuda_kernels.cuh, "fused multi-head self-attention",
 * and cpu_kernels.h's attention_fwd/bwd): qkv[B,T,3C] packed q|k|v, head h in columns
 * h·hs.., scale 1/sqrt(hs), causal, dropout p on the probabilities with element
 * ((b·NH+h)·T+t)·T+u of the Philox stream, kept ones scaled by 1/(1-p). The operands
 * are bf16 copies (pkc_cast_f32_to_bf16 of qkv and dy, in cuda_scratch); the products
 * go through mma.sync m16n8k16 with fp32 accumulators, softmax and its statistics stay
 * fp32, and the probabilities are rounded to bf16 for the P·V (and dS·K, dSᵀ·Q, Pᵀ·dy)
 * products. So results differ from fp32 by bf16 rounding: ~1e-2 relative. */
#ifndef PD2BW_CUDA_FLASH_COMMON_CUH
#define PD2BW_CUDA_FLASH_COMMON_CUH

#ifndef PD2BW_CUDA_MMA_CUH
#include "cuda_mma.cuh"
#endif

/* Every flash kernel runs PKC_FLASH_THREADS threads a block (4 warps, 16 query or key
 * rows each) and strides over its tiles by gridDim.x, so any grid is correct; another
 * block size, or a head size or sequence length not compiled, gives NaN outputs
 * (pkc_flash_poison). */
#define PKC_FLASH_THREADS 128 /* 4 warps */
#define PKC_FLASH_BR 64       /* rows of a block's tile (16 per warp) */
#define PKC_FLASH_BC 64       /* rows of the other operand loaded per step */

/* The head sizes compiled: the model's (PKC_ATT_HS, when a multiple of 16 in 16..128:
 * the code generator launches these kernels only then), or under PKC_FLASH_TEST_SIZES
 * (the emulator, gpu_op_check) 16, 32, 64 and 128; otherwise none (the kernels still
 * exist, so the library's kernel list is fixed, and poison their outputs). */
#if defined(PKC_ATT_HS) && PKC_ATT_HS % 16 == 0 && PKC_ATT_HS >= 16 && PKC_ATT_HS <= 128
#define PKC_FLASH_SIZES(X) X(PKC_ATT_HS)
#define PKC_FLASH_HS_MAX PKC_ATT_HS
#elif defined(PKC_FLASH_TEST_SIZES)
#define PKC_FLASH_SIZES(X) X(16) X(32) X(64) X(128)
#define PKC_FLASH_HS_MAX 128
#else
#define PKC_FLASH_SIZES(X)
#define PKC_FLASH_HS_MAX 16
#endif

/* The sequence length compiled: the model's (PKC_ATT_T, which the code generator defines
 * beside PKC_ATT_HS when every attention op has one T), so that the tile count and the
 * row offsets (t·T, causal bounds) are constants. A launch with another T then poisons
 * its outputs, as an uncompiled head size does; without PKC_ATT_T any T runs. */
#if defined(PKC_ATT_T)
#define PKC_FLASH_T_OK(T) ((T) == PKC_ATT_T)
#define PKC_FLASH_T(T) PKC_ATT_T
#else
#define PKC_FLASH_T_OK(T) 1
#define PKC_FLASH_T(T) (T)
#endif

/* Fully unrolled loops over the fragment arrays, so they stay in registers (a loop the
 * compiler keeps, e.g. around a Philox draw, would index them dynamically: local
 * memory). Nothing under the emulator. */
#if defined(PKC_EMULATE)
#define PKC_UNROLL
#else
#define PKC_UNROLL _Pragma("unroll")
#endif

/* Shared-memory rows are padded by 8 bf16 (16 bytes): ldmatrix's eight row addresses
 * then fall in distinct banks. */
#define PKC_FLASH_LD(HS) ((HS) + 8)

/* Philox dropout as the CPU draws it (cuda_helpers.cuh pkc_keep). */
typedef struct PkcFlashDrop {
  pkc_u64 seed, thr;
  pkc_u32 op, mb;
  float ks; /* 1/(1-p) */
  int on;
} PkcFlashDrop;

static __device__ __forceinline__ PkcFlashDrop pkc_flash_drop(double p, pkc_u64 seed, pkc_u32 op,
                                                              const pkc_u32 *mbkey) {
  PkcFlashDrop d;
  d.seed = seed;
  d.op = op;
  d.mb = p > 0 ? *mbkey : 0u; /* NULL when p is 0 */
  d.thr = pk_rng_threshold(p);
  d.ks = pkc_keep_scale(p);
  d.on = p > 0;
  return d;
}

/* The keep multiplier of element e: 0 or 1/(1-p). Not inlined on the GPU: the callers'
 * loops are unrolled, and 64 inlined Philox blocks per tile made each kernel's code
 * (and NVRTC's time) several times larger for a path taken only with dropout. */
#if defined(PKC_EMULATE)
#define PKC_FLASH_NOINLINE
#else
#define PKC_FLASH_NOINLINE __noinline__
#endif
static __device__ PKC_FLASH_NOINLINE float pkc_flash_keep(const PkcFlashDrop *d, pkc_u64 e, PhiloxCtr *blk,
                                                       pkc_u64 *blk_id) {
  return pkc_keep(d->seed, d->op, d->mb, d->thr, e, blk, blk_id) ? d->ks : 0.0f;
}

/* Rows r0..r0+PKC_FLASH_BR-1 of one head's HS columns (src: row 0, column h·HS of a
 * bf16 matrix with row stride ld) into dst (PKC_FLASH_LD(HS) a row) by cp.async;
 * rows at or past T are zeros. The caller commits and waits. */
template <int HS>
static __device__ __forceinline__ void pkc_flash_load(unsigned short *dst, const unsigned short *src,
                                                      pkc_i64 ld, int r0, int T) {
  const int chunks = HS / 8; /* 16 bytes each */
  for (int i = (int)threadIdx.x; i < PKC_FLASH_BR * chunks; i += PKC_FLASH_THREADS) {
    int r = i / chunks, ch = i % chunks;
    unsigned short *d = dst + r * PKC_FLASH_LD(HS) + ch * 8;
    if (r0 + r < T) {
      pkc_cp_async16(d, src + (pkc_i64)(r0 + r) * ld + ch * 8);
    } else {
      ((unsigned long long *)d)[0] = 0;
      ((unsigned long long *)d)[1] = 0;
    }
  }
}

/* A 16x16 A fragment (rows 16·w.., columns k0..) of a PKC_FLASH_LD(HS)-strided tile. */
template <int HS>
static __device__ __forceinline__ void pkc_flash_ld_a(unsigned a[4], const unsigned short *tile, int row0,
                                                      int k0) {
  int lane = (int)threadIdx.x & 31;
  pkc_ldmatrix_x4(a, tile + (row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * PKC_FLASH_LD(HS) + k0 +
                         (lane >> 4) * 8);
}

/* B fragments for two 8-column n-tiles (n0.., n0+8..) of one k-step (k0..k0+15) when
 * the tile stores B transposed ([n][k], e.g. K for S = Q·Kᵀ): b[0..1] n-tile n0,
 * b[2..3] n-tile n0+8. */
template <int HS>
static __device__ __forceinline__ void pkc_flash_ld_bt(unsigned b[4], const unsigned short *tile, int n0,
                                                       int k0) {
  int lane = (int)threadIdx.x & 31;
  pkc_ldmatrix_x4(b, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * PKC_FLASH_LD(HS) + k0 +
                         ((lane >> 3) & 1) * 8);
}

/* The same when the tile stores B as [k][n] (e.g. V for O = P·V): ldmatrix .trans. */
template <int HS>
static __device__ __forceinline__ void pkc_flash_ld_b(unsigned b[4], const unsigned short *tile, int n0,
                                                      int k0) {
  int lane = (int)threadIdx.x & 31;
  pkc_ldmatrix_x4_trans(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * PKC_FLASH_LD(HS) + n0 +
                               (lane >> 4) * 8);
}

/* acc[n/8], acc[n/8+1] += a · B for every 16 columns n < NCOLS of one k-step (k0..) of a
 * tile holding B transposed ([n][k]): S = Q·Kᵀ, dP = dy·Vᵀ. */
template <int HS, int NCOLS>
static __device__ __forceinline__ void pkc_flash_mma_bt(float (*acc)[4], const unsigned a[4],
                                                        const unsigned short *tile, int k0) {
  PKC_UNROLL
  for (int n = 0; n < NCOLS; n += 16) {
    unsigned b[4];
    pkc_flash_ld_bt<HS>(b, tile, n, k0);
    pkc_mma_bf16_16816(acc[n / 8], a, b);
    pkc_mma_bf16_16816(acc[n / 8 + 1], a, b + 2);
  }
}

/* The same for a tile holding B as [k][n] (HS columns): O += P·V, dq += dS·K,
 * dv += P'ᵀ·dy, dk += dSᵀ·q. */
template <int HS>
static __device__ __forceinline__ void pkc_flash_mma_b(float (*acc)[4], const unsigned a[4],
                                                       const unsigned short *tile, int k0) {
  PKC_UNROLL
  for (int n = 0; n < HS; n += 16) {
    unsigned b[4];
    pkc_flash_ld_b<HS>(b, tile, n, k0);
    pkc_mma_bf16_16816(acc[n / 8], a, b);
    pkc_mma_bf16_16816(acc[n / 8 + 1], a, b + 2);
  }
}

/* FlashAttention-2's register re-use: the fp32 accumulators of n-tiles 2kk and 2kk+1 (C
 * layout) are, rounded to bf16, the A fragment of k-step kk of the next product. */
static __device__ __forceinline__ void pkc_flash_acc_to_a(unsigned a[4], const float (*acc)[4], int kk) {
  a[0] = pkc_pack_bf16x2(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pkc_pack_bf16x2(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pkc_pack_bf16x2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pkc_pack_bf16x2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

/* Fills a whole output with NaN (a head size or block size not compiled for). */
static __device__ void pkc_flash_poison(float *x, pkc_i64 n) {
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) x[i] = PKC_NAN;
}

/* Tiles of PKC_FLASH_BR rows covering T. */
static __device__ __forceinline__ int pkc_flash_ntiles(int T) {
  return (T + PKC_FLASH_BR - 1) / PKC_FLASH_BR;
}

#if defined(PKC_EMULATE)
#define PKC_FLASH_NEG_INF (-__builtin_huge_valf())
#else
#define PKC_FLASH_NEG_INF (__int_as_float(0xff800000))
#endif

#endif /* PD2BW_CUDA_FLASH_COMMON_CUH */
