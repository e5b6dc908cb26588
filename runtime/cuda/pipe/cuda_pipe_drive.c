/* runtime/cuda/pipe/cuda_pipe_drive.c — the CUDA pipeline modes' driver loop (cuda_pipe.h):
 * init/resume (cuda_pipe.c), training in stretches that end where a validation is due
 * (pipe_drive, runtime/pipeline/pipeline_drive.c: the CPU pipelines' loop too),
 * the validations, the results and --save, for single-GPU mode here and, through
 * cp_train, for multi-GPU mode (cuda_pipe_nccl.c). */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* pipe_drive's work in the CUDA modes: cp_run over the stretch's instructions, and
 * the mode's validation, which the step times leave out. */
typedef struct CpDrive {
  CpRun *x;
  bool (*eval)(CpRun *x, double *mean);
} CpDrive;

static bool drive_run(void *ctx, int64_t lo, int64_t hi) {
  CpRun *x = ((CpDrive *)ctx)->x;
  cp_select(x, lo, hi);
  return cp_run(x);
}

static bool drive_eval(void *ctx, double *mean) {
  CpDrive *c = ctx;
  double t0 = pipe_now();
  bool ok = c->eval(c->x, mean);
  c->x->t_prev_step += pipe_now() - t0; /* the step times leave the validations out */
  return ok;
}

bool cp_train(CpRun *x, bool (*eval)(CpRun *x, double *mean), double *val, double *val_final) {
  const CudaExecOptions *o = x->o;
  x->batch_prev = x->first - 1; /* the clock starts now */
  x->t_prev_step = pipe_now();
  CpDrive cd = {x, eval};
  PipeDrive drive = {.first = x->first, .steps = x->steps, .eval_every = o->eval_every, .run = drive_run,
                     .eval = o->val_path ? drive_eval : NULL, .ctx = &cd, .print = x->self == 0 && !o->quiet};
  return pipe_drive(&drive, val, val_final); /* the driver loop of every pipelined mode */
}

/* ---- results ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double u = *(const double *)a, v = *(const double *)b;
  return (u > v) - (u < v);
}

/* The step time as the CPU pipeline measures it (pipe_measure): the median of the
 * update-to-update times after the first trained step (which fills the pipeline and
 * starts the clock); a run of one step: that step. ms[b] NAN: not timed (multi-GPU
 * mode skips a wait with a tied sum outstanding; the next timed step's ms is per
 * batch of its span). */
static double median_step_s(const double *ms, int64_t nb) {
  double *d = pd_malloc((size_t)(nb + 1) * sizeof *d);
  int64_t n = 0;
  for (int64_t b = 1; b < nb; b++)
    if (isfinite(ms[b])) d[n++] = ms[b];
  double med = nb > 0 && isfinite(ms[0]) ? ms[0] : 0;
  if (n > 0) {
    qsort(d, (size_t)n, sizeof *d, cmp_double);
    med = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
  }
  free(d);
  return med / 1e3;
}

float *cp_outcome_param(PipeOutcome *out, int *cap, const RtParam *q) {
  for (int j = 0; j < out->nparams; j++)
    if (strcmp(out->names[j], q->name) == 0) return NULL;
  if (out->nparams == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    out->names = pd_realloc(out->names, (size_t)*cap * sizeof(char *));
    out->numel = pd_realloc(out->numel, (size_t)*cap * sizeof(int64_t));
    out->weights = pd_realloc(out->weights, (size_t)*cap * sizeof(float *));
  }
  out->names[out->nparams] = pd_strdup(q->name);
  out->numel[out->nparams] = q->numel;
  out->weights[out->nparams] = pd_malloc((size_t)q->bytes + 4);
  return out->weights[out->nparams++];
}

void cp_outcome_finish(const CpRun *x, PipeOutcome *out) {
  const PipePlan *p = x->p;
  int64_t nb = x->steps - x->first;
  out->step_loss = pd_calloc((size_t)nb + 1, sizeof(double));
  out->val_loss = pd_calloc((size_t)nb + 1, sizeof(double));
  for (int64_t b = 0; b < nb; b++) {
    double sum = 0;
    for (int64_t j = 0; j < x->mref; j++) sum += out->mb_loss[b * x->mref + j];
    out->step_loss[b] = sum / (double)x->mref;
    out->val_loss[b] = NAN; /* cx_pipe_train fills in its validations */
  }
  out->val_final = NAN;
  out->grad_norm = pd_calloc((size_t)nb + 1, sizeof(double));
  out->step_ms = pd_calloc((size_t)nb + 1, sizeof(double));
  for (int64_t b = 0; b < nb; b++) {
    out->grad_norm[b] = x->grad_norm[x->first + b];
    out->step_ms[b] = x->step_ms[x->first + b];
  }
  out->step_time_s = median_step_s(out->step_ms, nb);
  out->bubble = pd_calloc((size_t)p->d, sizeof(double));
  out->arena_bytes = pd_calloc((size_t)p->d, sizeof(uint64_t));
  out->planned_bytes = pd_calloc((size_t)p->d, sizeof(uint64_t));
  for (int st = 0; st < p->d; st++) {
    out->arena_bytes[st] = (p->st[st].planned_bytes + 255) / 256 * 256;
    out->planned_bytes[st] = p->st[st].planned_bytes;
  }
}

bool cp_outcome_loss_ok(const PipeOutcome *out, char *err, size_t errlen) {
  for (int64_t b = 0; b < out->steps - out->first_step; b++)
    if (!rt_loss_ok(out->step_loss[b], out->first_step + b, err, errlen)) return false;
  return true;
}
