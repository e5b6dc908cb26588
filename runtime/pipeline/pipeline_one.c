/* runtime/pipeline/pipeline_one.c — the one-stage trainer (pipeline.h: trainer_*): a plan
 * with d = 1 and w = 1 run by the interpreter (runtime/exec/), step by step. Its update
 * is the reference rule every pipelined schedule must reproduce (DESIGN.md §3,
 * docs/pipelines.md "Data order"): batch t's m microbatches forward then backward in
 * order (1f1b's d = 1 stream, or 2bw's for the delayed rule, two weight versions),
 * then the interpreter's OPT_STEP. Memory: one arena in the compiler's layout
 * (pipe_stage_layout_one), so a run holds exactly memory.total_bytes; the streams are
 * built for 64 batches and doubled when a run steps past them (pipe_rank_extend). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline_rank.h"

struct Trainer {
  const RtPlan *plan;
  PipePlan pp;
  PipeStage ps;
  int rank0;
  PipeOptions o;
  TransportWorld *world;
  PipeRank *R;
  int64_t step; /* updates done so far */
};

Trainer *trainer_create(const RtPlan *p, const TrainerOptions *o, char *err, size_t errlen) {
  if (p->nstages != 1) {
    snprintf(err, errlen, "%s: the plan has %d stages; the sequential executor runs one-stage plans", p->dir,
             p->nstages);
    return NULL;
  }
  const RtStage *st = &p->stages[0];
  if (st->real_bytes != 4) {
    snprintf(err, errlen, "%s: a float%d program cannot be trained (it is for gradient checks)", st->source,
             st->real_bytes * 8);
    return NULL;
  }
  if (!st->has_loss) {
    snprintf(err, errlen, "%s: the stage does not compute the loss", st->source);
    return NULL;
  }
  Trainer *t = pd_calloc(1, sizeof *t);
  t->plan = p;
  t->pp = (PipePlan){.rt = (RtPlan *)p, .d = 1, .w = 1, .b = p->b, .m = p->m,
                     .schedule = p->delayed ? PS_2BW : PS_1F1B, .st = &t->ps, .nranks = 1,
                     .rank_stage = &t->rank0, .rank_replica = &t->rank0};
  t->ps.rank_of_replica = &t->rank0;
  if (!pipe_stage_layout_one(&t->pp, err, errlen)) { /* the layout pd2bwc writes (pipeline_plan.c) */
    free(t);
    return NULL;
  }
  /* seed_set: it wins over a checkpoint's too (rt_run_seed's rule; pipe_rank_resume) */
  /* the first streams cover 64 batches; a longer run doubles them as it goes */
  t->o = (PipeOptions){.steps = 64, .quiet = true, .data_path = o ? o->data_path : NULL, .caller_batches = true,
                       .seed = o ? o->seed : 0, .seed_set = o && o->seed_set, .exec_device = o ? o->device : NULL};
  t->world = transport_local_create_world(1, 0);
  t->R = pipe_rank_create(&t->pp, &t->o, transport_local_rank(t->world, 0), 0, err, errlen);
  if (!t->R) {
    trainer_destroy(t);
    return NULL;
  }
  t->R->fault_step = -1; /* PD2BW_FAULT_INJECT is for the pipelined runs' ranks */
  /* trainer_grads' copy: the CPU device's (a GPU's would be a host wait per step) */
  if (!t->o.exec_device) t->R->grads_out = pd_calloc(1, (size_t)(st->blocks[BUF_GRADS] ? st->blocks[BUF_GRADS] : 1));
  return t;
}

void trainer_destroy(Trainer *t) {
  if (!t) return;
  if (t->R) {
    free(t->R->grads_out);
    t->R->dl = NULL; /* the caller's */
    pipe_rank_destroy(t->R);
  }
  if (t->world) transport_local_destroy_world(t->world);
  free(t->ps.bufs);
  free(t);
}

const RtStage *trainer_stage(const Trainer *t) { return t->R->st; }
float *trainer_params(Trainer *t) { return (float *)(void *)t->R->w[t->R->newest]; }
void trainer_read_params(Trainer *t, float *dst) {
  t->R->dev->ops->download(t->R->dev, dst, t->R->w[t->R->newest], (uint64_t)t->R->st->blocks[BUF_PARAMS]);
}
float *trainer_grads(Trainer *t) { return (float *)(void *)t->R->grads_out; }
int64_t trainer_step_index(const Trainer *t) { return t->step; }
double trainer_flops_per_step(const Trainer *t) { return pipe_flops_per_step(&t->pp); }

