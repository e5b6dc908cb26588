/* Optimizer steps and the small whole-tensor kernels: AdamW against steps worked out
 * by hand, SGD with momentum, the deterministic sum of squares, scale, axpy, zero. */
#include "kcheck.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* AdamW, lr 0.1, β1 0.9, β2 0.999, eps 1e-8, weight decay 0.01.
 * Step 1, element 0: w = 1, g = 0.5, m = v = 0:
 *   m = 0.1·0.5 = 0.05, v = 0.001·0.25 = 0.00025,
 *   m̂ = 0.05/0.1 = 0.5, v̂ = 0.00025/0.001 = 0.25, √v̂ = 0.5,
 *   w = 1 - 0.1·(0.5/(0.5 + 1e-8) + 0.01·1) = 1 - 0.1·1.00999998 = 0.899000002.
 * Elements 1 and 2 (w -2, 0.5; g 0.25, -1) the same way: -2.097999996, 0.599499999.
 * Step 2 (t = 2: m̂ = m/0.19, v̂ = v/0.001999) with g = (-0.25, 0.5, 2):
 *   m = (0.02, 0.0725, 0.11), v = (0.00031225, 0.0003124375, 0.004999),
 *   w = (0.8714672987058464, -2.192420196144804, 0.5622901465289252). */
static void test_adamw_hand(void) {
  double w[3] = {1, -2, 0.5}, g1[3] = {0.5, 0.25, -1}, g2[3] = {-0.25, 0.5, 2};
  double m[3] = {0}, v[3] = {0}, w1[3], w2[3];
  pk_adamw_step_f64(w1, w, g1, m, v, 3, 0.1, 0.9, 0.999, 1e-8, 0.01, 1, 1, 1.0, 0);
  EXPECT_NEAR(w1[0], 0.899000002, 1e-15, 0);
  EXPECT_NEAR(w1[1], -2.097999996, 1e-15, 0);
  EXPECT_NEAR(w1[2], 0.599499999, 1e-15, 0);
  EXPECT(w[0] == 1 && w[1] == -2 && w[2] == 0.5); /* w_in untouched (2BW) */
  EXPECT_NEAR(m[0], 0.05, 1e-15, 0);
  EXPECT_NEAR(v[0], 0.00025, 1e-15, 0);
  pk_adamw_step_f64(w2, w1, g2, m, v, 3, 0.1, 0.9, 0.999, 1e-8, 0.01, 1, 2, 1.0, 0);
  EXPECT_NEAR(m[1], 0.0725, 1e-14, 0);
  EXPECT_NEAR(v[2], 0.004999, 1e-14, 0);
  EXPECT_NEAR(w2[0], 0.8714672987058464, 1e-14, 0);
  EXPECT_NEAR(w2[1], -2.192420196144804, 1e-14, 0);
  EXPECT_NEAR(w2[2], 0.5622901465289252, 1e-14, 0);
}

/* decay = 0 (biases, norms): no weight-decay term; grad_scale scales g first. */
static void test_adamw_no_decay_and_scale(void) {
  double w[1] = {1}, g[1] = {1.0}, m[1] = {0}, v[1] = {0}, out[1];
  pk_adamw_step_f64(out, w, g, m, v, 1, 0.1, 0.9, 0.999, 1e-8, 0.5, 0, 1, 0.5, 0);
  /* g = 0.5 after scaling; m̂ = 0.5, √v̂ = 0.5: the step is lr·0.5/(0.5+1e-8) */
  EXPECT_NEAR(out[0], 1 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15, 0);
  EXPECT_NEAR(m[0], 0.05, 1e-15, 0);
  /* in place (w_out == w_in) works too, and float32 agrees */
  float wf[1] = {1}, gf[1] = {1}, mf[1] = {0}, vf[1] = {0};
  pk_adamw_step_f32(wf, wf, gf, mf, vf, 1, 0.1, 0.9, 0.999, 1e-8, 0.5, 0, 1, 0.5, 0);
  EXPECT_NEAR(wf[0], out[0], 1e-7, 0);
}

