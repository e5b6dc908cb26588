/* tests/cuda/op_check_flash.c — the tensor-core kernels against plain loops and the CPU
 * attention (op_check.h says how checks run).
 *
 *   - mma: pkc_mma_check_bf16's three products (ldmatrix, ldmatrix .trans, fragments
 *     gathered by the PTX layout) against a plain loop over the same bf16 values;
 *     fp32 sums of 32 exact products, so only the summation order differs: 1e-5.
 *   - flash: pkc_flash_attention_{fwd,bwd_*}_bf16 on qkv (and dy) cast to bf16 by
 *     pkc_cast_f32_to_bf16, as the code generator launches them, against the CPU's
 *     fp32 attention_fwd/bwd on the fp32 inputs. The kernels round q, k, v, dy and
 *     the probabilities to bf16 (8 significant bits, relative error 2^-9 each) and
 *     accumulate in fp32, so results differ from fp32 by ~1e-3..1e-2 of the tensor's
 *     scale: bound 2e-2 (output, dqkv). A wrong dropout mask (one element's keep
 *     decision flipped moves a row's output by ~P·v/(1-p)) or a wrong causal skip (a
 *     key tile missing or extra) gives errors of 0.1..1, far above it. lse against the
 *     CPU forward's (exact in fp32): bound 1e-2 of max |lse|. The backward runs as
 *     the code generator launches it: D = dy·out by pkc_attention_bwd_delta_f32 from
 *     the GPU forward's out, then dq and dkv from that forward's lse.
 * Shapes: B=2, NH=2, head sizes 16, 32, 64, T not a multiple of the 64-row tile
 * (one partial tile, and one full plus one partial), causal and not, p 0 and 0.2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check_internal.h"
#include "kernels/cpu_kernels.h"

#define FLASH_THREADS 128 /* kernels/cuda_flash_common.cuh PKC_FLASH_THREADS */
#define FLASH_ROWS 64     /* PKC_FLASH_BR */

