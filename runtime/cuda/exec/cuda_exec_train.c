/* runtime/cuda/exec/cuda_exec_train.c — the one-stage trainer on a device (cuda_exec.h).
 *
 * The update rule is runtime/core/trainer.c's, on device memory:
 *     grads = 0; for j in 0..m-1: inputs <- samples s·B + j·b ..; forward; backward
 *     norm  = sqrt(Σ_params Σ g²) / m        (pkc_sumsq_*: deterministic, in double)
 *     scale = 1/m · min(1, clip / norm)
 *     W     <- AdamW(W, g, lr(s), scale)     (pkc_adamw_step_f32 = pk_adamw_step_f32)
 * with microbatch j keyed as s·m + j for dropout, and for 2bw the delayed form: the
 * microbatches run on the older version, the optimizer reads the newer and writes
 * over the older, and the two swap.
 *
 * Host waits. A step's m input images go to the device in ONE copy (m slots), and
 * before each microbatch's forward a device-to-device copy on stream 0 moves slot j
 * into the inputs block: stream-ordered, so the forwards and backwards of all m
 * microbatches are issued back to back with no host wait. (The other choice, pointing
 * the inputs base at slot j, would key the pass graphs on the slot: m graphs per pass
 * per weight version, past CX_MAX_GRAPHS at large m; the copy is b·T·8 bytes and keeps
 * one graph per pass.) The host then waits once for the norm (it decides the clip
 * factor; the losses and the bad-id count come back with it) and once at the end.
 *
 * The norm and the update are CUDA graphs (CxStepGraph: eager on the first sighting,
 * captured on the second, launched after; the update has one per weight-version order,
 * as 2bw swaps the two versions). A graph freezes kernel arguments, so the values that
 * change per step (lr, the bias-correction step, the clip scale) live in device memory
 * (CxStepScalars, one htod per step) and the optimizer kernels are the _dev variants
 * that read them through a pointer. Without graph ops everything runs launch by
 * launch, the same kernels, the same bits.
 *
 * Arena (one allocation, each part 256-byte aligned):
 *   params | grads | adam m | adam v | stash | work | inputs | boundary | prev (2bw) |
 *   cuda_scratch | norm partials (double) | norm (double) | losses (f32 × m) |
 *   input slots (m × the inputs block, each 256-aligned) | step scalars |
 *   bf16 lists: the bf16 copies of params and prev (2bw), which the GEMMs read; this
 *   trainer rewrites them with one cast launch after its update (the pipeline
 *   interpreter's multi-tensor AdamW writes them itself: cuda_adamw_multi.h) */
#include "runtime/cuda/exec/cuda_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CX_BLOCK 256
#define CX_MAX_GRID 4096 /* grid-stride kernels: enough blocks to fill a GPU */

enum { A_PARAMS, A_GRADS, A_M, A_V, A_STASH, A_WORK, A_INPUTS, A_BOUNDARY, A_PREV, A_SCRATCH, A_PARTS, A_NORM, A_LOSS,
       A_SLOTS, A_SCALARS, A_P16, A_PREV16, A_COUNT };

/* The per-step optimizer values on the device: cuda_kernels.cuh's pkc_step_scalars,
 * field for field. */
typedef struct CxStepScalars {
  double lr;         /* rt_lr_at(step) */
  double grad_scale; /* 1/m · min(1, clip / norm) */
  int64_t t;         /* step + 1: AdamW's bias corrections */
} CxStepScalars;
_Static_assert(sizeof(CxStepScalars) == 24, "CxStepScalars must match pkc_step_scalars");

/* The trainer's own graphs. */
enum { G_NORM, G_UPDATE, G_UPDATE_SWAPPED /* 2bw, versions swapped */, G_COUNT };

/* One of them: eager on the first sighting, captured on the second, then launched. */
typedef struct CxStepGraph {
  bool seen;
  void *graph;
} CxStepGraph;

