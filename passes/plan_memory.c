/* passes/plan_memory.c — the per-stage memory plan: one arena, every buffer at a
 * 256-byte aligned offset (buffers and slot counts: docs/plan-format.md, "Memory: one
 * arena per stage"; PipeDream-2BW §3.2, Appendix A).
 *
 * Two figures, one buffer list. The search's estimate (plan_stage_bytes) sums the
 * segments' figures (PlanSegment, no graph needed); once the configuration is chosen,
 * plan_apply_layouts() rebuilds each stage's plan from the stage programs' exact block
 * sizes, buffer for buffer what the pipeline runtime (runtime/pipeline/pipeline.c)
 * allocates, so the plan's figure is the measured one. Both lay out the same buffers in
 * the same order, the segments' figures from the same layout function; P counts the
 * stage's own parameters plus every tied parameter it holds. A plan with CUDA programs
 * also needs, beside the arena on each device, the GPU-only cuda_scratch block
 * (passes/layout.h) and, with bf16, one bf16 weight copy per version: not arena
 * buffers, but part of what must fit the device (plan_stage_device_bytes), in the
 * search and the exact plan alike. */
#include "passes/planner.h"

#include <string.h>

#include "passes/layout.h"

#define PLAN_ALIGN 256u

int plan_versions_bound(PlanSchedule s, int d, int i, int64_t m, bool predict) {
  switch (s) {
  case PS_GPIPE:
  case PS_1F1B: return 1;
  case PS_2BW: return predict ? 3 : 2; /* prediction: the two read versions and the master */
  case PS_PIPEDREAM: {
    /* In flight at stage i: at most d-i microbatches, m consecutive ones share a
     * version, and the newest version is one of them in steady state. */
    int64_t inflight = d - i;
    int64_t v = (inflight - 1 + m - 1) / m + 1;
    return (int)(v < inflight ? v : inflight);
  }
  case PS_COUNT: break;
  }
  PD_CHECK(0, "schedule %d", (int)s);
  return 0;
}

bool plan_bf16_in_versions_any(const PlanInput *in, const PlanConfig *cfg) {
  return in->cuda && in->precision == GEMM_BF16 && cfg->schedule == PS_2BW && cfg->predict && !in->sgd;
}

bool plan_bf16_in_versions(const PlanInput *in, const PlanConfig *cfg, int a, int e) {
  (void)a, (void)e; /* every stage of a GPT or BERT can (layout_cuda_fold_params decides exactly) */
  return plan_bf16_in_versions_any(in, cfg);
}

int plan_stash_bound(PlanSchedule s, int d, int i, int64_t m) {
  switch (s) {
  case PS_GPIPE: return (int)m;
  case PS_1F1B: return (int)(m < d - i ? m : d - i);
  case PS_2BW:
  case PS_PIPEDREAM: return d - i;
  case PS_COUNT: break;
  }
  PD_CHECK(0, "schedule %d", (int)s);
  return 0;
}

