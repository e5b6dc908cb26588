/* tests/codegen/test_codegen_bf16.c — a bf16 layout's classifier gradient kept in the
 * stash (passes/layout.h, "the classifier's gradient in the stash") and the C program's
 * side of it (codegen/cgen_c_bf16.c), on the tiny GPT (tied LM head, vocabulary larger
 * than the width, so the LM head's GEMMs are the stage's largest):
 *  - layout: the gradient's place is the logits' stored place (STASH, bf16), neither
 *    has a backward working place, float32 layouts have none of it, on one stage and on
 *    the last of two; cuda_scratch stages no copy of the gradient, and the planner's
 *    figure (plan_cuda_scratch) is the layout's;
 *  - the C program: the forward runs cross_entropy_bwd and pk_bf16_store into the
 *    logits' slot when training, the backward no cross_entropy_bwd and no cast of the
 *    logits, its LM-head GEMMs pk_matmul_bf16a and pk_gemm_dw_bf16 on that slot;
 *  - running it: the slot holds exactly the RNE bf16 of cross_entropy_bwd of the
 *    forward's float32 logits (untouched in evaluation), and the parameter gradients
 *    are the float32 program's within the bf16 storage's error;
 *  - the bf16-reading GEMM kernels against the float32 GEMM on the widened values, and
 *    the same bits on 1 and 3 threads. */
/* the shared helpers define more than this file uses */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "gpt_dropout.h"
#include "stage_harness.h"
#pragma GCC diagnostic pop
#include "kernels/cpu_kernels.h"
#include "passes/planner.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#include "test.h"

enum { V = 1000, T = 16, C = 32, NH = 2, NL = 2 };

static Graph *tiny_gpt(Arena *a) {
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_gpt_dropout(a, &d, V, T, C, NH, NL, 0.0);
  EXPECT(g != NULL && pass_autodiff(g, &d));
  return g;
}