static uint16_t bf16_bits(float f) { /* round to nearest even (no NaN here) */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float bf16_val(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void check_mma(Ctx *c) {
  if (!oc_want(c, "mma")) return;
  uint16_t A[16 * 32], B[32 * 8], Bt[8 * 32];
  for (int i = 0; i < 16 * 32; i++) A[i] = bf16_bits(oc_frand(c) * 2);
  for (int k = 0; k < 32; k++)
    for (int n = 0; n < 8; n++) Bt[n * 32 + k] = B[k * 8 + n] = bf16_bits(oc_frand(c) * 2);
  float ref[3 * 128];
  for (int i = 0; i < 16; i++)
    for (int n = 0; n < 8; n++) {
      double s = 0;
      for (int k = 0; k < 32; k++) s += (double)bf16_val(A[i * 32 + k]) * bf16_val(B[k * 8 + n]);
      for (int m = 0; m < 3; m++) ref[m * 128 + i * 8 + n] = (float)s;
    }
  DevPtr dA = oc_up(c, A, sizeof A), dB = oc_up(c, B, sizeof B), dBt = oc_up(c, Bt, sizeof Bt);
  DevPtr dD = c->d->alloc(c->d->ctx, sizeof ref);
  LAUNCH_BLOCK(c, "pkc_mma_check_bf16", 1, 32, &dD, &dA, &dB, &dBt);
  float got[3 * 128];
  oc_down(c, got, dD, sizeof got);
  static const char *const what[3] = {"mma.ldmatrix_trans", "mma.ldmatrix", "mma.fragments"};
  for (int m = 0; m < 3; m++) oc_report(c, what[m], oc_rel_err(got + m * 128, ref + m * 128, 128), 1e-5);
}

static void flash_case(Ctx *c, int B, int T, int NH, int hs, int causal, double p) {
  int C = NH * hs;
  long long nq = (long long)B * T * 3 * C, no = (long long)B * T * C, rows = (long long)B * NH * T;
  long long tiles = (long long)B * NH * ((T + FLASH_ROWS - 1) / FLASH_ROWS);
  unsigned long long seed = 42;
  unsigned op = 11, mb = 5;
  float *qkv = oc_rvec(c, (size_t)nq, 1.5f), *out = oc_zvec((size_t)no), *lse = oc_zvec((size_t)rows);
  float *work = oc_zvec((size_t)pk_attention_work_elems(B, T, NH));
  DevPtr dq = oc_up(c, qkv, (size_t)nq * 4), dq16 = c->d->alloc(c->d->ctx, (size_t)nq * 2);
  DevPtr dout = c->d->alloc(c->d->ctx, (size_t)no * 4), dlse = c->d->alloc(c->d->ctx, (size_t)rows * 4);
  DevPtr dmb = oc_up(c, &mb, 4);
  LAUNCH(c, "pkc_cast_f32_to_bf16", nq, &dq16, &dq, &nq);
  LAUNCH_BLOCK(c, "pkc_flash_attention_fwd_bf16", tiles, FLASH_THREADS, &dout, &dlse, &dq16, &B, &T, &C, &NH,
               &causal, &p, &seed, &op, &dmb);
  PkRng rng = {seed, op, mb};
  pk_attention_fwd_f32(out, lse, qkv, work, B, T, C, NH, causal, p, rng);
  char name[80];
  snprintf(name, sizeof name, "flash_fwd.hs%d.T%d%s.p%.1f", hs, T, causal ? ".causal" : "", p);
  oc_check_vec(c, name, dout, out, (size_t)no, 2e-2);
  snprintf(name, sizeof name, "flash_fwd.lse.hs%d.T%d%s.p%.1f", hs, T, causal ? ".causal" : "", p);
  oc_check_vec(c, name, dlse, lse, (size_t)rows, 1e-2);

  /* backward: D from the forward's out, then dq and dk/dv into one dqkv (garbage
   * beforehand) from the forward's lse */
  float *dy = oc_rvec(c, (size_t)no, 1.0f), *dqkv = oc_zvec((size_t)nq);
  DevPtr ddy = oc_up(c, dy, (size_t)no * 4), ddy16 = c->d->alloc(c->d->ctx, (size_t)no * 2);
  DevPtr dD = c->d->alloc(c->d->ctx, (size_t)rows * 4), ddq = oc_up(c, qkv, (size_t)nq * 4);
  LAUNCH(c, "pkc_cast_f32_to_bf16", no, &ddy16, &ddy, &no);
  LAUNCH(c, "pkc_attention_bwd_delta_f32", rows, &dD, &ddy, &dout, &B, &T, &C, &NH);
  LAUNCH_BLOCK(c, "pkc_flash_attention_bwd_dq_bf16", tiles, FLASH_THREADS, &ddq, &dlse, &dD, &ddy16, &dq16, &B,
               &T, &C, &NH, &causal, &p, &seed, &op, &dmb);
  LAUNCH_BLOCK(c, "pkc_flash_attention_bwd_dkv_bf16", tiles, FLASH_THREADS, &ddq, &dlse, &dD, &ddy16, &dq16, &B,
               &T, &C, &NH, &causal, &p, &seed, &op, &dmb);
  pk_attention_bwd_f32(dqkv, dy, qkv, out, lse, work, B, T, C, NH, causal, p, rng);
  snprintf(name, sizeof name, "flash_bwd.hs%d.T%d%s.p%.1f", hs, T, causal ? ".causal" : "", p);
  oc_check_vec(c, name, ddq, dqkv, (size_t)nq, 2e-2);
  free(qkv), free(out), free(lse), free(work), free(dy), free(dqkv);
}

static void check_flash(Ctx *c) {
  if (!oc_want(c, "flash")) return;
  static const struct {
    int hs, T;
  } shapes[] = {{16, 70}, {32, 37}, {64, 33}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int causal = 0; causal <= 1; causal++)
      for (int k = 0; k < 2; k++) {
        c->d->reset(c->d->ctx);
        flash_case(c, 2, shapes[s].T, 2, shapes[s].hs, causal, k ? 0.2 : 0.0);
      }
}

void op_check_flash(Ctx *c) {
  check_mma(c);
  check_flash(c);
}