struct CxTrainer {
  const RtPlan *plan;
  const RtStage *st;
  const CxDeviceOps *ops;
  CxProgram *prog;
  TrainConfig tc;
  CxPtr part[A_COUNT];
  int64_t size[A_COUNT];
  uint64_t arena_bytes;
  bool delayed;
  char *host_inputs; /* staging copy of the m input slots */
  int64_t slot_bytes; /* an input slot: the inputs block rounded up to 256 bytes */
  bool has_data;      /* the stage reads tokens or targets */
  bool swapped;       /* 2bw: the versions are swapped relative to the start */
  int32_t *tok_tmp, *tgt_tmp;
  float *host_loss;
  double *mb_loss;
  int T;
  int64_t step;
  int nparts;     /* norm partials used */
  int *part_grid; /* [nparams] blocks of each parameter's partial sum (0: no grad) */
  void *k_sumsq, *k_final, *k_adamw, *k_sgd, *k_copy, *k_cast;
  CxStepGraph graph[G_COUNT];
  CxGraphStats update_stats; /* the update's runs (cx_trainer_update_graph_stats) */
};

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static unsigned grid_for(int64_t n) {
  int64_t g = (n + CX_BLOCK - 1) / CX_BLOCK;
  if (g < 1) g = 1;
  return (unsigned)(g > CX_MAX_GRID ? CX_MAX_GRID : g);
}

CxTrainer *cx_trainer_create(const RtPlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, char *err,
                             size_t errlen) {
  if (p->nstages != 1) {
    snprintf(err, errlen, "%s: the plan has %d stages; the one-stage trainer runs one-stage plans (several stages: cx_pipe_train, runtime/cuda_pipe.h)",
             p->dir, p->nstages);
    return NULL;
  }
  const RtStage *st = &p->stages[0];
  if (st->real_bytes != 4 || !st->has_loss) {
    snprintf(err, errlen, "%s: the stage must be float32 and compute the loss", st->source);
    return NULL;
  }
  CxTrainer *t = pd_calloc(1, sizeof *t);
  t->plan = p;
  t->st = st;
  t->ops = ops;
  t->tc = p->train;
  if (o && o->seed_set) t->tc.seed = o->seed;
  t->delayed = p->delayed;
  t->prog = cx_program_load(ops, p->dir, 0, o ? o->gemm : CX_GEMM_PLAN, err, errlen);
  if (!t->prog) {
    free(t);
    return NULL;
  }
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    if (cx_program_block(t->prog, c) != st->blocks[c]) {
      snprintf(err, errlen, "%s: the launch list's %s block (%lld bytes) is not the C program's (%lld): a mixed plan",
               p->dir, buf_class_name((BufClass)c), (long long)cx_program_block(t->prog, c), (long long)st->blocks[c]);
      cx_trainer_destroy(t);
      return NULL;
    }
  if (cx_program_loss_offset(t->prog) < 0) {
    snprintf(err, errlen, "%s: the launch list has no loss", p->dir);
    cx_trainer_destroy(t);
    return NULL;
  }
  t->part_grid = pd_calloc((size_t)st->nparams + 1, sizeof(int));
  for (int k = 0; k < st->nparams; k++)
    if (st->params[k].has_grad) t->nparts += (t->part_grid[k] = (int)grid_for(st->params[k].numel));
  int64_t pb = st->blocks[BUF_PARAMS];
  t->slot_bytes = (st->blocks[BUF_INPUTS] + 255) / 256 * 256;
  int64_t sizes[A_COUNT] = {pb, st->blocks[BUF_GRADS], pb, pb, st->blocks[BUF_STASH], st->blocks[BUF_WORK],
                            st->blocks[BUF_INPUTS], st->blocks[BUF_BOUNDARY], t->delayed ? pb : 0,
                            cx_program_block(t->prog, CX_SCRATCH), (int64_t)t->nparts * 8, 8, p->m * 4,
                            p->m * t->slot_bytes, (int64_t)sizeof(CxStepScalars),
                            cx_program_block(t->prog, CX_PARAMS16),
                            t->delayed ? cx_program_block(t->prog, CX_PARAMS16) : 0};
  uint64_t total = 0;
  for (int i = 0; i < A_COUNT; i++) {
    t->size[i] = sizes[i];
    total += (uint64_t)(sizes[i] + 255) / 256 * 256;
  }
  CxPtr base;
  if (!ops->alloc(ops->dev, total, &base, err, errlen)) {
    cx_trainer_destroy(t);
    return NULL;
  }
  t->arena_bytes = total;
  for (int i = 0; i < A_COUNT; i++) {
    t->part[i] = base;
    base += (uint64_t)(sizes[i] + 255) / 256 * 256;
  }
  ops->memset0(ops->dev, 0, t->part[0], total);
  for (int k = 0; k < st->ninputs; k++) {
    const RtInput *in = &st->inputs[k];
    if (in->stream == STREAM_OTHER) continue;
    if (in->dtype != DT_I32 || in->rank != 2 || in->shape[0] != st->b) {
      snprintf(err, errlen, "%s: data input '%s' must be i32 [b, T]", st->source, in->name);
      cx_trainer_destroy(t);
      return NULL;
    }
    t->T = (int)in->shape[1];
    t->has_data = true;
  }
  t->host_inputs = pd_calloc((size_t)(p->m * t->slot_bytes) + 1, 1);
  t->tok_tmp = pd_malloc((size_t)(t->T + 1) * sizeof(int32_t));
  t->tgt_tmp = pd_malloc((size_t)(t->T + 1) * sizeof(int32_t));
  t->host_loss = pd_calloc((size_t)p->m + 1, sizeof(float));
  t->mb_loss = pd_calloc((size_t)p->m + 1, sizeof(double));
  t->k_sumsq = cx_program_kernel(t->prog, "pkc_sumsq_partial_f32");
  t->k_final = cx_program_kernel(t->prog, "pkc_sumsq_final_f32");
  t->k_adamw = cx_program_kernel(t->prog, "pkc_adamw_step_dev_f32");
  t->k_sgd = cx_program_kernel(t->prog, "pkc_sgd_step_dev_f32");
  t->k_copy = cx_program_kernel(t->prog, "pkc_copy_f32");
  t->k_cast = cx_program_kernel(t->prog, "pkc_cast_f32_to_bf16");
  /* The CPU trainer's initial weights, drawn on the host and copied once. */
  float *w = pd_calloc((size_t)pb / 4 + 1, sizeof(float));
  for (int k = 0; k < st->nparams; k++) rt_init_param(w + st->params[k].offset / 4, &st->params[k], t->tc.seed);
  ops->htod(ops->dev, t->part[A_PARAMS], w, (size_t)pb);
  if (t->delayed) ops->htod(ops->dev, t->part[A_PREV], w, (size_t)pb);
  free(w);
  cx_trainer_weights_loaded(t);
  return t;
}

