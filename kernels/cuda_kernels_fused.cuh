/* kernels/cuda_kernels_fused.cuh — the fused CUDA kernels, each a softmax with what
 * surrounds it: softmax cross-entropy (the loss, and the classifier kernels that give
 * its gradient in the same pass, in float32 or as bfloat16) and multi-head
 * self-attention in fp32 (an online softmax, FlashAttention-2's backward; the
 * tensor-core kernels are cuda_flash_*.cuh).
 *
 * A part of kernels/cuda_kernels.cuh, not a header of its own: cuda_kernels.cuh
 * includes it inside its extern "C" block, after the 128-bit maps (pkc_map1,
 * pkc_map2) and the attention head-size macros it may use, so it has no include guard;
 * the library text that NVRTC compiles (kernels.cu) has this file in place of that
 * #include (kernels/embed.cmake), and the host emulator and the runtime include
 * cuda_kernels.cuh as before. Its own file so that each family of kernels reads on its
 * own (cuda_kernels.cuh held all of them in ~1100 lines), as cpu_kernels_<family>.h
 * do for the CPU twin; that file's conventions and cuda_kernels.cuh's launch
 * conventions hold here. */
#ifndef PD2BW_CUDA_KERNELS_CUH
#error "kernels/cuda_kernels_fused.cuh is a part of kernels/cuda_kernels.cuh: include that"
#endif

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

/* One counted row of the classifier (pkc_classifier_body): the row's loss into
 * *rowloss (thread 0), and the gradient's scale w/Σexp; *mx gets the row's max. The
 * target logit xt is read before the block's barriers, so before any write of the row. */
static __device__ float pkc_classifier_row(double *rowloss, float *mx_out, const float *x, int V, int tg,
                                           float w, float *sh, double *shd) {
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
  if (threadIdx.x == 0) *rowloss = log(s) + (double)mx - (double)xt;
  *mx_out = mx;
  return inv;
}

/* The classifier's gradient store: element i of the float32 gradient d32, or, with
 * bf16 != 0, its bfloat16 bits (round to nearest even, pkc_f32_to_bf16) into d16. Each
 * kernel passes bf16 as a constant, so once inlined only its own store remains. */
static __device__ __forceinline__ void pkc_classifier_store(float *d32, unsigned short *d16, int bf16, pkc_i64 i,
                                                           float g) {
  if (bf16) d16[i] = pkc_f32_to_bf16(g);
  else d32[i] = g;
}

/* The body of both classifier kernels (their comments say what they compute); only
 * the store differs (pkc_classifier_store: d32 or d16, the other unused). Each
 * gradient element is computed once, in float32, and stored once: the product
 * p·inv, then at the target the difference, each rounded to float32 (__fmul_rn
 * keeps the two from being contracted into one fma). These are the CPU's cross-entropy
 * gradient's two roundings, and the ones pkc_classifier_f32 made when it stored
 * p·inv everywhere and subtracted w at the target after a barrier: the same two
 * operations on the same values, so the same bits, now without the barrier or the
 * second pass over d[tg]. Each thread writes only the columns it read itself, and the
 * target logit was read before the row's first write (pkc_classifier_row), so d32 may
 * alias logits. */
static __device__ __forceinline__ void pkc_classifier_body(double *rowloss, float *d32, unsigned short *d16, int bf16,
                                                          const float *logits, const int *targets, pkc_i64 M,
                                                          int V, int ld, int ignore_index, float dloss,
                                                          const int *nvalid, int training, float *sh,
                                                          double *shd) {
  int nv = *nvalid;
  float w = nv ? dloss / (float)nv : 0.0f;
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    int tg = targets[r];
    const float *x = logits + r * ld;
    pkc_i64 o = r * ld;
    if (tg == ignore_index || tg < 0 || tg >= V) {
      if (threadIdx.x == 0) rowloss[r] = 0;
      if (training) /* float32 +0, or bf16 +0 (pkc_f32_to_bf16(0.0f) == 0) */
        for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) pkc_classifier_store(d32, d16, bf16, o + c, 0.0f);
      continue; /* uniform across the block */
    }
    float mx;
    float inv = pkc_classifier_row(&rowloss[r], &mx, x, V, tg, w, sh, shd);
    if (!training) continue;
    for (int c = (int)threadIdx.x; c < V; c += (int)blockDim.x) {
      float g = __fmul_rn(expf(x[c] - mx), inv);
      pkc_classifier_store(d32, d16, bf16, o + c, c == tg ? g - w : g);
    }
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
  pkc_classifier_body(rowloss, dlogits, 0, 0, logits, targets, M, V, ld, ignore_index, dloss, nvalid, training, sh,
                      shd);
}

