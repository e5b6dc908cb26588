/* Every backward kernel against central finite differences, in float64 (the bound
 * is in kcheck.h: 1e-6 relative + 1e-8 absolute per element). Small shapes with
 * random, non-zero inputs: B=2, T=5, C=8, 2 heads. Attention has its own file. */
#include "kcheck.h"

enum { B = 2, T = 5, C = 8, V = 11, N = 6, TMAX = 7 };
#define BT (B * T)

/* ---- embedding ---------------------------------------------------------------- */
typedef struct {
  double *table, *g, *y;
  const int32_t *ids;
} EmbCtx;
static double emb_loss(void *p) {
  EmbCtx *c = p;
  pk_embedding_fwd_f64(c->y, c->table, c->ids, BT, C, V);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_embedding(void) {
  /* ids repeat (3 and 7 twice), so the backward must accumulate rows. */
  static const int32_t ids[BT] = {3, 1, 7, 3, 0, 10, 7, 2, 5, 9};
  EmbCtx c = {kc_alloc(V * C), kc_alloc(BT * C), kc_alloc(BT * C), ids};
  kc_fill(c.table, V * C, 0.1, 1);
  kc_fill(c.g, BT * C, 0.1, 1);
  double *dt = kc_alloc(V * C);
  kc_fill(dt, V * C, 5, 6); /* garbage: accumulate = 0 must overwrite it */
  EXPECT_EQ_INT(pk_embedding_bwd_f64(dt, c.g, ids, BT, C, V, 0), 0);
  KC_CHECK_GRAD("embedding dtable", c.table, V * C, dt, emb_loss, &c);
  /* accumulate = 1 adds on top: twice the gradient after a second call. */
  double *dt2 = kc_alloc(V * C);
  pk_embedding_bwd_f64(dt2, c.g, ids, BT, C, V, 0);
  pk_embedding_bwd_f64(dt2, c.g, ids, BT, C, V, 1);
  for (int i = 0; i < V * C; i++) EXPECT_NEAR(dt2[i], 2 * dt[i], 1e-15, 1e-15);
  /* A bad id is a zero row and is counted, never an out-of-bounds read. */
  int32_t badids[BT] = {3, 1, 7, 3, -1, 10, 11, 2, 5, 9};
  EXPECT_EQ_INT(pk_embedding_fwd_f64(c.y, c.table, badids, BT, C, V), 2);
  EXPECT(c.y[4 * C] == 0 && c.y[6 * C + C - 1] == 0);
  EXPECT_EQ_INT(pk_embedding_bwd_f64(dt, c.g, badids, BT, C, V, 0), 2);
  free(c.table), free(c.g), free(c.y), free(dt), free(dt2);
}

/* ---- positions ---------------------------------------------------------------- */
typedef struct {
  double *table, *g, *y;
} PosCtx;
static double pos_loss(void *p) {
  PosCtx *c = p;
  pk_positions_fwd_f64(c->y, c->table, B, T, C);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_positions(void) {
  PosCtx c = {kc_alloc(TMAX * C), kc_alloc(BT * C), kc_alloc(BT * C)};
  kc_fill(c.table, TMAX * C, 0.1, 1);
  kc_fill(c.g, BT * C, 0.1, 1);
  double *dt = kc_alloc(TMAX * C);
  kc_fill(dt, TMAX * C, 5, 6);
  pk_positions_bwd_f64(dt, c.g, B, T, C, TMAX, 0);
  KC_CHECK_GRAD("positions dtable", c.table, TMAX * C, dt, pos_loss, &c);
  for (int i = T * C; i < TMAX * C; i++) EXPECT(dt[i] == 0); /* rows >= T */
  free(c.table), free(c.g), free(c.y), free(dt);
}

/* ---- linear ------------------------------------------------------------------- */
typedef struct {
  double *x, *W, *b, *g, *y;
} LinCtx;
static double lin_loss(void *p) {
  LinCtx *c = p;
  pk_linear_fwd_f64(c->y, c->x, c->W, c->b, BT, C, N);
  return kc_dot(c->g, c->y, BT * N);
}
static void test_linear(void) {
  LinCtx c = {kc_alloc(BT * C), kc_alloc(C * N), kc_alloc(N), kc_alloc(BT * N), kc_alloc(BT * N)};
  kc_fill(c.x, BT * C, 0.1, 1);
  kc_fill(c.W, C * N, 0.1, 1);
  kc_fill(c.b, N, 0.1, 1);
  kc_fill(c.g, BT * N, 0.1, 1);
  double *dx = kc_alloc(BT * C), *dW = kc_alloc(C * N), *db = kc_alloc(N);
  pk_linear_dx_f64(dx, c.g, c.W, BT, C, N);
  pk_linear_dw_f64(dW, c.x, c.g, BT, C, N, 0);
  pk_bias_grad_f64(db, c.g, BT, N, 0);
  KC_CHECK_GRAD("linear dx", c.x, BT * C, dx, lin_loss, &c);
  KC_CHECK_GRAD("linear dW", c.W, C * N, dW, lin_loss, &c);
  KC_CHECK_GRAD("linear db", c.b, N, db, lin_loss, &c);
  /* Without a bias, y = x·W exactly (the bias path must not leak). */
  double *y0 = kc_alloc(BT * N);
  kc_fill(y0, BT * N, 5, 6);
  pk_linear_fwd_f64(y0, c.x, c.W, NULL, BT, C, N);
  pk_linear_fwd_f64(c.y, c.x, c.W, c.b, BT, C, N);
  for (int i = 0; i < BT * N; i++) EXPECT_NEAR(y0[i] + c.b[i % N], c.y[i], 1e-14, 1e-14);
  /* accumulate = 1 for dW and db adds. */
  pk_linear_dw_f64(dW, c.x, c.g, BT, C, N, 1);
  pk_bias_grad_f64(db, c.g, BT, N, 1);
  double *dW1 = kc_alloc(C * N), *db1 = kc_alloc(N);
  pk_linear_dw_f64(dW1, c.x, c.g, BT, C, N, 0);
  pk_bias_grad_f64(db1, c.g, BT, N, 0);
  for (int i = 0; i < C * N; i++) EXPECT_NEAR(dW[i], 2 * dW1[i], 1e-14, 1e-14);
  for (int i = 0; i < N; i++) EXPECT_NEAR(db[i], 2 * db1[i], 1e-14, 1e-14);
  free(c.x), free(c.W), free(c.b), free(c.g), free(c.y), free(dx), free(dW), free(db);
  free(y0), free(dW1), free(db1);
}

/* ---- matmul, all four transpose combinations ------------------------------------ */
typedef struct {
  double *a, *b, *g, *y;
  int ta, tb;
} MmCtx;
enum { MM_M = 7, MM_K = 5, MM_N = 4 };
static double mm_loss(void *p) {
  MmCtx *c = p;
  pk_matmul_fwd_f64(c->y, c->a, c->b, MM_M, MM_K, MM_N, c->ta, c->tb);
  return kc_dot(c->g, c->y, MM_M * MM_N);
}
static void test_matmul(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      MmCtx c = {kc_alloc(MM_M * MM_K), kc_alloc(MM_K * MM_N), kc_alloc(MM_M * MM_N),
                 kc_alloc(MM_M * MM_N), ta, tb};
      kc_fill(c.a, MM_M * MM_K, 0.1, 1);
      kc_fill(c.b, MM_K * MM_N, 0.1, 1);
      kc_fill(c.g, MM_M * MM_N, 0.1, 1);
      /* the forward itself against an explicit sum */
      mm_loss(&c);
      for (int i = 0; i < MM_M; i++)
        for (int j = 0; j < MM_N; j++) {
          double s = 0;
          for (int p = 0; p < MM_K; p++)
            s += (ta ? c.a[p * MM_M + i] : c.a[i * MM_K + p]) *
                 (tb ? c.b[j * MM_K + p] : c.b[p * MM_N + j]);
          EXPECT_NEAR(c.y[i * MM_N + j], s, 1e-14, 1e-14);
        }
      double *da = kc_alloc(MM_M * MM_K), *db = kc_alloc(MM_K * MM_N);
      pk_matmul_da_f64(da, c.g, c.b, MM_M, MM_K, MM_N, ta, tb);
      pk_matmul_db_f64(db, c.a, c.g, MM_M, MM_K, MM_N, ta, tb, 0);
      char what[64];
      snprintf(what, sizeof what, "matmul da (ta=%d tb=%d)", ta, tb);
      KC_CHECK_GRAD(what, c.a, MM_M * MM_K, da, mm_loss, &c);
      snprintf(what, sizeof what, "matmul db (ta=%d tb=%d)", ta, tb);
      KC_CHECK_GRAD(what, c.b, MM_K * MM_N, db, mm_loss, &c);
      free(c.a), free(c.b), free(c.g), free(c.y), free(da), free(db);
    }
}

/* ---- add with bias broadcast, mul, scale ------------------------------------------ */
typedef struct {
  double *a, *b, *g, *y;
  int kind; /* 0 add_bias, 1 mul, 2 scale, 3 add */
} EwCtx;
static double ew_loss(void *p) {
  EwCtx *c = p;
  if (c->kind == 0) pk_add_bias_fwd_f64(c->y, c->a, c->b, BT, C);
  if (c->kind == 1) pk_mul_fwd_f64(c->y, c->a, c->b, BT * C);
  if (c->kind == 2) pk_scale_fwd_f64(c->y, c->a, -0.75, BT * C);
  if (c->kind == 3) pk_add_fwd_f64(c->y, c->a, c->b, BT * C);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_elementwise(void) {
  EwCtx c = {kc_alloc(BT * C), kc_alloc(BT * C), kc_alloc(BT * C), kc_alloc(BT * C), 0};
  kc_fill(c.a, BT * C, 0.1, 1);
  kc_fill(c.b, BT * C, 0.1, 1);
  kc_fill(c.g, BT * C, 0.1, 1);
  double *da = kc_alloc(BT * C), *db = kc_alloc(BT * C);
  /* add_bias: da = dy, dbias = bias_grad(dy) */
  c.kind = 0;
  pk_bias_grad_f64(db, c.g, BT, C, 0);
  KC_CHECK_GRAD("add bias dbias", c.b, C, db, ew_loss, &c);
  KC_CHECK_GRAD("add bias da", c.a, BT * C, c.g, ew_loss, &c);
  c.kind = 3;
  KC_CHECK_GRAD("add da", c.a, BT * C, c.g, ew_loss, &c);
  KC_CHECK_GRAD("add db", c.b, BT * C, c.g, ew_loss, &c);
  c.kind = 1;
  pk_mul_bwd_f64(da, db, c.g, c.a, c.b, BT * C);
  KC_CHECK_GRAD("mul da", c.a, BT * C, da, ew_loss, &c);
  KC_CHECK_GRAD("mul db", c.b, BT * C, db, ew_loss, &c);
  c.kind = 2;
  pk_scale_fwd_f64(da, c.g, -0.75, BT * C);
  KC_CHECK_GRAD("scale dx", c.a, BT * C, da, ew_loss, &c);
  free(c.a), free(c.b), free(c.g), free(c.y), free(da), free(db);
}

/* ---- layernorm ---------------------------------------------------------------- */
typedef struct {
  double *x, *gamma, *beta, *g, *y;
} LnCtx;
static double ln_loss(void *p) {
  LnCtx *c = p;
  pk_layernorm_fwd_f64(c->y, NULL, c->x, c->gamma, c->beta, BT, C, 1e-5);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_layernorm(void) {
  LnCtx c = {kc_alloc(BT * C), kc_alloc(C), kc_alloc(C), kc_alloc(BT * C), kc_alloc(BT * C)};
  kc_fill(c.x, BT * C, 0.1, 2);
  kc_fill(c.gamma, C, 0.5, 1.5);
  kc_fill(c.beta, C, 0.1, 1);
  kc_fill(c.g, BT * C, 0.1, 1);
  for (int have = 0; have < 2; have++) {
    double *dx = kc_alloc(BT * C), *dg = kc_alloc(C), *dbeta = kc_alloc(C);
    double *stats = kc_alloc(2 * BT);
    if (have) pk_layernorm_fwd_f64(c.y, stats, c.x, c.gamma, c.beta, BT, C, 1e-5);
    pk_layernorm_bwd_f64(dx, dg, dbeta, stats, have, c.g, c.x, c.gamma, BT, C, 1e-5, 0);
    KC_CHECK_GRAD(have ? "layernorm dx (cached stats)" : "layernorm dx", c.x, BT * C, dx,
                  ln_loss, &c);
    KC_CHECK_GRAD("layernorm dgamma", c.gamma, C, dg, ln_loss, &c);
    KC_CHECK_GRAD("layernorm dbeta", c.beta, C, dbeta, ln_loss, &c);
    free(dx), free(dg), free(dbeta), free(stats);
  }
  /* The forward normalises: with gamma 1, beta 0 each row has mean 0, variance ~1. */
  double *one = kc_alloc(C), *zero = kc_alloc(C);
  for (int i = 0; i < C; i++) one[i] = 1;
  pk_layernorm_fwd_f64(c.y, NULL, c.x, one, zero, BT, C, 0);
  for (int r = 0; r < BT; r++) {
    double m = 0, v = 0;
    for (int i = 0; i < C; i++) m += c.y[r * C + i] / C;
    for (int i = 0; i < C; i++) v += (c.y[r * C + i] - m) * (c.y[r * C + i] - m) / C;
    EXPECT_NEAR(m, 0, 0, 1e-12);
    EXPECT_NEAR(v, 1, 1e-12, 0);
  }
  free(c.x), free(c.gamma), free(c.beta), free(c.g), free(c.y), free(one), free(zero);
}

/* ---- rmsnorm ------------------------------------------------------------------ */
typedef struct {
  double *x, *gamma, *g, *y;
} RmsCtx;
static double rms_loss(void *p) {
  RmsCtx *c = p;
  pk_rmsnorm_fwd_f64(c->y, c->x, c->gamma, BT, C, 1e-6);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_rmsnorm(void) {
  RmsCtx c = {kc_alloc(BT * C), kc_alloc(C), kc_alloc(BT * C), kc_alloc(BT * C)};
  kc_fill(c.x, BT * C, 0.1, 2);
  kc_fill(c.gamma, C, 0.5, 1.5);
  kc_fill(c.g, BT * C, 0.1, 1);
  double *dx = kc_alloc(BT * C), *dg = kc_alloc(C), *dg2 = kc_alloc(C);
  pk_rmsnorm_bwd_f64(dx, c.g, c.x, c.gamma, BT, C, 1e-6);
  KC_CHECK_GRAD("rmsnorm dx", c.x, BT * C, dx, rms_loss, &c);
  pk_rmsnorm_dgamma_f64(dg, c.g, c.x, BT, C, 1e-6, 0);
  KC_CHECK_GRAD("rmsnorm dgamma", c.gamma, C, dg, rms_loss, &c);
  for (int i = 0; i < C; i++) dg2[i] = 0.25;
  pk_rmsnorm_dgamma_f64(dg2, c.g, c.x, BT, C, 1e-6, 1); /* accumulate: adds onto 0.25 */
  for (int i = 0; i < C; i++) EXPECT_NEAR(dg2[i], dg[i] + 0.25, 1e-14, 1e-14);
  /* Hugging Face's LlamaRMSNorm of [1, 2, 3, 4], weight [1, 0.5, 2, 1], eps 1e-6:
   * x·rsqrt(7.5 + 1e-6)·weight. */
  double x4[4] = {1, 2, 3, 4}, w4[4] = {1, 0.5, 2, 1}, y4[4];
  const double want[4] = {0.3651483473268884, 0.3651483473268884, 2.1908900839613303, 1.4605933893075536};
  pk_rmsnorm_fwd_f64(y4, x4, w4, 1, 4, 1e-6);
  for (int i = 0; i < 4; i++) EXPECT_NEAR(y4[i], want[i], 1e-15, 0);
  free(c.x), free(c.gamma), free(c.g), free(c.y), free(dx), free(dg), free(dg2);
}

/* ---- rope ----------------------------------------------------------------------- */
/* x[B,T,C] in 2 heads of D = 4; theta 10 so the angles t/theta^(2i/D) of T = 5
 * positions span more than a turn. */
typedef struct {
  double *x, *g, *y;
} RopeCtx;
static double rope_loss(void *p) {
  RopeCtx *c = p;
  pk_rope_fwd_f64(c->y, c->x, BT, T, C, 2, 10);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_rope(void) {
  RopeCtx c = {kc_alloc(BT * C), kc_alloc(BT * C), kc_alloc(BT * C)};
  kc_fill(c.x, BT * C, 0.1, 2);
  kc_fill(c.g, BT * C, 0.1, 1);
  double *dx = kc_alloc(BT * C), *back = kc_alloc(BT * C);
  pk_rope_bwd_f64(dx, c.g, BT, T, C, 2, 10);
  KC_CHECK_GRAD("rope dx", c.x, BT * C, dx, rope_loss, &c);
  /* a rotation: the inverse undoes it, and position 0 is the identity */
  rope_loss(&c);
  pk_rope_bwd_f64(back, c.y, BT, T, C, 2, 10);
  for (int i = 0; i < BT * C; i++) EXPECT_NEAR(back[i], c.x[i], 1e-14, 1e-15);
  for (int i = 0; i < C; i++) EXPECT(c.y[i] == c.x[i] && c.y[T * C + i] == c.x[T * C + i]);
  /* one head of D = 4 at position 2 (theta 10000): pair 0 turns by 2 rad, pair 1 by
   * 2/100: y0 = x0·cos 2 - x2·sin 2, y2 = x2·cos 2 + x0·sin 2, likewise (x1, x3). */
  double x4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, y4[12];
  pk_rope_fwd_f64(y4, x4, 3, 3, 4, 1, 10000);
  const double want[4] = {1 * cos(2.0) - 3 * sin(2.0), 2 * cos(0.02) - 4 * sin(0.02), 3 * cos(2.0) + 1 * sin(2.0),
                          4 * cos(0.02) + 2 * sin(0.02)};
  for (int i = 0; i < 4; i++) EXPECT_NEAR(y4[8 + i], want[i], 1e-15, 1e-15);
  free(c.x), free(c.g), free(c.y), free(dx), free(back);
}

/* ---- gelu, relu, softmax, silu --------------------------------------------------- */
typedef struct {
  double *x, *g, *y;
  int kind; /* 0 gelu, 1 relu, 2 softmax, 3 silu */
} ActCtx;
static double act_loss(void *p) {
  ActCtx *c = p;
  if (c->kind == 0) pk_gelu_fwd_f64(c->y, c->x, BT * C);
  if (c->kind == 1) pk_relu_fwd_f64(c->y, c->x, BT * C);
  if (c->kind == 2) pk_softmax_fwd_f64(c->y, c->x, BT, C);
  if (c->kind == 3) pk_silu_fwd_f64(c->y, c->x, BT * C);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_activations(void) {
  ActCtx c = {kc_alloc(BT * C), kc_alloc(BT * C), kc_alloc(BT * C), 0};
  kc_fill(c.x, BT * C, 0.05, 3); /* |x| >= 0.05 >> h: relu's kink is never crossed */
  kc_fill(c.g, BT * C, 0.1, 1);
  double *dx = kc_alloc(BT * C);
  c.kind = 0;
  pk_gelu_bwd_f64(dx, c.g, c.x, BT * C);
  KC_CHECK_GRAD("gelu dx", c.x, BT * C, dx, act_loss, &c);
  c.kind = 1;
  pk_relu_bwd_f64(dx, c.g, c.x, BT * C);
  KC_CHECK_GRAD("relu dx", c.x, BT * C, dx, act_loss, &c);
  c.kind = 2;
  act_loss(&c);
  pk_softmax_bwd_f64(dx, c.g, c.y, BT, C);
  KC_CHECK_GRAD("softmax dx", c.x, BT * C, dx, act_loss, &c);
  c.kind = 3;
  pk_silu_bwd_f64(dx, c.g, c.x, BT * C);
  KC_CHECK_GRAD("silu dx", c.x, BT * C, dx, act_loss, &c);
  /* SiLU's value at known points: silu(1) = 1/(1 + e^-1); far out, x or 0 (no NaN). */
  double xs[3] = {1, -100, 100}, ys[3], gs[3] = {1, 1, 1}, ds[3];
  pk_silu_fwd_f64(ys, xs, 3);
  pk_silu_bwd_f64(ds, gs, xs, 3);
  EXPECT_NEAR(ys[0], 0.7310585786300049, 1e-14, 0);
  EXPECT_NEAR(ys[1], 0, 0, 1e-30);
  EXPECT_NEAR(ys[2], 100, 1e-14, 0);
  EXPECT_NEAR(ds[1], 0, 0, 1e-30);
  EXPECT_NEAR(ds[2], 1, 1e-14, 0);
  /* GELU's value at a known point: gelu(1) = 0.5·(1 + tanh(√(2/π)·1.044715)). */
  double one = 1, y1;
  pk_gelu_fwd_f64(&y1, &one, 1);
  EXPECT_NEAR(y1, 0.8411919906082768, 1e-14, 0);
  free(c.x), free(c.g), free(c.y), free(dx);
}

/* ---- dropout --------------------------------------------------------------------- */
typedef struct {
  double *x, *g, *y;
  PkRng rng;
} DropCtx;
static double drop_loss(void *p) {
  DropCtx *c = p;
  pk_dropout_fwd_f64(c->y, c->x, BT * C, 0.3, c->rng);
  return kc_dot(c->g, c->y, BT * C);
}
static void test_dropout(void) {
  DropCtx c = {kc_alloc(BT * C), kc_alloc(BT * C), kc_alloc(BT * C), {1234, 5, 6}};
  kc_fill(c.x, BT * C, 0.1, 1);
  kc_fill(c.g, BT * C, 0.1, 1);
  double *dx = kc_alloc(BT * C);
  pk_dropout_bwd_f64(dx, c.g, BT * C, 0.3, c.rng);
  KC_CHECK_GRAD("dropout dx", c.x, BT * C, dx, drop_loss, &c);
  int zeros = 0;
  for (int i = 0; i < BT * C; i++) zeros += dx[i] == 0;
  EXPECT(zeros > 0 && zeros < BT * C); /* the mask is neither empty nor full */
  free(c.x), free(c.g), free(c.y), free(dx);
}

/* ---- gather ---------------------------------------------------------------------- */
enum { P = 3 };
typedef struct {
  double *x, *g, *y;
  const int32_t *pos;
} GatCtx;
static double gat_loss(void *p) {
  GatCtx *c = p;
  pk_gather_fwd_f64(c->y, c->x, c->pos, B, T, P, C);
  return kc_dot(c->g, c->y, B * P * C);
}
static void test_gather(void) {
  static const int32_t pos[B * P] = {4, 0, 4, 1, 2, 3}; /* 4 repeats in sample 0 */
  GatCtx c = {kc_alloc(BT * C), kc_alloc(B * P * C), kc_alloc(B * P * C), pos};
  kc_fill(c.x, BT * C, 0.1, 1);
  kc_fill(c.g, B * P * C, 0.1, 1);
  double *dx = kc_alloc(BT * C);
  kc_fill(dx, BT * C, 5, 6);
  EXPECT_EQ_INT(pk_gather_bwd_f64(dx, c.g, pos, B, T, P, C), 0);
  KC_CHECK_GRAD("gather dx", c.x, BT * C, dx, gat_loss, &c);
  int32_t bad[B * P] = {4, 5, 4, -1, 2, 3};
  EXPECT_EQ_INT(pk_gather_fwd_f64(c.y, c.x, bad, B, T, P, C), 2);
  EXPECT_EQ_INT(pk_gather_bwd_f64(dx, c.g, bad, B, T, P, C), 2);
  free(c.x), free(c.g), free(c.y), free(dx);
}

/* ---- cross-entropy ----------------------------------------------------------------- */
typedef struct {
  double *logits;
  const int32_t *targets;
  double dloss;
} CeCtx;
static double ce_loss(void *p) {
  CeCtx *c = p;
  double l;
  pk_cross_entropy_fwd_f64(&l, c->logits, c->targets, BT, V, -1);
  return c->dloss * l;
}
static void test_cross_entropy(void) {
  /* two ignored rows (-1): the mean is over the 8 others */
  static const int32_t tg[BT] = {3, -1, 0, 10, 7, 7, -1, 2, 5, 1};
  CeCtx c = {kc_alloc(BT * V), tg, 0.7};
  kc_fill(c.logits, BT * V, 0.1, 3);
  double *dl = kc_alloc(BT * V);
  pk_cross_entropy_bwd_f64(dl, c.logits, tg, BT, V, -1, 0.7);
  KC_CHECK_GRAD("cross_entropy dlogits", c.logits, BT * V, dl, ce_loss, &c);
  for (int i = 0; i < V; i++) EXPECT(dl[1 * V + i] == 0 && dl[6 * V + i] == 0);
  /* the value itself, from the definition */
  double want = 0, got;
  for (int r = 0; r < BT; r++) {
    if (tg[r] < 0) continue;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp(c.logits[r * V + i]);
    want += log(s) - c.logits[r * V + tg[r]];
  }
  want /= 8;
  EXPECT_EQ_INT(pk_cross_entropy_fwd_f64(&got, c.logits, tg, BT, V, -1), 0);
  EXPECT_NEAR(got, want, 1e-13, 0);
  /* in place: dlogits may alias logits */
  double *inplace = kc_alloc(BT * V);
  for (int i = 0; i < BT * V; i++) inplace[i] = c.logits[i];
  pk_cross_entropy_bwd_f64(inplace, inplace, tg, BT, V, -1, 0.7);
  for (int i = 0; i < BT * V; i++) EXPECT_NEAR(inplace[i], dl[i], 1e-15, 1e-17);
  /* all ignored: loss 0, gradient 0, no division by zero */
  int32_t none[BT];
  for (int r = 0; r < BT; r++) none[r] = -100;
  pk_cross_entropy_fwd_f64(&got, c.logits, none, BT, V, -100);
  EXPECT(got == 0);
  pk_cross_entropy_bwd_f64(dl, c.logits, none, BT, V, -100, 1);
  for (int i = 0; i < BT * V; i++) EXPECT(dl[i] == 0);
  /* a target out of range (not ignore_index) is counted */
  int32_t oob[BT] = {3, -1, 0, 11, 7, 7, -1, 2, 5, 1};
  EXPECT_EQ_INT(pk_cross_entropy_fwd_f64(&got, c.logits, oob, BT, V, -1), 1);
  free(c.logits), free(dl), free(inplace);
}

int main(void) {
  RUN(test_embedding);
  RUN(test_positions);
  RUN(test_linear);
  RUN(test_matmul);
  RUN(test_elementwise);
  RUN(test_layernorm);
  RUN(test_rmsnorm);
  RUN(test_rope);
  RUN(test_activations);
  RUN(test_dropout);
  RUN(test_gather);
  RUN(test_cross_entropy);
  return TEST_REPORT();
}
