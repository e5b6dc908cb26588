/* kernels/cuda_flash_bwd.cuh — attention backward on tensor cores (FlashAttention-2),
 * packed qkv (pkc_flash_attention_bwd_dq/dkv_bf16) and separate q, k, v with KVH
 * key/value heads (pkc_flash_attention_gqa_bwd_dq/dkv_bf16).
 *
 * Invariants: deterministic — no atomics, every output row written by one warp; the
 * dropout multiplier of each element is replayed from Philox as the forward drew it;
 * nothing of the forward is recomputed but P, from the forward's lse (its second
 * output) and D[row] = dy·out (pkc_attention_bwd_delta_f32, launched first). The dq and
 * dkv launches write disjoint outputs and may run in either order.
 */
#ifndef PD2BW_CUDA_FLASH_BWD_CUH
#define PD2BW_CUDA_FLASH_BWD_CUH

#ifndef PD2BW_CUDA_FLASH_COMMON_CUH
#include "cuda_flash_common.cuh"
#endif

#define PKC_FLASH_LOG2E 1.4426950408889634f

/* The launches, in order (all but the first block PKC_FLASH_THREADS, any grid; qkv16
 * and dy16 are qkv and dy as bf16; row = (b·NH+h)·T + t):
 *   1. pkc_attention_bwd_delta_f32 (cuda_kernels.cuh): D[row] = dy·out;
 *   2. ..._bwd_dq_bf16, one block per (b, h, 64-query tile):
 *      dq = scale·Σ_j dS_j·k_j, dS = P∘(dP∘M − D), P = exp(s − lse), dP = dy·vᵀ;
 *   3. ..._bwd_dkv_bf16, one block per (b, h, 64-key tile), walking the query tiles:
 *      dv = Σ_t (P∘M)ᵀ·dy, dk = scale·Σ_t dSᵀ·q;
 * with M the dropout multiplier (0 or 1/(1-p)) of element ((b·NH+h)·T+t)·T+u. S, dP
 * and the two products run as mma.sync with dS and P re-packed from the accumulators
 * as A fragments; causal tiles are skipped (whole tiles per block, a warp's rows per
 * warp). Grids: B·NH·ceil(T/64) each. The GQA dkv block owns one key/value head's key
 * tile and walks every query head of its group, so dk and dv sum over the group in
 * registers. */
