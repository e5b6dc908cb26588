/* kernels/cpu_kernels.h — every CPU kernel of pd2bw, forward and backward.
 *
 * This folder owns the numerics of the CPU backend: the kernels of every primitive op
 * of ir/ops.def (and the optimizer steps), the counter-based RNG (philox.h) and the
 * embedded copy of both that the code generator pastes into each stageN.c.
 *
 * Why one header of static functions: a generated stageN.c must compile on the
 * machine that runs the plan with nothing but the system compiler, so the code
 * generator pastes philox.h and then this file verbatim at its top (the build embeds
 * the text: see pk_kernels_src.h made by kernels/embed.cmake). The
 * shapes the generated code passes are compile-time constants, so `cc -O3` inlines
 * and specialises the loops. The sequential executor and the tests include the same
 * text, so there is exactly one implementation of each op.
 *
 * Why a name macro and a real-type macro: the kernels are written once and
 * instantiated per real type. Including this file plainly gives the float32
 * kernels, named pk_<op>_f32; defining PK_F64 before a (second) inclusion gives the
 * float64 ones, pk_<op>_f64, which the finite-difference tests use:
 *     #include "kernels/cpu_kernels.h"          // pk_..._f32
 *     #define PK_F64
 *     #include "kernels/cpu_kernels.h"          // pk_..._f64
 *
 * GEMMs go through one hook, pk_sgemm_fn (row-major, below). The float32 kernels
 * call the hook set by pk_set_sgemm() (the runtime hands a stage .so pd_sgemm from
 * runtime/blas/blas.h); with no hook set they fall back to a naive loop, so a kernel
 * never crashes for want of a BLAS. The float64 kernels always use the naive loop.
 *
 * Conventions for every kernel:
 *  - Tensors are dense, row-major, and do not overlap unless a comment says so.
 *  - Activation outputs and activation gradients are overwritten. Parameter
 *    gradients (embedding, positions, linear dW/db, matmul weight, layernorm
 *    gamma/beta) take `accumulate`: 0 overwrites, 1 adds into the buffer (how the
 *    runtime sums gradients over the microbatches of a batch without a copy).
 *  - Linear weights are [in, out] (y = x·W + b), as in ir/ops.def.
 *  - Kernels that index with data (token ids, targets, gather positions) never read
 *    or write out of bounds: they skip a bad index and return how many they
 *    skipped, so the runtime can report the data error.
 *  - Reductions that feed the loss or the gradient norm are deterministic: their
 *    summation order does not depend on the number of threads.
 *  - Random ops take a PkRng (seed, op id, global microbatch index); their
 *    backward replays the forward's mask from the same PkRng (philox.h).
 *
 * OpenMP pragmas are spelled through PK_OMP so that a build without -fopenmp sees
 * nothing (and -Wunknown-pragmas stays quiet).
 */

/* ===== Part 1: shared by every instantiation (included once) ============== */
#ifndef PD2BW_CPU_KERNELS_COMMON
#define PD2BW_CPU_KERNELS_COMMON

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef PD2BW_PHILOX_H
#include "philox.h"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PK_API static __attribute__((unused))
#else
#define PK_API static
#endif

#define PK_PRAGMA_(x) _Pragma(#x)
#if defined(_OPENMP)
#define PK_OMP(x) PK_PRAGMA_(x)
#else
#define PK_OMP(x)
#endif

/* Loops shorter than this run on one thread: a fork/join costs more. */
#define PK_PAR_MIN 16384

/* Row-major GEMM, the one BLAS entry point every kernel uses:
 *     C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C[M,N]
 * transa == 0: A is stored M×K (A[i*lda + p], lda >= K), op(A) = A;
 * transa != 0: A is stored K×M (A[p*lda + i], lda >= M), op(A) = Aᵀ;
 * likewise B: transb == 0, stored K×N (ldb >= N); transb != 0, stored N×K (ldb >= K).
 * C is stored M×N (C[i*ldc + j], ldc >= N). beta == 0 means C is not read (NaNs in
 * it do not propagate). This is cblas_sgemm(CblasRowMajor, ...) exactly. */
typedef void (*pk_sgemm_fn)(int transa, int transb, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta,
                            float *C, int ldc);

