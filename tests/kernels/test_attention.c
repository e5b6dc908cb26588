/* Fused multi-head self-attention: causal and bidirectional, with and without
 * dropout on the probabilities. The backward is checked against finite differences
 * of the forward with the mask held fixed (the same PkRng draws the same mask in
 * every forward call), the forward against a plain reference that builds the whole
 * score matrix and draws the mask element by element with pk_rng_u32 — which pins
 * the element numbering ((b·NH + h)·T + t)·T + t2 that a CUDA kernel must follow. */
#include "kcheck.h"

/* T and C are fixed; the batch size and head count vary per case, because the
 * kernels walk query rows in blocks (pk_attention_work_elems: the forward min(T, B·NH)
 * rows, at least 2; the backward half that): blocks of 4 and 2 rows of a 5-row
 * sequence, of 2 and 1 rows, and all 5 rows at once are all exercised. */
enum { T = 5, C = 8 };
static int B = 2, NH = 2, HS = 4;
#define QKV (B * T * 3 * C)
#define OUT (B * T * C)

typedef struct {
  double *qkv, *g, *y, *lse, *work;
  int causal;
  double p;
  PkRng rng;
} AttCtx;

static double att_loss(void *ctx) {
  AttCtx *c = ctx;
  pk_attention_fwd_f64(c->y, c->lse, c->qkv, c->work, B, T, C, NH, c->causal, c->p, c->rng);
  return kc_dot(c->g, c->y, OUT);
}

/* The reference: per (b, h) the full score matrix, softmax, mask, P'·V; lse[b,h,t]
 * = log Σ_u e^(s_u), natural log (what the backward takes from the forward). */
static void att_reference(double *out, double *lse, const double *qkv, int causal, double p,
                          PkRng rng) {
  uint64_t thr = pk_rng_threshold(p);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double s[T], mx = -1e300, sum = 0;
        for (int u = 0; u < T; u++) {
          s[u] = 0;
          if (causal && u > t) continue;
          for (int d = 0; d < HS; d++)
            s[u] += qkv[(b * T + t) * 3 * C + h * HS + d] *
                    qkv[(b * T + u) * 3 * C + C + h * HS + d];
          s[u] /= sqrt((double)HS);
          if (s[u] > mx) mx = s[u];
        }
        for (int u = 0; u < T; u++) {
          s[u] = causal && u > t ? 0 : exp(s[u] - mx);
          sum += s[u];
        }
        lse[(b * NH + h) * T + t] = mx + log(sum);
        for (int u = 0; u < T; u++) {
          s[u] /= sum;
          uint64_t e = (((uint64_t)b * NH + h) * T + t) * T + u;
          if (p > 0) s[u] = pk_rng_u32(rng.seed, rng.op, rng.microbatch, e) < thr ? 0 : s[u] / (1 - p);
        }
        for (int d = 0; d < HS; d++) {
          double o = 0;
          for (int u = 0; u < T; u++) o += s[u] * qkv[(b * T + u) * 3 * C + 2 * C + h * HS + d];
          out[(b * T + t) * C + h * HS + d] = o;
        }
      }
}

static void check_case(int causal, double p) {
  AttCtx c = {kc_alloc(QKV), kc_alloc(OUT), kc_alloc(OUT), kc_alloc(B * NH * T),
              kc_alloc(pk_attention_work_elems(B, T, NH)), causal, p, {42, 17, 3}};
  kc_fill(c.qkv, QKV, 0.1, 1.5);
  kc_fill(c.g, OUT, 0.1, 1);
  double *ref = kc_alloc(OUT), *ref_lse = kc_alloc(B * NH * T);
  att_loss(&c);
  att_reference(ref, ref_lse, c.qkv, causal, p, c.rng);
  for (int i = 0; i < OUT; i++) EXPECT_NEAR(c.y[i], ref[i], 1e-12, 1e-14);
  for (int i = 0; i < B * NH * T; i++) EXPECT_NEAR(c.lse[i], ref_lse[i], 1e-12, 1e-14);

  double *dqkv = kc_alloc(QKV);
  kc_fill(dqkv, QKV, 5, 6); /* garbage: the backward must overwrite all of it */
  pk_attention_bwd_f64(dqkv, c.g, c.qkv, c.y, c.lse, c.work, B, T, C, NH, causal, p, c.rng);
  char what[80];
  snprintf(what, sizeof what, "attention dqkv (causal=%d p=%g)", causal, p);
  KC_CHECK_GRAD(what, c.qkv, QKV, dqkv, att_loss, &c);
  free(c.qkv), free(c.g), free(c.y), free(c.lse), free(c.work), free(ref), free(ref_lse);
  free(dqkv);
}

