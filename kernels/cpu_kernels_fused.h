/* kernels/cpu_kernels_fused.h — the two fused CPU kernels, each a softmax with what
 * surrounds it: softmax cross-entropy (the loss) and multi-head self-attention
 * (QKᵀ, causal mask, softmax, dropout, ·V, worked through in blocks of query rows).
 *
 * A part of kernels/cpu_kernels.h, not a header of its own: cpu_kernels.h includes it
 * inside each instantiation (float32, float64), where PK(), PK_REAL and Part 1's
 * helpers are defined, so it has no include guard; the text that generated programs
 * carry has this file in place of that #include (kernels/embed.cmake). Its own file
 * so that each family of kernels reads on its own (cpu_kernels.h held all of them in
 * ~1000 lines). */
#ifndef PK_REAL
#error "kernels/cpu_kernels_fused.h is a part of kernels/cpu_kernels.h: include that"
#endif

/* ---- fused softmax cross-entropy ------------------------------------------------- */

/* *loss = mean over rows r with targets[r] != ignore_index of
 * logsumexp(logits[r,:]) - logits[r, targets[r]]; 0 when no row counts. A target
 * outside [0,V) that is not ignore_index is skipped like an ignored one and
 * counted in the return value. Rows are summed in double, in order. */
PK_API int64_t PK(cross_entropy_fwd)(PK_REAL *loss, const PK_REAL *logits,
                                     const int32_t *targets, int64_t M, int V,
                                     int ignore_index) {
  /* Rows in PK_SUM_CHUNKS fixed chunks (in parallel), each summed in order, then the
   * chunks in order: the same bits on any number of threads. */
  double part[PK_SUM_CHUNKS];
  int64_t per = (M + PK_SUM_CHUNKS - 1) / PK_SUM_CHUNKS, nvalid = 0, bad = 0;
  PK_OMP(omp parallel for schedule(static) reduction(+ : nvalid, bad) if (M * V >= PK_PAR_MIN))
  for (int ch = 0; ch < PK_SUM_CHUNKS; ch++) {
    int64_t lo = ch * per, hi = lo + per < M ? lo + per : M;
    double acc = 0;
    for (int64_t r = lo; r < hi; r++) {
      int32_t tg = targets[r];
      if (tg == ignore_index) continue;
      if (tg < 0 || tg >= V) {
        bad++;
        continue;
      }
      const PK_REAL *x = logits + r * V;
      PK_REAL mx = PK(row_max_)(x, V);
      acc += log(PK(sum_exp_)(NULL, x, mx, V)) + (double)mx - (double)x[tg];
      nvalid++;
    }
    part[ch] = acc;
  }
  double sum = 0;
  for (int ch = 0; ch < PK_SUM_CHUNKS; ch++) sum += part[ch];
  *loss = nvalid ? (PK_REAL)(sum / (double)nvalid) : 0;
  return bad;
}

/* dlogits = dloss · (softmax(logits) - onehot(target)) / N_valid on counted rows,
 * 0 on ignored (and bad-target) rows. dloss is the upstream gradient of the loss
 * (1 for the loss itself). dlogits may alias logits (computed in place row by row:
 * the LM head's logits are the largest activation). */