/* The classifier of a bf16 plan (pd2bwc --precision bf16, fusion on): rowloss[r] as
 * pkc_classifier_f32, and with training != 0 the gradient, as bfloat16 bits (round to nearest
 * even, pkc_f32_to_bf16) into d16 (the logits' stored bf16 place: the backward's
 * LM-head GEMMs read it as their bf16 operand). Each element is rounded once from the
 * float32 value pkc_classifier_f32 (and the CPU's cross-entropy gradient) computes:
 * the same body (pkc_classifier_body), only the store differs. logits (float32) and d16
 * are distinct buffers; both have rows ld elements apart, V columns read and written.
 * Tested against pkc_classifier_f32 bit for bit (tests/cuda/op_check.c);
 * codegen/cgen_cuda_ops.c launches it (classifier_bwd says when). */
__global__ void pkc_classifier_bf16(double *rowloss, unsigned short *d16, const float *logits, const int *targets,
                                    pkc_i64 M, int V, int ld, int ignore_index, float dloss, const int *nvalid,
                                    int training) {
  __shared__ float sh[PKC_MAX_BLOCK];
  __shared__ double shd[PKC_MAX_BLOCK];
  pkc_classifier_body(rowloss, 0, d16, 1, logits, targets, M, V, ld, ignore_index, dloss, nvalid, training, sh, shd);
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
 * the kernels were not compiled for (PKC_ATT_HS, PKC_ATT_HS_MAX: cuda_kernels.cuh) gives NaN
 * outputs, which any check catches. These are the fp32 kernels, exact to the CPU;
 * a bf16 plan whose head size is a multiple of 16 launches their tensor-core twins
 * instead (cuda_flash_fwd.cuh, cuda_flash_bwd.cuh: mma.sync on bf16 operands, tiles
 * in shared memory, the same dropout masks), codegen/cgen_cuda_ops.c emit_attention. */

/* Fills a whole output with NaN (a head size the kernels were not compiled for). */
static __device__ void pkc_attention_poison(float *x, pkc_i64 n) {
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) x[i] = PKC_NAN;
}

/* Scratch floats the backward needs (D; the forward needs none). */
#define PKC_ATTENTION_WORK_ELEMS(B, T, NH) ((pkc_i64)(B) * (NH) * (T))

/* The forward's body over q rows (row stride ldq), k and v rows (row stride ldkv), NH
 * query heads of hs reading key/value head h/(NH/KVH); out [B,T,NH·hs]. */
