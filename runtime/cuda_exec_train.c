/* runtime/cuda_exec_train.c — the one-stage trainer on a device (cuda_exec.h).
 *
 * The update rule is runtime/trainer.c's, on device memory:
 *     grads = 0; for j in 0..m-1: inputs <- samples s·B + j·b ..; forward; backward
 *     norm  = sqrt(Σ_params Σ g²) / m        (pkc_sumsq_*: deterministic, in double)
 *     scale = 1/m · min(1, clip / norm)
 *     W     <- AdamW(W, g, lr(s), scale)     (pkc_adamw_step_f32 = pk_adamw_step_f32)
 * with microbatch j keyed as s·m + j for dropout, and for 2bw the delayed form: the
 * microbatches run on the older version, the optimizer reads the newer and writes
 * over the older, and the two swap. The host waits for the device once per
 * microbatch (its inputs are copied into the one inputs block) and once per step (the
 * norm decides the clip factor; the losses and the bad-id count come back with it).
 *
 * Arena (one allocation, each part 256-byte aligned):
 *   params | grads | adam m | adam v | stash | work | inputs | boundary | prev (2bw) |
 *   cuda_scratch | norm partials (double) | norm (double) | losses (f32 × m) */
#include "runtime/cuda_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CX_BLOCK 256
#define CX_MAX_GRID 4096 /* grid-stride kernels: enough blocks to fill a GPU */

enum { A_PARAMS, A_GRADS, A_M, A_V, A_STASH, A_WORK, A_INPUTS, A_BOUNDARY, A_PREV, A_SCRATCH, A_PARTS, A_NORM, A_LOSS,
       A_COUNT };

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
  char *host_inputs; /* staging copy of the inputs block */
  int32_t *tok_tmp, *tgt_tmp;
  float *host_loss;
  double *mb_loss;
  int T;
  int64_t step;
  int nparts;     /* norm partials used */
  int *part_grid; /* [nparams] blocks of each parameter's partial sum (0: no grad) */
  void *k_sumsq, *k_final, *k_adamw, *k_sgd, *k_copy;
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
  int64_t sizes[A_COUNT] = {pb, st->blocks[BUF_GRADS], pb, pb, st->blocks[BUF_STASH], st->blocks[BUF_WORK],
                            st->blocks[BUF_INPUTS], st->blocks[BUF_BOUNDARY], t->delayed ? pb : 0,
                            cx_program_block(t->prog, CX_SCRATCH), (int64_t)t->nparts * 8, 8, p->m * 4};
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
  }
  t->host_inputs = pd_calloc((size_t)st->blocks[BUF_INPUTS] + 1, 1);
  t->tok_tmp = pd_malloc((size_t)(t->T + 1) * sizeof(int32_t));
  t->tgt_tmp = pd_malloc((size_t)(t->T + 1) * sizeof(int32_t));
  t->host_loss = pd_calloc((size_t)p->m + 1, sizeof(float));
  t->mb_loss = pd_calloc((size_t)p->m + 1, sizeof(double));
  t->k_sumsq = cx_program_kernel(t->prog, "pkc_sumsq_partial_f32");
  t->k_final = cx_program_kernel(t->prog, "pkc_sumsq_final_f32");
  t->k_adamw = cx_program_kernel(t->prog, "pkc_adamw_step_f32");
  t->k_sgd = cx_program_kernel(t->prog, "pkc_sgd_step_f32");
  t->k_copy = cx_program_kernel(t->prog, "pkc_copy_f32");
  /* The CPU trainer's initial weights, drawn on the host and copied once. */
  float *w = pd_calloc((size_t)pb / 4 + 1, sizeof(float));
  for (int k = 0; k < st->nparams; k++) rt_init_param(w + st->params[k].offset / 4, &st->params[k], t->tc.seed);
  ops->htod(ops->dev, t->part[A_PARAMS], w, (size_t)pb);
  if (t->delayed) ops->htod(ops->dev, t->part[A_PREV], w, (size_t)pb);
  free(w);
  return t;
}