PK_API void PK(cross_entropy_bwd)(PK_REAL *dlogits, const PK_REAL *logits,
                                  const int32_t *targets, int64_t M, int V, int ignore_index,
                                  PK_REAL dloss) {
  int64_t nvalid = 0;
  for (int64_t r = 0; r < M; r++)
    nvalid += targets[r] != ignore_index && targets[r] >= 0 && targets[r] < V;
  PK_REAL w = nvalid ? dloss / (PK_REAL)nvalid : 0;
  PK_OMP(omp parallel for schedule(static) if (M * V >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    int32_t tg = targets[r];
    const PK_REAL *x = logits + r * V;
    PK_REAL *d = dlogits + r * V;
    if (tg == ignore_index || tg < 0 || tg >= V) {
      memset(d, 0, (size_t)V * sizeof(PK_REAL));
      continue;
    }
    PK_REAL mx = PK(row_max_)(x, V);
    PK_REAL inv = (PK_REAL)(w / PK(sum_exp_)(d, x, mx, V)); /* d = e^(x - mx) */
    for (int c = 0; c < V; c++) d[c] *= inv;
    d[tg] -= w;
  }
}

/* ---- fused multi-head self-attention ---------------------------------------------- */

/* Softmax of one query row t of the scores s[0, nk) (already scaled) over keys
 * [0, n), zero on [n, nk), and *lse = log Σ_u e^(s_u) (natural log) for the backward;
 * with dropout (thr > 0), P' = P⊙mask·keep instead. The mask element of (bh, t, u)
 * is ((bh·T + t)·T + u) of rng's stream. */
PK_API void PK(att_softmax_row_)(PK_REAL *s, PK_REAL *lse, int n, int nk, int T, int bh, int t,
                                 uint64_t thr, PK_REAL keep_scale, PkRng rng) {
  PK_REAL mx = PK(row_max_)(s, n);
  double sum = PK(sum_exp_)(s, s, mx, n);
  PK_REAL inv = (PK_REAL)(1 / sum);
  *lse = (PK_REAL)((double)mx + log(sum));
  for (int u = n; u < nk; u++) s[u] = 0;
  if (thr > 0) {
    PhiloxCtr blk;
    uint64_t blk_id = UINT64_MAX, e0 = ((uint64_t)bh * T + (uint64_t)t) * (uint64_t)T;
    for (int u = 0; u < n; u++)
      s[u] = pk_keep_(rng, thr, e0 + (uint64_t)u, &blk, &blk_id) ? s[u] * inv * keep_scale : 0;
  } else {
    for (int u = 0; u < n; u++) s[u] *= inv;
  }
}

/* out[B,T,NH·hs] = multi-head attention, the queries' rows q (row stride ldq), keys k
 * and values v (row stride ldkv; sample b at b·T rows of each). Query head h uses
 * columns h·hs:(h+1)·hs of q and out, and key/value head h/(NH/KVH) (grouped-query
 * attention; KVH = NH is multi-head). Scores are scaled by 1/sqrt(hs); causal != 0
 * masks keys after the query. Dropout p applies to the probabilities: element
 * ((b·NH + h)·T + t)·T + u of rng's stream (philox.h), kept ones scaled 1/(1-p).
 * lse[B,NH,T] gets each query row's log-sum-exp of the scaled scores (natural log),
 * as the CUDA flash forward writes it: the backward recomputes P = e^(s - lse)
 * from it, with no softmax reduction over the keys.
 *
 * work: pk_attention_work_elems(B,T,NH) reals. Per (batch, head) in turn, blocks of
 * query rows as many as fit in work: S = scale·Q·Kᵀ and O = P'·V are GEMMs through
 * the hook (BLAS threads them; a causal block stops at its last row's key), the row
 * softmax runs rows in parallel. */
PK_API void PK(attention_core_fwd_)(PK_REAL *out, PK_REAL *lse, const PK_REAL *qs, int ldq, const PK_REAL *ks,
                                    const PK_REAL *vs, int ldkv, PK_REAL *work, int B, int T, int NH, int KVH,
                                    int hs, int causal, double p, PkRng rng) {
  int C = NH * hs, grp = NH / KVH;
  int R = (int)(pk_attention_work_elems(B, T, NH) / T); /* rows per block */
  R = R < T ? R : T;
  PK_REAL scale = (PK_REAL)(1.0 / sqrt((double)hs));
  uint64_t thr = pk_rng_threshold(p);
  PK_REAL keep_scale = p < 1 ? (PK_REAL)(1.0 / (1.0 - p)) : 0;
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const PK_REAL *q = qs + (int64_t)b * T * ldq + (int64_t)h * hs;
    const PK_REAL *k = ks + (int64_t)b * T * ldkv + (int64_t)(h / grp) * hs;
    const PK_REAL *v = vs + (int64_t)b * T * ldkv + (int64_t)(h / grp) * hs;
    PK_REAL *o = out + (int64_t)b * T * C + (int64_t)h * hs;
    for (int t0 = 0; t0 < T; t0 += R) {
      int t1 = t0 + R < T ? t0 + R : T, nk = causal ? t1 : T;
      PK(gemm)(0, 1, t1 - t0, nk, hs, scale, q + (int64_t)t0 * ldq, ldq, k, ldkv, 0, work, nk);
      PK_OMP(omp parallel for schedule(static) if ((int64_t)(t1 - t0) * nk >= PK_PAR_MIN))
      for (int t = t0; t < t1; t++)
        PK(att_softmax_row_)(work + (int64_t)(t - t0) * nk, lse + (int64_t)bh * T + t,
                             causal ? t + 1 : T, nk, T, bh, t, thr, keep_scale, rng);
      PK(gemm)(0, 0, t1 - t0, hs, nk, 1, work, nk, v, ldkv, 0, o + (int64_t)t0 * C, C);
    }
  }
}