void cx_trainer_destroy(CxTrainer *t) {
  if (!t) return;
  for (int g = 0; g < G_COUNT; g++)
    if (t->graph[g].graph) t->ops->graph_destroy(t->ops->dev, t->graph[g].graph);
  cx_program_free(t->prog);
  free(t->part_grid);
  free(t->host_inputs);
  free(t->tok_tmp);
  free(t->tgt_tmp);
  free(t->host_loss);
  free(t->mb_loss);
  free(t);
}

int64_t cx_trainer_step_index(const CxTrainer *t) { return t->step; }
double cx_trainer_flops_per_step(const CxTrainer *t) { return (t->st->flops_fwd + t->st->flops_bwd) * (double)t->plan->m; }
uint64_t cx_trainer_arena_bytes(const CxTrainer *t) { return t->arena_bytes; }
CxGemmType cx_trainer_gemm_type(const CxTrainer *t) { return cx_program_gemm_type(t->prog); }
CxGraphStats cx_trainer_graph_stats(const CxTrainer *t) { return cx_program_graph_stats(t->prog); }
CxProgram *cx_trainer_program(CxTrainer *t) { return t->prog; }
CxGraphStats cx_trainer_update_graph_stats(const CxTrainer *t) { return t->update_stats; }

void cx_trainer_read_params(CxTrainer *t, float *dst) {
  t->ops->dtoh(t->ops->dev, dst, t->part[A_PARAMS], (size_t)t->st->blocks[BUF_PARAMS]);
}

CxTrainerState cx_trainer_state(const CxTrainer *t) {
  return (CxTrainerState){.plan = t->plan, .ops = t->ops, .params = t->part[A_PARAMS],
                          .prev = t->delayed ? t->part[A_PREV] : 0, .adam_m = t->part[A_M], .adam_v = t->part[A_V],
                          .step = t->step, .seed = t->tc.seed};
}

