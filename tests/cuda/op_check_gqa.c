/* tests/cuda/op_check_gqa.c — grouped-query attention's CUDA kernels against the CPU's
 * (op_check.h says how checks run).
 *
 *   - attention_gqa: pkc_attention_gqa_fwd_f32 (out, lse), then the backward as the code
 *     generator launches it (pkc_attention_bwd_delta_f32 from the GPU forward's out,
 *     pkc_attention_gqa_bwd_dq_f32, pkc_attention_gqa_bwd_dkv_f32 from its lse) against
 *     the C attention_gqa_fwd/bwd in float32: both fp32, only the summation order
 *     differs, bound 1e-4 as the packed attention's. dk and dv start as garbage (the
 *     kernels overwrite them) and sum over a group's query heads, so a missing or
 *     extra head of the group, or a query head reading the wrong key/value head, is
 *     an error of the order of the values.
 * Shapes: B=2, T=19, head size 8 (the emulator's compiled one), 4 query heads over 2
 * key/value heads, over 1 (multi-query) and over 4 (multi-head); causal and not, p 0
 * and 0.2.
 */
#include <stdio.h>
#include <stdlib.h>

#include "op_check_internal.h"
#include "kernels/cpu_kernels.h"

static void gqa_case(Ctx *c, int NH, int KVH, int causal, double p) {
  int B = 2, T = 19, hs = 8;
  size_t nq = (size_t)B * T * NH * hs, nkv = (size_t)B * T * KVH * hs;
  float *q = oc_rvec(c, nq, 1.5f), *k = oc_rvec(c, nkv, 1.5f), *v = oc_rvec(c, nkv, 1.5f);
  float *dy = oc_rvec(c, nq, 1), *out = oc_zvec(nq), *lse = oc_zvec((size_t)B * NH * T);
  float *dq = oc_zvec(nq), *dk = oc_zvec(nkv), *dv = oc_zvec(nkv);
  float *work = oc_zvec((size_t)pk_attention_work_elems(B, T, NH));
  DevPtr gq = oc_up(c, q, nq * 4), gk = oc_up(c, k, nkv * 4), gv = oc_up(c, v, nkv * 4);
  DevPtr gdy = oc_up(c, dy, nq * 4), gout = c->d->alloc(c->d->ctx, nq * 4);
  DevPtr glse = c->d->alloc(c->d->ctx, (size_t)B * NH * T * 4);
  DevPtr gD = c->d->alloc(c->d->ctx, (size_t)B * NH * T * 4);
  DevPtr gdq = oc_up(c, q, nq * 4), gdk = oc_up(c, k, nkv * 4), gdv = oc_up(c, v, nkv * 4); /* garbage */
  unsigned long long seed = 42;
  unsigned op = 11, mb = 5;
  DevPtr gmb = oc_up(c, &mb, 4); /* the kernels read the microbatch key in device memory */
  PkRng rng = {seed, op, mb};
  int64_t rows = (int64_t)B * NH * T, krows = (int64_t)B * KVH * T;
  int C = NH * hs;
  char name[80], tag[40];
  snprintf(tag, sizeof tag, "h%d.kv%d%s.p%.1f", NH, KVH, causal ? ".causal" : "", p);

  LAUNCH(c, "pkc_attention_gqa_fwd_f32", rows, &gout, &glse, &gq, &gk, &gv, &B, &T, &NH, &KVH, &hs, &causal, &p,
         &seed, &op, &gmb);
  pk_attention_gqa_fwd_f32(out, lse, q, k, v, work, B, T, NH, KVH, hs, causal, p, rng);
  snprintf(name, sizeof name, "attention_gqa_fwd.%s", tag);
  oc_check_vec(c, name, gout, out, nq, 1e-4);
  snprintf(name, sizeof name, "attention_gqa_fwd_lse.%s", tag);
  oc_check_vec(c, name, glse, lse, (size_t)rows, 1e-4);

  LAUNCH(c, "pkc_attention_bwd_delta_f32", rows, &gD, &gdy, &gout, &B, &T, &C, &NH);
  LAUNCH(c, "pkc_attention_gqa_bwd_dq_f32", rows, &gdq, &glse, &gD, &gdy, &gq, &gk, &gv, &B, &T, &NH, &KVH, &hs,
         &causal, &p, &seed, &op, &gmb);
  LAUNCH(c, "pkc_attention_gqa_bwd_dkv_f32", krows, &gdk, &gdv, &glse, &gD, &gdy, &gq, &gk, &gv, &B, &T, &NH, &KVH,
         &hs, &causal, &p, &seed, &op, &gmb);
  pk_attention_gqa_bwd_f32(dq, dk, dv, dy, q, k, v, out, lse, work, B, T, NH, KVH, hs, causal, p, rng);
  snprintf(name, sizeof name, "attention_gqa_bwd.dq.%s", tag);
  oc_check_vec(c, name, gdq, dq, nq, 1e-4);
  snprintf(name, sizeof name, "attention_gqa_bwd.dk.%s", tag);
  oc_check_vec(c, name, gdk, dk, nkv, 1e-4);
  snprintf(name, sizeof name, "attention_gqa_bwd.dv.%s", tag);
  oc_check_vec(c, name, gdv, dv, nkv, 1e-4);
  free(q), free(k), free(v), free(dy), free(out), free(lse), free(dq), free(dk), free(dv), free(work);
}

void op_check_gqa(Ctx *c) {
  if (!oc_want(c, "gqa")) return; /* not "attention...": test_cuda_emu counts that family's checks */
  static const int kvh[] = {2, 1, 4};
  for (int i = 0; i < 3; i++)
    for (int causal = 0; causal <= 1; causal++)
      for (int k = 0; k < 2; k++) {
        c->d->reset(c->d->ctx);
        gqa_case(c, 4, kvh[i], causal, k ? 0.2 : 0.0);
      }
}
