/* passes/plan_partition.c — contiguous stages by dynamic programming.
 *
 * best[i][e] = the smallest possible "slowest stage" when stages 0..i hold segments
 * [0, e); stage i holds [a, e) and costs, per batch,
 *     T_i = m (F + B (+ F when recomputing) + p2p in and out) + all-reduce,
 * with memory of stage i (which depends on i: stash slots d-i) within the device.
 * Lower bounds of a stage's time and memory (leaving out what depends on where it
 * starts) only grow as it takes more segments, so the scan over a stops as soon as
 * one passes the bound: close to O(n^2) per configuration rather than O(d n^2),
 * and still exact. The same recurrence minimising the largest stage memory
 * says how far over memory a configuration that fits nowhere is. A CUDA plan's
 * cuda_scratch (the largest forward cross-entropy and, with bf16, the largest GEMM
 * of the stage's segments) is a running maximum as the stage grows, so it is part
 * of the memory bound too.
 */
#include "passes/planner.h"

#include <float.h>
#include <string.h>

#include "passes/layout.h"

typedef struct Dp {
  const PlanInput *in;
  const Cluster *c;
  const PlanConfig *cfg;
  double *F, *B;    /* prefix sums of per-sample forward/backward times */
  double *bw_p2p;   /* [d-1] */
  double *bw_ar;    /* [d] */
  double cap;       /* device memory */
  int64_t *ce_rows, *staging; /* per segment at the configuration's b (CUDA plans) */
  double *stash, *work, *inputs; /* per segment: bytes at the configuration's b */
} Dp;

/* Time per batch of stage i holding [a, e) (sum given). */
static double stage_time(const Dp *p, int i, int a, int e, const PlanStageSums *s) {
  const PlanConfig *cfg = p->cfg;
  double b = (double)cfg->microbatch_size, m = (double)cfg->microbatches;
  double f = (p->F[e] - p->F[a]) * b, bw = (p->B[e] - p->B[a]) * b;
  double t = f + bw + (cfg->recompute ? f : 0);
  int d = cfg->stages;
  if (i > 0 && p->bw_p2p[i - 1] > 0) t += 2 * s->in_bytes * b / p->bw_p2p[i - 1];
  if (i < d - 1 && p->bw_p2p[i] > 0) t += 2 * s->out_bytes * b / p->bw_p2p[i];
  return m * t + plan_cost_allreduce((double)s->params * 4, cfg->replicas, p->bw_ar[i]);
}

static double stage_mem(const Dp *p, int i, const PlanStageSums *s) {
  const PlanConfig *cfg = p->cfg;
  int d = cfg->stages;
  int64_t m = cfg->microbatches;
  return (double)plan_stage_bytes(cfg, i, s, plan_versions_bound(cfg->schedule, d, i, m, cfg->predict),
                                  plan_stash_bound(cfg->schedule, d, i, m), NULL);
}

/* Runs the recurrence; by_memory: minimise the largest stage memory, ignoring the
 * device size; else minimise time subject to it. Returns the optimum or -1. */
