/* kernels/cuda_flash_fwd.cuh — attention forward on tensor cores (FlashAttention-2):
 * pkc_flash_attention_fwd_bf16 over packed qkv and pkc_flash_attention_gqa_fwd_bf16
 * over separate q, k, v with KVH key/value heads, from bf16 inputs, fp32 out.
 *
 * Invariants: out is pkc_attention_fwd_f32's (the C twin, op_check holds them to each
 * other); dropout is drawn per element from Philox exactly as the CPU draws it (same
 * element index, same threshold); lse (may be NULL) gets each query row's natural-log
 * log-sum-exp of the scaled scores, lse[(b·NH+h)·T + t], the IR's second output of
 * attention, which the backward (cuda_flash_bwd.cuh) takes instead of recomputing.
 */
#ifndef PD2BW_CUDA_FLASH_FWD_CUH
#define PD2BW_CUDA_FLASH_FWD_CUH

#ifndef PD2BW_CUDA_FLASH_COMMON_CUH
#include "cuda_flash_common.cuh"
#endif

/* How a block runs: one per (b, h, 64-query tile), 4 warps of 16 query rows. The warp
 * keeps its Q rows as A fragments in registers, walks the key tiles (K and V tiles in
 * shared memory, loaded by cp.async): S = Q·Kᵀ by mma.sync, the online softmax on S's
 * accumulators (row max and sum across the four lanes of a row by shuffles; the sum
 * stays per lane until the end), dropout, then P re-packed in registers as the A
 * fragment of O += P·V (no trip through shared memory). Causal: key tiles wholly after
 * the block's last query are never loaded, those after a warp's last query skipped by
 * that warp; partial tiles (T not a multiple of 64) are masked. Launch: block
 * PKC_FLASH_THREADS, grid B·NH·ceil(T/64) (any grid works). */
/* One query tile: out, and lse[row] when lse is not NULL. q rows have stride ldq, k and
 * v rows ldkv; query head h reads key/value head h/(NH/KVH) (packed qkv: ldq = ldkv =
 * 3C, KVH = NH). */
