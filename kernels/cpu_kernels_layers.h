/* kernels/cpu_kernels_layers.h — the CPU kernels of the ops that hold weights and of
 * the arithmetic between them: embedding and positions (rows of a table), linear and
 * matmul (through PK(gemm)), add, mul and scale, layernorm and rmsnorm.
 *
 * A part of kernels/cpu_kernels.h, not a header of its own: cpu_kernels.h includes it
 * inside each instantiation (float32, float64), where PK(), PK_REAL and Part 1's
 * helpers are defined, so it has no include guard; the text that generated programs
 * carry has this file in place of that #include (kernels/embed.cmake). Its own file
 * so that each family of kernels reads on its own (cpu_kernels.h held all of them in
 * ~1000 lines). */
#ifndef PK_REAL
#error "kernels/cpu_kernels_layers.h is a part of kernels/cpu_kernels.h: include that"
#endif

/* ---- embedding, positions ---------------------------------------------------- */

/* out[i,:] = table[ids[i],:] for the n = B·T tokens; table is [V,C]. A token id
 * outside [0,V) yields a zero row; returns how many there were. */
PK_API int64_t PK(embedding_fwd)(PK_REAL *out, const PK_REAL *table, const int32_t *ids,
                                 int64_t n, int C, int V) {
  int64_t bad = 0;
  PK_OMP(omp parallel for schedule(static) reduction(+ : bad) if (n * C >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= V) {
      memset(out + i * C, 0, (size_t)C * sizeof(PK_REAL));
      bad++;
    } else {
      memcpy(out + i * C, table + (int64_t)id * C, (size_t)C * sizeof(PK_REAL));
    }
  }
  return bad;
}

/* dtable[ids[i],:] += dy[i,:] (after zeroing dtable when !accumulate). Threads own
 * column chunks and walk the tokens in order: no races, same sum every run. Bad ids
 * are skipped and counted. */
PK_API int64_t PK(embedding_bwd)(PK_REAL *dtable, const PK_REAL *dy, const int32_t *ids,
                                 int64_t n, int C, int V, int accumulate) {
  if (!accumulate) PK(zero)(dtable, (int64_t)V * C);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += ids[i] < 0 || ids[i] >= V;
  int nchunks = (C + PK_COLS - 1) / PK_COLS;
  PK_OMP(omp parallel for schedule(static) if (n * C >= PK_PAR_MIN))
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * PK_COLS, c1 = c0 + PK_COLS < C ? c0 + PK_COLS : C;
    for (int64_t i = 0; i < n; i++) {
      int32_t id = ids[i];
      if (id < 0 || id >= V) continue;
      PK_REAL *d = dtable + (int64_t)id * C;
      const PK_REAL *g = dy + i * C;
      for (int c = c0; c < c1; c++) d[c] += g[c];
    }
  }
  return bad;
}

/* out[b,t,:] = table[t,:] (learned positions; table is [Tmax,C], T <= Tmax). */
PK_API void PK(positions_fwd)(PK_REAL *out, const PK_REAL *table, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    memcpy(out + (int64_t)b * T * C, table, (size_t)T * C * sizeof(PK_REAL));
}

/* dtable[t,:] (+)= Σ_b dy[b,t,:] for t < T; rows T..rows-1 are zeroed when
 * !accumulate (they received no gradient) and left alone otherwise. */
PK_API void PK(positions_bwd)(PK_REAL *dtable, const PK_REAL *dy, int B, int T, int C,
                              int rows, int accumulate) {
  if (!accumulate && rows > T)
    PK(zero)(dtable + (int64_t)T * C, (int64_t)(rows - T) * C);
  PK_OMP(omp parallel for schedule(static) if ((int64_t)B * T * C >= PK_PAR_MIN))
  for (int t = 0; t < T; t++) {
    PK_REAL *d = dtable + (int64_t)t * C;
    if (!accumulate) memset(d, 0, (size_t)C * sizeof(PK_REAL));
    for (int b = 0; b < B; b++) {
      const PK_REAL *g = dy + ((int64_t)b * T + t) * C;
      for (int c = 0; c < C; c++) d[c] += g[c];
    }
  }
}

/* ---- linear and matmul ------------------------------------------------------ */

