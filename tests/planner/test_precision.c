/* The planner and the GEMM precision (planner.h: PlanInput.precision, a GemmType, and
 * PlanInput.cuda):
 *  - an input whose precision is left zero (GEMM_PLAN) plans exactly as tf32 and its
 *    plan says tf32 (plan_precision, the one place the default lives);
 *  - the cost model charges the cluster's peak for the precision: the same model and
 *    configuration predict step times in exactly the ratio of the peaks when compute
 *    is all there is (no memory-bandwidth or link terms);
 *  - the peak lookup: plain `tflops` for all, tf32 falling back to fp32, no bf16 peak
 *    is refused by plan_create with the cluster's location;
 *  - a CUDA plan's cuda_scratch per stage, from the segments' terms, is exactly what
 *    layout_cuda_scratch_bytes (the figure codegen records) gives for every stage of
 *    a real differentiated GPT, at several microbatch sizes, bf16 or not;
 *  - bf16 operand staging counts in the fit: a partition that fits in tf32 does not
 *    in bf16, and the planner moves the cut.
 */
#include <stdint.h>

#include "gpt_input.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the MLP builder is not used here */
#include "ir/build_models.h"
#pragma GCC diagnostic pop
#include "passes/layout.h"
#include "passes/passes.h"
#include "passes/planner.h"
#include "test.h"

static char diag_buf[4096];

static Plan *make(const PlanInput *in, const Cluster *c, const PlanPins *pins) {
  FILE *f = fmemopen(diag_buf, sizeof diag_buf, "w");
  Diag d;
  diag_init(&d, f);
  Plan *p = plan_create(in, c, pins, &d);
  fclose(f);
  return p;
}

/* Compute only: no memory-bandwidth term (roofline and optimizer step), links
 * "infinitely fast" (0 disables the transfer terms). */
static Cluster compute_only(void) {
  Cluster c = test_cluster(1, 4, 80);
  c.flops = 0;
  c.flops_fp32 = 20e12, c.flops_tf32 = 150e12, c.flops_bf16 = 300e12;
  c.mem_bandwidth = 0, c.intra_bandwidth = 0, c.inter_bandwidth = 0;
  return c;
}

static void test_step_time_ratio(void) {
  PlanInput in;
  gpt_input(&in, 8, 1024, 512, 50257, 16, 64);
  Cluster c = compute_only();
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 2, pins.replicas = 1, pins.microbatch_size = 4, pins.schedule = PS_1F1B;
  pins.recompute = PR_OFF;
  double t[GEMM_BF16 + 1];
  for (int p = GEMM_PLAN; p <= GEMM_BF16; p++) { /* GEMM_PLAN: left zero, the default */
    in.precision = (GemmType)p;
    Plan *pl = make(&in, &c, &pins);
    EXPECT(pl != NULL);
    t[p] = pl ? pl->sim.step_time_s : 0;
    GemmType want = p == GEMM_PLAN ? GEMM_TF32 : (GemmType)p; /* the plan holds it resolved */
    if (pl) EXPECT(pl->in.precision == want && pl->stages[1].first_seg > 0);
    plan_destroy(pl);
  }
  EXPECT(t[GEMM_TF32] > 0);
  EXPECT(t[GEMM_PLAN] == t[GEMM_TF32]); /* zero is tf32, exactly */
  /* the ratio of the peaks: tf32/bf16 = 300/150, fp32/tf32 = 150/20 */
  EXPECT_NEAR(t[GEMM_TF32] / t[GEMM_BF16], 2.0, 1e-9, 0);
  EXPECT_NEAR(t[GEMM_FP32] / t[GEMM_TF32], 7.5, 1e-9, 0);
  /* and per segment: forward FLOPs over the precision's peak */
  in.precision = GEMM_PLAN;
  EXPECT(plan_precision(&in) == GEMM_TF32);
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 1, 2, 1), in.segs[1].fwd_flops / 150e12, 1e-12, 0);
  in.precision = GEMM_BF16;
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 1, 2, 1), in.segs[1].fwd_flops / 300e12, 1e-12, 0);
  plan_input_free(&in);
}