/* The bf16 copy of weight block `w` into `w16` (a bf16 list; nothing otherwise). */
static void cast_weights(CxTrainer *t, CxPtr w16, CxPtr w) {
  int64_t n = t->st->blocks[BUF_PARAMS] / 4;
  if (!t->size[A_P16]) return;
  void *args[] = {&w16, &w, &n};
  t->ops->launch(t->ops->dev, 0, t->k_cast, grid_for((n + 7) / 8), CX_BLOCK, args);
}

void cx_trainer_weights_loaded(CxTrainer *t) {
  cast_weights(t, t->part[A_P16], t->part[A_PARAMS]);
  if (t->delayed) cast_weights(t, t->part[A_PREV16], t->part[A_PREV]);
}

void cx_trainer_set_position(CxTrainer *t, int64_t step, uint64_t seed) {
  t->step = step;
  t->tc.seed = seed;
}

/* Microbatch j's samples first + j·b .. into slot j of the host copy, as trainer.c's
 * fill_inputs, for j in 0..m-1; then all m slots onto the device in one copy (it
 * waits for the device, which is idle here: between steps). */
static void upload_inputs(CxTrainer *t, DataLoader *data, int64_t first) {
  const RtStage *st = t->st;
  if (!t->has_data) return;
  for (int64_t j = 0; j < t->plan->m; j++) {
    char *img = t->host_inputs + j * t->slot_bytes;
    int32_t *tok = NULL, *tgt = NULL;
    for (int k = 0; k < st->ninputs; k++) {
      const RtInput *in = &st->inputs[k];
      if (in->stream == STREAM_TOKENS) tok = (int32_t *)(void *)(img + in->offset);
      if (in->stream == STREAM_TARGETS) tgt = (int32_t *)(void *)(img + in->offset);
    }
    for (int64_t r = 0; r < st->b; r++)
      data_get_sample(data, first + j * st->b + r, tok ? tok + r * t->T : t->tok_tmp,
                      tgt ? tgt + r * t->T : t->tgt_tmp);
  }
  t->ops->htod(t->ops->dev, t->part[A_SLOTS], t->host_inputs, (size_t)(t->plan->m * t->slot_bytes));
}

/* Slot j into the inputs block, on stream 0 before the pass that reads it. */
static void select_inputs(CxTrainer *t, int64_t j) {
  if (!t->has_data) return;
  t->ops->dtod(t->ops->dev, 0, t->part[A_INPUTS], t->part[A_SLOTS] + (CxPtr)(j * t->slot_bytes),
               (size_t)t->st->blocks[BUF_INPUTS]);
}

/* The loss of the forward just issued into losses[j] (stream-ordered). */
static void keep_loss(CxTrainer *t, int64_t j) {
  CxPtr dst = t->part[A_LOSS] + (CxPtr)j * 4;
  CxPtr src = t->part[A_SCRATCH] + (CxPtr)cx_program_loss_offset(t->prog);
  int64_t one = 1;
  void *args[] = {&dst, &src, &one};
  t->ops->launch(t->ops->dev, 0, t->k_copy, 1, 32, args);
}

/* trainer_eval on the device: every microbatch's forward with dropout off (key 0, as
 * trainer.c's make_ctx) on the newest weights; a batch's m losses read back at once
 * and summed in microbatch order (as before: the same sum). */
double cx_trainer_eval(CxTrainer *t, DataLoader *data, int64_t first, int64_t nbatches) {
  const RtPlan *p = t->plan;
  int64_t B = p->b * p->m;
  CxReplay r = {.seed = t->tc.seed, .microbatch = 0, .training = false, .stream = 0};
  CxPtr base[BUF_CLASS_COUNT] = {0, t->part[A_PARAMS], t->part[A_GRADS], t->part[A_STASH],
                                 t->part[A_WORK], t->part[A_INPUTS], t->part[A_BOUNDARY]};
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++) r.base[c] = base[c];
  r.base[CX_SCRATCH] = t->part[A_SCRATCH];
  r.base[CX_PARAMS16] = t->part[A_P16];
  double sum = 0;
  int64_t n = 0;
  for (int64_t k = first; k < first + nbatches; k++) {
    upload_inputs(t, data, k * B);
    for (int64_t j = 0; j < p->m; j++) {
      select_inputs(t, j);
      cx_program_run(t->prog, CX_FORWARD, &r);
      keep_loss(t, j);
    }
    t->ops->dtoh(t->ops->dev, t->host_loss, t->part[A_LOSS], (size_t)p->m * 4);
    for (int64_t j = 0; j < p->m; j++) {
      sum += t->host_loss[j];
      n++;
    }
  }
  return n ? sum / (double)n : 0;
}