/* y[M,N] = x[M,K]·W[K,N] + bias[N] (bias may be NULL). M = all leading dims. */
PK_API void PK(linear_fwd)(PK_REAL *y, const PK_REAL *x, const PK_REAL *W,
                           const PK_REAL *bias, int64_t M, int K, int N) {
  if (bias) {
    PK_OMP(omp parallel for schedule(static) if (M * N >= PK_PAR_MIN))
    for (int64_t i = 0; i < M; i++) memcpy(y + i * N, bias, (size_t)N * sizeof(PK_REAL));
  }
  PK(gemm)(0, 0, (int)M, N, K, 1, x, K, W, N, bias ? 1 : 0, y, N);
}

/* dx[M,K] = dy[M,N]·Wᵀ */
PK_API void PK(linear_dx)(PK_REAL *dx, const PK_REAL *dy, const PK_REAL *W, int64_t M,
                          int K, int N) {
  PK(gemm)(0, 1, (int)M, K, N, 1, dy, N, W, N, 0, dx, K);
}

/* dW[K,N] (+)= x[M,K]ᵀ·dy[M,N] */
PK_API void PK(linear_dw)(PK_REAL *dW, const PK_REAL *x, const PK_REAL *dy, int64_t M,
                          int K, int N, int accumulate) {
  PK(gemm)(1, 0, K, N, (int)M, 1, x, K, dy, N, accumulate ? 1 : 0, dW, N);
}

/* db[N] (+)= Σ_rows dy[M,N] (also add's gradient for a broadcast bias). */
PK_API void PK(bias_grad)(PK_REAL *db, const PK_REAL *dy, int64_t M, int N, int accumulate) {
  int nchunks = (N + PK_COLS - 1) / PK_COLS;
  PK_OMP(omp parallel for schedule(static) if (M * N >= PK_PAR_MIN))
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * PK_COLS, c1 = c0 + PK_COLS < N ? c0 + PK_COLS : N;
    PK_REAL acc[PK_COLS];
    for (int c = c0; c < c1; c++) acc[c - c0] = accumulate ? db[c] : 0;
    for (int64_t i = 0; i < M; i++)
      for (int c = c0; c < c1; c++) acc[c - c0] += dy[i * N + c];
    for (int c = c0; c < c1; c++) db[c] = acc[c - c0];
  }
}

/* y[M,N] = op(a)·op(b): op(a) is a [M,K] (ta = 0) or aᵀ with a [K,M] (ta = 1); op(b)
 * is b [K,N] (tb = 0) or bᵀ with b [N,K] (tb = 1, the tied LM head). */
PK_API void PK(matmul_fwd)(PK_REAL *y, const PK_REAL *a, const PK_REAL *b, int64_t M, int K,
                           int N, int ta, int tb) {
  PK(gemm)(ta, tb, (int)M, N, K, 1, a, ta ? (int)M : K, b, tb ? K : N, 0, y, N);
}

/* Gradient with respect to a, stored like a: d op(a) = dy·op(b)ᵀ. */
PK_API void PK(matmul_da)(PK_REAL *da, const PK_REAL *dy, const PK_REAL *b, int64_t M, int K,
                          int N, int ta, int tb) {
  if (!ta) /* da[M,K] = dy[M,N]·op(b)ᵀ */
    PK(gemm)(0, !tb, (int)M, K, N, 1, dy, N, b, tb ? K : N, 0, da, K);
  else /* da[K,M] = op(b)[K,N]·dyᵀ */
    PK(gemm)(tb, 1, K, (int)M, N, 1, b, tb ? K : N, dy, N, 0, da, (int)M);
}

/* Gradient with respect to b, stored like b: d op(b) = op(a)ᵀ·dy. With tb = 1 this
 * is ops.def's matmul_dw_t (dW[N,K] = Σ dyᵀ·x). */
PK_API void PK(matmul_db)(PK_REAL *db, const PK_REAL *a, const PK_REAL *dy, int64_t M, int K,
                          int N, int ta, int tb, int accumulate) {
  PK_REAL beta = accumulate ? 1 : 0;
  if (!tb) /* db[K,N] = op(a)ᵀ·dy */
    PK(gemm)(!ta, 0, K, N, (int)M, 1, a, ta ? (int)M : K, dy, N, beta, db, N);
  else /* db[N,K] = dyᵀ·op(a) */
    PK(gemm)(1, ta, N, K, (int)M, 1, dy, N, a, ta ? (int)M : K, beta, db, K);
}