template <int HS>
static __device__ void pkc_flash_fwd_tile(float *out, float *lse, const unsigned short *qs, pkc_i64 ldq,
                                          const unsigned short *ks, const unsigned short *vs, pkc_i64 ldkv, int T,
                                          int NH, int KVH, int causal, const PkcFlashDrop *dr, pkc_i64 tile,
                                          unsigned short *sK, unsigned short *sV) {
  const int nq = pkc_flash_ntiles(T);
  const int qt = nq - 1 - (int)(tile % nq); /* causal: the longest tiles first */
  const pkc_i64 bh = tile / nq;
  const int b = (int)(bh / NH), h = (int)(bh % NH);
  const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const pkc_i64 C = (pkc_i64)NH * HS;
  const unsigned short *qb = qs + (pkc_i64)b * T * ldq + (pkc_i64)h * HS;
  const unsigned short *kb = ks + (pkc_i64)b * T * ldkv + (pkc_i64)(h / (NH / KVH)) * HS;
  const unsigned short *vb = vs + (pkc_i64)b * T * ldkv + (pkc_i64)(h / (NH / KVH)) * HS;
  const int q0 = qt * PKC_FLASH_BR, wq0 = q0 + 16 * warp; /* the block's and the warp's first row */
  const float sl2 = (float)(1.4426950408889634 / sqrt((double)HS)); /* scale·log2(e) */

  /* Q: through sK into this warp's A fragments. */
  unsigned qf[HS / 16][4];
  pkc_flash_load<HS>(sK, qb, ldq, q0, T);
  pkc_cp_async_commit();
  pkc_cp_async_wait<0>();
  __syncthreads();
  PKC_UNROLL
  for (int kk = 0; kk < HS / 16; kk++) pkc_flash_ld_a<HS>(qf[kk], sK, 16 * warp, 16 * kk);
  __syncthreads();

  float o[HS / 8][4];
  PKC_UNROLL
  for (int j = 0; j < HS / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
  float m[2] = {PKC_FLASH_NEG_INF, PKC_FLASH_NEG_INF}, l[2] = {0, 0}; /* m: log2 units */
  int nk = pkc_flash_ntiles(T);
  if (causal) {
    int last = (q0 + PKC_FLASH_BR < T ? q0 + PKC_FLASH_BR : T) - 1;
    nk = last / PKC_FLASH_BC + 1;
  }
  for (int kt = 0; kt < nk; kt++) {
    const int k0 = kt * PKC_FLASH_BC;
    pkc_flash_load<HS>(sK, kb, ldkv, k0, T);
    pkc_flash_load<HS>(sV, vb, ldkv, k0, T);
    pkc_cp_async_commit();
    pkc_cp_async_wait<0>();
    __syncthreads();
    if (!causal || k0 <= wq0 + 15) { /* warp-uniform: some of the warp's rows see keys here */
      float s[PKC_FLASH_BC / 8][4];
      PKC_UNROLL
      for (int j = 0; j < PKC_FLASH_BC / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
      PKC_UNROLL
      for (int kk = 0; kk < HS / 16; kk++) pkc_flash_mma_bt<HS, PKC_FLASH_BC>(s, qf[kk], sK, 16 * kk);
      /* mask, then the online softmax per row (i>>1 picks row g or g+8) */
      float mx[2] = {PKC_FLASH_NEG_INF, PKC_FLASH_NEG_INF};
      PKC_UNROLL
      for (int j = 0; j < PKC_FLASH_BC / 8; j++)
        PKC_UNROLL
        for (int i = 0; i < 4; i++) {
          int row = wq0 + g + 8 * (i >> 1), key = k0 + 8 * j + 2 * c + (i & 1);
          bool ok = key < T && (!causal || key <= row);
          s[j][i] = ok ? s[j][i] * sl2 : PKC_FLASH_NEG_INF;
          mx[i >> 1] = s[j][i] > mx[i >> 1] ? s[j][i] : mx[i >> 1];
        }
      float base_[2], corr[2];
      PKC_UNROLL
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float mn = fmaxf(m[r], mx[r]);
        base_[r] = mn == PKC_FLASH_NEG_INF ? 0.0f : mn; /* a row with no key yet */
        corr[r] = exp2f(m[r] - base_[r]);
        m[r] = mn;
        l[r] *= corr[r];
      }
      PKC_UNROLL
      for (int j = 0; j < HS / 8; j++)
        PKC_UNROLL
        for (int i = 0; i < 4; i++) o[j][i] *= corr[i >> 1];
      PKC_UNROLL
      for (int r = 0; r < 2; r++) {
        int row = wq0 + g + 8 * r;
        PhiloxCtr blk;
        pkc_u64 blk_id = ~0ull, e0 = ((pkc_u64)bh * T + (pkc_u64)row) * (pkc_u64)T;
        PKC_UNROLL
        for (int j = 0; j < PKC_FLASH_BC / 8; j++)
          PKC_UNROLL
          for (int i = 2 * r; i < 2 * r + 2; i++) {
            float pv = exp2f(s[j][i] - base_[r]);
            l[r] += pv; /* the denominator counts dropped elements too (as the CPU) */
            int key = k0 + 8 * j + 2 * c + (i & 1);
            if (dr->on && row < T && key < T) pv *= pkc_flash_keep(dr, e0 + (pkc_u64)key, &blk, &blk_id);
            s[j][i] = pv;
          }
      }
      /* O += P·V: S's accumulators of key tiles 2kk, 2kk+1 are P's A fragment kk. */
      PKC_UNROLL
      for (int kk = 0; kk < PKC_FLASH_BC / 16; kk++) {
        unsigned pa[4];
        pkc_flash_acc_to_a(pa, s, kk);
        pkc_flash_mma_b<HS>(o, pa, sV, 16 * kk);
      }
    }
    __syncthreads(); /* before the next tile overwrites sK, sV */
  }
  PKC_UNROLL
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = wq0 + g + 8 * r;
    const float inv = 1.0f / l[r];
    if (row >= T) continue;
    float *dst = out + ((pkc_i64)b * T + row) * C + (pkc_i64)h * HS + 2 * c;
    PKC_UNROLL
    for (int j = 0; j < HS / 8; j++) {
      dst[8 * j] = o[j][2 * r] * inv;
      dst[8 * j + 1] = o[j][2 * r + 1] * inv;
    }
    if (lse && c == 0) lse[bh * T + row] = (m[r] + log2f(l[r])) * 0.6931471805599453f;
  }
}