/* One hook per translation unit (the kernels are static). A stage .so sets it once,
 * from the pointer the runtime passes to its init function. */
static pk_sgemm_fn pk_sgemm_hook_;
PK_API void pk_set_sgemm(pk_sgemm_fn fn) { pk_sgemm_hook_ = fn; }
PK_API pk_sgemm_fn pk_get_sgemm(void) { return pk_sgemm_hook_; }

/* The identity of one random op's stream in one microbatch (philox.h). */
typedef struct PkRng {
  uint64_t seed;       /* training seed */
  uint32_t op;         /* op id of the forward op (its backward replays it) */
  uint32_t microbatch; /* global microbatch index */
} PkRng;

/* True when element e of the stream is kept by dropout with threshold thr
 * (thr = pk_rng_threshold(p)). `blk`/`blk_id` cache the current block of four. */
static inline int pk_keep_(PkRng r, uint64_t thr, uint64_t e, PhiloxCtr *blk,
                           uint64_t *blk_id) {
  if ((e >> 2) != *blk_id) {
    *blk_id = e >> 2;
    *blk = pk_rng_block(r.seed, r.op, r.microbatch, e >> 2);
  }
  return (uint64_t)blk->v[e & 3] >= thr;
}

/* Scratch elements attention_fwd/bwd need: T per (batch, head), and at least 2·T. The
 * kernels work through the T query rows in blocks of as many rows as this holds (the
 * forward one R×T score block, R = min(T, B·NH); the backward two, R = B·NH/2): the
 * workspace stays linear in T. It is also what the CUDA backward needs (D, one float
 * per query row), so the planner sizes the stage workspace with this same formula
 * (passes/layout.c) for both backends. */
PK_API int64_t pk_attention_work_elems(int B, int T, int NH) {
  int64_t rows = (int64_t)B * NH;
  return (rows > 2 ? rows : 2) * T;
}

/* expf for loops the compiler vectorises (libm's expf is a call per element, which
 * made GELU and the softmaxes ~10 % of a GPT-2 step: bench/train/RESULTS.md).
 * Cephes' expf: x = n·ln2 + r, |r| <= ln2/2 (ln2 split in two so n·ln2_hi is exact),
 * e^r by its degree-7 minimax polynomial, 2^n through the exponent bits. Max relative
 * error 8.3e-8 (≈ 1.4 ulp; measured against exp() on every float in [-87, 88],
 * sampled in tests/kernels/test_kernels_f32.c). |x| is clamped to 87, so results
 * stay normal and finite (e^±87 = 6.1e37, 1.6e-38), which the callers rely on (no
 * inf·0, no denormal slow paths); a NaN argument gives NaN.
 * Written so that gcc -O3 vectorises loops of it without -ffast-math: the clamp is
 * integer arithmetic on the bits (a float compare-and-select lets gcc thread the
 * constant case into a branch it may not if-convert under -ftrapping-math), and n
 * is read from the bits of the rounding sum instead of a float->int conversion. */