void trainer_step(Trainer *t, DataLoader *data, StepStats *out) {
  PipeRank *R = t->R;
  int64_t s = t->step, m = t->pp.m;
  char err[RT_ERR_LEN];
  if (s >= R->steps && !pipe_rank_extend(R, 2 * s + 1, err, sizeof err)) PD_CHECK(0, "(%s)", err);
  R->dl = data;
  int64_t bad = R->bad_ids;
  double t0 = transport_now();
  /* no link to fail on: only the interpreter's per-step checks stop it (exec_interp.c) */
  if (!exec_run_batches(R, s, s + 1)) {
    PD_CHECK(R->stopped, "(one-stage step %lld: %s)", (long long)s, R->err);
    *out = (StepStats){.loss = NAN, .error = R->err};
    return;
  }
  const double *mb = R->loss + (s - R->first) * m;
  double sum = 0;
  for (int64_t j = 0; j < m; j++) sum += mb[j];
  *out = (StepStats){.loss = sum * (1.0 / (double)m), .mb_loss = mb, .lr = rt_lr_at(&R->tc, s),
                     .grad_norm = R->grad_norm[s - R->first], .ms = (transport_now() - t0) * 1e3,
                     .bad_ids = R->bad_ids - bad};
  t->step = s + 1;
}

double trainer_eval(Trainer *t, DataLoader *data, int64_t first, int64_t nbatches) {
  PipeRank *R = t->R;
  int64_t b = t->pp.b, m = t->pp.m;
  double sum = 0, *loss = pd_calloc((size_t)m, sizeof(double));
  int64_t n = 0;
  for (int64_t k = first; k < first + nbatches; k++) {
    for (int64_t j = 0; j < m; j++) {
      R->dev->ops->load_samples(R->dev, R->inputs, data, k * b * m + j * b, b);
      /* microbatch 0 and training 0: no dropout stream is drawn */
      ExecPass c = {.mb = 0, .seed = R->tc.seed, .training = false, .loss = &loss[j]};
      for (int cls = 0; cls < BUF_CLASS_COUNT; cls++)
        if (cls != BUF_NONE) c.block[cls] = pipe_block_base(R, cls, -1, 0);
      R->dev->ops->forward(R->dev, &c);
    }
    R->dev->ops->flush(R->dev); /* the batch's losses land (a GPU's: one wait) */
    for (int64_t j = 0; j < m; j++, n++) sum += loss[j];
  }
  free(loss);
  return n ? sum / (double)n : 0;
}

/* The state in host memory (the arena is the device's), as rank 0 gathers a pipeline's. */
bool trainer_save(Trainer *t, const char *path, char *err, size_t errlen) {
  PipeRank *R = t->R;
  uint64_t pb = (uint64_t)R->st->blocks[BUF_PARAMS];
  char *mem = pd_calloc(5 * pb + 1, 1), *w = mem, *m = mem + pb, *v = mem + 2 * pb;
  char *prev = t->pp.schedule == PS_2BW ? mem + 3 * pb : NULL, *next = R->spec.predict ? mem + 4 * pb : NULL;
  R->dev->ops->download(R->dev, w, R->w[R->newest], pb);
  R->dev->ops->download(R->dev, m, R->adam_m, pb);
  R->dev->ops->download(R->dev, v, R->adam_v, pb);
  if (prev) R->dev->ops->download(R->dev, prev, R->w[pipe_prev_slot(t->step)], pb);
  if (next) R->dev->ops->download(R->dev, next, R->w[pipe_next_slot(t->step)], pb);
  PipeGathered G = {.d = 1, .stage_w = &w, .stage_m = &m, .stage_v = &v, .stage_prev = &prev,
                    .stage_next = next ? &next : NULL};
  bool ok = pipe_save(&t->pp, &G, t->step, R->tc.seed, path, err, errlen);
  free(mem);
  return ok;
}

bool trainer_resume(Trainer *t, const char *path, char *err, size_t errlen) {
  PipeRank *R = t->R;
  if (!pipe_rank_resume(R, path, err, errlen)) return false;
  t->step = R->first;
  return pipe_rank_extend(R, R->first + 1, err, errlen);
}

bool trainer_init_from(Trainer *t, const char *path, char *err, size_t errlen) {
  return pipe_rank_init_from(t->R, path, err, errlen);
}
