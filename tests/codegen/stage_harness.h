/* tests/codegen/stage_harness.h — run a generated stage program from a test.
 *
 * Builds a graph's one-stage program through the real path (layout_stage,
 * codegen_c_stage, the runtime's cc + cache + dlopen) and gives the test the blocks
 * as plain arrays: params and grads as reals (float or double), inputs by tensor. */
#ifndef PD2BW_TEST_STAGE_HARNESS_H
#define PD2BW_TEST_STAGE_HARNESS_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "passes/passes.h"
#include "runtime/core/runtime.h"

typedef struct Harness {
  const Graph *g;
  StageLayout *L;
  StageProgram prog;
  int rs; /* 1: float32 program, 2: float64 */
  char *block[BUF_CLASS_COUNT];
  char dir[256];
} Harness;

/* A private cache so tests never touch the user's ~/.cache. */
static void harness_env(void) {
  char b[256];
  snprintf(b, sizeof b, "/tmp/pd2bw-test-cache-%ld", (long)getuid());
  setenv("PD2BW_CACHE", b, 0);
}

/* The program of layout L (the harness owns it from here: harness_free destroys it). */
static bool harness_build_layout(Harness *h, const Graph *g, StageLayout *L, bool f64, bool fuse) {
  harness_env();
  memset(h, 0, sizeof *h);
  h->g = g;
  h->rs = f64 ? 2 : 1;
  h->L = L;
  snprintf(h->dir, sizeof h->dir, "/tmp/pd2bw-test-XXXXXX");
  if (!mkdtemp(h->dir)) return false;
  CodegenOptions o = {.f64 = f64, .fuse = fuse};
  Diag d;
  diag_init(&d, stderr);
  cJSON *j = cJSON_CreateObject();
  bool ok = codegen_c_stage(g, h->L, 0, &o, h->dir, j, &d);
  cJSON_Delete(j);
  if (!ok) return false;
  char path[512], err[RT_ERR_LEN];
  snprintf(path, sizeof path, "%s/stage0.c", h->dir);
  if (!stage_program_load(path, f64 ? 8 : 4, &h->prog, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return false;
  }
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++) {
    size_t n = (size_t)(h->L->total[c] * h->rs) + 64;
    h->block[c] = aligned_alloc(64, (n + 63) / 64 * 64);
    memset(h->block[c], 0, n);
  }
  return true;
}

/* The program of regions [first, last] of g. */
static bool harness_build_range(Harness *h, const Graph *g, int first, int last, int64_t b, bool f64,
                                bool fuse) {
  return harness_build_layout(h, g, layout_stage(g, first, last, b), f64, fuse);
}

static bool harness_build(Harness *h, const Graph *g, int64_t b, bool f64, bool fuse) {
  return harness_build_range(h, g, 0, g->nregions - 1, b, f64, fuse);
}

static void harness_free(Harness *h) {
  stage_program_unload(&h->prog);
  for (int c = 0; c < BUF_CLASS_COUNT; c++) free(h->block[c]);
  char path[512];
  snprintf(path, sizeof path, "%s/stage0.c", h->dir);
  remove(path);
  rmdir(h->dir);
  layout_destroy(h->L);
}

static void *harness_tensor(Harness *h, int t) {
  const TensorPlace *pl = &h->L->place[t];
  return h->block[pl->cls] + pl->offset * h->rs;
}

/* Reads element i of a float tensor (params, grads, ...) as double. */
static double hget(Harness *h, int t, int64_t i) {
  void *p = harness_tensor(h, t);
  return h->rs == 2 ? ((double *)p)[i] : (double)((float *)p)[i];
}
static void hset(Harness *h, int t, int64_t i, double v) {
  void *p = harness_tensor(h, t);
  if (h->rs == 2)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

static StageCtx harness_ctx(Harness *h, bool training, uint32_t mb, double *loss) {
  StageCtx c = {0};
  c.abi = PD2BW_STAGE_ABI;
  c.training = training;
  c.microbatch = mb;
  c.rng_base = (uint32_t)codegen_rng_base(h->L); /* as plan.json's program.rng_base */
  c.seed = 1234;
  c.params = h->block[BUF_PARAMS];
  c.grads = h->block[BUF_GRADS];
  c.stash = h->block[BUF_STASH];
  c.work = h->block[BUF_WORK];
  c.inputs = h->block[BUF_INPUTS];
  c.boundary = h->block[BUF_BOUNDARY];
  c.sgemm = (void (*)(void))pd_sgemm;
  c.loss = loss;
  return c;
}

static double harness_forward(Harness *h, bool training, uint32_t mb) {
  double loss = NAN;
  StageCtx c = harness_ctx(h, training, mb, &loss);
  h->prog.forward(&c);
  return loss;
}

/* forward + backward; grads accumulate (zero them first for a fresh gradient) */
static double harness_fwd_bwd(Harness *h, uint32_t mb) {
  double loss = NAN;
  StageCtx c = harness_ctx(h, true, mb, &loss);
  h->prog.forward(&c);
  h->prog.backward(&c);
  return loss;
}

static uint64_t hrng_state = 88172645463325252ull;
static double hrand(void) { /* xorshift64 -> [-1, 1) */
  hrng_state ^= hrng_state << 13;
  hrng_state ^= hrng_state >> 7;
  hrng_state ^= hrng_state << 17;
  return (double)(hrng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

/* Random params (scaled by `scale`, gains near 1) and random inputs: i32 inputs
 * uniform in [0, vocab). */
static void harness_randomize(Harness *h, double scale, int vocab) {
  const Graph *g = h->g;
  for (int p = 0; p < g->nparams; p++) {
    int t = g->params[p].tensor;
    if (h->L->place[t].cls != BUF_PARAMS) continue;
    int64_t n = shape_numel(&g->tensors[t].shape, h->L->b);
    double base = g->params[p].init == INIT_ONES ? 1 : 0;
    for (int64_t i = 0; i < n; i++) hset(h, t, i, base + scale * hrand());
  }
  for (int t = 0; t < g->ntensors; t++) {
    if (h->L->place[t].cls != BUF_INPUTS) continue;
    int64_t n = shape_numel(&g->tensors[t].shape, h->L->b);
    if (g->tensors[t].dtype == DT_I32) {
      int32_t *p = harness_tensor(h, t);
      for (int64_t i = 0; i < n; i++) p[i] = (int32_t)((hrand() + 1) / 2 * vocab) % vocab;
    } else {
      for (int64_t i = 0; i < n; i++) hset(h, t, i, hrand());
    }
  }
}

#endif