static uint64_t align_up(uint64_t x) { return (x + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

typedef struct Layout {
  PlanStage *st;
  uint64_t top;
} Layout;

/* Places `count` buffers of `bytes` each (index 0..count-1). Without a stage to
 * record them in, only the arena size moves: the search calls this millions of
 * times. */
static void put_n(Layout *L, PlanBufKind kind, int count, double bytes);

static void put(Layout *L, PlanBufKind kind, int index, double bytes) {
  uint64_t size = bytes > 0 ? (uint64_t)(bytes + 0.5) : 0;
  uint64_t off = L->top;
  L->top = align_up(off + size);
  if (!L->st) return;
  PlanStage *st = L->st;
  st->bufs = pd_realloc(st->bufs, (size_t)(st->nbufs + 1) * sizeof *st->bufs);
  st->bufs[st->nbufs++] = (PlanBuffer){kind, index, off, size};
}

static void put_n(Layout *L, PlanBufKind kind, int count, double bytes) {
  if (L->st) {
    for (int i = 0; i < count; i++) put(L, kind, i, bytes);
    return;
  }
  uint64_t size = bytes > 0 ? (uint64_t)(bytes + 0.5) : 0;
  L->top += (uint64_t)count * align_up(size); /* top is aligned already */
}

uint64_t plan_stage_bytes(const PlanConfig *cfg, int i, const PlanStageSums *sum,
                          int nversions, int nstash, PlanStage *st) {
  int d = cfg->stages;
  double b = (double)cfg->microbatch_size;
  double slot = cfg->recompute ? b * sum->in_bytes : sum->stash;
  if (st) {
    free(st->bufs);
    st->bufs = NULL;
    st->nbufs = 0;
  }
  Layout L = {st, 0};
  double pbytes = (double)sum->params * 4.0;
  put_n(&L, PB_WEIGHTS, nversions, pbytes);
  /* 2bw steps tied parameters spanning stages later, from double-buffered grads
   * (beside PB_GRADS, which the program sizes for every parameter it holds) */
  bool split = cfg->schedule == PS_2BW && sum->tied_spanning > 0;
  double tbytes = (double)sum->tied_spanning * 4.0;
  put(&L, PB_GRADS, 0, pbytes);
  if (split) put_n(&L, PB_TIED_GRADS, 2, tbytes);
  put(&L, PB_OPT_M, 0, pbytes);
  put(&L, PB_OPT_V, 0, pbytes);
  put_n(&L, PB_STASH, nstash, slot);
  if (cfg->recompute) put(&L, PB_ACTIVATIONS, 0, sum->stash);
  if (sum->inputs > 0) put(&L, PB_INPUTS, 0, sum->inputs);
  /* the gradient sent back (i > 0); the activation sent on and its gradient (i < d-1) */
  double boundary = (i > 0 ? sum->in_bytes : 0) + (i < d - 1 ? 2 * sum->out_bytes : 0);
  if (boundary > 0) put(&L, PB_BOUNDARY, 0, b * boundary);
  put(&L, PB_WORKSPACE, 0, sum->ws);
  /* TIED_SYNC's receive buffers, double-buffered like the gradients they hold */
  if (sum->tied_recv > 0) put_n(&L, PB_TIED_RECV, 2, sum->tied_recv);
  uint64_t w16 = sum->bf16_weights && !sum->bf16_in_versions ? (uint64_t)nversions * align_up((uint64_t)sum->params * 2) : 0;
  uint64_t device = L.top + align_up(sum->cuda_scratch) + w16 + sum->cublas_workspace;
  if (st) {
    st->total_bytes = L.top;
    st->estimated_bytes = device;
    st->cuda_scratch = sum->cuda_scratch;
    st->weights_bf16 = w16;
    st->cublas_workspace = sum->cublas_workspace;
    st->params = sum->params;
    st->stash_slot_bytes = slot;
    st->nversions = nversions;
    st->nstash = nstash;
  }
  return device;
}

uint64_t plan_stage_device_bytes(const PlanStage *st) {
  return st->total_bytes + align_up(st->cuda_scratch) + st->weights_bf16 + st->cublas_workspace;
}

void plan_segment_cuda_needs(const PlanSegment *s, int64_t b, int64_t *ce_rows, int64_t *staging) {
  *ce_rows = *staging = 0;
  for (int k = 0; k < s->ncuda; k++) {
    const PlanCudaTerm *t = &s->cuda[k];
    int64_t a = t->a1 * b + t->a0;
    if (!t->gemm) {
      if (a > *ce_rows) *ce_rows = a;
      continue;
    }
    int64_t x = layout_cuda_gemm_staging(a, t->b1 * b + t->b0);
    if (x > *staging) *staging = x;
  }
}

uint64_t plan_cuda_scratch(const PlanInput *in, int a, int e, int64_t b) {
  if (!in->cuda) return 0;
  int64_t rows = 0, staging = 0, r, x;
  for (int s = a; s < e; s++) {
    plan_segment_cuda_needs(&in->segs[s], b, &r, &x);
    if (r > rows) rows = r;
    if (x > staging) staging = x;
  }
  return (uint64_t)layout_cuda_scratch_size(rows, staging, in->precision == GEMM_BF16);
}

double plan_seg_stash(const PlanSegment *s, int64_t b) { return s->stash_bytes * (double)b + s->stash_fixed; }
double plan_seg_work(const PlanSegment *s, int64_t b) { return s->workspace_bytes * (double)b + s->workspace_fixed; }
double plan_seg_inputs(const PlanSegment *s, int64_t b) { return s->inputs_bytes * (double)b + s->inputs_fixed; }

void plan_stage_sums(const PlanInput *in, int a, int e, int64_t b, PlanStageSums *sum) {
  memset(sum, 0, sizeof *sum);
  sum->params = plan_tied_params(in, a, e);
  sum->tied_spanning = plan_tied_spanning(in, a, e);
  double internal = 0; /* the widest cut inside the stage, per sample */
  for (int s = a; s < e; s++) {
    const PlanSegment *g = &in->segs[s];
    sum->params += g->params;
    sum->stash += plan_seg_stash(g, b);
    sum->inputs += plan_seg_inputs(g, b);
    if (plan_seg_work(g, b) > sum->ws) sum->ws = plan_seg_work(g, b);
    if (s < e - 1 && g->out_bytes > internal) internal = g->out_bytes;
  }
  sum->ws += internal * (double)b;
  sum->in_bytes = plan_stage_in_bytes(in, a);
  sum->out_bytes = in->segs[e - 1].out_bytes;
}

uint64_t plan_stage_memory(const PlanInput *in, const Cluster *c, const PlanConfig *cfg, int i, int a,
                           int e, int nversions, int nstash, PlanStage *st) {
  PlanStageSums sum;
  plan_stage_sums(in, a, e, cfg->microbatch_size, &sum);
  sum.cuda_scratch = plan_cuda_scratch(in, a, e, cfg->microbatch_size);
  sum.cublas_workspace = plan_cublas_workspace(in, c);
  sum.bf16_weights = in->cuda && in->precision == GEMM_BF16;
  sum.bf16_in_versions = plan_bf16_in_versions(in, cfg, a, e);
  sum.tied_recv = plan_tied_recv_bytes(in, a, e, cfg->stages);
  return plan_stage_bytes(cfg, i, &sum, nversions, nstash, st);
}

/* ---- the exact plan ------------------------------------------------------------- */

int plan_apply_layouts(Plan *p, const PlanStageBlocks *blocks) {
  int d = p->cfg.stages, over = 0;
  for (int i = 0; i < d; i++) {
    PlanStage *st = &p->stages[i];
    const PlanStageBlocks *B = &blocks[i];
    /* tied parameters this stage holds together with other stages: TIED_SYNC receives
     * the others' gradients; deferred ones (2bw) keep two gradients of their own */
    uint64_t deferred = 0, recv = 0;
    for (int g = 0; g < p->ngroups; g++) {
      const PlanTiedGroup *G = &p->groups[g];
      bool member = false;
      for (int q = 0; q < G->nstages; q++) member |= G->stages[q] == i;
      if (!member || G->nstages < 2) continue;
      uint64_t bytes = align_up((uint64_t)p->in.tied[G->tied].count * 4);
      if (plan_tied_deferred(&p->streams.spec, g)) deferred += bytes;
      recv += (uint64_t)(G->nstages - 1) * bytes;
    }
    uint64_t slot = p->cfg.recompute ? B->act_in : B->stash;
    free(st->bufs);
    st->bufs = NULL;
    st->nbufs = 0;
    Layout L = {st, 0};
    put_n(&L, PB_WEIGHTS, st->nversions, (double)B->params);
    put(&L, PB_GRADS, 0, (double)B->grads);
    if (deferred) put_n(&L, PB_TIED_GRADS, 2, (double)deferred);
    put(&L, PB_OPT_M, 0, (double)B->params);
    put(&L, PB_OPT_V, 0, (double)B->params);
    put_n(&L, PB_STASH, st->nstash, (double)slot);
    if (p->cfg.recompute) put(&L, PB_ACTIVATIONS, 0, (double)B->stash);
    if (B->inputs) put(&L, PB_INPUTS, 0, (double)B->inputs);
    if (B->boundary) put(&L, PB_BOUNDARY, 0, (double)B->boundary);
    put(&L, PB_WORKSPACE, 0, (double)B->work);
    if (recv) put_n(&L, PB_TIED_RECV, 2, (double)recv);
    st->total_bytes = L.top;
    st->cuda_scratch = B->cuda_scratch;
    st->weights_bf16 = (uint64_t)st->nversions * align_up(B->params_bf16);
    st->cublas_workspace = plan_cublas_workspace(&p->in, &p->cluster);
    st->stash_slot_bytes = (double)slot;
    over += (double)plan_stage_device_bytes(st) > p->cluster.memory_bytes;
  }
  return over;
}