static void launch(CxTrainer *t, void *k, unsigned grid, unsigned block, void **args) {
  t->ops->launch(t->ops->dev, 0, k, grid, block, args);
}

/* Issues graph g's work on stream 0 through `issue`: eagerly (no graph ops, or the
 * first sighting), by capturing it (second sighting) or as the graph. A failed
 * capture is a bug, as in cx_program_run. */
static void run_graph(CxTrainer *t, int g, void (*issue)(CxTrainer *), CxGraphStats *stats) {
  const CxDeviceOps *ops = t->ops;
  CxStepGraph *sg = &t->graph[g];
  if (!ops->capture_begin || !sg->seen) {
    sg->seen = true;
    issue(t);
    if (stats) stats->eager++;
    return;
  }
  if (!sg->graph) {
    char err[256] = "";
    if (!ops->capture_begin(ops->dev, 0, err, sizeof err))
      pd_fatal(__FILE__, __LINE__, "capturing the trainer's graph %d: %s", g, err);
    issue(t);
    sg->graph = ops->capture_end(ops->dev, 0, err, sizeof err);
    if (!sg->graph) pd_fatal(__FILE__, __LINE__, "capturing the trainer's graph %d: %s", g, err);
    if (stats) stats->captured++;
  }
  ops->graph_launch(ops->dev, sg->graph, 0);
  if (stats) stats->launches++;
}

/* Σ g² over the parameters with a gradient, in parameter order, into A_NORM. */
static void launch_norm(CxTrainer *t) {
  const RtStage *st = t->st;
  CxPtr part = t->part[A_PARTS];
  for (int k = 0; k < st->nparams; k++) {
    if (!t->part_grid[k]) continue;
    CxPtr g = t->part[A_GRADS] + (CxPtr)st->params[k].offset;
    int64_t n = st->params[k].numel;
    void *args[] = {&part, &g, &n};
    launch(t, t->k_sumsq, (unsigned)t->part_grid[k], CX_BLOCK, args);
    part += (CxPtr)t->part_grid[k] * 8;
  }
  CxPtr out = t->part[A_NORM], parts = t->part[A_PARTS];
  int np = t->nparts;
  void *args[] = {&out, &parts, &np};
  launch(t, t->k_final, 1, 32, args);
}

/* The optimizer over every parameter, its per-step values read from A_SCALARS. */
static void launch_update(CxTrainer *t) {
  const RtStage *st = t->st;
  CxPtr sc = t->part[A_SCALARS];
  for (int k = 0; k < st->nparams; k++) {
    const RtParam *pp = &st->params[k];
    CxPtr w = t->part[A_PARAMS] + (CxPtr)pp->offset;
    CxPtr wout = t->delayed ? t->part[A_PREV] + (CxPtr)pp->offset : w;
    int64_t n = pp->numel;
    if (!pp->has_grad) {
      if (t->delayed) { /* keeps its value in both versions */
        void *args[] = {&wout, &w, &n};
        launch(t, t->k_copy, grid_for(n), CX_BLOCK, args);
      }
      continue;
    }
    CxPtr g = t->part[A_GRADS] + (CxPtr)pp->offset, m = t->part[A_M] + (CxPtr)pp->offset,
          v = t->part[A_V] + (CxPtr)pp->offset;
    int decay = pp->decay;
    double b1 = t->tc.beta1, b2 = t->tc.beta2, eps = t->tc.eps, wd = t->tc.weight_decay, dc = t->tc.delay_comp;
    if (t->tc.optimizer == OPT_SGD) { /* momentum: beta1 */
      void *args[] = {&wout, &w, &g, &m, &n, &b1, &wd, &decay, &sc};
      launch(t, t->k_sgd, grid_for(n), CX_BLOCK, args);
    } else {
      void *args[] = {&wout, &w, &g, &m, &v, &n, &b1, &b2, &eps, &wd, &decay, &dc, &sc};
      launch(t, t->k_adamw, grid_for(n), CX_BLOCK, args);
    }
  }
  cast_weights(t, t->part[t->delayed ? A_PREV16 : A_P16], t->part[t->delayed ? A_PREV : A_PARAMS]);
}

