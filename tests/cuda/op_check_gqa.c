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
 *   - flash_gqa: pkc_flash_attention_gqa_{fwd,bwd_dq,bwd_dkv}_bf16 on q, k, v (and dy)
 *     cast to bf16 by pkc_cast_f32_to_bf16, against the C attention_gqa in float32 on
 *     the float32 inputs: bf16 operands and probabilities, bounds 2e-2 (out, dq, dk,
 *     dv) and 1e-2 (lse) as the packed flash kernels' (op_check_flash.c). Head sizes 32
 *     (T 70: a full and a partial tile) and 64 (T 33), 4 heads over 2 and over 1;
 *     causal and not, p 0 and 0.2. Family "gqa_tc" ("gqa" runs it too).
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

#define FLASH_THREADS 128 /* kernels/cuda_flash_common.cuh PKC_FLASH_THREADS */
#define FLASH_ROWS 64     /* PKC_FLASH_BR */

static DevPtr to_bf16(Ctx *c, DevPtr x, long long n) {
  DevPtr y = c->d->alloc(c->d->ctx, (size_t)n * 2);
  LAUNCH(c, "pkc_cast_f32_to_bf16", n, &y, &x, &n);
  return y;
}

static void flash_gqa_case(Ctx *c, int T, int hs, int NH, int KVH, int causal, double p) {
  int B = 2, C = NH * hs;
  long long nq = (long long)B * T * C, nkv = (long long)B * T * KVH * hs, rows = (long long)B * NH * T;
  long long ntile = (T + FLASH_ROWS - 1) / FLASH_ROWS, tiles = B * NH * ntile, ktiles = B * KVH * ntile;
  unsigned long long seed = 42;
  unsigned op = 11, mb = 5;
  float *q = oc_rvec(c, (size_t)nq, 1.5f), *k = oc_rvec(c, (size_t)nkv, 1.5f), *v = oc_rvec(c, (size_t)nkv, 1.5f);
  float *dy = oc_rvec(c, (size_t)nq, 1), *out = oc_zvec((size_t)nq), *lse = oc_zvec((size_t)rows);
  float *dq = oc_zvec((size_t)nq), *dk = oc_zvec((size_t)nkv), *dv = oc_zvec((size_t)nkv);
  float *work = oc_zvec((size_t)pk_attention_work_elems(B, T, NH));
  DevPtr gq = oc_up(c, q, (size_t)nq * 4), gk = oc_up(c, k, (size_t)nkv * 4), gv = oc_up(c, v, (size_t)nkv * 4);
  DevPtr gdy = oc_up(c, dy, (size_t)nq * 4), gout = c->d->alloc(c->d->ctx, (size_t)nq * 4);
  DevPtr glse = c->d->alloc(c->d->ctx, (size_t)rows * 4), gD = c->d->alloc(c->d->ctx, (size_t)rows * 4);
  DevPtr gdq = oc_up(c, q, (size_t)nq * 4), gdk = oc_up(c, k, (size_t)nkv * 4), gdv = oc_up(c, v, (size_t)nkv * 4);
  DevPtr gmb = oc_up(c, &mb, 4);
  DevPtr q16 = to_bf16(c, gq, nq), k16 = to_bf16(c, gk, nkv), v16 = to_bf16(c, gv, nkv), dy16 = to_bf16(c, gdy, nq);
  PkRng rng = {seed, op, mb};
  char name[96], tag[48];
  snprintf(tag, sizeof tag, "hs%d.T%d.h%d.kv%d%s.p%.1f", hs, T, NH, KVH, causal ? ".causal" : "", p);

  LAUNCH_BLOCK(c, "pkc_flash_attention_gqa_fwd_bf16", tiles, FLASH_THREADS, &gout, &glse, &q16, &k16, &v16, &B, &T,
               &NH, &KVH, &hs, &causal, &p, &seed, &op, &gmb);
  pk_attention_gqa_fwd_f32(out, lse, q, k, v, work, B, T, NH, KVH, hs, causal, p, rng);
  snprintf(name, sizeof name, "flash_gqa_fwd.%s", tag);
  oc_check_vec(c, name, gout, out, (size_t)nq, 2e-2);
  snprintf(name, sizeof name, "flash_gqa_fwd.lse.%s", tag);
  oc_check_vec(c, name, glse, lse, (size_t)rows, 1e-2);

  LAUNCH(c, "pkc_attention_bwd_delta_f32", rows, &gD, &gdy, &gout, &B, &T, &C, &NH);
  LAUNCH_BLOCK(c, "pkc_flash_attention_gqa_bwd_dq_bf16", tiles, FLASH_THREADS, &gdq, &glse, &gD, &dy16, &q16, &k16,
               &v16, &B, &T, &NH, &KVH, &hs, &causal, &p, &seed, &op, &gmb);
  LAUNCH_BLOCK(c, "pkc_flash_attention_gqa_bwd_dkv_bf16", ktiles, FLASH_THREADS, &gdk, &gdv, &glse, &gD, &dy16,
               &q16, &k16, &v16, &B, &T, &NH, &KVH, &hs, &causal, &p, &seed, &op, &gmb);
  pk_attention_gqa_bwd_f32(dq, dk, dv, dy, q, k, v, out, lse, work, B, T, NH, KVH, hs, causal, p, rng);
  snprintf(name, sizeof name, "flash_gqa_bwd.dq.%s", tag);
  oc_check_vec(c, name, gdq, dq, (size_t)nq, 2e-2);
  snprintf(name, sizeof name, "flash_gqa_bwd.dk.%s", tag);
  oc_check_vec(c, name, gdk, dk, (size_t)nkv, 2e-2);
  snprintf(name, sizeof name, "flash_gqa_bwd.dv.%s", tag);
  oc_check_vec(c, name, gdv, dv, (size_t)nkv, 2e-2);
  free(q), free(k), free(v), free(dy), free(out), free(lse), free(dq), free(dk), free(dv), free(work);
}

static void check_flash_gqa(Ctx *c) {
  if (!oc_want(c, "gqa_tc")) return; /* not "flash": the seqlen variant runs that family at one T */
  static const struct {
    int hs, T, kvh;
  } shapes[] = {{32, 70, 2}, {64, 33, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int causal = 0; causal <= 1; causal++)
      for (int k = 0; k < 2; k++) {
        c->d->reset(c->d->ctx);
        flash_gqa_case(c, shapes[s].T, shapes[s].hs, 4, shapes[s].kvh, causal, k ? 0.2 : 0.0);
      }
}

static void check_gqa(Ctx *c) {
  if (!oc_want(c, "gqa")) return; /* not "attention...": test_cuda_emu counts that family's checks */
  static const int kvh[] = {2, 1, 4};
  for (int i = 0; i < 3; i++)
    for (int causal = 0; causal <= 1; causal++)
      for (int k = 0; k < 2; k++) {
        c->d->reset(c->d->ctx);
        gqa_case(c, 4, kvh[i], causal, k ? 0.2 : 0.0);
      }
}

void op_check_gqa(Ctx *c) {
  check_gqa(c);
  check_flash_gqa(c);
}