/* One query tile's dq (row stride ldq, as q's); q, k, v as pkc_flash_fwd_tile's. */
template <int HS>
static __device__ void pkc_flash_dq_tile(float *dqs, const float *lse, const float *Dv, const unsigned short *dy,
                                         const unsigned short *qs, pkc_i64 ldq, const unsigned short *ks,
                                         const unsigned short *vs, pkc_i64 ldkv, int T, int NH, int KVH, int causal,
                                         const PkcFlashDrop *dr, pkc_i64 tile, unsigned short *sK,
                                         unsigned short *sV) {
  const int nq = pkc_flash_ntiles(T);
  const int qt = nq - 1 - (int)(tile % nq);
  const pkc_i64 bh = tile / nq;
  const int b = (int)(bh / NH), h = (int)(bh % NH);
  const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const pkc_i64 C = (pkc_i64)NH * HS;
  const unsigned short *qb = qs + (pkc_i64)b * T * ldq + (pkc_i64)h * HS;
  const unsigned short *kb = ks + (pkc_i64)b * T * ldkv + (pkc_i64)(h / (NH / KVH)) * HS;
  const unsigned short *vb = vs + (pkc_i64)b * T * ldkv + (pkc_i64)(h / (NH / KVH)) * HS;
  const int q0 = qt * PKC_FLASH_BR, wq0 = q0 + 16 * warp;
  const float scale = (float)(1.0 / sqrt((double)HS)), sl2 = scale * PKC_FLASH_LOG2E;

  /* Q and dy rows: through sK, sV into this warp's A fragments. */
  unsigned qf[HS / 16][4], yf[HS / 16][4];
  pkc_flash_load<HS>(sK, qb, ldq, q0, T);
  pkc_flash_load<HS>(sV, dy + (pkc_i64)b * T * C + (pkc_i64)h * HS, C, q0, T);
  pkc_cp_async_commit();
  pkc_cp_async_wait<0>();
  __syncthreads();
  PKC_UNROLL
  for (int kk = 0; kk < HS / 16; kk++) {
    pkc_flash_ld_a<HS>(qf[kk], sK, 16 * warp, 16 * kk);
    pkc_flash_ld_a<HS>(yf[kk], sV, 16 * warp, 16 * kk);
  }
  __syncthreads();
  float lse2[2], Dr[2];
  PKC_UNROLL
  for (int r = 0; r < 2; r++) {
    int row = wq0 + g + 8 * r;
    lse2[r] = row < T ? lse[bh * T + row] * PKC_FLASH_LOG2E : 0.0f;
    Dr[r] = row < T ? Dv[bh * T + row] : 0.0f;
  }
  float dq[HS / 8][4];
  PKC_UNROLL
  for (int j = 0; j < HS / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0;
  int nk = pkc_flash_ntiles(T);
  if (causal) nk = ((q0 + PKC_FLASH_BR < T ? q0 + PKC_FLASH_BR : T) - 1) / PKC_FLASH_BC + 1;
  for (int kt = 0; kt < nk; kt++) {
    const int k0 = kt * PKC_FLASH_BC;
    pkc_flash_load<HS>(sK, kb, ldkv, k0, T);
    pkc_flash_load<HS>(sV, vb, ldkv, k0, T);
    pkc_cp_async_commit();
    pkc_cp_async_wait<0>();
    __syncthreads();
    if (!causal || k0 <= wq0 + 15) {
      float s[PKC_FLASH_BC / 8][4], dp[PKC_FLASH_BC / 8][4];
      PKC_UNROLL
      for (int j = 0; j < PKC_FLASH_BC / 8; j++)
        PKC_UNROLL
        for (int i = 0; i < 4; i++) s[j][i] = dp[j][i] = 0;
      PKC_UNROLL
      for (int kk = 0; kk < HS / 16; kk++) {
        pkc_flash_mma_bt<HS, PKC_FLASH_BC>(s, qf[kk], sK, 16 * kk);
        pkc_flash_mma_bt<HS, PKC_FLASH_BC>(dp, yf[kk], sV, 16 * kk);
      }
      PKC_UNROLL
      for (int r = 0; r < 2; r++) {
        int row = wq0 + g + 8 * r;
        PhiloxCtr blk;
        pkc_u64 blk_id = ~0ull, e0 = ((pkc_u64)bh * T + (pkc_u64)row) * (pkc_u64)T;
        PKC_UNROLL
        for (int j = 0; j < PKC_FLASH_BC / 8; j++)
          PKC_UNROLL
          for (int i = 2 * r; i < 2 * r + 2; i++) {
            int key = k0 + 8 * j + 2 * c + (i & 1);
            bool ok = row < T && key < T && (!causal || key <= row);
            float P = ok ? exp2f(s[j][i] * sl2 - lse2[r]) : 0.0f;
            float mk = dr->on && ok ? pkc_flash_keep(dr, e0 + (pkc_u64)key, &blk, &blk_id) : 1.0f;
            s[j][i] = P * (dp[j][i] * mk - Dr[r]) * scale; /* dS */
          }
      }
      PKC_UNROLL
      for (int kk = 0; kk < PKC_FLASH_BC / 16; kk++) { /* dq += dS·K */
        unsigned da[4];
        pkc_flash_acc_to_a(da, s, kk);
        pkc_flash_mma_b<HS>(dq, da, sK, 16 * kk);
      }
    }
    __syncthreads();
  }
  PKC_UNROLL
  for (int r = 0; r < 2; r++) {
    int row = wq0 + g + 8 * r;
    if (row >= T) continue;
    float *dst = dqs + ((pkc_i64)b * T + row) * ldq + (pkc_i64)h * HS + 2 * c;
    PKC_UNROLL
    for (int j = 0; j < HS / 8; j++) {
      dst[8 * j] = dq[j][2 * r];
      dst[8 * j + 1] = dq[j][2 * r + 1];
    }
  }
}

/* One key tile of key/value head kh (of KVH): dk and dv (row stride ldkv) summed over
 * the query heads of its group, in order, in the same accumulators (no atomics). sL
 * holds the query tile's lse·log2(e) (sL[0..63]) and D (sL[64..]). */
template <int HS>
static __device__ void pkc_flash_dkv_tile(float *dks, float *dvs, const float *lse, const float *Dv,
                                          const unsigned short *dy, const unsigned short *qs, pkc_i64 ldq,
                                          const unsigned short *ks, const unsigned short *vs, pkc_i64 ldkv, int T,
                                          int NH, int KVH, int causal, const PkcFlashDrop *dr, pkc_i64 tile,
                                          unsigned short *sQ, unsigned short *sY, float *sL) {
  const int nk = pkc_flash_ntiles(T);
  const int kt = (int)(tile % nk); /* causal: the first key tiles see the most queries */
  const pkc_i64 bkh = tile / nk;
  const int b = (int)(bkh / KVH), kh = (int)(bkh % KVH), grp = NH / KVH;
  const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const pkc_i64 C = (pkc_i64)NH * HS;
  const unsigned short *kb = ks + (pkc_i64)b * T * ldkv + (pkc_i64)kh * HS;
  const unsigned short *vb = vs + (pkc_i64)b * T * ldkv + (pkc_i64)kh * HS;
  const int k0 = kt * PKC_FLASH_BC, wk0 = k0 + 16 * warp;
  const float scale = (float)(1.0 / sqrt((double)HS)), sl2 = scale * PKC_FLASH_LOG2E;

  /* K and V rows: through sQ, sY into this warp's A fragments (Sᵀ = K·Qᵀ, dPᵀ = V·dyᵀ). */
  unsigned kf[HS / 16][4], vf[HS / 16][4];
  pkc_flash_load<HS>(sQ, kb, ldkv, k0, T);
  pkc_flash_load<HS>(sY, vb, ldkv, k0, T);
  pkc_cp_async_commit();
  pkc_cp_async_wait<0>();
  __syncthreads();
  PKC_UNROLL
  for (int kk = 0; kk < HS / 16; kk++) {
    pkc_flash_ld_a<HS>(kf[kk], sQ, 16 * warp, 16 * kk);
    pkc_flash_ld_a<HS>(vf[kk], sY, 16 * warp, 16 * kk);
  }
  __syncthreads();
  float dk[HS / 8][4], dv[HS / 8][4];
  PKC_UNROLL
  for (int j = 0; j < HS / 8; j++)
    PKC_UNROLL
    for (int i = 0; i < 4; i++) dk[j][i] = dv[j][i] = 0;
  for (int h = kh * grp; h < (kh + 1) * grp; h++) {
  const pkc_i64 bh = (pkc_i64)b * NH + h;
  const unsigned short *qb = qs + (pkc_i64)b * T * ldq + (pkc_i64)h * HS;
  const unsigned short *ybase = dy + (pkc_i64)b * T * C + (pkc_i64)h * HS;
  for (int qt = causal ? k0 / PKC_FLASH_BR : 0; qt < pkc_flash_ntiles(T); qt++) {
    const int q0 = qt * PKC_FLASH_BR;
    pkc_flash_load<HS>(sQ, qb, ldq, q0, T);
    pkc_flash_load<HS>(sY, ybase, C, q0, T);
    pkc_cp_async_commit();
    for (int i = (int)threadIdx.x; i < PKC_FLASH_BR; i += PKC_FLASH_THREADS) {
      bool in = q0 + i < T;
      sL[i] = in ? lse[bh * T + q0 + i] * PKC_FLASH_LOG2E : 0.0f;
      sL[PKC_FLASH_BR + i] = in ? Dv[bh * T + q0 + i] : 0.0f;
    }
    pkc_cp_async_wait<0>();
    __syncthreads();
    if (!causal || q0 + PKC_FLASH_BR - 1 >= wk0) { /* some query of the tile sees the warp's keys */
      float s[PKC_FLASH_BR / 8][4], dp[PKC_FLASH_BR / 8][4]; /* [key][query], transposed */
      PKC_UNROLL
      for (int j = 0; j < PKC_FLASH_BR / 8; j++)
        PKC_UNROLL
        for (int i = 0; i < 4; i++) s[j][i] = dp[j][i] = 0;
      PKC_UNROLL
      for (int kk = 0; kk < HS / 16; kk++) {
        pkc_flash_mma_bt<HS, PKC_FLASH_BR>(s, kf[kk], sQ, 16 * kk);
        pkc_flash_mma_bt<HS, PKC_FLASH_BR>(dp, vf[kk], sY, 16 * kk);
      }
      PKC_UNROLL
      for (int j = 0; j < PKC_FLASH_BR / 8; j++)
        PKC_UNROLL
        for (int i = 0; i < 4; i++) {
          int key = wk0 + g + 8 * (i >> 1), qi = 8 * j + 2 * c + (i & 1), query = q0 + qi;
          bool ok = key < T && query < T && (!causal || key <= query);
          float P = ok ? exp2f(s[j][i] * sl2 - sL[qi]) : 0.0f, mk = 1.0f;
          if (dr->on && ok) {
            PhiloxCtr blk;
            pkc_u64 blk_id = ~0ull;
            mk = pkc_flash_keep(dr, ((pkc_u64)bh * T + (pkc_u64)query) * (pkc_u64)T + (pkc_u64)key, &blk,
                                &blk_id);
          }
          s[j][i] = P * mk;                                          /* P', for dv */
          dp[j][i] = P * (dp[j][i] * mk - sL[PKC_FLASH_BR + qi]) * scale; /* dS, for dk */
        }
      PKC_UNROLL
      for (int kk = 0; kk < PKC_FLASH_BR / 16; kk++) { /* dv += P'ᵀ·dy, dk += dSᵀ·q */
        unsigned pa[4], da[4];
        pkc_flash_acc_to_a(pa, s, kk);
        pkc_flash_acc_to_a(da, dp, kk);
        pkc_flash_mma_b<HS>(dv, pa, sY, 16 * kk);
        pkc_flash_mma_b<HS>(dk, da, sQ, 16 * kk);
      }
    }
    __syncthreads();
  }
  } /* the group's heads */
  PKC_UNROLL
  for (int r = 0; r < 2; r++) {
    int key = wk0 + g + 8 * r;
    if (key >= T) continue;
    float *dk_ = dks + ((pkc_i64)b * T + key) * ldkv + (pkc_i64)kh * HS + 2 * c;
    float *dv_ = dvs + ((pkc_i64)b * T + key) * ldkv + (pkc_i64)kh * HS + 2 * c;
    PKC_UNROLL
    for (int j = 0; j < HS / 8; j++) {
      dk_[8 * j] = dk[j][2 * r];
      dk_[8 * j + 1] = dk[j][2 * r + 1];
      dv_[8 * j] = dv[j][2 * r];
      dv_[8 * j + 1] = dv[j][2 * r + 1];
    }
  }
}

extern "C" __global__ void pkc_flash_attention_bwd_dq_bf16(float *dqkv, const float *lse, const float *Dv,
                                                           const unsigned short *dy,
                                                           const unsigned short *qkv, int B, int T, int C, int NH,
                                                           int causal, double p, pkc_u64 seed, pkc_u32 op,
                                                           const pkc_u32 *mbkey) {
  __shared__ __align__(16) unsigned short sKV[2 * PKC_FLASH_BC * PKC_FLASH_LD(PKC_FLASH_HS_MAX)];
  const PkcFlashDrop dr = pkc_flash_drop(p, seed, op, mbkey);
  const pkc_i64 tiles = (pkc_i64)B * NH * pkc_flash_ntiles(PKC_FLASH_T(T)), C3 = 3 * (pkc_i64)C;
  (void)sKV, (void)tiles, (void)lse, (void)Dv, (void)qkv, (void)dy, (void)causal, (void)dr, (void)C3;
  if (blockDim.x == PKC_FLASH_THREADS && C % NH == 0 && PKC_FLASH_T_OK(T)) switch (C / NH) {
#define PKC_FLASH_DQ_CASE(n)                                                                               \
  case n:                                                                                                 \
    for (pkc_i64 t = blockIdx.x; t < tiles; t += gridDim.x)                                               \
      pkc_flash_dq_tile<n>(dqkv, lse, Dv, dy, qkv, C3, qkv + C, qkv + 2 * C, C3, PKC_FLASH_T(T), NH, NH, causal, \
                           &dr, t, sKV, sKV + PKC_FLASH_BC * PKC_FLASH_LD(n));                            \
    return;
      PKC_FLASH_SIZES(PKC_FLASH_DQ_CASE)
#undef PKC_FLASH_DQ_CASE
    default: break;
    }
  pkc_flash_poison(dqkv, (pkc_i64)B * T * 3 * C);
}

extern "C" __global__ void pkc_flash_attention_bwd_dkv_bf16(float *dqkv, const float *lse, const float *Dv,
                                                            const unsigned short *dy,
                                                            const unsigned short *qkv, int B, int T, int C, int NH,
                                                            int causal, double p, pkc_u64 seed, pkc_u32 op,
                                                            const pkc_u32 *mbkey) {
  __shared__ __align__(16) unsigned short sQY[2 * PKC_FLASH_BR * PKC_FLASH_LD(PKC_FLASH_HS_MAX)];
  __shared__ float sL[2 * PKC_FLASH_BR];
  const PkcFlashDrop dr = pkc_flash_drop(p, seed, op, mbkey);
  const pkc_i64 tiles = (pkc_i64)B * NH * pkc_flash_ntiles(PKC_FLASH_T(T)), C3 = 3 * (pkc_i64)C;
  (void)sQY, (void)sL, (void)tiles, (void)lse, (void)Dv, (void)qkv, (void)dy, (void)causal, (void)dr, (void)C3;
  if (blockDim.x == PKC_FLASH_THREADS && C % NH == 0 && PKC_FLASH_T_OK(T)) switch (C / NH) {
#define PKC_FLASH_DKV_CASE(n)                                                                              \
  case n:                                                                                                 \
    for (pkc_i64 t = blockIdx.x; t < tiles; t += gridDim.x)                                               \
      pkc_flash_dkv_tile<n>(dqkv + C, dqkv + 2 * C, lse, Dv, dy, qkv, C3, qkv + C, qkv + 2 * C, C3,             \
                            PKC_FLASH_T(T), NH, NH, causal, &dr, t, sQY, sQY + PKC_FLASH_BR * PKC_FLASH_LD(n), sL); \
    return;
      PKC_FLASH_SIZES(PKC_FLASH_DKV_CASE)
#undef PKC_FLASH_DKV_CASE
    default: break;
    }
  pkc_flash_poison(dqkv, (pkc_i64)B * T * 3 * C);
}

/* Grouped-query attention's backward (attention_gqa), after pkc_attention_bwd_delta_f32
 * (C = NH·hs): dq[B,T,NH·hs], then dk and dv [B,T,KVH·hs], each key tile's block walking
 * the query tiles of every head of its group. q16, k16, v16, dy16 as bf16. Grids:
 * B·NH·ceil(T/64) for dq, B·KVH·ceil(T/64) for dkv. */
extern "C" __global__ void pkc_flash_attention_gqa_bwd_dq_bf16(float *dq, const float *lse, const float *Dv,
                                                               const unsigned short *dy, const unsigned short *q,
                                                               const unsigned short *k, const unsigned short *v,
                                                               int B, int T, int NH, int KVH, int hs, int causal,
                                                               double p, pkc_u64 seed, pkc_u32 op,
                                                               const pkc_u32 *mbkey) {
  __shared__ __align__(16) unsigned short sKV[2 * PKC_FLASH_BC * PKC_FLASH_LD(PKC_FLASH_HS_MAX)];
  const PkcFlashDrop dr = pkc_flash_drop(p, seed, op, mbkey);
  const pkc_i64 tiles = (pkc_i64)B * NH * pkc_flash_ntiles(PKC_FLASH_T(T));
  (void)sKV, (void)tiles, (void)lse, (void)Dv, (void)q, (void)k, (void)v, (void)dy, (void)causal, (void)dr;
  if (blockDim.x == PKC_FLASH_THREADS && KVH >= 1 && NH % KVH == 0 && PKC_FLASH_T_OK(T)) switch (hs) {
#define PKC_FLASH_GQA_DQ_CASE(n)                                                                           \
  case n:                                                                                                 \
    for (pkc_i64 t = blockIdx.x; t < tiles; t += gridDim.x)                                               \
      pkc_flash_dq_tile<n>(dq, lse, Dv, dy, q, (pkc_i64)NH * n, k, v, (pkc_i64)KVH * n, PKC_FLASH_T(T), NH, KVH, \
                           causal, &dr, t, sKV, sKV + PKC_FLASH_BC * PKC_FLASH_LD(n));                    \
    return;
      PKC_FLASH_SIZES(PKC_FLASH_GQA_DQ_CASE)
#undef PKC_FLASH_GQA_DQ_CASE
    default: break;
    }
  pkc_flash_poison(dq, (pkc_i64)B * T * NH * hs);
}

extern "C" __global__ void pkc_flash_attention_gqa_bwd_dkv_bf16(float *dk, float *dv, const float *lse,
                                                                const float *Dv, const unsigned short *dy,
                                                                const unsigned short *q, const unsigned short *k,
                                                                const unsigned short *v, int B, int T, int NH,
                                                                int KVH, int hs, int causal, double p, pkc_u64 seed,
                                                                pkc_u32 op, const pkc_u32 *mbkey) {
  __shared__ __align__(16) unsigned short sQY[2 * PKC_FLASH_BR * PKC_FLASH_LD(PKC_FLASH_HS_MAX)];
  __shared__ float sL[2 * PKC_FLASH_BR];
  const PkcFlashDrop dr = pkc_flash_drop(p, seed, op, mbkey);
  const pkc_i64 tiles = (pkc_i64)B * KVH * pkc_flash_ntiles(PKC_FLASH_T(T));
  (void)sQY, (void)sL, (void)tiles, (void)lse, (void)Dv, (void)q, (void)k, (void)v, (void)dy, (void)causal, (void)dr;
  if (blockDim.x == PKC_FLASH_THREADS && KVH >= 1 && NH % KVH == 0 && PKC_FLASH_T_OK(T)) switch (hs) {
#define PKC_FLASH_GQA_DKV_CASE(n)                                                                          \
  case n:                                                                                                 \
    for (pkc_i64 t = blockIdx.x; t < tiles; t += gridDim.x)                                               \
      pkc_flash_dkv_tile<n>(dk, dv, lse, Dv, dy, q, (pkc_i64)NH * n, k, v, (pkc_i64)KVH * n, PKC_FLASH_T(T), NH, \
                            KVH, causal, &dr, t, sQY, sQY + PKC_FLASH_BR * PKC_FLASH_LD(n), sL);          \
    return;
      PKC_FLASH_SIZES(PKC_FLASH_GQA_DKV_CASE)
#undef PKC_FLASH_GQA_DKV_CASE
    default: break;
    }
  pkc_flash_poison(dk, (pkc_i64)B * T * KVH * hs);
  pkc_flash_poison(dv, (pkc_i64)B * T * KVH * hs);
}

#endif /* PD2BW_CUDA_FLASH_BWD_CUH */