void cx_trainer_step(CxTrainer *t, DataLoader *data, StepStats *out) {
  const CxDeviceOps *ops = t->ops;
  const RtStage *st = t->st;
  const RtPlan *p = t->plan;
  double t0 = now_ms();
  int64_t B = p->b * p->m;
  upload_inputs(t, data, t->step * B);
  ops->memset0(ops->dev, 0, t->part[A_GRADS], (size_t)st->blocks[BUF_GRADS]);
  ops->memset0(ops->dev, 0, t->part[A_SCRATCH] + (CxPtr)cx_program_bad_ids_offset(t->prog), 8);
  CxReplay r = {.seed = t->tc.seed, .training = true, .stream = 0};
  CxPtr *slot[BUF_CLASS_COUNT] = {NULL, &t->part[A_PARAMS], &t->part[A_GRADS], &t->part[A_STASH],
                                  &t->part[A_WORK], &t->part[A_INPUTS], &t->part[A_BOUNDARY]};
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++) r.base[c] = *slot[c];
  /* 2bw trains on the older version */
  if (t->delayed) r.base[BUF_PARAMS] = t->part[A_PREV];
  r.base[CX_PARAMS16] = t->part[t->delayed ? A_PREV16 : A_P16];
  r.base[CX_SCRATCH] = t->part[A_SCRATCH];
  for (int64_t j = 0; j < p->m; j++) { /* no host wait in here */
    select_inputs(t, j);
    r.microbatch = (uint32_t)(t->step * p->m + j);
    cx_program_run(t->prog, CX_FORWARD, &r);
    keep_loss(t, j);
    cx_program_run(t->prog, CX_BACKWARD, &r);
  }
  run_graph(t, G_NORM, launch_norm, NULL);
  double ss = 0;
  uint64_t bad = 0;
  ops->dtoh(ops->dev, &ss, t->part[A_NORM], 8);
  ops->dtoh(ops->dev, t->host_loss, t->part[A_LOSS], (size_t)p->m * 4);
  ops->dtoh(ops->dev, &bad, t->part[A_SCRATCH] + (CxPtr)cx_program_bad_ids_offset(t->prog), 8);
  double inv_m = 1.0 / (double)p->m, norm = sqrt(ss) * inv_m, scale = inv_m;
  if (t->tc.clip > 0 && norm > t->tc.clip) scale *= t->tc.clip / norm;
  double lr = rt_lr_at(&t->tc, t->step);
  CxStepScalars sv = {.lr = lr, .grad_scale = scale, .t = t->step + 1};
  ops->htod(ops->dev, t->part[A_SCALARS], &sv, sizeof sv); /* the device is idle: read back above */
  run_graph(t, t->swapped ? G_UPDATE_SWAPPED : G_UPDATE, launch_update, &t->update_stats);
  if (t->delayed) {
    CxPtr x = t->part[A_PARAMS];
    t->part[A_PARAMS] = t->part[A_PREV];
    t->part[A_PREV] = x;
    x = t->part[A_P16]; /* the bf16 copies follow their versions */
    t->part[A_P16] = t->part[A_PREV16];
    t->part[A_PREV16] = x;
    t->swapped = !t->swapped;
  }
  ops->sync(ops->dev);
  double loss_sum = 0;
  for (int64_t j = 0; j < p->m; j++) loss_sum += (t->mb_loss[j] = t->host_loss[j]);
  t->step++;
  out->loss = loss_sum * inv_m;
  out->mb_loss = t->mb_loss;
  out->lr = lr;
  out->grad_norm = norm;
  out->bad_ids = (int64_t)bad;
  out->ms = now_ms() - t0;
}
