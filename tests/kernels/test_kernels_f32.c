/* The float32 kernels agree with the float64 ones (forward and backward) on the same
 * inputs: max |f32 - f64| <= 2e-5 · max |f64| per output tensor (float32 carries
 * about 6e-8 relative per operation; these small shapes sum at most a few dozen
 * terms). Also: the float32 GEMM goes through the hook once one is set. */
#include "kcheck.h"

enum { B = 2, T = 5, C = 8, NH = 2, V = 11, N = 6 };
#define BT (B * T)
#define TOL 2e-5

#define AGREE(name, f32buf, f64buf, n)                                              \
  do {                                                                              \
    double r_ = kc_rel_diff_f32(f32buf, f64buf, n);                                 \
    if (!(r_ <= TOL)) fprintf(stderr, "%s: f32 vs f64 relative diff %g\n", name, r_); \
    EXPECT(r_ <= TOL);                                                              \
  } while (0)

/* Input pairs: the same random values in double and in float. */
typedef struct {
  double *d;
  float *f;
  int64_t n;
} Pair;
static Pair pair(int64_t n, double lo, double hi) {
  Pair p = {kc_alloc(n), NULL, n};
  kc_fill(p.d, n, lo, hi);
  for (int64_t i = 0; i < n; i++) p.d[i] = (double)(float)p.d[i]; /* exact in both */
  p.f = kc_to_f32(p.d, n);
  return p;
}
static void pair_free(Pair *p) { free(p->d), free(p->f); }
/* An output pair (zeroed). */
static Pair outn(int64_t n) {
  Pair p = {kc_alloc(n), NULL, n};
  p.f = kc_to_f32(p.d, n);
  return p;
}

static void test_dense_ops(void) {
  Pair x = pair(BT * C, 0.1, 2), W = pair(C * N, 0.1, 1), b = pair(N, 0.1, 1);
  Pair g = pair(BT * N, 0.1, 1), y = outn(BT * N), dx = outn(BT * C), dW = outn(C * N);
  pk_linear_fwd_f64(y.d, x.d, W.d, b.d, BT, C, N);
  pk_linear_fwd_f32(y.f, x.f, W.f, b.f, BT, C, N);
  AGREE("linear_fwd", y.f, y.d, y.n);
  pk_linear_dx_f64(dx.d, g.d, W.d, BT, C, N);
  pk_linear_dx_f32(dx.f, g.f, W.f, BT, C, N);
  AGREE("linear_dx", dx.f, dx.d, dx.n);
  pk_linear_dw_f64(dW.d, x.d, g.d, BT, C, N, 0);
  pk_linear_dw_f32(dW.f, x.f, g.f, BT, C, N, 0);
  AGREE("linear_dw", dW.f, dW.d, dW.n);
  for (int tb = 0; tb < 2; tb++) {
    pk_matmul_fwd_f64(y.d, x.d, W.d, BT, C, N, 0, tb);
    pk_matmul_fwd_f32(y.f, x.f, W.f, BT, C, N, 0, tb);
    AGREE("matmul_fwd", y.f, y.d, y.n);
  }
  Pair out2 = outn(x.n);
  pk_add_bias_fwd_f64(out2.d, x.d, W.d, BT, C);
  pk_add_bias_fwd_f32(out2.f, x.f, W.f, BT, C);
  AGREE("add_bias_fwd", out2.f, out2.d, out2.n);
  Pair x2 = pair(BT * C, 0.1, 2);
  pk_mul_fwd_f64(out2.d, x.d, x2.d, BT * C);
  pk_mul_fwd_f32(out2.f, x.f, x2.f, BT * C);
  AGREE("mul_fwd", out2.f, out2.d, out2.n);
  pair_free(&x), pair_free(&W), pair_free(&b), pair_free(&g), pair_free(&y);
  pair_free(&dx), pair_free(&dW), pair_free(&out2), pair_free(&x2);
}