static const Op *cross_entropy(const Graph *g) {
  for (int o = 0; o < g->nops; o++)
    if (g->ops[o].kind == OP_CROSS_ENTROPY) return &g->ops[o];
  return NULL;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void check_places(const Graph *g, int first, int b) {
  StageLayout *L = layout_stage_bf16(g, first, g->nregions - 1, b, true);
  int t = L->cls_grad, lg = cross_entropy(g)->in[0];
  EXPECT(t >= 0);
  if (t < 0) return;
  const TensorPlace *pg = &L->place[t], *pl = &L->place[lg];
  printf("  regions %d..%d: dlogits t%d on logits t%d, stash +%lld, logits' forward working place %lld\n", first,
         g->nregions - 1, t, lg, (long long)pg->offset, (long long)pl->work[0]);
  EXPECT(pg->alias == lg && pg->cls == BUF_STASH && pg->bf16 && pg->offset == pl->offset && pg->bytes == pl->bytes);
  EXPECT(pg->work[0] == -1 && pg->work[1] == -1 && pg->up[0] == -1 && pg->up[1] == -1);
  EXPECT(pl->bf16 && pl->cls == BUF_STASH && pl->work[0] >= 0 && pl->work[1] == -1 && pl->up[1] == -1);
  /* no cast staging of the gradient: the dx GEMM's A would be b·T·V bf16 elements */
  int64_t M = (int64_t)b * T, staged = layout_cuda_bf16_staging(M) + M * V * 2;
  EXPECT(layout_cuda_scratch_bytes(L, true) < staged);
  PlanInput in;
  EXPECT(plan_input_from_graph_bf16(g, true, &in));
  in.cuda = true, in.precision = GEMM_BF16;
  EXPECT_EQ_INT(plan_cuda_scratch(&in, first, g->nregions, b), layout_cuda_scratch_bytes(L, true));
  plan_input_free(&in);
  layout_destroy(L);
  L = layout_stage(g, first, g->nregions - 1, b);
  EXPECT_EQ_INT(L->cls_grad, -1);
  layout_destroy(L);
}

static void test_layout(void) {
  Arena *a = arena_create();
  Graph *g = tiny_gpt(a);
  check_places(g, 0, 2);
  check_places(g, 2, 3); /* the last stage of two: receives its input */
  graph_destroy(g);
  arena_destroy(a);
}

static void test_program_text(void) {
  Arena *a = arena_create();
  Graph *g = tiny_gpt(a);
  StageLayout *L = layout_stage_bf16(g, 0, g->nregions - 1, 2, true);
  char *src = codegen_c_source(g, L, 0, &(CodegenOptions){.fuse = true});
  const char *bwd = strstr(src, "/* backward of region");
  char store[96];
  EXPECT(L->cls_grad >= 0);
  snprintf(store, sizeof store, "pk_bf16_store((uint16_t *)(void *)(S + %lld), ",
           L->cls_grad >= 0 ? (long long)L->place[L->cls_grad].offset : -1LL);
  EXPECT(bwd != NULL);
  EXPECT(count(src, " K(cross_entropy_bwd)(") == 1 && strstr(src, " K(cross_entropy_bwd)(") < bwd);
  EXPECT(strstr(src, "if (ctx->training) { /* the gradient, stored as bf16 over the logits */") != NULL);
  EXPECT_EQ_INT(count(src, store), 1);
  EXPECT(strstr(src, "/* logits down */") == NULL && strstr(src, "/* logits up */") == NULL);
  EXPECT_EQ_INT(count(src, "pk_matmul_bf16a("), 2); /* the kernel's definition and the LM head's dx */
  EXPECT_EQ_INT(count(src, "pk_gemm_dw_bf16("), 2); /* and the tied weight's gradient */
  free(src);
  layout_destroy(L);
  graph_destroy(g);
  arena_destroy(a);
}

/* The slot after a training forward == RNE bf16 of cross_entropy_bwd of the logits an
 * evaluation forward left in their working place; grads near the float32 program's. */
static void test_program_runs(void) {
  Arena *a = arena_create();
  Graph *g = tiny_gpt(a);
  Harness h, f;
  EXPECT(harness_build_layout(&h, g, layout_stage_bf16(g, 0, g->nregions - 1, 2, true), false, true));
  EXPECT(harness_build(&f, g, 2, false, true));
  harness_randomize(&h, 0.5, V);
  for (int c = BUF_PARAMS; c <= BUF_INPUTS; c++) /* the same params and inputs for both */
    if (c == BUF_PARAMS || c == BUF_INPUTS) memcpy(f.block[c], h.block[c], (size_t)f.L->total[c]);
  const Op *ce = cross_entropy(g);
  const TensorPlace *pl = &h.L->place[ce->in[0]];
  int64_t M = 2 * T, n = M * V;
  uint16_t *slot = (uint16_t *)(void *)(h.block[BUF_STASH] + pl->offset), *want = malloc((size_t)n * 2);
  float *dl = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) slot[i] = 0x7777;
  harness_forward(&h, false, 3);
  bool kept = true;
  for (int64_t i = 0; i < n; i++) kept = kept && slot[i] == 0x7777;
  EXPECT(kept); /* evaluation stores no gradient */
  const float *logits = (const float *)(void *)(h.block[BUF_WORK] + pl->work[0]);
  pk_cross_entropy_bwd_f32(dl, logits, harness_tensor(&h, ce->in[1]), M, V, (int)ce->attr[0], 1);
  pk_bf16_store(want, dl, n);
  memset(h.block[BUF_GRADS], 0, (size_t)h.L->total[BUF_GRADS]);
  memset(f.block[BUF_GRADS], 0, (size_t)f.L->total[BUF_GRADS]);
  double l16 = harness_fwd_bwd(&h, 3), l32 = harness_fwd_bwd(&f, 3);
  EXPECT(memcmp(slot, want, (size_t)n * 2) == 0);
  const float *g16 = (const float *)(void *)h.block[BUF_GRADS], *g32 = (const float *)(void *)f.block[BUF_GRADS];
  double scale = 0, err = 0;
  for (int64_t i = 0; i < h.L->total[BUF_GRADS] / 4; i++) scale = fmax(scale, fabs(g32[i]));
  for (int64_t i = 0; i < h.L->total[BUF_GRADS] / 4; i++) err = fmax(err, fabs((double)g16[i] - g32[i]) / scale);
  printf("  loss bf16 plan %.7f, float32 %.7f; grads' largest difference %.2e of their scale\n", l16, l32, err);
  EXPECT(h.L->total[BUF_GRADS] == f.L->total[BUF_GRADS] && fabs(l16 - l32) < 1e-2 && err < 2e-2);
  free(want), free(dl);
  harness_free(&h), harness_free(&f);
  graph_destroy(g);
  arena_destroy(a);
}

