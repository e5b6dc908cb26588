/* Grouped-query attention (attention_gqa_fwd/bwd): separate q[B,T,NH·HS], k and v
 * [B,T,KVH·HS], query head h reading key/value head h/(NH/KVH). The forward is checked
 * against a plain reference that expands k and v to NH heads (head h gets a copy of
 * its group's key/value head), builds the whole score matrix and draws the dropout
 * mask element by element with pk_rng_u32 (element ((b·NH + h)·T + t)·T + u, as
 * attention's); the backward against finite differences of the forward in q, k and v
 * (so dk and dv must sum over the group's query heads), and the packed kernel's dqkv of
 * the expanded inputs summed over each group. KVH = NH must be the packed attention's
 * numbers exactly (both run the same strided body). */
#include "kcheck.h"

enum { T = 5, HS = 4 };
static int B = 2, NH = 4, KVH = 2;
#define CQ (NH * HS)
#define CKV (KVH * HS)
#define NQ (B * T * CQ)
#define NKV (B * T * CKV)

typedef struct {
  double *q, *k, *v, *g, *y, *lse, *work;
  int causal;
  double p;
  PkRng rng;
} GqaCtx;

static double gqa_loss(void *ctx) {
  GqaCtx *c = ctx;
  pk_attention_gqa_fwd_f64(c->y, c->lse, c->q, c->k, c->v, c->work, B, T, NH, KVH, HS, c->causal, c->p, c->rng);
  return kc_dot(c->g, c->y, NQ);
}

/* k or v [B,T,KVH·HS] expanded to [B,T,NH·HS]: head h is kv head h/(NH/KVH). */
static void expand(double *full, const double *kv) {
  for (int r = 0; r < B * T; r++)
    for (int h = 0; h < NH; h++)
      for (int d = 0; d < HS; d++) full[r * CQ + h * HS + d] = kv[r * CKV + (h / (NH / KVH)) * HS + d];
}

/* Multi-head attention over q and the expanded k, v: full scores, softmax, mask, P'·V. */
static void reference(double *out, double *lse, const double *q, const double *kf, const double *vf, int causal,
                      double p, PkRng rng) {
  uint64_t thr = pk_rng_threshold(p);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double s[T], mx = -1e300, sum = 0;
        for (int u = 0; u < T; u++) {
          s[u] = 0;
          if (causal && u > t) continue;
          for (int d = 0; d < HS; d++) s[u] += q[(b * T + t) * CQ + h * HS + d] * kf[(b * T + u) * CQ + h * HS + d];
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
          for (int u = 0; u < T; u++) o += s[u] * vf[(b * T + u) * CQ + h * HS + d];
          out[(b * T + t) * CQ + h * HS + d] = o;
        }
      }
}