extern "C" __global__ void pkc_flash_attention_fwd_bf16(float *out, float *lse, const unsigned short *qkv,
                                                        int B, int T, int C, int NH, int causal, double p,
                                                        pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  __shared__ __align__(16) unsigned short sKV[2 * PKC_FLASH_BC * PKC_FLASH_LD(PKC_FLASH_HS_MAX)];
  const PkcFlashDrop dr = pkc_flash_drop(p, seed, op, mbkey);
  const pkc_i64 tiles = (pkc_i64)B * NH * pkc_flash_ntiles(PKC_FLASH_T(T)), C3 = 3 * (pkc_i64)C;
  (void)sKV, (void)tiles, (void)qkv, (void)causal, (void)dr, (void)C3; /* unused when no size is compiled */
  if (blockDim.x == PKC_FLASH_THREADS && C % NH == 0 && PKC_FLASH_T_OK(T)) switch (C / NH) {
#define PKC_FLASH_FWD_CASE(n)                                                                              \
  case n:                                                                                                 \
    for (pkc_i64 t = blockIdx.x; t < tiles; t += gridDim.x)                                               \
      pkc_flash_fwd_tile<n>(out, lse, qkv, C3, qkv + C, qkv + 2 * C, C3, PKC_FLASH_T(T), NH, NH, causal, &dr, t, \
                            sKV, sKV + PKC_FLASH_BC * PKC_FLASH_LD(n));                                   \
    return;
      PKC_FLASH_SIZES(PKC_FLASH_FWD_CASE)
#undef PKC_FLASH_FWD_CASE
    default: break;
    }
  pkc_flash_poison(out, (pkc_i64)B * T * C); /* not compiled for this head size */
  if (lse) pkc_flash_poison(lse, (pkc_i64)B * NH * T);
}

/* Grouped-query attention (attention_gqa): q16[B,T,NH·hs], k16 and v16 [B,T,KVH·hs] as
 * bf16, KVH dividing NH; out and lse as pkc_flash_attention_fwd_bf16's. Grid
 * B·NH·ceil(T/64) (any grid works). */
extern "C" __global__ void pkc_flash_attention_gqa_fwd_bf16(float *out, float *lse, const unsigned short *q,
                                                            const unsigned short *k, const unsigned short *v, int B,
                                                            int T, int NH, int KVH, int hs, int causal, double p,
                                                            pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  __shared__ __align__(16) unsigned short sKV[2 * PKC_FLASH_BC * PKC_FLASH_LD(PKC_FLASH_HS_MAX)];
  const PkcFlashDrop dr = pkc_flash_drop(p, seed, op, mbkey);
  const pkc_i64 tiles = (pkc_i64)B * NH * pkc_flash_ntiles(PKC_FLASH_T(T));
  (void)sKV, (void)tiles, (void)q, (void)k, (void)v, (void)causal, (void)dr; /* unused when no size is compiled */
  if (blockDim.x == PKC_FLASH_THREADS && KVH >= 1 && NH % KVH == 0 && PKC_FLASH_T_OK(T)) switch (hs) {
#define PKC_FLASH_GQA_FWD_CASE(n)                                                                          \
  case n:                                                                                                 \
    for (pkc_i64 t = blockIdx.x; t < tiles; t += gridDim.x)                                               \
      pkc_flash_fwd_tile<n>(out, lse, q, (pkc_i64)NH * n, k, v, (pkc_i64)KVH * n, PKC_FLASH_T(T), NH, KVH,   \
                            causal, &dr, t, sKV, sKV + PKC_FLASH_BC * PKC_FLASH_LD(n));                   \
    return;
      PKC_FLASH_SIZES(PKC_FLASH_GQA_FWD_CASE)
#undef PKC_FLASH_GQA_FWD_CASE
    default: break;
    }
  pkc_flash_poison(out, (pkc_i64)B * T * NH * hs); /* not compiled for this head size */
  if (lse) pkc_flash_poison(lse, (pkc_i64)B * NH * T);
}

#endif /* PD2BW_CUDA_FLASH_FWD_CUH */