/* dq, dk, dv (overwritten; row strides ldq, ldkv as the forward's q, k, v) from
 * dy[B,T,NH·hs], the forward's q, k, v, its output out and its lse[B,NH,T], with the
 * same heads/causal/p/rng as the forward (the same mask is replayed). dk and dv of a
 * key/value head sum over the query heads of its group. FlashAttention-2's backward:
 * per query row t, D_t = dy_t·out_t (= Σ_u P_u·dP_u, with dropout too: Σ_u P'_u
 * (dy_t·v_u) = dy_t·out_t), so no pass over the keys reduces anything. Per block of
 * rows:
 *   P = e^(S - lse), P' = P⊙mask/(1-p)                         (recomputed)
 *   dV += P'ᵀ·dy, dP' = dy·Vᵀ, dP = dP'⊙mask/(1-p), dS = P⊙(dP - D),
 *   dQ = scale·dS·K, dK += scale·dSᵀ·Q.
 * work holds two blocks: P, and P' then dP' then dS. */
PK_API void PK(attention_core_bwd_)(PK_REAL *dqs, PK_REAL *dks, PK_REAL *dvs, const PK_REAL *dy,
                                    const PK_REAL *qs, int ldq, const PK_REAL *ks, const PK_REAL *vs, int ldkv,
                                    const PK_REAL *out, const PK_REAL *lse, PK_REAL *work, int B, int T, int NH,
                                    int KVH, int hs, int causal, double p, PkRng rng) {
  int C = NH * hs, grp = NH / KVH;
  int R = (int)(pk_attention_work_elems(B, T, NH) / (2 * (int64_t)T)); /* rows per block */
  R = R < T ? R : T;
  PK_REAL scale = (PK_REAL)(1.0 / sqrt((double)hs));
  uint64_t thr = pk_rng_threshold(p);
  PK_REAL keep_scale = p < 1 ? (PK_REAL)(1.0 / (1.0 - p)) : 0;
  PK_REAL *P = work, *D = work + (int64_t)R * T;
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const PK_REAL *q = qs + (int64_t)b * T * ldq + (int64_t)h * hs;
    const PK_REAL *k = ks + (int64_t)b * T * ldkv + (int64_t)(h / grp) * hs;
    const PK_REAL *v = vs + (int64_t)b * T * ldkv + (int64_t)(h / grp) * hs;
    const PK_REAL *g = dy + (int64_t)b * T * C + (int64_t)h * hs;
    const PK_REAL *o = out + (int64_t)b * T * C + (int64_t)h * hs;
    const PK_REAL *lr = lse + (int64_t)bh * T;
    PK_REAL *dq = dqs + (int64_t)b * T * ldq + (int64_t)h * hs;
    PK_REAL *dk = dks + (int64_t)b * T * ldkv + (int64_t)(h / grp) * hs;
    PK_REAL *dv = dvs + (int64_t)b * T * ldkv + (int64_t)(h / grp) * hs;
    if (h % grp == 0)
      for (int t = 0; t < T; t++) { /* dK and dV accumulate over the blocks and the group's heads */
        memset(dk + (int64_t)t * ldkv, 0, (size_t)hs * sizeof(PK_REAL));
        memset(dv + (int64_t)t * ldkv, 0, (size_t)hs * sizeof(PK_REAL));
      }
    for (int t0 = 0; t0 < T; t0 += R) {
      int t1 = t0 + R < T ? t0 + R : T, nr = t1 - t0, nk = causal ? t1 : T;
      PK(gemm)(0, 1, nr, nk, hs, scale, q + (int64_t)t0 * ldq, ldq, k, ldkv, 0, P, nk);
      PK_OMP(omp parallel for schedule(static) if ((int64_t)nr * nk >= PK_PAR_MIN))
      for (int t = t0; t < t1; t++) {
        PK_REAL *pr = P + (int64_t)(t - t0) * nk, *dr = D + (int64_t)(t - t0) * nk;
        int n = causal ? t + 1 : T;
        PK_REAL l = lr[t];
        for (int u = 0; u < n; u++) pr[u] = PK_EXPV(pr[u] - l);
        for (int u = n; u < nk; u++) pr[u] = 0;
        if (thr > 0) { /* P' = P⊙mask·keep_scale, for dV */
          PhiloxCtr blk;
          uint64_t blk_id = UINT64_MAX, e0 = ((uint64_t)bh * T + (uint64_t)t) * (uint64_t)T;
          for (int u = 0; u < nk; u++)
            dr[u] = u < n && pk_keep_(rng, thr, e0 + (uint64_t)u, &blk, &blk_id)
                        ? pr[u] * keep_scale
                        : 0;
        }
      }
      const PK_REAL *gb = g + (int64_t)t0 * C;
      PK(gemm)(1, 0, nk, hs, nr, 1, thr > 0 ? D : P, nk, gb, C, 1, dv, ldkv); /* dV */
      PK(gemm)(0, 1, nr, nk, hs, 1, gb, C, v, ldkv, 0, D, nk);                 /* dP' */
      PK_OMP(omp parallel for schedule(static) if ((int64_t)nr * nk >= PK_PAR_MIN))
      for (int t = t0; t < t1; t++) {
        PK_REAL *pr = P + (int64_t)(t - t0) * nk, *dr = D + (int64_t)(t - t0) * nk;
        const PK_REAL *gt = g + (int64_t)t * C, *ot = o + (int64_t)t * C;
        int n = causal ? t + 1 : T;
        if (thr > 0) {
          PhiloxCtr blk;
          uint64_t blk_id = UINT64_MAX, e0 = ((uint64_t)bh * T + (uint64_t)t) * (uint64_t)T;
          for (int u = 0; u < n; u++)
            dr[u] = pk_keep_(rng, thr, e0 + (uint64_t)u, &blk, &blk_id) ? dr[u] * keep_scale : 0;
        }
        double dot = 0; /* D_t = dy_t·out_t */
        for (int kk = 0; kk < hs; kk++) dot += (double)gt[kk] * (double)ot[kk];
        PK_REAL Dt = (PK_REAL)dot;
        for (int u = 0; u < n; u++) dr[u] = pr[u] * (dr[u] - Dt);
        for (int u = n; u < nk; u++) dr[u] = 0;
      }
      PK(gemm)(0, 0, nr, hs, nk, scale, D, nk, k, ldkv, 0, dq + (int64_t)t0 * ldq, ldq);   /* dQ */
      PK(gemm)(1, 0, nk, hs, nr, scale, D, nk, q + (int64_t)t0 * ldq, ldq, 1, dk, ldkv); /* dK */
    }
  }
}