static inline float pk_expf_(float x) {
  uint32_t xb;
  memcpy(&xb, &x, sizeof xb);
  uint32_t ax = xb & 0x7fffffffu;
  ax = ax > 0x42ae0000u && ax <= 0x7f800000u ? 0x42ae0000u : ax; /* 87.0f; NaN stays */
  xb = (xb & 0x80000000u) | ax;
  memcpy(&x, &xb, sizeof x);
  /* t = 1.5·2^23 + round(x·log2 e): its low mantissa bits hold n. */
  float t = x * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = x - n * 0.693359375f; /* ln2_hi: 9 significant bits, n·ln2_hi exact */
  r = r - n * -2.12194440e-4f;    /* ln2_lo */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t tb;
  memcpy(&tb, &t, sizeof tb);
  uint32_t bits = (uint32_t)(tb - 0x4b400000 + 127) << 23; /* 2^n, n in [-126, 126] */
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* The float64 twin of pk_expf_'s contract (finite, normal results; NaN passes) for
 * the kernels written once for both types. */
static inline double pk_exp_clamped_(double x) {
  x = x > 700.0 ? 700.0 : x;
  x = x < -700.0 ? -700.0 : x;
  return exp(x);
}

/* Columns per chunk in column-parallel reductions (bias grad, layernorm params,
 * embedding grad): each thread owns whole columns, rows are summed in order. */
#define PK_COLS 64
/* Chunks of a deterministic sum (sumsq): fixed, so the order never depends on the
 * number of threads. */
#define PK_SUM_CHUNKS 64

#endif /* PD2BW_CPU_KERNELS_COMMON */

/* ===== Part 2: the kernels, instantiated per real type ==================== */
/* Each instantiation happens at most once per translation unit, however often the
 * file is included. */
#if defined(PK_F64) ? !defined(PD2BW_CPU_KERNELS_F64) : !defined(PD2BW_CPU_KERNELS_F32)
#ifdef PK_F64
#define PD2BW_CPU_KERNELS_F64
#define PK_REAL double
#define PK_SUFFIX f64
#define PK_IS_F32 0
#define PK_EXPV pk_exp_clamped_
#define PK_LOG log
#define PK_SQRT sqrt
#else
#define PD2BW_CPU_KERNELS_F32
#define PK_REAL float
#define PK_SUFFIX f32
#define PK_IS_F32 1
#define PK_EXPV pk_expf_ /* vectorisable, Part 1 */
#define PK_LOG logf
#define PK_SQRT sqrtf
#endif
#define PK_CAT_(a, b) pk_##a##_##b
#define PK_CAT(a, b) PK_CAT_(a, b)
#define PK(name) PK_CAT(name, PK_SUFFIX)
typedef PK_REAL PK(real);

/* ---- GEMM ------------------------------------------------------------------ */

/* The reference loop (float64 kernels, tests, and float32 without a hook). */
PK_API void PK(gemm_naive)(int ta, int tb, int M, int N, int K, PK_REAL alpha,
                           const PK_REAL *A, int lda, const PK_REAL *B, int ldb,
                           PK_REAL beta, PK_REAL *C, int ldc) {
  PK_OMP(omp parallel for schedule(static) if ((int64_t)M * N * K >= PK_PAR_MIN))
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      PK_REAL acc = 0;
      for (int p = 0; p < K; p++) {
        PK_REAL a = ta ? A[(int64_t)p * lda + i] : A[(int64_t)i * lda + p];
        PK_REAL b = tb ? B[(int64_t)j * ldb + p] : B[(int64_t)p * ldb + j];
        acc += a * b;
      }
      PK_REAL *c = &C[(int64_t)i * ldc + j];
      *c = alpha * acc + (beta == 0 ? (PK_REAL)0 : beta * *c);
    }
  }
}