static void test_pointwise_and_norm(void) {
  Pair x = pair(BT * C, 0.05, 3), g = pair(BT * C, 0.1, 1), y = outn(BT * C), d = outn(BT * C);
  Pair gamma = pair(C, 0.5, 1.5), beta = pair(C, 0.1, 1), dg = outn(C), db = outn(C);
  Pair st = outn(2 * BT);
  pk_gelu_fwd_f64(y.d, x.d, y.n);
  pk_gelu_fwd_f32(y.f, x.f, y.n);
  AGREE("gelu_fwd", y.f, y.d, y.n);
  pk_gelu_bwd_f64(d.d, g.d, x.d, d.n);
  pk_gelu_bwd_f32(d.f, g.f, x.f, d.n);
  AGREE("gelu_bwd", d.f, d.d, d.n);
  pk_relu_fwd_f64(y.d, x.d, y.n);
  pk_relu_fwd_f32(y.f, x.f, y.n);
  AGREE("relu_fwd", y.f, y.d, y.n);
  pk_silu_fwd_f64(y.d, x.d, y.n);
  pk_silu_fwd_f32(y.f, x.f, y.n);
  AGREE("silu_fwd", y.f, y.d, y.n);
  pk_silu_bwd_f64(d.d, g.d, x.d, d.n);
  pk_silu_bwd_f32(d.f, g.f, x.f, d.n);
  AGREE("silu_bwd", d.f, d.d, d.n);
  pk_softmax_fwd_f64(y.d, x.d, BT, C);
  pk_softmax_fwd_f32(y.f, x.f, BT, C);
  AGREE("softmax_fwd", y.f, y.d, y.n);
  pk_softmax_bwd_f64(d.d, g.d, y.d, BT, C);
  pk_softmax_bwd_f32(d.f, g.f, y.f, BT, C);
  AGREE("softmax_bwd", d.f, d.d, d.n);
  pk_layernorm_fwd_f64(y.d, NULL, x.d, gamma.d, beta.d, BT, C, 1e-5);
  pk_layernorm_fwd_f32(y.f, NULL, x.f, gamma.f, beta.f, BT, C, 1e-5f);
  AGREE("layernorm_fwd", y.f, y.d, y.n);
  pk_layernorm_bwd_f64(d.d, dg.d, db.d, st.d, 0, g.d, x.d, gamma.d, BT, C, 1e-5, 0);
  pk_layernorm_bwd_f32(d.f, dg.f, db.f, st.f, 0, g.f, x.f, gamma.f, BT, C, 1e-5f, 0);
  AGREE("layernorm_bwd dx", d.f, d.d, d.n);
  AGREE("layernorm_bwd dgamma", dg.f, dg.d, dg.n);
  AGREE("layernorm_bwd dbeta", db.f, db.d, db.n);
  pk_rmsnorm_fwd_f64(y.d, x.d, gamma.d, BT, C, 1e-6);
  pk_rmsnorm_fwd_f32(y.f, x.f, gamma.f, BT, C, 1e-6f);
  AGREE("rmsnorm_fwd", y.f, y.d, y.n);
  pk_rmsnorm_bwd_f64(d.d, g.d, x.d, gamma.d, BT, C, 1e-6);
  pk_rmsnorm_bwd_f32(d.f, g.f, x.f, gamma.f, BT, C, 1e-6f);
  AGREE("rmsnorm_bwd", d.f, d.d, d.n);
  pk_rmsnorm_dgamma_f64(dg.d, g.d, x.d, BT, C, 1e-6, 0);
  pk_rmsnorm_dgamma_f32(dg.f, g.f, x.f, BT, C, 1e-6f, 0);
  AGREE("rmsnorm_dgamma", dg.f, dg.d, dg.n);
  pk_rope_fwd_f64(y.d, x.d, BT, T, C, NH, 10000);
  pk_rope_fwd_f32(y.f, x.f, BT, T, C, NH, 10000);
  AGREE("rope_fwd", y.f, y.d, y.n);
  pk_rope_bwd_f64(d.d, g.d, BT, T, C, NH, 10);
  pk_rope_bwd_f32(d.f, g.f, BT, T, C, NH, 10);
  AGREE("rope_bwd", d.f, d.d, d.n);
  PkRng r = {99, 1, 2};
  pk_dropout_fwd_f64(y.d, x.d, y.n, 0.25, r);
  pk_dropout_fwd_f32(y.f, x.f, y.n, 0.25, r);
  AGREE("dropout_fwd", y.f, y.d, y.n); /* same mask in both precisions */
  for (int64_t i = 0; i < y.n; i++) EXPECT((y.f[i] == 0) == (y.d[i] == 0));
  pair_free(&x), pair_free(&g), pair_free(&y), pair_free(&d), pair_free(&gamma);
  pair_free(&beta), pair_free(&dg), pair_free(&db), pair_free(&st);
}