void cx_trainer_destroy(CxTrainer *t) {
  if (!t) return;
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

void cx_trainer_read_params(CxTrainer *t, float *dst) {
  t->ops->dtoh(t->ops->dev, dst, t->part[A_PARAMS], (size_t)t->st->blocks[BUF_PARAMS]);
}

CxTrainerState cx_trainer_state(const CxTrainer *t) {
  return (CxTrainerState){.plan = t->plan, .ops = t->ops, .params = t->part[A_PARAMS],
                          .prev = t->delayed ? t->part[A_PREV] : 0, .adam_m = t->part[A_M], .adam_v = t->part[A_V],
                          .step = t->step, .seed = t->tc.seed};
}

void cx_trainer_set_position(CxTrainer *t, int64_t step, uint64_t seed) {
  t->step = step;
  t->tc.seed = seed;
}

/* Samples first .. first + b - 1 into the host copy of the inputs block, as
 * trainer.c's fill_inputs, then onto the device. */
static void fill_inputs(CxTrainer *t, DataLoader *data, int64_t first) {
  const RtStage *st = t->st;
  int32_t *tok = NULL, *tgt = NULL;
  for (int k = 0; k < st->ninputs; k++) {
    const RtInput *in = &st->inputs[k];
    if (in->stream == STREAM_TOKENS) tok = (int32_t *)(void *)(t->host_inputs + in->offset);
    if (in->stream == STREAM_TARGETS) tgt = (int32_t *)(void *)(t->host_inputs + in->offset);
  }
  if (!tok && !tgt) return;
  for (int64_t r = 0; r < st->b; r++)
    data_get_sample(data, first + r, tok ? tok + r * t->T : t->tok_tmp, tgt ? tgt + r * t->T : t->tgt_tmp);
  t->ops->htod(t->ops->dev, t->part[A_INPUTS], t->host_inputs, (size_t)st->blocks[BUF_INPUTS]);
}

/* trainer_eval on the device: every microbatch's forward with dropout off (key 0, as
 * trainer.c's make_ctx) on the newest weights; the loss read back after each. */
double cx_trainer_eval(CxTrainer *t, DataLoader *data, int64_t first, int64_t nbatches) {
  const RtPlan *p = t->plan;
  int64_t B = p->b * p->m, loss_off = cx_program_loss_offset(t->prog);
  CxReplay r = {.seed = t->tc.seed, .microbatch = 0, .training = false, .stream = 0};
  CxPtr base[BUF_CLASS_COUNT] = {0, t->part[A_PARAMS], t->part[A_GRADS], t->part[A_STASH],
                                 t->part[A_WORK], t->part[A_INPUTS], t->part[A_BOUNDARY]};
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++) r.base[c] = base[c];
  r.base[CX_SCRATCH] = t->part[A_SCRATCH];
  double sum = 0;
  int64_t n = 0;
  for (int64_t k = first; k < first + nbatches; k++)
    for (int64_t j = 0; j < p->m; j++) {
      float loss = 0;
      fill_inputs(t, data, k * B + j * p->b);
      cx_program_run(t->prog, CX_FORWARD, &r);
      t->ops->dtoh(t->ops->dev, &loss, t->part[A_SCRATCH] + (CxPtr)loss_off, 4);
      sum += loss;
      n++;
    }
  return n ? sum / (double)n : 0;
}

static void launch(CxTrainer *t, void *k, unsigned grid, unsigned block, void **args) {
  t->ops->launch(t->ops->dev, 0, k, grid, block, args);
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

static void launch_update(CxTrainer *t, double lr, double scale) {
  const RtStage *st = t->st;
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
    double b1 = t->tc.beta1, b2 = t->tc.beta2, eps = t->tc.eps, wd = t->tc.weight_decay;
    if (t->tc.optimizer == OPT_SGD) {
      void *args[] = {&wout, &w, &g, &m, &n, &lr, &b1, &wd, &decay, &scale};
      launch(t, t->k_sgd, grid_for(n), CX_BLOCK, args);
    } else {
      int64_t step = t->step + 1;
      void *args[] = {&wout, &w, &g, &m, &v, &n, &lr, &b1, &b2, &eps, &wd, &decay, &step, &scale};
      launch(t, t->k_adamw, grid_for(n), CX_BLOCK, args);
    }
  }
  if (t->delayed) {
    CxPtr x = t->part[A_PARAMS];
    t->part[A_PARAMS] = t->part[A_PREV];
    t->part[A_PREV] = x;
  }
}

void cx_trainer_step(CxTrainer *t, DataLoader *data, StepStats *out) {
  const CxDeviceOps *ops = t->ops;
  const RtStage *st = t->st;
  const RtPlan *p = t->plan;
  double t0 = now_ms();
  int64_t B = p->b * p->m, loss_off = cx_program_loss_offset(t->prog);
  ops->memset0(ops->dev, 0, t->part[A_GRADS], (size_t)st->blocks[BUF_GRADS]);
  ops->memset0(ops->dev, 0, t->part[A_SCRATCH] + (CxPtr)cx_program_bad_ids_offset(t->prog), 8);
  CxReplay r = {.seed = t->tc.seed, .training = true, .stream = 0};
  CxPtr *slot[BUF_CLASS_COUNT] = {NULL, &t->part[A_PARAMS], &t->part[A_GRADS], &t->part[A_STASH],
                                  &t->part[A_WORK], &t->part[A_INPUTS], &t->part[A_BOUNDARY]};
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++) r.base[c] = *slot[c];
  /* 2bw trains on the older version */
  if (t->delayed) r.base[BUF_PARAMS] = t->part[A_PREV];
  r.base[CX_SCRATCH] = t->part[A_SCRATCH];
  for (int64_t j = 0; j < p->m; j++) {
    fill_inputs(t, data, t->step * B + j * p->b);
    r.microbatch = (uint32_t)(t->step * p->m + j);
    cx_program_run(t->prog, CX_FORWARD, &r);
    CxPtr dst = t->part[A_LOSS] + (CxPtr)j * 4, src = t->part[A_SCRATCH] + (CxPtr)loss_off;
    int64_t one = 1;
    void *args[] = {&dst, &src, &one};
    launch(t, t->k_copy, 1, 32, args);
    cx_program_run(t->prog, CX_BACKWARD, &r);
  }
  launch_norm(t);
  double ss = 0;
  uint64_t bad = 0;
  ops->dtoh(ops->dev, &ss, t->part[A_NORM], 8);
  ops->dtoh(ops->dev, t->host_loss, t->part[A_LOSS], (size_t)p->m * 4);
  ops->dtoh(ops->dev, &bad, t->part[A_SCRATCH] + (CxPtr)cx_program_bad_ids_offset(t->prog), 8);
  double inv_m = 1.0 / (double)p->m, norm = sqrt(ss) * inv_m, scale = inv_m;
  if (t->tc.clip > 0 && norm > t->tc.clip) scale *= t->tc.clip / norm;
  double lr = rt_lr_at(&t->tc, t->step);
  launch_update(t, lr, scale);
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