static __device__ void pkc_attention_fwd_body(float *out, float *lse, const float *qs, pkc_i64 ldq,
                                              const float *ks, const float *vs, pkc_i64 ldkv, int B, int T,
                                              int NH, int KVH, int hs, int causal, double p, pkc_u64 seed,
                                              pkc_u32 op, const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  const int C = NH * hs, grp = NH / KVH;
  float scale = (float)(1.0 / sqrt((double)hs));
  pkc_u64 thr = pk_rng_threshold(p);
  float ksc = pkc_keep_scale(p);
  pkc_i64 rows = (pkc_i64)B * NH * T;
  for (pkc_i64 row = pkc_tid(); row < rows; row += pkc_nthreads()) {
    int t = (int)(row % T);
    pkc_i64 bh = row / T;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    const float *qb = qs + (pkc_i64)b * T * ldq + (pkc_i64)h * hs;
    const float *kb = ks + (pkc_i64)b * T * ldkv + (pkc_i64)(h / grp) * hs;
    const float *vb = vs + (pkc_i64)b * T * ldkv + (pkc_i64)(h / grp) * hs;
    float *o = out + ((pkc_i64)b * T + t) * C + (pkc_i64)h * hs;
    float q[PKC_ATT_HS_MAX], acc[PKC_ATT_HS_MAX];
    for (int d = 0; d < hs; d++) {
      q[d] = qb[(pkc_i64)t * ldq + d];
      acc[d] = 0;
    }
    int n = causal ? t + 1 : T;
    float m = -3.402823466e38f, l = 0;
    PhiloxCtr blk;
    pkc_u64 blk_id = ~0ull, e0 = (pkc_u64)row * (pkc_u64)T;
    for (int t2 = 0; t2 < n; t2++) {
      const float *k = kb + (pkc_i64)t2 * ldkv;
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
        w = pkc_keep(seed, op, microbatch, thr, e0 + (pkc_u64)t2, &blk, &blk_id) ? w * ksc : 0.0f;
      if (w != 0.0f) {
        const float *v = vb + (pkc_i64)t2 * ldkv;
        for (int d = 0; d < hs; d++) acc[d] += w * v[d];
      }
    }
    float inv = 1.0f / l;
    for (int d = 0; d < hs; d++) o[d] = acc[d] * inv;
    lse[row] = m + logf(l);
  }
}

__global__ void pkc_attention_fwd_f32(float *out, float *lse, const float *qkv, int B, int T, int C,
                                      int NH, int causal, double p, pkc_u64 seed, pkc_u32 op,
                                      const pkc_u32 *mbkey) {
  if (!PKC_ATT_HS_OK(C, NH)) { /* not the head size compiled for: poison, don't guess */
    pkc_attention_poison(out, (pkc_i64)B * T * C);
    pkc_attention_poison(lse, (pkc_i64)B * NH * T);
    return;
  }
  pkc_i64 C3 = 3 * (pkc_i64)C;
  pkc_attention_fwd_body(out, lse, qkv, C3, qkv + C, qkv + 2 * C, C3, B, T, NH, NH, PKC_ATT_HS_OF(C, NH), causal,
                         p, seed, op, mbkey);
}