static void test_attention_and_loss(void) {
  Pair qkv = pair(BT * 3 * C, 0.1, 1.5), g = pair(BT * C, 0.1, 1), y = outn(BT * C);
  Pair dq = outn(BT * 3 * C), w = outn(pk_attention_work_elems(B, T, NH));
  Pair lse = outn((BT / T) * NH * T);
  PkRng r = {5, 6, 7};
  for (int causal = 0; causal < 2; causal++) {
    pk_attention_fwd_f64(y.d, lse.d, qkv.d, w.d, B, T, C, NH, causal, 0.2, r);
    pk_attention_fwd_f32(y.f, lse.f, qkv.f, w.f, B, T, C, NH, causal, 0.2, r);
    AGREE("attention_fwd", y.f, y.d, y.n);
    AGREE("attention_fwd lse", lse.f, lse.d, lse.n);
    pk_attention_bwd_f64(dq.d, g.d, qkv.d, y.d, lse.d, w.d, B, T, C, NH, causal, 0.2, r);
    pk_attention_bwd_f32(dq.f, g.f, qkv.f, y.f, lse.f, w.f, B, T, C, NH, causal, 0.2, r);
    AGREE("attention_bwd", dq.f, dq.d, dq.n);
  }
  { /* grouped-query: NH query heads of C/NH over one key/value head */
    int hs = C / NH;
    Pair q = pair(BT * C, 0.1, 1.5), k = pair(BT * hs, 0.1, 1.5), v = pair(BT * hs, 0.1, 1.5);
    Pair gq = outn(BT * C), gk = outn(BT * hs), gv = outn(BT * hs);
    pk_attention_gqa_fwd_f64(y.d, lse.d, q.d, k.d, v.d, w.d, B, T, NH, 1, hs, 1, 0.2, r);
    pk_attention_gqa_fwd_f32(y.f, lse.f, q.f, k.f, v.f, w.f, B, T, NH, 1, hs, 1, 0.2, r);
    AGREE("attention_gqa_fwd", y.f, y.d, y.n);
    AGREE("attention_gqa_fwd lse", lse.f, lse.d, lse.n);
    pk_attention_gqa_bwd_f64(gq.d, gk.d, gv.d, g.d, q.d, k.d, v.d, y.d, lse.d, w.d, B, T, NH, 1, hs, 1, 0.2, r);
    pk_attention_gqa_bwd_f32(gq.f, gk.f, gv.f, g.f, q.f, k.f, v.f, y.f, lse.f, w.f, B, T, NH, 1, hs, 1, 0.2, r);
    AGREE("attention_gqa_bwd dq", gq.f, gq.d, gq.n);
    AGREE("attention_gqa_bwd dk", gk.f, gk.d, gk.n);
    AGREE("attention_gqa_bwd dv", gv.f, gv.d, gv.n);
    pair_free(&q), pair_free(&k), pair_free(&v), pair_free(&gq), pair_free(&gk), pair_free(&gv);
  }
  Pair logits = pair(BT * V, 0.1, 4), dl = outn(BT * V);
  static const int32_t tg[BT] = {3, -1, 0, 10, 7, 7, -1, 2, 5, 1};
  double ld;
  float lf;
  pk_cross_entropy_fwd_f64(&ld, logits.d, tg, BT, V, -1);
  pk_cross_entropy_fwd_f32(&lf, logits.f, tg, BT, V, -1);
  EXPECT_NEAR(lf, ld, 1e-6, 0);
  pk_cross_entropy_bwd_f64(dl.d, logits.d, tg, BT, V, -1, 1);
  pk_cross_entropy_bwd_f32(dl.f, logits.f, tg, BT, V, -1, 1);
  AGREE("cross_entropy_bwd", dl.f, dl.d, dl.n);
  pair_free(&qkv), pair_free(&g), pair_free(&y), pair_free(&dq), pair_free(&w), pair_free(&lse);
  pair_free(&logits), pair_free(&dl);
}

