/* kernels/cpu_kernels.h — every CPU kernel of pd2bw, forward and backward, with the
 * optimizer steps and bf16 plans' casts and GEMMs; parts by family in
 * cpu_kernels_<family>.h, which this file includes inside each instantiation.
 *
 * One header of static functions because a generated stageN.c must compile with
 * nothing but the system compiler: codegen pastes philox.h and this text verbatim
 * (kernels/embed.cmake puts each part in place of its #include), every shape a
 * constant so `cc -O3` specialises the loops; the sequential executor and the tests
 * include the same text, so each op has exactly one implementation. Written once per
 * real type: a plain #include gives pk_<op>_f32, another after #define PK_F64 gives
 * pk_<op>_f64 (the finite-difference tests). GEMMs go through pk_sgemm_fn.
 * Every kernel keeps the conventions of docs/kernels.md: dense row-major tensors,
 * parameter gradients added under `accumulate`, bad data indices skipped and counted,
 * reductions of the loss and gradient norm independent of the thread count, random
 * ops replaying their mask from a PkRng (philox.h). */

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

/* OpenMP pragmas are spelled through PK_OMP so that a build without -fopenmp sees
 * nothing (and -Wunknown-pragmas stays quiet). */
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
 * it do not propagate). This is cblas_sgemm(CblasRowMajor, ...) exactly.
 * Every GEMM of the kernels goes through it: the float32 kernels call the hook set by
 * pk_set_sgemm() (the runtime hands a stage .so pd_sgemm from runtime/blas/blas.h);
 * with no hook set they fall back to a naive loop, so a kernel never crashes for want
 * of a BLAS. The float64 kernels always use the naive loop. */
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

/* bfloat16 storage of a --precision bf16 plan's stashed and sent activations (the
 * program computes in float32 on a working copy: passes/layout.h, "bf16 storage").
 * Float32 only (a bf16 plan has no float64 program). pk_bf16_store rounds to
 * nearest even and keeps a NaN a quiet NaN, bit for bit the GPU's pkc_f32_to_bf16
 * (kernels/cuda_helpers.cuh), so both backends store the same bits; pk_bf16_load
 * widens exactly. */
static inline uint16_t pk_f32_to_bf16_(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

PK_API void pk_bf16_store(uint16_t *y, const float *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = pk_f32_to_bf16_(x[i]);
}

/* One element widened exactly (pk_bf16_load's, and the bf16-reading GEMMs' of
 * cpu_kernels_layers.h, which widen each element where they read it). */
static inline float pk_bf16_to_f32_(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

PK_API void pk_bf16_load(float *y, const uint16_t *x, int64_t n) {
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) y[i] = pk_bf16_to_f32_(x[i]);
}

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
#define PK_POW pow
#define PK_COS cos
#define PK_SIN sin
#else
#define PD2BW_CPU_KERNELS_F32
#define PK_REAL float
#define PK_SUFFIX f32
#define PK_IS_F32 1
#define PK_EXPV pk_expf_ /* vectorisable, Part 1 */
#define PK_LOG logf
#define PK_SQRT sqrtf
#define PK_POW powf
#define PK_COS cosf
#define PK_SIN sinf
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

/* The kernels by family, each included here once per instantiation. */
#include "cpu_kernels_layers.h"
#include "cpu_kernels_activations.h"
#include "cpu_kernels_fused.h"
#include "cpu_kernels_optim.h"

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
#undef PK_POW
#undef PK_COS
#undef PK_SIN
#endif /* one instantiation */
#undef PK_F64