#if PK_IS_F32
/* bf16 plans: the GEMMs reading the classifier's gradient g [M, N] as the bfloat16 the
 * forward stored (passes/layout.h, "the classifier's gradient in the stash"),
 * row-major and contiguous, each element widened exactly where it is read (no
 * float32 copy of g anywhere: the layout gives the backward none), float32 arithmetic.
 * Plain loops, not the BLAS hook (which wants float32 operands): each output element
 * is one sum in a fixed order, the threads split the output into fixed blocks, so the
 * bits never depend on the number of threads; the blocks reuse what they load (8 rows
 * of g per row of b, 256 columns of g for every row of dW). At GPT-2's LM head
 * (M = 256, N = 50257, K = 768) on this project's 2-core host (2026-12-02): 45 GFLOP/s
 * (matmul, tb = 0), 11 (tb = 1), 60 and 66 (dW, gt = 0 and 1), below SGEMM's
 * (bench/sgemm/RESULTS.md): the C program of a bf16 plan mirrors the GPU's storage, it
 * is not the fast path.
 * Float32 only (a bf16 plan has no float64 program).
 * pk_matmul_bf16a: y[M,K] = g·op(b), b [N,K] (tb = 0) or [K,N] (tb = 1), over n.
 * pk_gemm_dw_bf16: dW (+)= xᵀ·g, dW[K,N] (gt = 0, linear_dw), or gᵀ·x, dW[N,K]
 * (gt = 1, matmul_dw_t), x [M,K], over the rows i in order after dW's old value. */
#define PK_BF16_ROWS 8   /* pk_matmul_bf16a: rows of g per block */
#define PK_BF16_COLS 256 /* pk_gemm_dw_bf16 (gt = 0): columns of g per block */
PK_API void pk_matmul_bf16a(float *y, const uint16_t *g, const float *b, int64_t M, int N, int K, int tb) {
  int64_t nb = (M + PK_BF16_ROWS - 1) / PK_BF16_ROWS;
  PK_OMP(omp parallel for schedule(static) if (M * N * K >= PK_PAR_MIN))
  for (int64_t blk = 0; blk < nb; blk++) { /* PK_BF16_ROWS rows share each row of b */
    int64_t i0 = blk * PK_BF16_ROWS;
    int nr = (int)(M - i0 < PK_BF16_ROWS ? M - i0 : PK_BF16_ROWS);
    float *yi = y + i0 * K;
    const uint16_t *gi = g + i0 * N;
    if (tb) {
      for (int k = 0; k < K; k++) {
        const float *bk = b + (int64_t)k * N;
        float acc[PK_BF16_ROWS] = {0};
        for (int n = 0; n < N; n++)
          for (int r = 0; r < nr; r++) acc[r] += pk_bf16_to_f32_(gi[(int64_t)r * N + n]) * bk[n];
        for (int r = 0; r < nr; r++) yi[(int64_t)r * K + k] = acc[r];
      }
      continue;
    }
    for (int64_t k = 0; k < (int64_t)nr * K; k++) yi[k] = 0;
    for (int n = 0; n < N; n++) {
      const float *bn = b + (int64_t)n * K;
      for (int r = 0; r < nr; r++) {
        float a = pk_bf16_to_f32_(gi[(int64_t)r * N + n]), *yr = yi + (int64_t)r * K;
        for (int k = 0; k < K; k++) yr[k] += a * bn[k];
      }
    }
  }
}

PK_API void pk_gemm_dw_bf16(float *dW, const float *x, const uint16_t *g, int64_t M, int K, int N, int gt,
                            int accumulate) {
  if (gt) { /* dW[N,K]: row n += g[i,n] · x[i,:], over i */
    PK_OMP(omp parallel for schedule(static) if (M * N * K >= PK_PAR_MIN))
    for (int n = 0; n < N; n++) {
      float *d = dW + (int64_t)n * K;
      if (!accumulate)
        for (int c = 0; c < K; c++) d[c] = 0;
      for (int64_t i = 0; i < M; i++) {
        float a = pk_bf16_to_f32_(g[i * N + n]);
        const float *xi = x + i * K;
        for (int c = 0; c < K; c++) d[c] += a * xi[c];
      }
    }
    return;
  }
  /* dW[K,N]: row k += x[i,k] · g[i,:], over i; in blocks of PK_BF16_COLS columns, so
   * that a block of g stays in cache for every k */
  int nb = (N + PK_BF16_COLS - 1) / PK_BF16_COLS;
  PK_OMP(omp parallel for schedule(static) if (M * N * K >= PK_PAR_MIN))
  for (int blk = 0; blk < nb; blk++) {
    int c0 = blk * PK_BF16_COLS, nc = N - c0 < PK_BF16_COLS ? N - c0 : PK_BF16_COLS;
    for (int k = 0; k < K; k++) {
      float *d = dW + (int64_t)k * N + c0;
      if (!accumulate)
        for (int c = 0; c < nc; c++) d[c] = 0;
      for (int64_t i = 0; i < M; i++) {
        float a = x[i * K + k];
        const uint16_t *gi = g + i * N + c0;
        for (int c = 0; c < nc; c++) d[c] += a * pk_bf16_to_f32_(gi[c]);
      }
    }
  }
}
#endif

