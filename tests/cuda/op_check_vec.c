/* tests/cuda/op_check_vec.c — the elementwise kernels' two paths give the same bits.
 *
 * Each elementwise kernel with a 128-bit fast path (cuda_kernels.cuh: pkc_map1,
 * pkc_map2, the casts, add_bias, mul_bwd, dropout) takes it only when every pointer is
 * 16-byte aligned; otherwise the scalar loop does all the work. op_check.c's checks
 * run them on aligned buffers (the fast path plus the scalar tail, n = 1003) against
 * the CPU; here the same inputs are placed 1..3 floats (1..7 bf16) off alignment, in
 * several combinations, and the outputs must equal the aligned run's bit for bit, on
 * the same device. So a wrong lane, a wrong tail or a path that rounds differently
 * fails here, whatever the device's arithmetic.
 */
#include "op_check_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"

/* How the kernel takes its arguments. */
typedef enum VecForm {
  VF_MAP1,     /* (y, x, n) */
  VF_MAP2,     /* (y, a, b, n) */
  VF_SCALE,    /* (y, x, f32 s, n) */
  VF_INPLACE,  /* (y, f32 s, n): y read and written */
  VF_AXPY,     /* (y, f32 a, x, n): y read and written */
  VF_FILL,     /* (y, f32 v, n) */
  VF_BIAS,     /* (y, a, bias, i64 M, i32 N) */
  VF_MULBWD,   /* (da, db, dy, a, b, n): two outputs */
  VF_DROPOUT,  /* (y, x, n, f64 p, u64 seed, u32 op, mbkey) */
  VF_TO_BF16,  /* (u16 y, f32 x, n) */
  VF_FROM_BF16 /* (f32 y, u16 x, n) */
} VecForm;

static const struct {
  const char *kernel;
  VecForm form;
} vec_kernels[] = {
    {"pkc_fill_f32", VF_FILL},         {"pkc_copy_f32", VF_MAP1},
    {"pkc_scale_inplace_f32", VF_INPLACE}, {"pkc_axpy_f32", VF_AXPY},
    {"pkc_add_fwd_f32", VF_MAP2},      {"pkc_add_bias_fwd_f32", VF_BIAS},
    {"pkc_mul_fwd_f32", VF_MAP2},      {"pkc_mul_bwd_f32", VF_MULBWD},
    {"pkc_scale_fwd_f32", VF_SCALE},   {"pkc_gelu_fwd_f32", VF_MAP1},
    {"pkc_gelu_bwd_f32", VF_MAP2},     {"pkc_relu_fwd_f32", VF_MAP1},
    {"pkc_relu_bwd_f32", VF_MAP2},     {"pkc_silu_fwd_f32", VF_MAP1},
    {"pkc_silu_bwd_f32", VF_MAP2},     {"pkc_dropout_fwd_f32", VF_DROPOUT},
    {"pkc_dropout_bwd_f32", VF_DROPOUT}, {"pkc_cast_f32_to_bf16", VF_TO_BF16},
    {"pkc_cast_bf16_to_f32", VF_FROM_BF16},
};

/* add_bias's shape: N a multiple of 4 (its 128-bit path needs whole rows of float4),
 * M·N <= VEC_N (the rest of y is left as it was). */
enum { VEC_N = 1003, VEC_M = 17, VEC_NCOL = 56 };

/* One run: the inputs (in[0..2], VEC_N elements of esz_in bytes; in[0] is also the
 * initial y of the in-place forms) copied to offsets off_in elements past an aligned
 * arena address, the outputs at off_out; returns the outputs (2·VEC_N elements of
 * esz_out bytes; the second half for mul_bwd's db), malloc'd. */