PK_API void PK(gemm)(int ta, int tb, int M, int N, int K, PK_REAL alpha, const PK_REAL *A,
                     int lda, const PK_REAL *B, int ldb, PK_REAL beta, PK_REAL *C, int ldc) {
  if (M <= 0 || N <= 0) return;
#if PK_IS_F32
  if (pk_sgemm_hook_) {
    pk_sgemm_hook_(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  PK(gemm_naive)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- elementwise helpers ---------------------------------------------------- */

/* max of x[0..n), n >= 1, through 8 interleaved partial maxima so that the compiler
 * vectorises it (a max does not depend on the order it is taken in). */
PK_API PK_REAL PK(row_max_)(const PK_REAL *x, int n) {
  PK_REAL m[8];
  for (int j = 0; j < 8; j++) m[j] = x[0];
  int c = 0;
  for (; c + 8 <= n; c += 8)
    for (int j = 0; j < 8; j++) m[j] = x[c + j] > m[j] ? x[c + j] : m[j];
  for (; c < n; c++) m[0] = x[c] > m[0] ? x[c] : m[0];
  PK_REAL mx = m[0];
  for (int j = 1; j < 8; j++) mx = m[j] > mx ? m[j] : mx;
  return mx;
}

/* Σ e^(x[c] - mx) over [0, n) in double, and the terms into out[0..n) when out is not
 * NULL (out may be x itself). The exps go through PK_EXPV a tile at a time (so they
 * vectorise) and are summed into 8 interleaved double partial sums, combined in a
 * fixed order: the same bits on any number of threads. */
PK_API double PK(sum_exp_)(PK_REAL *out, const PK_REAL *x, PK_REAL mx, int n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  PK_REAL tile[256];
  for (int c0 = 0; c0 < n; c0 += 256) {
    int m = n - c0 < 256 ? n - c0 : 256;
    PK_REAL *t = out ? out + c0 : tile;
    for (int c = 0; c < m; c++) t[c] = PK_EXPV(x[c0 + c] - mx);
    int c = 0;
    for (; c + 8 <= m; c += 8)
      for (int j = 0; j < 8; j++) lane[j] += (double)t[c + j];
    for (; c < m; c++) lane[c & 7] += (double)t[c];
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

PK_API void PK(zero)(PK_REAL *x, int64_t n) { memset(x, 0, (size_t)n * sizeof(PK_REAL)); }

PK_API void PK(copy)(PK_REAL *y, const PK_REAL *x, int64_t n) {
  if (y != x) memmove(y, x, (size_t)n * sizeof(PK_REAL));
}

/* x *= s in place (gradient clipping, 1/accumulation). */
PK_API void PK(scale_inplace)(PK_REAL *x, PK_REAL s, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

/* y += a·x (summing activation gradients that meet at a fork). */
PK_API void PK(axpy)(PK_REAL *y, PK_REAL a, const PK_REAL *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* Σ x², summed in double over PK_SUM_CHUNKS fixed chunks then in chunk order, so
 * the result is the same on any number of threads (the global grad norm). */
PK_API double PK(sumsq)(const PK_REAL *x, int64_t n) {
  double part[PK_SUM_CHUNKS];
  int64_t per = (n + PK_SUM_CHUNKS - 1) / PK_SUM_CHUNKS;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int c = 0; c < PK_SUM_CHUNKS; c++) {
    int64_t lo = c * per, hi = lo + per < n ? lo + per : n;
    double acc = 0;
    for (int64_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];
    part[c] = acc;
  }
  double s = 0;
  for (int c = 0; c < PK_SUM_CHUNKS; c++) s += part[c];
  return s;
}

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

/* out[B,T,C] = multi-head attention over qkv[B,T,3C] packed as GPT-2's c_attn emits
 * it: q = [..,0:C], k = [..,C:2C], v = [..,2C:3C]; head h uses columns
 * h·hs:(h+1)·hs of each, hs = C/NH. Scores are scaled by 1/sqrt(hs); causal != 0
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
PK_API void PK(attention_fwd)(PK_REAL *out, PK_REAL *lse, const PK_REAL *qkv, PK_REAL *work,
                              int B, int T, int C, int NH, int causal, double p, PkRng rng) {
  int hs = C / NH, C3 = 3 * C;
  int R = (int)(pk_attention_work_elems(B, T, NH) / T); /* rows per block */
  R = R < T ? R : T;
  PK_REAL scale = (PK_REAL)(1.0 / sqrt((double)hs));
  uint64_t thr = pk_rng_threshold(p);
  PK_REAL keep_scale = p < 1 ? (PK_REAL)(1.0 / (1.0 - p)) : 0;
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const PK_REAL *q = qkv + (int64_t)b * T * C3 + (int64_t)h * hs;
    PK_REAL *o = out + (int64_t)b * T * C + (int64_t)h * hs;
    for (int t0 = 0; t0 < T; t0 += R) {
      int t1 = t0 + R < T ? t0 + R : T, nk = causal ? t1 : T;
      PK(gemm)(0, 1, t1 - t0, nk, hs, scale, q + (int64_t)t0 * C3, C3, q + C, C3, 0, work, nk);
      PK_OMP(omp parallel for schedule(static) if ((int64_t)(t1 - t0) * nk >= PK_PAR_MIN))
      for (int t = t0; t < t1; t++)
        PK(att_softmax_row_)(work + (int64_t)(t - t0) * nk, lse + (int64_t)bh * T + t,
                             causal ? t + 1 : T, nk, T, bh, t, thr, keep_scale, rng);
      PK(gemm)(0, 0, t1 - t0, hs, nk, 1, work, nk, q + 2 * C, C3, 0, o + (int64_t)t0 * C, C);
    }
  }
}

/* dqkv[B,T,3C] (overwritten) from dy[B,T,C], the forward's qkv, its output out[B,T,C]
 * and its lse[B,NH,T], with the same heads/causal/p/rng as the forward (the same mask
 * is replayed). FlashAttention-2's backward: per query row t, D_t = dy_t·out_t (=
 * Σ_u P_u·dP_u, with dropout too: Σ_u P'_u (dy_t·v_u) = dy_t·out_t), so no pass over
 * the keys reduces anything. Per block of rows:
 *   P = e^(S - lse), P' = P⊙mask/(1-p)                         (recomputed)
 *   dV += P'ᵀ·dy, dP' = dy·Vᵀ, dP = dP'⊙mask/(1-p), dS = P⊙(dP - D),
 *   dQ = scale·dS·K, dK += scale·dSᵀ·Q.
 * work holds two blocks: P, and P' then dP' then dS. */
PK_API void PK(attention_bwd)(PK_REAL *dqkv, const PK_REAL *dy, const PK_REAL *qkv,
                              const PK_REAL *out, const PK_REAL *lse, PK_REAL *work, int B, int T,
                              int C, int NH, int causal, double p, PkRng rng) {
  int hs = C / NH, C3 = 3 * C;
  int R = (int)(pk_attention_work_elems(B, T, NH) / (2 * (int64_t)T)); /* rows per block */
  R = R < T ? R : T;
  PK_REAL scale = (PK_REAL)(1.0 / sqrt((double)hs));
  uint64_t thr = pk_rng_threshold(p);
  PK_REAL keep_scale = p < 1 ? (PK_REAL)(1.0 / (1.0 - p)) : 0;
  PK_REAL *P = work, *D = work + (int64_t)R * T;
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const PK_REAL *q = qkv + (int64_t)b * T * C3 + (int64_t)h * hs;
    const PK_REAL *g = dy + (int64_t)b * T * C + (int64_t)h * hs;
    const PK_REAL *o = out + (int64_t)b * T * C + (int64_t)h * hs;
    const PK_REAL *lr = lse + (int64_t)bh * T;
    PK_REAL *dq = dqkv + (int64_t)b * T * C3 + (int64_t)h * hs;
    for (int t = 0; t < T; t++) { /* dK and dV accumulate over the blocks */
      memset(dq + (int64_t)t * C3 + C, 0, (size_t)hs * sizeof(PK_REAL));
      memset(dq + (int64_t)t * C3 + 2 * C, 0, (size_t)hs * sizeof(PK_REAL));
    }
    for (int t0 = 0; t0 < T; t0 += R) {
      int t1 = t0 + R < T ? t0 + R : T, nr = t1 - t0, nk = causal ? t1 : T;
      PK(gemm)(0, 1, nr, nk, hs, scale, q + (int64_t)t0 * C3, C3, q + C, C3, 0, P, nk);
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
      PK(gemm)(1, 0, nk, hs, nr, 1, thr > 0 ? D : P, nk, gb, C, 1, dq + 2 * C, C3); /* dV */
      PK(gemm)(0, 1, nr, nk, hs, 1, gb, C, q + 2 * C, C3, 0, D, nk);                 /* dP' */
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
        for (int k = 0; k < hs; k++) dot += (double)gt[k] * (double)ot[k];
        PK_REAL Dt = (PK_REAL)dot;
        for (int u = 0; u < n; u++) dr[u] = pr[u] * (dr[u] - Dt);
        for (int u = n; u < nk; u++) dr[u] = 0;
      }
      PK(gemm)(0, 0, nr, hs, nk, scale, D, nk, q + C, C3, 0, dq + (int64_t)t0 * C3, C3); /* dQ */
      PK(gemm)(1, 0, nk, hs, nr, scale, D, nk, q + (int64_t)t0 * C3, C3, 1, dq + C, C3); /* dK */
    }
  }
}

/* ---- optimizers ----------------------------------------------------------------- */

/* One AdamW step (Loshchilov & Hutter; PyTorch's AdamW), element by element:
 *   g = grad·grad_scale     (grad_scale folds in clipping and 1/accumulation)
 *   m = β1·m + (1-β1)·g,  v = β2·v + (1-β2)·g²
 *   w_out = w_in - lr·( m/(1-β1^t) / (sqrt(v/(1-β2^t)) + eps) + wd·w_in )
 * with wd = weight_decay only when `decay` (decoupled; biases and norms pass 0).
 * t is the 1-based step. w_out may alias w_in; 2BW writes the new version into the
 * oldest version's buffer, so they usually differ.
 *
 * Delay compensation (train.delay_comp = λ > 0, the 2bw rule only: docs/update-rules.md).
 * 2BW's g was taken at W(t-1), which w_out holds on entry (its old contents are read
 * before they are overwritten); w_in is W(t). The first moment takes the first-order
 * Taylor estimate of the gradient at W(t),
 *   g~ = g + λ·sqrt(v/(1-β2^t))·(w_in - w_out)
 * instead of g: DC-ASGD-a (Zheng et al. 2017), whose curvature estimate λ·g·g /
 * sqrt(mean square of g) takes Adam's bias-corrected second moment v̂ (the new one,
 * of the raw g) for both the g·g and the mean square. λ = 0 is plain AdamW, bit for
 * bit; w_out == w_in (no older version) compensates nothing. */
PK_API void PK(adamw_step)(PK_REAL *w_out, const PK_REAL *w_in, const PK_REAL *grad,
                           PK_REAL *m, PK_REAL *v, int64_t n, double lr, double beta1,
                           double beta2, double eps, double weight_decay, int decay,
                           int64_t t, double grad_scale, double delay_comp) {
  /* 1-β computed in double: 1 - 0.999f is off by 5e-5 relative in float. */
  PK_REAL b1 = (PK_REAL)beta1, b2 = (PK_REAL)beta2;
  PK_REAL ob1 = (PK_REAL)(1.0 - beta1), ob2 = (PK_REAL)(1.0 - beta2);
  PK_REAL bc1 = (PK_REAL)(1.0 - pow(beta1, (double)t));
  PK_REAL bc2 = (PK_REAL)(1.0 - pow(beta2, (double)t));
  PK_REAL lr_ = (PK_REAL)lr, eps_ = (PK_REAL)eps, gs = (PK_REAL)grad_scale;
  PK_REAL wd = decay ? (PK_REAL)weight_decay : 0, dc = (PK_REAL)delay_comp;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL g = grad[i] * gs;
    PK_REAL vi = b2 * v[i] + ob2 * g * g;
    PK_REAL w = w_in[i];
    PK_REAL gc = dc != 0 ? g + dc * PK_SQRT(vi / bc2) * (w - w_out[i]) : g;
    PK_REAL mi = b1 * m[i] + ob1 * gc;
    m[i] = mi;
    v[i] = vi;
    w_out[i] = w - lr_ * ((mi / bc1) / (PK_SQRT(vi / bc2) + eps_) + wd * w);
  }
}

/* SGD with momentum (PyTorch's SGD, dampening 0, coupled L2 weight decay):
 *   g = grad·grad_scale + wd·w_in,  buf = momentum·buf + g,  w_out = w_in - lr·buf
 * wd = weight_decay only when `decay`. buf may be NULL when momentum == 0. A
 * zero-initialised buf gives buf = g on the first step, as PyTorch does. */
PK_API void PK(sgd_step)(PK_REAL *w_out, const PK_REAL *w_in, const PK_REAL *grad,
                         PK_REAL *buf, int64_t n, double lr, double momentum,
                         double weight_decay, int decay, double grad_scale) {
  PK_REAL lr_ = (PK_REAL)lr, mu = (PK_REAL)momentum, gs = (PK_REAL)grad_scale;
  PK_REAL wd = decay ? (PK_REAL)weight_decay : 0;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL w = w_in[i];
    PK_REAL g = grad[i] * gs + wd * w;
    if (buf) {
      buf[i] = mu * buf[i] + g;
      g = buf[i];
    }
    w_out[i] = w - lr_ * g;
  }
}

/* ---- end of the instantiation: make the file includable again ------------------ */
#undef PK_GELU_K
#undef PK_GELU_A
#undef PK
#undef PK_CAT
#undef PK_CAT_
#undef PK_REAL
#undef PK_SUFFIX
#undef PK_IS_F32
#undef PK_EXPV
#undef PK_LOG
#undef PK_SQRT
#endif /* one instantiation */
#undef PK_F64