static void check_case(int causal, double p) {
  GqaCtx c = {kc_alloc(NQ),      kc_alloc(NKV),   kc_alloc(NKV),
              kc_alloc(NQ),      kc_alloc(NQ),    kc_alloc(B * NH * T),
              kc_alloc(pk_attention_work_elems(B, T, NH)), causal, p, {42, 17, 3}};
  kc_fill(c.q, NQ, 0.1, 1.5);
  kc_fill(c.k, NKV, 0.1, 1.5);
  kc_fill(c.v, NKV, 0.1, 1.5);
  kc_fill(c.g, NQ, 0.1, 1);
  double *kf = kc_alloc(NQ), *vf = kc_alloc(NQ), *ref = kc_alloc(NQ), *ref_lse = kc_alloc(B * NH * T);
  expand(kf, c.k);
  expand(vf, c.v);
  gqa_loss(&c);
  reference(ref, ref_lse, c.q, kf, vf, causal, p, c.rng);
  for (int i = 0; i < NQ; i++) EXPECT_NEAR(c.y[i], ref[i], 1e-12, 1e-14);
  for (int i = 0; i < B * NH * T; i++) EXPECT_NEAR(c.lse[i], ref_lse[i], 1e-12, 1e-14);

  double *dq = kc_alloc(NQ), *dk = kc_alloc(NKV), *dv = kc_alloc(NKV);
  kc_fill(dq, NQ, 5, 6); /* garbage: the backward must overwrite all of it */
  kc_fill(dk, NKV, 5, 6);
  kc_fill(dv, NKV, 5, 6);
  pk_attention_gqa_bwd_f64(dq, dk, dv, c.g, c.q, c.k, c.v, c.y, c.lse, c.work, B, T, NH, KVH, HS, causal, p,
                           c.rng);
  char what[96];
  snprintf(what, sizeof what, "attention_gqa dq (NH=%d KVH=%d causal=%d p=%g)", NH, KVH, causal, p);
  KC_CHECK_GRAD(what, c.q, NQ, dq, gqa_loss, &c);
  snprintf(what, sizeof what, "attention_gqa dk (NH=%d KVH=%d causal=%d p=%g)", NH, KVH, causal, p);
  KC_CHECK_GRAD(what, c.k, NKV, dk, gqa_loss, &c);
  snprintf(what, sizeof what, "attention_gqa dv (NH=%d KVH=%d causal=%d p=%g)", NH, KVH, causal, p);
  KC_CHECK_GRAD(what, c.v, NKV, dv, gqa_loss, &c);

  /* The packed kernel on the expanded inputs: its dk, dv summed over each group (y
   * again at the unperturbed inputs: the finite differences left their last). */
  gqa_loss(&c);
  double *qkv = kc_alloc(3 * NQ), *dqkv = kc_alloc(3 * NQ), *y = kc_alloc(NQ), *lse = kc_alloc(B * NH * T);
  for (int r = 0; r < B * T; r++)
    for (int j = 0; j < CQ; j++) {
      qkv[r * 3 * CQ + j] = c.q[r * CQ + j];
      qkv[r * 3 * CQ + CQ + j] = kf[r * CQ + j];
      qkv[r * 3 * CQ + 2 * CQ + j] = vf[r * CQ + j];
    }
  pk_attention_fwd_f64(y, lse, qkv, c.work, B, T, CQ, NH, causal, p, c.rng);
  for (int i = 0; i < NQ; i++) EXPECT_NEAR(c.y[i], y[i], 1e-12, 1e-14);
  pk_attention_bwd_f64(dqkv, c.g, qkv, y, lse, c.work, B, T, CQ, NH, causal, p, c.rng);
  for (int r = 0; r < B * T; r++) {
    for (int j = 0; j < CQ; j++) EXPECT_NEAR(dq[r * CQ + j], dqkv[r * 3 * CQ + j], 1e-12, 1e-14);
    for (int kh = 0; kh < KVH; kh++)
      for (int d = 0; d < HS; d++) {
        double sk = 0, sv = 0;
        for (int h = kh * (NH / KVH); h < (kh + 1) * (NH / KVH); h++) {
          sk += dqkv[r * 3 * CQ + CQ + h * HS + d];
          sv += dqkv[r * 3 * CQ + 2 * CQ + h * HS + d];
        }
        EXPECT_NEAR(dk[r * CKV + kh * HS + d], sk, 1e-12, 1e-14);
        EXPECT_NEAR(dv[r * CKV + kh * HS + d], sv, 1e-12, 1e-14);
      }
  }
  free(c.q), free(c.k), free(c.v), free(c.g), free(c.y), free(c.lse), free(c.work);
  free(kf), free(vf), free(ref), free(ref_lse), free(dq), free(dk), free(dv);
  free(qkv), free(dqkv), free(y), free(lse);
}

static void all_cases(void) {
  for (int causal = 0; causal < 2; causal++) {
    check_case(causal, 0);
    check_case(causal, 0.3);
  }
}

/* Groups of 2 (Llama 2 70B / Llama 3's 4:1 in miniature), of 4 (one kv head: multi-query),
 * and none (kv_heads = heads); batch 1 and 3 change the kernels' row blocks. */
static void test_groups_of_two(void) { B = 2, NH = 4, KVH = 2, all_cases(); }
static void test_multi_query(void) { B = 1, NH = 4, KVH = 1, all_cases(); }
static void test_multi_head(void) { B = 3, NH = 2, KVH = 2, all_cases(); }

/* kv_heads = heads gives the packed attention's very numbers (one strided body). */
static void test_packed_bits(void) {
  B = 2, NH = 2, KVH = 2;
  double *q = kc_alloc(NQ), *k = kc_alloc(NQ), *v = kc_alloc(NQ), *qkv = kc_alloc(3 * NQ);
  double *y0 = kc_alloc(NQ), *y1 = kc_alloc(NQ), *l0 = kc_alloc(B * NH * T), *l1 = kc_alloc(B * NH * T);
  double *work = kc_alloc(pk_attention_work_elems(B, T, NH));
  kc_fill(q, NQ, 0.1, 1.5), kc_fill(k, NQ, 0.1, 1.5), kc_fill(v, NQ, 0.1, 1.5);
  for (int r = 0; r < B * T; r++)
    for (int j = 0; j < CQ; j++)
      qkv[r * 3 * CQ + j] = q[r * CQ + j], qkv[r * 3 * CQ + CQ + j] = k[r * CQ + j],
                    qkv[r * 3 * CQ + 2 * CQ + j] = v[r * CQ + j];
  PkRng r = {5, 6, 7};
  pk_attention_fwd_f64(y0, l0, qkv, work, B, T, CQ, NH, 1, 0.2, r);
  pk_attention_gqa_fwd_f64(y1, l1, q, k, v, work, B, T, NH, NH, HS, 1, 0.2, r);
  EXPECT(memcmp(y0, y1, sizeof(double) * NQ) == 0);
  EXPECT(memcmp(l0, l1, sizeof(double) * B * NH * T) == 0);
  free(q), free(k), free(v), free(qkv), free(y0), free(y1), free(l0), free(l1), free(work);
}

int main(void) {
  RUN(test_groups_of_two);
  RUN(test_multi_query);
  RUN(test_multi_head);
  RUN(test_packed_bits);
  return TEST_REPORT();
}