/* The float32 GEMMs use the hook once set (and the naive loop before). */
static int hook_calls;
static void counting_sgemm(int ta, int tb, int M, int Nn, int K, float alpha, const float *A,
                           int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc) {
  hook_calls++;
  pk_gemm_naive_f32(ta, tb, M, Nn, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
}
static void test_gemm_hook(void) {
  Pair x = pair(BT * C, 0.1, 2), W = pair(C * N, 0.1, 1), y = outn(BT * N);
  EXPECT(pk_get_sgemm() == NULL);
  pk_linear_fwd_f32(y.f, x.f, W.f, NULL, BT, C, N);
  EXPECT_EQ_INT(hook_calls, 0);
  pk_set_sgemm(counting_sgemm);
  pk_linear_fwd_f32(y.f, x.f, W.f, NULL, BT, C, N);
  pk_linear_dx_f32(x.f, y.f, W.f, BT, C, N);
  pk_set_sgemm(NULL);
  EXPECT_EQ_INT(hook_calls, 2);
  pair_free(&x), pair_free(&W), pair_free(&y);
}

/* pk_expf_ (the vectorisable expf of GELU and the softmaxes): within 1e-7 relative
 * of exp() on 2^22 floats spread over [-87, 87] plus the region around 0, clamped
 * (finite, normal) outside, NaN through. */
static void test_vector_expf(void) {
  double worst = 0;
  for (int i = 0; i <= 1 << 22; i++) {
    float x = -87.0f + 174.0f * (float)i / (float)(1 << 22);
    float xs[2] = {x, x * 1e-6f};
    for (int k = 0; k < 2; k++) {
      double e = exp((double)xs[k]), rel = fabs((double)pk_expf_(xs[k]) - e) / e;
      worst = rel > worst ? rel : worst;
    }
  }
  if (!(worst < 1e-7)) fprintf(stderr, "pk_expf_: worst relative error %g\n", worst);
  EXPECT(worst < 1e-7);
  EXPECT(pk_expf_(1000.0f) == pk_expf_(87.0f) && isfinite(pk_expf_(INFINITY)));
  EXPECT(pk_expf_(-1000.0f) == pk_expf_(-87.0f) && pk_expf_(-INFINITY) > 0);
  EXPECT(isnormal(pk_expf_(-87.0f)));
  EXPECT(isnan(pk_expf_(NAN)));
  EXPECT(pk_expf_(0.0f) == 1.0f);
}

/* GELU over a wide range (the tails, where 1 + tanh cancels, and |x| large enough to
 * clamp the exp): f32 close to f64 element by element (relative, even at
 * y ≈ -1e-25 where the tanh form gave 0), and finite. In the tail the float
 * rounding of the exp's argument (|2u| ≈ 50 at x = -8) alone is ~3e-6 relative. */
static void test_gelu_wide_range(void) {
  enum { M = 4001 };
  static double xd[M], yd[M], gd[M], dd[M];
  static float xf[M], yf[M], gf[M], df[M];
  for (int i = 0; i < M; i++) {
    xd[i] = (double)(float)(-60.0 + 120.0 * i / (M - 1) + (i % 7) * 1e-3);
    xf[i] = (float)xd[i];
    gd[i] = 1, gf[i] = 1;
  }
  pk_gelu_fwd_f64(yd, xd, M);
  pk_gelu_fwd_f32(yf, xf, M);
  pk_gelu_bwd_f64(dd, gd, xd, M);
  pk_gelu_bwd_f32(df, gf, xf, M);
  int bad = 0;
  for (int i = 0; i < M; i++) {
    bad += !isfinite(yf[i]) || !isfinite(df[i]);
    bad += fabs(yf[i] - yd[i]) > 2e-5 * fabs(yd[i]) + 1e-30;
    bad += fabs(df[i] - dd[i]) > 2e-5 * fabs(dd[i]) + 1e-30;
  }
  EXPECT_EQ_INT(bad, 0);
  /* tanh form, in double, as the definition */
  double x = -3.1, u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  pk_gelu_fwd_f64(yd, &x, 1);
  EXPECT_NEAR(yd[0], 0.5 * x * (1 + tanh(u)), 1e-15, 1e-15);
}

int main(void) {
  RUN(test_vector_expf);
  RUN(test_gelu_wide_range);
  RUN(test_dense_ops);
  RUN(test_pointwise_and_norm);
  RUN(test_attention_and_loss);
  RUN(test_gemm_hook);
  return TEST_REPORT();
}