/* Grouped-query attention (attention_gqa): q[B,T,NH·hs], k and v [B,T,KVH·hs]. */
__global__ void pkc_attention_gqa_fwd_f32(float *out, float *lse, const float *q, const float *k, const float *v,
                                          int B, int T, int NH, int KVH, int hs, int causal, double p,
                                          pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  if (!PKC_ATT_HS_OK(NH * hs, NH) || KVH < 1 || NH % KVH != 0) {
    pkc_attention_poison(out, (pkc_i64)B * T * NH * hs);
    pkc_attention_poison(lse, (pkc_i64)B * NH * T);
    return;
  }
  pkc_attention_fwd_body(out, lse, q, (pkc_i64)NH * hs, k, v, (pkc_i64)KVH * hs, B, T, NH, KVH,
                         PKC_ATT_HS_OF(NH * hs, NH), causal, p, seed, op, mbkey);
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

/* dq rows (stride ldq) of the backward, q, k, v as the forward's. */
static __device__ void pkc_attention_dq_body(float *dqs, const float *lse, const float *Dv, const float *dy,
                                             const float *qs, pkc_i64 ldq, const float *ks, const float *vs,
                                             pkc_i64 ldkv, int B, int T, int NH, int KVH, int hs, int causal,
                                             double p, pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  const int C = NH * hs, grp = NH / KVH;
  float scale = (float)(1.0 / sqrt((double)hs));
  pkc_u64 thr = pk_rng_threshold(p);
  float ksc = pkc_keep_scale(p);
  pkc_i64 rows = (pkc_i64)B * NH * T;
  for (pkc_i64 row = pkc_tid(); row < rows; row += pkc_nthreads()) {
    int t = (int)(row % T);
    pkc_i64 bh = row / T;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    const float *qb = qs + (pkc_i64)b * T * ldq + (pkc_i64)h * hs;
    const float *kb = ks + (pkc_i64)b * T * ldkv + (pkc_i64)(h / grp) * hs;
    const float *vb = vs + (pkc_i64)b * T * ldkv + (pkc_i64)(h / grp) * hs;
    float *dq = dqs + ((pkc_i64)b * T + t) * ldq + (pkc_i64)h * hs;
    const float *g = dy + ((pkc_i64)b * T + t) * C + (pkc_i64)h * hs;
    float q[PKC_ATT_HS_MAX], acc[PKC_ATT_HS_MAX];
    for (int d = 0; d < hs; d++) {
      q[d] = qb[(pkc_i64)t * ldq + d];
      acc[d] = 0;
    }
    float L = lse[row], D = Dv[row];
    int n = causal ? t + 1 : T;
    PhiloxCtr blk;
    pkc_u64 blk_id = ~0ull, e0 = (pkc_u64)row * (pkc_u64)T;
    for (int t2 = 0; t2 < n; t2++) {
      const float *k = kb + (pkc_i64)t2 * ldkv;
      const float *v = vb + (pkc_i64)t2 * ldkv;
      float s = 0, gv = 0;
      for (int d = 0; d < hs; d++) {
        s += q[d] * k[d];
        gv += g[d] * v[d];
      }
      float P = expf(s * scale - L);
      float mk =
          p > 0 ? (pkc_keep(seed, op, microbatch, thr, e0 + (pkc_u64)t2, &blk, &blk_id) ? ksc : 0.0f)
                : 1.0f;
      float ds = P * (gv * mk - D) * scale;
      for (int d = 0; d < hs; d++) acc[d] += ds * k[d];
    }
    for (int d = 0; d < hs; d++) dq[d] = acc[d];
  }
}

/* dk and dv rows (stride ldkv): one thread per key/value head's row j, summing over the
 * query heads of its group in order (deterministic, no atomics). */
static __device__ void pkc_attention_dkv_body(float *dks, float *dvs, const float *lse, const float *Dv,
                                              const float *dy, const float *qs, pkc_i64 ldq, const float *ks,
                                              const float *vs, pkc_i64 ldkv, int B, int T, int NH, int KVH, int hs,
                                              int causal, double p, pkc_u64 seed, pkc_u32 op,
                                              const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  const int C = NH * hs, grp = NH / KVH;
  float scale = (float)(1.0 / sqrt((double)hs));
  pkc_u64 thr = pk_rng_threshold(p);
  float ksc = pkc_keep_scale(p);
  pkc_i64 rows = (pkc_i64)B * KVH * T;
  for (pkc_i64 krow = pkc_tid(); krow < rows; krow += pkc_nthreads()) {
    int j = (int)(krow % T); /* the key/value row this thread owns */
    pkc_i64 bkh = krow / T;
    int b = (int)(bkh / KVH), kh = (int)(bkh % KVH);
    float *dk = dks + ((pkc_i64)b * T + j) * ldkv + (pkc_i64)kh * hs;
    float *dv = dvs + ((pkc_i64)b * T + j) * ldkv + (pkc_i64)kh * hs;
    float k[PKC_ATT_HS_MAX], v[PKC_ATT_HS_MAX], ak[PKC_ATT_HS_MAX], av[PKC_ATT_HS_MAX];
    for (int d = 0; d < hs; d++) {
      k[d] = ks[((pkc_i64)b * T + j) * ldkv + (pkc_i64)kh * hs + d];
      v[d] = vs[((pkc_i64)b * T + j) * ldkv + (pkc_i64)kh * hs + d];
      ak[d] = av[d] = 0;
    }
    for (int h = kh * grp; h < (kh + 1) * grp; h++) {
      pkc_i64 bh = (pkc_i64)b * NH + h;
      const float *qb = qs + (pkc_i64)b * T * ldq + (pkc_i64)h * hs;
      for (int t = causal ? j : 0; t < T; t++) {
        const float *q = qb + (pkc_i64)t * ldq;
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
          mk = (pkc_u64)pk_rng_u32(seed, op, microbatch, e) >= thr ? ksc : 0.0f;
        }
        float pd = P * mk; /* P' */
        float ds = P * (gv * mk - Dv[qrow]) * scale;
        for (int d = 0; d < hs; d++) {
          av[d] += pd * g[d];
          ak[d] += ds * q[d];
        }
      }
    }
    for (int d = 0; d < hs; d++) {
      dk[d] = ak[d];
      dv[d] = av[d];
    }
  }
}