static void *vec_run(Ctx *c, const char *kernel, VecForm form, void *const in[3], int off_in,
                     int off_out) {
  size_t esz_in = form == VF_FROM_BF16 ? 2 : 4, esz_out = form == VF_TO_BF16 ? 2 : 4;
  size_t n = VEC_N, pad = 8;
  DevPtr d_in[3], d_out[2];
  for (int i = 0; i < 3; i++) {
    d_in[i] = c->d->alloc(c->d->ctx, (n + pad) * esz_in) + (DevPtr)off_in * esz_in;
    c->d->upload(c->d->ctx, d_in[i], in[i], n * esz_in);
  }
  for (int i = 0; i < 2; i++) {
    d_out[i] = c->d->alloc(c->d->ctx, (n + pad) * esz_out) + (DevPtr)off_out * esz_out;
    /* the in-place forms' y starts as in[0]; the others' y as a pattern they overwrite */
    c->d->upload(c->d->ctx, d_out[i], in[form == VF_INPLACE || form == VF_AXPY ? 0 : 2],
                 n * esz_out);
  }
  long long nn = VEC_N, M = VEC_M;
  int N = VEC_NCOL;
  float s = -1.375f;
  double p = 0.3;
  unsigned long long seed = 0xfeedf00d12345ull;
  unsigned op = 11, mb = 5;
  DevPtr dmb = oc_up(c, &mb, 4);
  switch (form) {
  case VF_MAP1:
  case VF_TO_BF16:
  case VF_FROM_BF16: LAUNCH(c, kernel, nn, &d_out[0], &d_in[0], &nn); break;
  case VF_MAP2: LAUNCH(c, kernel, nn, &d_out[0], &d_in[0], &d_in[1], &nn); break;
  case VF_SCALE: LAUNCH(c, kernel, nn, &d_out[0], &d_in[0], &s, &nn); break;
  case VF_INPLACE: LAUNCH(c, kernel, nn, &d_out[0], &s, &nn); break;
  case VF_AXPY: LAUNCH(c, kernel, nn, &d_out[0], &s, &d_in[1], &nn); break;
  case VF_FILL: LAUNCH(c, kernel, nn, &d_out[0], &s, &nn); break;
  case VF_BIAS: LAUNCH(c, kernel, nn, &d_out[0], &d_in[0], &d_in[1], &M, &N); break;
  case VF_MULBWD:
    LAUNCH(c, kernel, nn, &d_out[0], &d_out[1], &d_in[0], &d_in[1], &d_in[2], &nn);
    break;
  case VF_DROPOUT:
    LAUNCH(c, kernel, (nn + 3) / 4, &d_out[0], &d_in[0], &nn, &p, &seed, &op, &dmb);
    break;
  }
  char *out = malloc(2 * n * esz_out);
  oc_down(c, out, d_out[0], n * esz_out);
  oc_down(c, out + n * esz_out, d_out[1], n * esz_out);
  return out;
}

void op_check_vec(Ctx *c) {
  if (!oc_want(c, "vector")) return;
  /* (inputs, outputs) off alignment, in elements: each pointer misaligned alone, and
   * both by different amounts */
  static const int offs[][2] = {{1, 0}, {0, 1}, {2, 3}, {3, 3}};
  void *in[3];
  for (int i = 0; i < 3; i++) {
    float *v = oc_rvec(c, VEC_N, 3);
    for (int k = 0; k < VEC_N; k++)
      if (v[k] == 0) v[k] = 1; /* dropout: a zero would hide a mask difference */
    in[i] = v;
  }
  for (size_t k = 0; k < sizeof vec_kernels / sizeof *vec_kernels; k++) {
    const char *kernel = vec_kernels[k].kernel;
    VecForm form = vec_kernels[k].form;
    size_t bytes = 2 * (size_t)VEC_N * (form == VF_TO_BF16 ? 2 : 4);
    c->d->reset(c->d->ctx);
    char *ref = vec_run(c, kernel, form, in, 0, 0);
    if (form == VF_BIAS) { /* op_check.c's N = 70 never takes this path: the CPU here */
      float *want = malloc(VEC_N * sizeof *want);
      memcpy(want, in[2], VEC_N * sizeof *want);
      pk_add_bias_fwd_f32(want, in[0], in[1], VEC_M, VEC_NCOL);
      oc_report_exact(c, "add_bias_fwd.n4", memcmp(ref, want, VEC_N * sizeof *want) == 0,
                      "128-bit path = the CPU, bit for bit");
      free(want);
    }
    for (size_t o = 0; o < sizeof offs / sizeof *offs; o++) {
      int oi = offs[o][0], oo = offs[o][1];
      if (form == VF_TO_BF16 && oo) oo = 2 * oo + 1; /* 3..7 bf16: 2-byte steps, never 16 */
      if (form == VF_FROM_BF16 && oi) oi = 2 * oi + 1;
      c->d->reset(c->d->ctx);
      char *got = vec_run(c, kernel, form, in, oi, oo);
      char name[80], detail[96];
      snprintf(name, sizeof name, "%s.off%d_%d", kernel + 4, oi, oo);
      snprintf(detail, sizeof detail, "scalar path = the 128-bit path, bit for bit");
      oc_report_exact(c, name, memcmp(got, ref, bytes) == 0, detail);
      free(got);
    }
    free(ref);
  }
  for (int i = 0; i < 3; i++) free(in[i]);
}