/* SGD with momentum 0.9, lr 0.1, weight decay 0.01 (coupled), two steps:
 *   step 1: g = 0.5 + 0.01·1 = 0.51, buf = 0.51, w = 1 - 0.051 = 0.949
 *   step 2: g = -0.25 + 0.01·0.949 = -0.24051, buf = 0.9·0.51 - 0.24051 = 0.21849,
 *           w = 0.949 - 0.021849 = 0.927151 */
static void test_sgd(void) {
  double w[1] = {1}, buf[1] = {0}, g1[1] = {0.5}, g2[1] = {-0.25};
  pk_sgd_step_f64(w, w, g1, buf, 1, 0.1, 0.9, 0.01, 1, 1.0);
  EXPECT_NEAR(w[0], 0.949, 1e-15, 0);
  pk_sgd_step_f64(w, w, g2, buf, 1, 0.1, 0.9, 0.01, 1, 1.0);
  EXPECT_NEAR(buf[0], 0.21849, 1e-14, 0);
  EXPECT_NEAR(w[0], 0.927151, 1e-15, 0);
  /* no momentum buffer, no decay: plain w - lr·g·scale */
  double x[2] = {1, 2}, gx[2] = {1, -1};
  pk_sgd_step_f64(x, x, gx, NULL, 2, 0.5, 0, 0.3, 0, 2.0);
  EXPECT(x[0] == 0 && x[1] == 3);
}

static void test_sumsq_scale_axpy_zero(void) {
  enum { N = 100003 }; /* not a multiple of the chunk count */
  float *x = calloc(N, sizeof(float));
  double want = 0;
  for (int i = 0; i < N; i++) {
    x[i] = (float)((i % 7) - 3) * 0.5f;
    want += (double)x[i] * x[i];
  }
  EXPECT_NEAR(pk_sumsq_f32(x, N), want, 1e-12, 0);
  EXPECT(pk_sumsq_f32(x, 0) == 0);
  EXPECT(pk_sumsq_f32(x, 3) == 1.5 * 1.5 + 1 + 0.25);
  pk_scale_inplace_f32(x, 2, N);
  EXPECT_NEAR(pk_sumsq_f32(x, N), 4 * want, 1e-12, 0);
  float y[3] = {1, 2, 3}, z[3] = {1, 1, 1};
  pk_axpy_f32(y, -2, z, 3);
  EXPECT(y[0] == -1 && y[1] == 0 && y[2] == 1);
  pk_zero_f32(x, N);
  EXPECT(pk_sumsq_f32(x, N) == 0);
  free(x);
}

/* The reductions promised deterministic give the same bits on 1 and 2 threads (the
 * sizes are above PK_PAR_MIN, so the parallel paths run when built with OpenMP). */
static void test_thread_count_independent(void) {
#ifdef _OPENMP
  enum { R = 600, CC = 200 };
  float *x = malloc(sizeof(float) * R * CC), *st = malloc(sizeof(float) * 2 * R);
  float *dx = malloc(sizeof(float) * R * CC), gam[CC];
  float db[2][CC], dg[2][CC], dbeta[2][CC];
  double ss[2];
  for (int i = 0; i < R * CC; i++) x[i] = (float)(((i * 7919) % 2001) - 1000) * 1e-3f;
  for (int c = 0; c < CC; c++) gam[c] = 1.0f + (float)c * 1e-3f;
  int saved = omp_get_max_threads();
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    ss[k] = pk_sumsq_f32(x, R * CC);
    pk_bias_grad_f32(db[k], x, R, CC, 0);
    pk_layernorm_bwd_f32(dx, dg[k], dbeta[k], st, 0, x, x, gam, R, CC, 1e-5f, 0);
  }
  omp_set_num_threads(saved);
  EXPECT(ss[0] == ss[1]);
  EXPECT(memcmp(db[0], db[1], sizeof db[0]) == 0);
  EXPECT(memcmp(dg[0], dg[1], sizeof dg[0]) == 0);
  EXPECT(memcmp(dbeta[0], dbeta[1], sizeof dbeta[0]) == 0);
  free(x), free(st), free(dx);
#endif
}

int main(void) {
  RUN(test_adamw_hand);
  RUN(test_adamw_no_decay_and_scale);
  RUN(test_sgd);
  RUN(test_sumsq_scale_axpy_zero);
  RUN(test_thread_count_independent);
  return TEST_REPORT();
}