/* ---- add, mul, scale --------------------------------------------------------- */

/* y = a + b, same shapes (y may alias a or b). Its backward is the identity. */
PK_API void PK(add_fwd)(PK_REAL *y, const PK_REAL *a, const PK_REAL *b, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* y[M,N] = a[M,N] + bias[N] (broadcast over rows; y may alias a). Backward: da = dy,
 * dbias = bias_grad(dy). */
PK_API void PK(add_bias_fwd)(PK_REAL *y, const PK_REAL *a, const PK_REAL *bias, int64_t M,
                             int N) {
  PK_OMP(omp parallel for schedule(static) if (M * N >= PK_PAR_MIN))
  for (int64_t i = 0; i < M; i++)
    for (int c = 0; c < N; c++) y[i * N + c] = a[i * N + c] + bias[c];
}

/* y = a ⊙ b */
PK_API void PK(mul_fwd)(PK_REAL *y, const PK_REAL *a, const PK_REAL *b, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

/* da = dy ⊙ b, db = dy ⊙ a; either output may be NULL (no gradient wanted). */
PK_API void PK(mul_bwd)(PK_REAL *da, PK_REAL *db, const PK_REAL *dy, const PK_REAL *a,
                        const PK_REAL *b, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL g = dy[i];
    if (da) da[i] = g * b[i];
    if (db) db[i] = g * a[i];
  }
}

/* y = s·x (y may alias x); its backward is scale_fwd(dx, dy, s). */
PK_API void PK(scale_fwd)(PK_REAL *y, const PK_REAL *x, PK_REAL s, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}

/* ---- layernorm ---------------------------------------------------------------- */

/* y = (x - mean)·rstd·gamma + beta per row of C, rstd = 1/sqrt(var + eps) with the
 * biased variance (as PyTorch). stats (2·M reals, may be NULL) receives mean and
 * rstd of row r at [2r] and [2r+1], for a backward that wants to skip recomputing. */
PK_API void PK(layernorm_fwd)(PK_REAL *y, PK_REAL *stats, const PK_REAL *x,
                              const PK_REAL *gamma, const PK_REAL *beta, int64_t M, int C,
                              PK_REAL eps) {
  PK_OMP(omp parallel for schedule(static) if (M * C >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    const PK_REAL *xr = x + r * C;
    PK_REAL *yr = y + r * C;
    PK_REAL m = 0, v = 0;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    v /= C;
    PK_REAL rs = 1 / PK_SQRT(v + eps);
    for (int c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    if (stats) {
      stats[2 * r] = m;
      stats[2 * r + 1] = rs;
    }
  }
}

/* dx = rstd·(dxhat - mean(dxhat) - xhat·mean(dxhat·xhat)), dxhat = dy·gamma;
 * dgamma (+)= Σ_rows dy·xhat, dbeta (+)= Σ_rows dy (dgamma/dbeta may be NULL).
 * stats (2·M reals) is required: with have_stats it holds the forward's mean/rstd,
 * without it the kernel recomputes them into it (then it is just workspace). */
PK_API void PK(layernorm_bwd)(PK_REAL *dx, PK_REAL *dgamma, PK_REAL *dbeta, PK_REAL *stats,
                              int have_stats, const PK_REAL *dy, const PK_REAL *x,
                              const PK_REAL *gamma, int64_t M, int C, PK_REAL eps,
                              int accumulate) {
  PK_OMP(omp parallel for schedule(static) if (M * C >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    const PK_REAL *xr = x + r * C, *g = dy + r * C;
    PK_REAL m, rs;
    if (have_stats) {
      m = stats[2 * r];
      rs = stats[2 * r + 1];
    } else {
      PK_REAL v = 0;
      m = 0;
      for (int c = 0; c < C; c++) m += xr[c];
      m /= C;
      for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
      v /= C;
      rs = 1 / PK_SQRT(v + eps);
      stats[2 * r] = m;
      stats[2 * r + 1] = rs;
    }
    PK_REAL s1 = 0, s2 = 0;
    for (int c = 0; c < C; c++) {
      PK_REAL dxh = g[c] * gamma[c];
      s1 += dxh;
      s2 += dxh * (xr[c] - m) * rs;
    }
    s1 /= C;
    s2 /= C;
    PK_REAL *dr = dx + r * C;
    for (int c = 0; c < C; c++) {
      PK_REAL xh = (xr[c] - m) * rs;
      dr[c] = rs * (g[c] * gamma[c] - s1 - xh * s2);
    }
  }
  if (!dgamma && !dbeta) return;
  int nchunks = (C + PK_COLS - 1) / PK_COLS;
  PK_OMP(omp parallel for schedule(static) if (M * C >= PK_PAR_MIN))
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * PK_COLS, c1 = c0 + PK_COLS < C ? c0 + PK_COLS : C;
    PK_REAL ag[PK_COLS], ab[PK_COLS];
    for (int c = c0; c < c1; c++) {
      ag[c - c0] = accumulate && dgamma ? dgamma[c] : 0;
      ab[c - c0] = accumulate && dbeta ? dbeta[c] : 0;
    }
    for (int64_t r = 0; r < M; r++) {
      const PK_REAL *xr = x + r * C, *g = dy + r * C;
      PK_REAL m = stats[2 * r], rs = stats[2 * r + 1];
      for (int c = c0; c < c1; c++) {
        ag[c - c0] += g[c] * (xr[c] - m) * rs;
        ab[c - c0] += g[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      if (dgamma) dgamma[c] = ag[c - c0];
      if (dbeta) dbeta[c] = ab[c - c0];
    }
  }
}

/* ---- rmsnorm (Llama's: Hugging Face's LlamaRMSNorm in float32) ------------------ */

/* rstd = 1/sqrt(mean(x²) + eps) of one row of C. */
static inline PK_REAL PK(rms_rstd_)(const PK_REAL *xr, int C, PK_REAL eps) {
  PK_REAL s = 0;
  for (int c = 0; c < C; c++) s += xr[c] * xr[c];
  return 1 / PK_SQRT(s / C + eps);
}

/* y = x·rstd·gamma per row, in that order (LlamaRMSNorm's). */
PK_API void PK(rmsnorm_fwd)(PK_REAL *y, const PK_REAL *x, const PK_REAL *gamma, int64_t M, int C, PK_REAL eps) {
  PK_OMP(omp parallel for schedule(static) if (M * C >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    const PK_REAL *xr = x + r * C;
    PK_REAL rs = PK(rms_rstd_)(xr, C, eps);
    for (int c = 0; c < C; c++) y[r * C + c] = xr[c] * rs * gamma[c];
  }
}

/* dx = rstd·(dn - x·k), dn = dy·gamma, k = rstd²·mean(dn·x) (= rstd·mean(dn·n) with
 * n = x·rstd the normalised row). */
PK_API void PK(rmsnorm_bwd)(PK_REAL *dx, const PK_REAL *dy, const PK_REAL *x, const PK_REAL *gamma, int64_t M,
                            int C, PK_REAL eps) {
  PK_OMP(omp parallel for schedule(static) if (M * C >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    const PK_REAL *xr = x + r * C, *g = dy + r * C;
    PK_REAL rs = PK(rms_rstd_)(xr, C, eps), d = 0;
    for (int c = 0; c < C; c++) d += g[c] * gamma[c] * xr[c];
    PK_REAL k = d * rs * rs / C;
    for (int c = 0; c < C; c++) dx[r * C + c] = rs * (g[c] * gamma[c] - xr[c] * k);
  }
}

/* dgamma (+)= Σ_rows dy·x·rstd. Each chunk of columns recomputes its rows' rstd:
 * O(M·C) per chunk, small beside the GEMMs' O(M·C²) around it, and no stats pass
 * between two ops. */
PK_API void PK(rmsnorm_dgamma)(PK_REAL *dgamma, const PK_REAL *dy, const PK_REAL *x, int64_t M, int C, PK_REAL eps,
                               int accumulate) {
  int nchunks = (C + PK_COLS - 1) / PK_COLS;
  PK_OMP(omp parallel for schedule(static) if (M * C >= PK_PAR_MIN))
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * PK_COLS, c1 = c0 + PK_COLS < C ? c0 + PK_COLS : C;
    PK_REAL acc[PK_COLS];
    for (int c = c0; c < c1; c++) acc[c - c0] = accumulate ? dgamma[c] : 0;
    for (int64_t r = 0; r < M; r++) {
      const PK_REAL *xr = x + r * C;
      PK_REAL rs = PK(rms_rstd_)(xr, C, eps);
      for (int c = c0; c < c1; c++) acc[c - c0] += dy[r * C + c] * xr[c] * rs;
    }
    for (int c = c0; c < c1; c++) dgamma[c] = acc[c - c0];
  }
}

/* ---- rope (rotary position embedding, Hugging Face's rotate-half convention) ------ */

/* Pairs per angle table: the angles of one position are computed a chunk at a time. */
#define PK_ROPE_CHUNK 64

/* y = x rotated per head: x[B,T,C] (rows = B·T, row r at position t = r mod T), heads
 * of D = C/H, and for i < D/2 the pair (x_i, x_{i+D/2}) turned by sgn·a,
 * a = t·inv_i, inv_i = 1/theta^(2i/D), in the real type in the order Hugging Face's
 * LlamaRotaryEmbedding computes it (float32: its values to float32 rounding):
 *     y_i = x_i·cos a - x_{i+D/2}·sin a,   y_{i+D/2} = x_{i+D/2}·cos a + x_i·sin a.
 * Each position's cos and sin are computed once, for all its rows and heads. */
static inline void PK(rope_)(PK_REAL *y, const PK_REAL *x, int64_t rows, int T, int C, PK_REAL heads,
                             PK_REAL theta, PK_REAL sgn) {
  int H = (int)heads, D = C / H, half = D / 2;
  PK_OMP(omp parallel for schedule(static) if (rows * C >= PK_PAR_MIN))
  for (int t = 0; t < T; t++) {
    PK_REAL cs[PK_ROPE_CHUNK], sn[PK_ROPE_CHUNK];
    for (int i0 = 0; i0 < half; i0 += PK_ROPE_CHUNK) {
      int n = half - i0 < PK_ROPE_CHUNK ? half - i0 : PK_ROPE_CHUNK;
      for (int i = 0; i < n; i++) {
        PK_REAL inv = 1 / PK_POW(theta, (PK_REAL)(2 * (i0 + i)) / (PK_REAL)D);
        PK_REAL a = (PK_REAL)t * inv;
        cs[i] = PK_COS(a);
        sn[i] = sgn * PK_SIN(a);
      }
      for (int64_t r = t; r < rows; r += T)
        for (int h = 0; h < H; h++) {
          const PK_REAL *xa = x + r * C + h * D + i0, *xb = xa + half;
          PK_REAL *ya = y + r * C + h * D + i0, *yb = ya + half;
          for (int i = 0; i < n; i++) {
            PK_REAL u = xa[i], v = xb[i];
            ya[i] = u * cs[i] - v * sn[i];
            yb[i] = v * cs[i] + u * sn[i];
          }
        }
    }
  }
}

/* rope(x): the rotation by +a (see rope_). */
PK_API void PK(rope_fwd)(PK_REAL *y, const PK_REAL *x, int64_t rows, int T, int C, PK_REAL heads, PK_REAL theta) {
  PK(rope_)(y, x, rows, T, C, heads, theta, 1);
}

/* rope_bwd(dy) -> dx: the transpose of a rotation is its inverse, the rotation by -a:
 * dx_i = dy_i·cos a + dy_{i+D/2}·sin a, dx_{i+D/2} = dy_{i+D/2}·cos a - dy_i·sin a. */
PK_API void PK(rope_bwd)(PK_REAL *dx, const PK_REAL *dy, int64_t rows, int T, int C, PK_REAL heads,
                         PK_REAL theta) {
  PK(rope_)(dx, dy, rows, T, C, heads, theta, -1);
}
