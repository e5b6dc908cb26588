/* kernels/cpu_kernels_activations.h — the CPU kernels of the elementwise and
 * row-wise nonlinearities, gelu, relu, silu and softmax; of dropout, the random op (its
 * mask from philox.h through pk_keep_); and of gather, which picks rows by position.
 *
 * A part of kernels/cpu_kernels.h, not a header of its own: cpu_kernels.h includes it
 * inside each instantiation (float32, float64), where PK(), PK_REAL and Part 1's
 * helpers are defined, so it has no include guard; the text that generated programs
 * carry has this file in place of that #include (kernels/embed.cmake). Its own file
 * so that each family of kernels reads on its own (cpu_kernels.h held all of them in
 * ~1000 lines). */
#ifndef PK_REAL
#error "kernels/cpu_kernels_activations.h is a part of kernels/cpu_kernels.h: include that"
#endif

/* ---- gelu, relu, softmax ----------------------------------------------------- */

/* GELU, tanh form (GPT-2, BERT): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
 * Computed through 0.5·(1 + tanh(u)) = σ(2u) = 1/(1 + e^(-2u)), so one exp per
 * element (PK_EXPV, which vectorises) and no cancellation for large negative x
 * (1 + tanh(u) computed from tanh would lose all digits there). The backward uses
 * 1 - tanh² = 4·σ·(1-σ) and 1 - σ = e^(-2u)·σ. Exact in float64 up to rounding;
 * float32 within a few ulp of the float64 kernel. */
#define PK_GELU_K ((PK_REAL)0.7978845608028654)
#define PK_GELU_A ((PK_REAL)0.044715)

/* One element: what gelu_fwd computes, and what generated code calls inside its
 * fused elementwise loops, so both give the same bits. */
static inline PK_REAL PK(gelu_)(PK_REAL v) {
  PK_REAL e = PK_EXPV((PK_REAL)-2 * PK_GELU_K * (v + PK_GELU_A * v * v * v));
  return v / (1 + e);
}

PK_API void PK(gelu_fwd)(PK_REAL *y, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = PK(gelu_)(x[i]);
}

PK_API void PK(gelu_bwd)(PK_REAL *dx, const PK_REAL *dy, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL v = x[i];
    PK_REAL e = PK_EXPV((PK_REAL)-2 * PK_GELU_K * (v + PK_GELU_A * v * v * v));
    PK_REAL sg = 1 / (1 + e); /* σ(2u) = 0.5·(1 + tanh u) */
    PK_REAL du = PK_GELU_K * (1 + 3 * PK_GELU_A * v * v);
    dx[i] = dy[i] * (sg + 2 * v * sg * (e * sg) * du);
  }
}

PK_API void PK(relu_fwd)(PK_REAL *y, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}

/* dx = dy where x > 0, else 0 (the subgradient 0 at x = 0). */
PK_API void PK(relu_bwd)(PK_REAL *dx, const PK_REAL *dy, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : 0;
}

/* SiLU: x·σ(x) = x / (1 + e^(-x)), one exp per element (PK_EXPV, finite: no
 * inf·0 for large |x|). One element, as silu_fwd and fused loops compute it. */
static inline PK_REAL PK(silu_)(PK_REAL v) { return v / (1 + PK_EXPV(-v)); }

PK_API void PK(silu_fwd)(PK_REAL *y, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = PK(silu_)(x[i]);
}

/* dx = dy·σ·(1 + x·(1 - σ)), PyTorch's form. */
PK_API void PK(silu_bwd)(PK_REAL *dx, const PK_REAL *dy, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL s = 1 / (1 + PK_EXPV(-x[i]));
    dx[i] = dy[i] * s * (1 + x[i] * (1 - s));
  }
}