static double dp_run(const Dp *p, bool by_memory, int *cuts) {
  const PlanInput *in = p->in;
  int n = in->nsegs, d = p->cfg->stages;
  size_t cells = (size_t)d * (size_t)(n + 1);
  double *best = pd_malloc(cells * sizeof(double));
  int *arg = pd_malloc(cells * sizeof(int));
  for (size_t k = 0; k < cells; k++) best[k] = -1, arg[k] = -1;
#define AT(i, e) ((size_t)(i) * (size_t)(n + 1) + (size_t)(e))
  /* Stage 0 starts at segment 0: its sums over segments [1, e) grow with e, kept
   * here so that each e costs O(1), not a walk back to segment 0 (which made the
   * search quadratic in the number of layers). */
  PlanStageSums s0;
  memset(&s0, 0, sizeof s0);
  s0.cublas_workspace = plan_cublas_workspace(in, p->c);
  s0.bf16_weights = in->cuda && in->precision == GEMM_BF16;
  int64_t own0 = 0, rows0 = 0, staging0 = 0;
  double work0 = 0, internal0 = 0; /* largest WORK and widest inner cut of [1, e) */
  double b = (double)p->cfg->microbatch_size;
  for (int i = 0; i < d; i++) {
    /* stage i ends at e; stages after it need one segment each */
    for (int e = i + 1; e <= n - (d - 1 - i); e++) {
      double bound = DBL_MAX;
      int barg = -1;
      PlanStageSums s;
      memset(&s, 0, sizeof s);
      s.cublas_workspace = s0.cublas_workspace;
      s.bf16_weights = s0.bf16_weights;
      int64_t own = 0, rows = 0, staging = 0;
      double work = 0, internal = 0;
      int from = e - 1;
      if (i == 0) {
        if (e - 1 >= 1) {
          own0 += in->segs[e - 1].params;
          s0.stash += p->stash[e - 1];
          s0.inputs += p->inputs[e - 1];
          if (p->work[e - 1] > work0) work0 = p->work[e - 1];
          if (e - 2 >= 1 && in->segs[e - 2].out_bytes > internal0) internal0 = in->segs[e - 2].out_bytes;
          if (p->ce_rows[e - 1] > rows0) rows0 = p->ce_rows[e - 1];
          if (p->staging[e - 1] > staging0) staging0 = p->staging[e - 1];
        }
        s = s0, own = own0, rows = rows0, staging = staging0, from = 0;
        work = work0, internal = internal0;
      }
      s.out_bytes = in->segs[e - 1].out_bytes;
      for (int a = from; a >= i; a--) {
        if (in->cuda) {
          if (p->ce_rows[a] > rows) rows = p->ce_rows[a];
          if (p->staging[a] > staging) staging = p->staging[a];
          s.cuda_scratch = (uint64_t)layout_cuda_scratch_size(rows, staging, in->precision == GEMM_BF16);
        }
        own += in->segs[a].params;
        s.stash += p->stash[a];
        s.inputs += p->inputs[a];
        if (p->work[a] > work) work = p->work[a];
        if (a < e - 1 && in->segs[a].out_bytes > internal) internal = in->segs[a].out_bytes;
        s.ws = work + internal * b; /* as plan_stage_sums */
        s.bf16_in_versions = plan_bf16_in_versions(in, p->cfg, a, e);
        if (in->ntied > 0) {
          s.params = own + plan_tied_params(in, a, e);
          s.tied_spanning = plan_tied_spanning(in, a, e);
          s.tied_recv = plan_tied_recv_bytes(in, a, e, p->cfg->stages);
        } else {
          s.params = own;
        }
        s.in_bytes = plan_stage_in_bytes(in, a);
        /* Bounds that only grow as a decreases (the input boundary and whether a
         * tied parameter spans stages can change either way): once they pass, no
         * smaller a can do better. */
        PlanStageSums lb = s;
        lb.in_bytes = 0, lb.tied_spanning = 0, lb.tied_recv = 0;
        double mem_lb = stage_mem(p, i, &lb);
        if (by_memory ? mem_lb >= bound : mem_lb > p->cap) break;
        if (!by_memory && stage_time(p, i, a, e, &lb) >= bound) break;
        double prev = i == 0 ? 0 : best[AT(i - 1, a)];
        if (prev < 0) continue;
        double mem = stage_mem(p, i, &s);
        double cost;
        if (by_memory) {
          cost = mem;
        } else {
          if (mem > p->cap) continue;
          cost = stage_time(p, i, a, e, &s);
        }
        double v = prev > cost ? prev : cost;
        if (v < bound) bound = v, barg = a;
      }
      if (barg >= 0) best[AT(i, e)] = bound, arg[AT(i, e)] = barg;
    }
  }
  double r = best[AT(d - 1, n)];
  if (r >= 0 && cuts) {
    cuts[d] = n;
    for (int i = d - 1; i >= 0; i--) cuts[i] = arg[AT(i, cuts[i + 1])];
  }
#undef AT
  free(best);
  free(arg);
  return r;
}

double plan_partition(const PlanInput *in, const Cluster *c, const PlanConfig *cfg,
                      PlanPlacement pl, int *cuts, double *min_over_bytes) {
  int n = in->nsegs, d = cfg->stages, w = cfg->replicas;
  PD_CHECK(d >= 1 && d <= n, "stages %d for %d segments", d, n);
  Dp p = {in, c, cfg, NULL, NULL, NULL, NULL, c->memory_bytes, NULL, NULL, NULL, NULL, NULL};
  p.ce_rows = pd_calloc((size_t)n, sizeof(int64_t));
  p.staging = pd_calloc((size_t)n, sizeof(int64_t));
  if (in->cuda)
    for (int s = 0; s < n; s++)
      plan_segment_cuda_needs(&in->segs[s], cfg->microbatch_size, &p.ce_rows[s], &p.staging[s]);
  p.stash = pd_malloc((size_t)n * sizeof(double));
  p.work = pd_malloc((size_t)n * sizeof(double));
  p.inputs = pd_malloc((size_t)n * sizeof(double));
  for (int s = 0; s < n; s++) {
    p.stash[s] = plan_seg_stash(&in->segs[s], cfg->microbatch_size);
    p.work[s] = plan_seg_work(&in->segs[s], cfg->microbatch_size);
    p.inputs[s] = plan_seg_inputs(&in->segs[s], cfg->microbatch_size);
  }
  p.F = pd_calloc((size_t)n + 1, sizeof(double));
  p.B = pd_calloc((size_t)n + 1, sizeof(double));
  Cluster ce = plan_cluster_for_config(c, cfg);
  for (int s = 0; s < n; s++) {
    /* per sample at the configuration's b: a segment's time need not be linear in b */
    double b = (double)cfg->microbatch_size;
    p.F[s + 1] = p.F[s] + plan_cost_fwd(in, &ce, s, s + 1, cfg->microbatch_size) / b;
    p.B[s + 1] = p.B[s] + plan_cost_bwd(in, &ce, s, s + 1, cfg->microbatch_size) / b;
  }
  p.bw_p2p = pd_calloc((size_t)d, sizeof(double));
  p.bw_ar = pd_calloc((size_t)d, sizeof(double));
  for (int i = 0; i < d; i++) {
    p.bw_ar[i] = plan_place_ar_bw(c, pl, d, w, i);
    if (i < d - 1) p.bw_p2p[i] = plan_place_p2p_bw(c, pl, d, w, i);
  }
  double r = dp_run(&p, false, cuts);
  if (r < 0 && min_over_bytes) {
    double mem = dp_run(&p, true, NULL);
    *min_over_bytes = mem - p.cap;
  }
  free(p.F);
  free(p.B);
  free(p.bw_p2p);
  free(p.bw_ar);
  free(p.ce_rows);
  free(p.staging);
  free(p.stash), free(p.work), free(p.inputs);
  return r;
}
