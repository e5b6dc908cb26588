/* tests/cuda/op_check_sum.c — the ordered sum (pkc_sum_ordered_f32) against the CPU
 * device's, bit for bit.
 *
 * The interpreter's devices sum a tied weight's gradients and the replicas' with
 * sum_ordered (runtime/exec/exec.h): dst = ((src0 + src1) + ...) + src(k-1) per element
 * in float, dst possibly one of the sources. The CPU device's loop (exec_cpu.c
 * cpu_sum_ordered) is repeated here as the reference, and the kernel must give its bits
 * exactly (every member of a tied group must hold the same weight, whatever device it
 * runs on): for k = 1, 2, 3, 5 and 8 sources (the kernel's most), into a buffer of its
 * own and into each source in turn, on 16-byte aligned buffers (the 128-bit path plus
 * the scalar tail, n = 1003) and off alignment (the scalar path). The sources' scales
 * differ by powers of 8, so for these inputs another order of the adds gives other bits
 * (checked: "sum_ordered.order_matters"), and a kernel that reassociated would fail. */
#include "op_check_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SUM_N = 1003, SUM_SRCS = 8 }; /* SUM_SRCS: the kernel's PKC_SUM_SRCS */

/* The CPU device's sum (exec_cpu.c cpu_sum_ordered); `reverse` adds in the other order. */
static void cpu_sum(float *dst, float *const *src, int k, int64_t n, bool reverse) {
  for (int64_t i = 0; i < n; i++) {
    float a = src[reverse ? k - 1 : 0][i];
    for (int q = 1; q < k; q++) a += src[reverse ? k - 1 - q : q][i];
    dst[i] = a;
  }
}

/* One launch over k sources of in[], each placed `off` floats past an aligned address,
 * into a buffer of its own (alias < 0) or into source `alias`; returns whether the
 * result equals want bit for bit. */
static bool sum_run(Ctx *c, float *const *in, int k, int alias, int off, const float *want) {
  c->d->reset(c->d->ctx);
  DevPtr p[SUM_SRCS];
  for (int q = 0; q < k; q++) {
    p[q] = c->d->alloc(c->d->ctx, (SUM_N + 8) * sizeof(float)) + (DevPtr)off * sizeof(float);
    c->d->upload(c->d->ctx, p[q], in[q], SUM_N * sizeof(float));
  }
  for (int q = k; q < SUM_SRCS; q++) p[q] = p[0]; /* not read */
  DevPtr y = alias >= 0 ? p[alias] : oc_up(c, in[SUM_SRCS], SUM_N * sizeof(float)); /* a pattern to overwrite */
  int kk = k;
  long long n = SUM_N;
  LAUNCH(c, "pkc_sum_ordered_f32", n, &y, &kk, &n, &p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7]);
  float *got = oc_zvec(SUM_N);
  oc_down(c, got, y, SUM_N * sizeof(float));
  bool same = memcmp(got, want, SUM_N * sizeof(float)) == 0;
  free(got);
  return same;
}

void op_check_sum(Ctx *c) {
  if (!oc_want(c, "sum_ordered")) return;
  float *in[SUM_SRCS + 1];
  for (int q = 0; q <= SUM_SRCS; q++) in[q] = oc_rvec(c, SUM_N, (float)(1 << (3 * (q % 4))));
  float *want = oc_zvec(SUM_N), *other = oc_zvec(SUM_N);
  cpu_sum(want, in, SUM_SRCS, SUM_N, false);
  cpu_sum(other, in, SUM_SRCS, SUM_N, true);
  oc_report_exact(c, "sum_ordered.order_matters", memcmp(want, other, sizeof(float) * SUM_N) != 0,
                  "ascending and descending sums of these inputs differ");
  static const int ks[] = {1, 2, 3, 5, SUM_SRCS};
  for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
    int k = ks[t];
    cpu_sum(want, in, k, SUM_N, false);
    for (int off = 0; off <= 1; off++)
      for (int alias = -1; alias < k; alias++) {
        char name[64], detail[96];
        snprintf(name, sizeof name, "sum_ordered.k%d%s%s", k, off ? ".unaligned" : "", alias < 0 ? "" : ".into");
        if (alias >= 0) snprintf(name + strlen(name), sizeof name - strlen(name), "%d", alias);
        snprintf(detail, sizeof detail, "= the CPU device's sum of %d, bit for bit", k);
        oc_report_exact(c, name, sum_run(c, in, k, alias, off, want), detail);
      }
  }
  for (int q = 0; q <= SUM_SRCS; q++) free(in[q]);
  free(want), free(other);
}