static void set_dims(int b, int nh) {
  B = b;
  NH = nh;
  HS = C / nh;
}
static void all_cases(void) {
  for (int causal = 0; causal < 2; causal++) {
    check_case(causal, 0);
    check_case(causal, 0.3);
  }
}
static void test_two_row_blocks(void) { set_dims(2, 2), all_cases(); } /* R = 4, 2 of T = 5 */
static void test_one_row_blocks(void) { set_dims(1, 1), all_cases(); } /* R = 2, 1 */
static void test_one_block(void) { set_dims(3, 4), all_cases(); }      /* R = T */

/* Causal: the last token's q/k/v cannot change any earlier output; bidirectional:
 * it changes all of them. */
static void test_masking(void) {
  double *qkv = kc_alloc(QKV), *y0 = kc_alloc(OUT), *y1 = kc_alloc(OUT);
  double *lse = kc_alloc(B * NH * T), *work = kc_alloc(pk_attention_work_elems(B, T, NH));
  kc_fill(qkv, QKV, 0.1, 1.5);
  PkRng r = {1, 2, 3};
  for (int causal = 0; causal < 2; causal++) {
    pk_attention_fwd_f64(y0, lse, qkv, work, B, T, C, NH, causal, 0, r);
    for (int j = 0; j < 3 * C; j++) qkv[(T - 1) * 3 * C + j] += 0.5; /* b = 0, t = T-1 */
    pk_attention_fwd_f64(y1, lse, qkv, work, B, T, C, NH, causal, 0, r);
    for (int j = 0; j < 3 * C; j++) qkv[(T - 1) * 3 * C + j] -= 0.5;
    int changed_early = 0;
    for (int i = 0; i < (T - 1) * C; i++) changed_early += fabs(y0[i] - y1[i]) > 1e-12;
    if (causal)
      EXPECT_EQ_INT(changed_early, 0);
    else
      EXPECT_EQ_INT(changed_early, (T - 1) * C);
    for (int i = T * C; i < OUT; i++) EXPECT(y0[i] == y1[i]); /* other sample untouched */
  }
  free(qkv), free(y0), free(y1), free(lse), free(work);
}

/* Dropout: same stream, same output; another microbatch or op id, another mask. */
static void test_dropout_streams(void) {
  double *qkv = kc_alloc(QKV), *y0 = kc_alloc(OUT), *y1 = kc_alloc(OUT);
  double *lse = kc_alloc(B * NH * T), *work = kc_alloc(pk_attention_work_elems(B, T, NH));
  kc_fill(qkv, QKV, 0.1, 1.5);
  PkRng r = {7, 2, 3}, mb = {7, 2, 4}, op = {7, 9, 3};
  pk_attention_fwd_f64(y0, lse, qkv, work, B, T, C, NH, 0, 0.5, r);
  pk_attention_fwd_f64(y1, lse, qkv, work, B, T, C, NH, 0, 0.5, r);
  for (int i = 0; i < OUT; i++) EXPECT(y0[i] == y1[i]);
  pk_attention_fwd_f64(y1, lse, qkv, work, B, T, C, NH, 0, 0.5, mb);
  int same = 0;
  for (int i = 0; i < OUT; i++) same += y0[i] == y1[i];
  EXPECT(same < OUT / 2);
  pk_attention_fwd_f64(y1, lse, qkv, work, B, T, C, NH, 0, 0.5, op);
  same = 0;
  for (int i = 0; i < OUT; i++) same += y0[i] == y1[i];
  EXPECT(same < OUT / 2);
  free(qkv), free(y0), free(y1), free(lse), free(work);
}

int main(void) {
  RUN(test_two_row_blocks);
  RUN(test_one_row_blocks);
  RUN(test_one_block);
  set_dims(2, 2);
  RUN(test_masking);
  RUN(test_dropout_streams);
  return TEST_REPORT();
}