/* attention over qkv[B,T,3C] packed as GPT-2's c_attn emits it: q = [..,0:C],
 * k = [..,C:2C], v = [..,2C:3C] (attention_core_fwd_ with NH key/value heads). */
PK_API void PK(attention_fwd)(PK_REAL *out, PK_REAL *lse, const PK_REAL *qkv, PK_REAL *work,
                              int B, int T, int C, int NH, int causal, double p, PkRng rng) {
  PK(attention_core_fwd_)(out, lse, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, work, B, T, NH, NH, C / NH, causal,
                          p, rng);
}

/* dqkv[B,T,3C] (overwritten) from dy[B,T,C], the forward's qkv, out and lse. */
PK_API void PK(attention_bwd)(PK_REAL *dqkv, const PK_REAL *dy, const PK_REAL *qkv,
                              const PK_REAL *out, const PK_REAL *lse, PK_REAL *work, int B, int T,
                              int C, int NH, int causal, double p, PkRng rng) {
  PK(attention_core_bwd_)(dqkv, dqkv + C, dqkv + 2 * C, dy, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, out, lse,
                          work, B, T, NH, NH, C / NH, causal, p, rng);
}

/* Grouped-query attention over separate q[B,T,NH·hs], k and v [B,T,KVH·hs]
 * (attention_gqa; KVH divides NH). */
PK_API void PK(attention_gqa_fwd)(PK_REAL *out, PK_REAL *lse, const PK_REAL *q, const PK_REAL *k,
                                  const PK_REAL *v, PK_REAL *work, int B, int T, int NH, int KVH, int hs,
                                  int causal, double p, PkRng rng) {
  PK(attention_core_fwd_)(out, lse, q, NH * hs, k, v, KVH * hs, work, B, T, NH, KVH, hs, causal, p, rng);
}

/* dq, dk, dv (overwritten) of attention_gqa. */
PK_API void PK(attention_gqa_bwd)(PK_REAL *dq, PK_REAL *dk, PK_REAL *dv, const PK_REAL *dy, const PK_REAL *q,
                                  const PK_REAL *k, const PK_REAL *v, const PK_REAL *out, const PK_REAL *lse,
                                  PK_REAL *work, int B, int T, int NH, int KVH, int hs, int causal, double p,
                                  PkRng rng) {
  PK(attention_core_bwd_)(dq, dk, dv, dy, q, NH * hs, k, v, KVH * hs, out, lse, work, B, T, NH, KVH, hs, causal,
                          p, rng);
}