static void test_peaks(void) {
  Cluster c = {0};
  c.flops = 7e12; /* one rate for every precision (old files, CPUs) */
  for (int p = GEMM_FP32; p <= GEMM_BF16; p++) EXPECT_NEAR(plan_peak_flops(&c, (GemmType)p), 7e12, 0, 0);
  c.flops = 0, c.flops_fp32 = 15.7e12; /* a V100: no TF32, no BF16 */
  EXPECT_NEAR(plan_peak_flops(&c, GEMM_FP32), 15.7e12, 0, 0);
  EXPECT_NEAR(plan_peak_flops(&c, GEMM_TF32), 15.7e12, 0, 0);
  EXPECT_NEAR(plan_peak_flops(&c, GEMM_BF16), 0, 0, 0);
  c.flops_tf32 = 494.5e12, c.flops_bf16 = 989e12;
  EXPECT_NEAR(plan_peak_flops(&c, GEMM_TF32), 494.5e12, 0, 0);
  EXPECT_NEAR(plan_peak_flops(&c, GEMM_BF16), 989e12, 0, 0);
  /* --precision's spelling is GemmType's: fp32, tf32, bf16 and nothing else */
  GemmType pr;
  EXPECT(gemm_type_parse("bf16", &pr) && pr == GEMM_BF16);
  EXPECT(!gemm_type_parse("fp16", &pr));
  EXPECT(!gemm_type_parse("plan", &pr) && !gemm_type_parse("bf16_out", &pr));
  EXPECT_STREQ(gemm_type_name(GEMM_TF32), "tf32");

  /* bf16 on a cluster without a bf16 peak: refused, at the cluster's location */
  PlanInput in;
  gpt_input(&in, 4, 256, 128, 1000, 4, 8);
  Cluster v = test_cluster(1, 8, 16);
  v.name = "v100x8", v.device = "V100-16GB", v.loc = (Loc){"v100x8.cluster", 2, 1};
  v.flops = 0, v.flops_fp32 = 15.7e12;
  in.precision = GEMM_BF16;
  Plan *p = make(&in, &v, NULL);
  EXPECT(p == NULL);
  EXPECT(strstr(diag_buf, "v100x8.cluster:2:1: error: --precision bf16: cluster 'v100x8'") != NULL);
  EXPECT(strstr(diag_buf, "no bf16 peak") != NULL);
  plan_destroy(p);
  in.precision = GEMM_TF32;
  p = make(&in, &v, NULL);
  EXPECT(p != NULL);
  plan_destroy(p);
  plan_input_free(&in);
}

/* plan_cuda_scratch from the segments' terms == layout_cuda_scratch_bytes of the stage
 * program, for every contiguous stage of a differentiated GPT (tied LM head in the
 * epilogue: the largest GEMMs) at several b. */
static void test_scratch_matches_layout(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, 1000, 16, 32, 2, 2); /* vocab >> width: the LM head is largest */
  EXPECT(g != NULL && pass_autodiff(g, &d));
  PlanInput in;
  EXPECT(plan_input_from_graph(g, &in));
  in.cuda = true;
  int checked = 0, grows = 0;
  for (int bf = 0; bf < 2; bf++) {
    in.precision = bf ? GEMM_BF16 : GEMM_TF32;
    for (int64_t b = 1; b <= 5; b += 2)
      for (int s = 0; s < in.nsegs; s++)
        for (int e = s + 1; e <= in.nsegs; e++) {
          StageLayout *L = layout_stage(g, s, e - 1, b);
          int64_t want = layout_cuda_scratch_bytes(L, bf != 0);
          EXPECT_EQ_INT(plan_cuda_scratch(&in, s, e, b), want);
          grows += bf && want > layout_cuda_scratch_bytes(L, false);
          layout_destroy(L);
          checked++;
        }
  }
  EXPECT(checked > 20);
  EXPECT(grows > 0); /* bf16 staging is there */
  /* depends on the partition: the epilogue's LM head GEMMs are the largest */
  in.precision = GEMM_BF16;
  EXPECT(plan_cuda_scratch(&in, in.nsegs - 1, in.nsegs, 2) > plan_cuda_scratch(&in, 1, 2, 2));
  in.cuda = false; /* CPU programs: none */
  EXPECT_EQ_INT(plan_cuda_scratch(&in, 0, in.nsegs, 2), 0);
  plan_input_free(&in);
  graph_destroy(g);
  arena_destroy(a);
}

