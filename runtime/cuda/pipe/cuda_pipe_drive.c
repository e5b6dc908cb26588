/* runtime/cuda/pipe/cuda_pipe_drive.c — the CUDA pipeline modes' driver loop (cuda_pipe.h):
 * init/resume (cuda_pipe.c), training in stretches that end where a validation is due
 * (pipe_drive, runtime/pipeline/pipeline_drive.c: the CPU pipelines' loop too),
 * the validations, the results and --save of single-GPU mode. */
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

void cp_fill_outcome(CpRun *x, PipeOutcome *out) {
  const PipePlan *p = x->p;
  const CxDeviceOps *ops = x->ops;
  memset(out, 0, sizeof *out);
  out->first_step = x->first;
  out->steps = x->steps;
  out->mb_per_step = x->mref;
  int64_t nb = x->steps - x->first, nl = nb * x->mref;
  out->mb_loss = pd_calloc((size_t)nl + 1, sizeof(double));
  for (int r = 0; r < p->w && nb > 0; r++) {
    CpSr *s = cp_sr(x, p->d - 1, r);
    ops->dtoh(ops->dev, x->host_loss, s->loss + (CxPtr)(x->first * p->m) * 4, (size_t)(nb * p->m) * 4);
    for (int64_t b = 0; b < nb; b++)
      for (int64_t j = 0; j < p->m; j++) out->mb_loss[b * x->mref + r * p->m + j] = x->host_loss[b * p->m + j];
  }
  /* every parameter once, from the first stage holding it (replica 0, newest version) */
  int cap = 0;
  for (int st = 0; st < p->d; st++) {
    CpSr *s = cp_sr(x, st, 0);
    for (int k = 0; k < s->st->nparams; k++) {
      const RtParam *q = &s->st->params[k];
      float *dst = cp_outcome_param(out, &cap, q);
      if (dst) ops->dtoh(ops->dev, dst, s->w[s->newest] + (CxPtr)q->offset, (size_t)q->bytes);
    }
  }
  cp_outcome_finish(x, out);
}


/* --save: replica 0 of every stage (newest weights, 2bw's older version, AdamW m and v)
 * copied to the host and written by the CPU pipeline's own writer (pipe_save: the
 * one-stage trainer's format, atomic), so the checkpoint resumes anywhere. */
static bool cp_save(CpRun *x, const char *path, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  const CxDeviceOps *ops = x->ops;
  PipeGathered G = {.d = p->d};
  G.stage_w = pd_calloc((size_t)p->d, sizeof(char *));
  G.stage_prev = pd_calloc((size_t)p->d, sizeof(char *));
  G.stage_m = pd_calloc((size_t)p->d, sizeof(char *));
  G.stage_v = pd_calloc((size_t)p->d, sizeof(char *));
  for (int st = 0; st < p->d; st++) {
    CpSr *s = cp_sr(x, st, 0);
    size_t b = (size_t)s->st->blocks[BUF_PARAMS];
    int prev = s->nversions >= 2 && p->schedule == PS_2BW ? 1 - s->newest : s->newest;
    char **dst[4] = {&G.stage_w[st], &G.stage_prev[st], &G.stage_m[st], &G.stage_v[st]};
    CxPtr src[4] = {s->w[s->newest], s->w[prev], s->adam_m, s->adam_v};
    for (int q = 0; q < 4; q++) {
      *dst[q] = pd_malloc(b ? b : 1);
      if (b) ops->dtoh(ops->dev, *dst[q], src[q], b);
    }
  }
  bool ok = pipe_save(p, &G, x->steps, x->tc.seed, path, err, errlen);
  pipe_gathered_free(&G);
  return ok;
}

int cx_pipe_train_stats(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, PipeOutcome *out,
                        CxPipeStats *stats, char *err, size_t errlen) {
  CpRun x = {.p = p, .ops = ops, .o = o, .link = &cp_link_local};
  memset(out, 0, sizeof *out);
  int rc = 1;
  bool ready = cp_setup(&x, err, errlen);
  /* --init (in cp_setup) then --resume, as the CPU executors: a checkpoint replaces both */
  if (ready && o->resume_path) ready = cp_resume(&x, o->resume_path, err, errlen);
  if (ready && o->profile_out) /* each segment's time, from the second step on (cuda_profile.c) */
    for (int s = 0; s < p->d; s++) cx_program_profile(x.prog[s], x.steps - x.first > 1 ? (x.first + 1) * x.mref : 0);
  if (ready && o->val_path) ready = cp_eval_open(&x, err, errlen);
  if (ready && o->trace_path) cp_trace_open(&x); /* cuda_pipe_trace.c */
  if (ready) {
    int64_t nb = x.steps > x.first ? x.steps - x.first : 0;
    double *val = pd_malloc((size_t)(nb + 1) * sizeof(double)), val_final = NAN;
    bool ok = cp_train(&x, cp_eval_run, val, &val_final);
    if (ok) {
      ops->sync(ops->dev);
      cp_fill_outcome(&x, out);
      memcpy(out->val_loss, val, (size_t)nb * sizeof(double));
      out->val_final = val_final;
      uint64_t bad = 0, one = 0;
      for (int i = 0; i < x.nsr; i++) {
        ops->dtoh(ops->dev, &one, x.sr[i].scratch + (CxPtr)cx_program_bad_ids_offset(x.sr[i].prog), 8);
        bad += one;
      }
      if (bad) snprintf(err, errlen, "%s: %llu token ids or targets outside the model's vocabulary", o->data_path,
                        (unsigned long long)bad);
      else if (!cp_outcome_loss_ok(out, err, errlen)) (void)0; /* no checkpoint of a diverged run */
      else if ((!o->save_path || cp_save(&x, o->save_path, err, errlen)) && cp_trace_finish(&x, out, err, errlen) &&
               (!o->profile_out || cx_profile_write(x.prog, p, o->profile_out, err, errlen)))
        rc = 0;
      if (stats) {
        *stats = (CxPipeStats){.extra_bytes = x.extra_bytes, .weights_bf16 = x.w16_bytes, .steps = x.step_graphs};
        for (int s = 0; s < p->d; s++) {
          CxGraphStats g = cx_program_graph_stats(x.prog[s]);
          stats->graphs.captured += g.captured;
          stats->graphs.launches += g.launches;
          stats->graphs.eager += g.eager;
        }
      }
    } else {
      snprintf(err, errlen, "%s", x.err);
      ops->sync(ops->dev); /* what was issued finishes before its events go */
    }
    free(val);
  }
  cp_teardown(&x);
  return rc;
}

int cx_pipe_train(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, PipeOutcome *out,
                  uint64_t *extra_bytes, char *err, size_t errlen) {
  CxPipeStats st = {0};
  int rc = cx_pipe_train_stats(p, ops, o, out, &st, err, errlen);
  if (extra_bytes) *extra_bytes = st.extra_bytes;
  return rc;
}