__global__ void pkc_attention_bwd_dq_f32(float *dqkv, const float *lse, const float *Dv, const float *dy,
                                         const float *qkv, int B, int T, int C, int NH, int causal,
                                         double p, pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  pkc_i64 C3 = 3 * (pkc_i64)C;
  if (!PKC_ATT_HS_OK(C, NH)) {
    pkc_attention_poison(dqkv, (pkc_i64)B * T * C3);
    return;
  }
  pkc_attention_dq_body(dqkv, lse, Dv, dy, qkv, C3, qkv + C, qkv + 2 * C, C3, B, T, NH, NH, PKC_ATT_HS_OF(C, NH),
                        causal, p, seed, op, mbkey);
}

__global__ void pkc_attention_bwd_dkv_f32(float *dqkv, const float *lse, const float *Dv, const float *dy,
                                          const float *qkv, int B, int T, int C, int NH, int causal,
                                          double p, pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  pkc_i64 C3 = 3 * (pkc_i64)C;
  if (!PKC_ATT_HS_OK(C, NH)) {
    pkc_attention_poison(dqkv, (pkc_i64)B * T * C3);
    return;
  }
  pkc_attention_dkv_body(dqkv + C, dqkv + 2 * C, lse, Dv, dy, qkv, C3, qkv + C, qkv + 2 * C, C3, B, T, NH, NH,
                         PKC_ATT_HS_OF(C, NH), causal, p, seed, op, mbkey);
}

/* attention_gqa's backward, after pkc_attention_bwd_delta_f32 (C = NH·hs): dq, then dk
 * and dv of each key/value head summed over its group's query heads. */
__global__ void pkc_attention_gqa_bwd_dq_f32(float *dq, const float *lse, const float *Dv, const float *dy,
                                             const float *q, const float *k, const float *v, int B, int T, int NH,
                                             int KVH, int hs, int causal, double p, pkc_u64 seed, pkc_u32 op,
                                             const pkc_u32 *mbkey) {
  if (!PKC_ATT_HS_OK(NH * hs, NH) || KVH < 1 || NH % KVH != 0) {
    pkc_attention_poison(dq, (pkc_i64)B * T * NH * hs);
    return;
  }
  pkc_attention_dq_body(dq, lse, Dv, dy, q, (pkc_i64)NH * hs, k, v, (pkc_i64)KVH * hs, B, T, NH, KVH,
                        PKC_ATT_HS_OF(NH * hs, NH), causal, p, seed, op, mbkey);
}

__global__ void pkc_attention_gqa_bwd_dkv_f32(float *dk, float *dv, const float *lse, const float *Dv,
                                              const float *dy, const float *q, const float *k, const float *v,
                                              int B, int T, int NH, int KVH, int hs, int causal, double p,
                                              pkc_u64 seed, pkc_u32 op, const pkc_u32 *mbkey) {
  if (!PKC_ATT_HS_OK(NH * hs, NH) || KVH < 1 || NH % KVH != 0) {
    pkc_attention_poison(dk, (pkc_i64)B * T * KVH * hs);
    pkc_attention_poison(dv, (pkc_i64)B * T * KVH * hs);
    return;
  }
  pkc_attention_dkv_body(dk, dv, lse, Dv, dy, q, (pkc_i64)NH * hs, k, v, (pkc_i64)KVH * hs, B, T, NH, KVH,
                         PKC_ATT_HS_OF(NH * hs, NH), causal, p, seed, op, mbkey);
}