/* Softmax over each row of N (max-subtracted, so large logits do not overflow). */
PK_API void PK(softmax_fwd)(PK_REAL *y, const PK_REAL *x, int64_t M, int N) {
  PK_OMP(omp parallel for schedule(static) if (M * N >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    const PK_REAL *xr = x + r * N;
    PK_REAL *yr = y + r * N;
    PK_REAL mx = PK(row_max_)(xr, N);
    PK_REAL s = (PK_REAL)PK(sum_exp_)(yr, xr, mx, N);
    for (int c = 0; c < N; c++) yr[c] /= s;
  }
}

/* dx = y ⊙ (dy - Σ dy⊙y) per row, y the forward output. */
PK_API void PK(softmax_bwd)(PK_REAL *dx, const PK_REAL *dy, const PK_REAL *y, int64_t M,
                            int N) {
  PK_OMP(omp parallel for schedule(static) if (M * N >= PK_PAR_MIN))
  for (int64_t r = 0; r < M; r++) {
    const PK_REAL *g = dy + r * N, *yr = y + r * N;
    PK_REAL s = 0;
    for (int c = 0; c < N; c++) s += g[c] * yr[c];
    for (int c = 0; c < N; c++) dx[r * N + c] = yr[c] * (g[c] - s);
  }
}

/* ---- dropout ----------------------------------------------------------------------- */

/* y = x ⊙ mask / (1-p); element e is dropped iff its Philox draw is below
 * pk_rng_threshold(p) (philox.h). p = 0 copies; p >= 1 zeroes. y may alias x. */
PK_API void PK(dropout_fwd)(PK_REAL *y, const PK_REAL *x, int64_t n, double p, PkRng rng) {
  if (!(p > 0)) {
    PK(copy)(y, x, n);
    return;
  }
  uint64_t thr = pk_rng_threshold(p);
  PK_REAL keep_scale = p < 1 ? (PK_REAL)(1.0 / (1.0 - p)) : 0;
  int64_t nblk = (n + 3) / 4;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t blk = 0; blk < nblk; blk++) {
    PhiloxCtr r = pk_rng_block(rng.seed, rng.op, rng.microbatch, (uint64_t)blk);
    for (int j = 0; j < 4 && blk * 4 + j < n; j++) {
      int64_t i = blk * 4 + j;
      y[i] = (uint64_t)r.v[j] >= thr ? x[i] * keep_scale : 0;
    }
  }
}

/* dx = dy ⊙ mask / (1-p) with the forward's mask: same PkRng, same n. */
PK_API void PK(dropout_bwd)(PK_REAL *dx, const PK_REAL *dy, int64_t n, double p, PkRng rng) {
  PK(dropout_fwd)(dx, dy, n, p, rng);
}

/* ---- gather ------------------------------------------------------------------------ */

/* y[b,j,:] = x[b,pos[b,j],:]; x is [B,T,C], pos [B,P]. A position outside [0,T)
 * gives a zero row; returns how many there were. */
PK_API int64_t PK(gather_fwd)(PK_REAL *y, const PK_REAL *x, const int32_t *pos, int B, int T,
                              int P, int C) {
  int64_t bad = 0;
  for (int b = 0; b < B; b++)
    for (int j = 0; j < P; j++) {
      int32_t t = pos[(int64_t)b * P + j];
      PK_REAL *yr = y + ((int64_t)b * P + j) * C;
      if (t < 0 || t >= T) {
        memset(yr, 0, (size_t)C * sizeof(PK_REAL));
        bad++;
      } else {
        memcpy(yr, x + ((int64_t)b * T + t) * C, (size_t)C * sizeof(PK_REAL));
      }
    }
  return bad;
}

/* dx = 0, then dx[b,pos[b,j],:] += dy[b,j,:] (a position may repeat). */
PK_API int64_t PK(gather_bwd)(PK_REAL *dx, const PK_REAL *dy, const int32_t *pos, int B,
                              int T, int P, int C) {
  int64_t bad = 0;
  PK(zero)(dx, (int64_t)B * T * C);
  for (int b = 0; b < B; b++)
    for (int j = 0; j < P; j++) {
      int32_t t = pos[(int64_t)b * P + j];
      if (t < 0 || t >= T) {
        bad++;
        continue;
      }
      PK_REAL *d = dx + ((int64_t)b * T + t) * C;
      const PK_REAL *g = dy + ((int64_t)b * P + j) * C;
      for (int c = 0; c < C; c++) d[c] += g[c];
    }
  return bad;
}