static float frand(void) { return (float)hrand(); }

/* largest |got - want| over the reference's scale */
static double rel(const float *got, const float *want, int64_t n) {
  double s = 0, e = 0;
  for (int64_t i = 0; i < n; i++) s = fmax(s, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) e = fmax(e, fabs((double)got[i] - want[i]));
  return s > 0 ? e / s : e;
}

static void test_gemm_kernels(void) {
  const int64_t M = 37; /* 4 blocks of 8 rows and 5 */
  const int N = 301, K = 19; /* a block of 256 columns and 45 */
  float *gf = malloc(M * N * 4), *x = malloc(M * K * 4), *b = malloc((size_t)N * K * 4);
  float *y = malloc(M * K * 4), *yr = malloc(M * K * 4);
  float *w = malloc((size_t)N * K * 4), *wr = malloc((size_t)N * K * 4);
  uint16_t *g = malloc(M * N * 2);
  for (int64_t i = 0; i < M * N; i++) gf[i] = frand();
  pk_bf16_store(g, gf, M * N);
  pk_bf16_load(gf, g, M * N); /* the values the kernels see */
  for (int64_t i = 0; i < M * K; i++) x[i] = frand();
  for (int64_t i = 0; i < (int64_t)N * K; i++) b[i] = frand();
  double worst = 0;
  for (int tb = 0; tb < 2; tb++) { /* y[M,K] = g·op(b) */
    pk_matmul_bf16a(y, g, b, M, N, K, tb);
    pk_matmul_fwd_f32(yr, gf, b, M, N, K, 0, tb);
    worst = fmax(worst, rel(y, yr, M * K));
  }
  for (int gt = 0; gt < 2; gt++)
    for (int acc = 0; acc < 2; acc++) {
      for (int64_t i = 0; i < (int64_t)N * K; i++) w[i] = wr[i] = frand();
      pk_gemm_dw_bf16(w, x, g, M, K, N, gt, acc);
      if (gt) /* matmul_dw_t: dW[N,K] = gᵀ·x */
        pk_matmul_db_f32(wr, x, gf, M, K, N, 0, 1, acc);
      else /* linear_dw: dW[K,N] = xᵀ·g */
        pk_linear_dw_f32(wr, x, gf, M, K, N, acc);
      worst = fmax(worst, rel(w, wr, (int64_t)N * K));
    }
  printf("  bf16-reading GEMMs against float32 GEMMs on the widened values: %.2e\n", worst);
  EXPECT(worst < 1e-5);
#ifdef _OPENMP
  bool same = true; /* the same bits on 1 and on 3 threads */
  for (int run = 0; run < 2; run++) {
    omp_set_num_threads(run ? 3 : 1);
    float *out = run ? yr : y, *dw = run ? wr : w;
    pk_matmul_bf16a(out, g, b, M, N, K, 0);
    pk_gemm_dw_bf16(dw, x, g, M, K, N, 0, 0);
    pk_gemm_dw_bf16(dw, x, g, M, K, N, 1, 1);
  }
  same = memcmp(y, yr, (size_t)M * K * 4) == 0 && memcmp(w, wr, (size_t)N * K * 4) == 0;
  EXPECT(same);
#endif
  free(gf), free(x), free(b), free(y), free(yr), free(w), free(wr), free(g);
}

int main(void) {
  RUN(test_layout);
  RUN(test_program_text);
  RUN(test_program_runs);
  RUN(test_gemm_kernels);
  return TEST_REPORT();
}