/* Four equal segments, each 16·P bytes under 1f1b (weights, grads, adam m and v), and
 * with bf16 2·P more (the bf16 weight copy: 1/8 segment); the last holds a GEMM whose
 * bf16 staging is 1.5 segments. With a device of 3.5 segments, tf32 cuts 2 | 2
 * (balanced), bf16 cannot hold segments 2-3 plus the staging (3.75) and cuts 3 | 1
 * (3.375 and 2.625). */
static void test_bf16_staging_moves_the_cut(void) {
  const int64_t P = 1 << 22;
  const double seg = 16.0 * (double)P, staging = 1.5 * seg;
  PlanInput in;
  plan_input_init(&in, "four");
  in.batch = 4;
  in.input_bytes = 64;
  for (int s = 0; s < 4; s++) {
    char name[8];
    snprintf(name, sizeof name, "s%d", s);
    PlanSegment *x = plan_input_add_segment(&in, name);
    x->params = P;
    x->fwd_flops = 1e9, x->bwd_flops = 2e9;
    x->out_bytes = s < 3 ? 64 : 0;
  }
  /* a GEMM with an empty A and a fixed B of staging/2 elements (2 bytes each as bf16) */
  plan_segment_add_cuda(&in.segs[3], (PlanCudaTerm){true, 0, 0, 0, (int64_t)(staging / 2)});
  in.cuda = true;
  Cluster c = test_cluster(1, 2, 1);
  c.memory_bytes = 3.5 * seg;
  c.cublas_workspace = 256; /* counted in what must fit: keep it out of the way */
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 2, pins.replicas = 1, pins.microbatch_size = 1, pins.schedule = PS_1F1B;
  pins.recompute = PR_OFF;

  in.precision = GEMM_TF32;
  Plan *t = make(&in, &c, &pins);
  EXPECT(t != NULL);
  if (t) {
    EXPECT_EQ_INT(t->stages[1].first_seg, 2);
    EXPECT_EQ_INT(t->stages[1].cuda_scratch, layout_cuda_scratch_size(0, 0, false));
    EXPECT_EQ_INT(t->stages[0].weights_bf16 + t->stages[1].weights_bf16, 0); /* no bf16 copy */
  }
  in.precision = GEMM_BF16;
  Plan *b = make(&in, &c, &pins);
  EXPECT(b != NULL);
  if (b) {
    EXPECT_EQ_INT(b->stages[1].first_seg, 3);
    uint64_t want = (uint64_t)layout_cuda_scratch_size(0, layout_cuda_gemm_staging(0, (int64_t)(staging / 2)), true);
    EXPECT_EQ_INT(b->stages[1].cuda_scratch, want);
    EXPECT_EQ_INT(b->stages[0].cuda_scratch, layout_cuda_scratch_size(0, 0, true));
    for (int i = 0; i < 2; i++) {
      const PlanStage *st = &b->stages[i];
      /* the bf16 weight copy: one version (1f1b), 2 bytes a parameter */
      EXPECT_EQ_INT(st->weights_bf16, (uint64_t)(st->params * 2 + 255) / 256 * 256);
      EXPECT_EQ_INT(plan_stage_device_bytes(st), st->total_bytes + (st->cuda_scratch + 255) / 256 * 256 +
                                                     st->weights_bf16 + st->cublas_workspace);
      EXPECT((double)plan_stage_device_bytes(st) <= c.memory_bytes);
    }
    /* the cut tf32 chose would not fit: stage [2, 4) with the staging */
    PlanConfig cfg = b->cfg;
    EXPECT((double)plan_stage_memory(&b->in, &c, &cfg, 1, 2, 4, 1, 1, NULL) > c.memory_bytes);
  }
  /* one stage fits neither way: a clear message, no plan */
  pins.stages = 1;
  Plan *none = make(&in, &c, &pins);
  EXPECT(none == NULL);
  EXPECT(strstr(diag_buf, "does not fit") != NULL);
  plan_destroy(t);
  plan_destroy(b);
  plan_destroy(none);
  plan_input_free(&in);
}

int main(void) {
  RUN(test_step_time_ratio);
  RUN(test_peaks);
  RUN(test_scratch_matches_layout);
  RUN(test_bf16_staging_moves_the_cut);
  return TEST_REPORT();
}
