/* runtime/exec/exec_one_main.c — pd2bwrun --backend cuda's one-stage driver
 * (runtime/pipeline/pipeline.h exec_one_main_on): the driver loop around the one-stage
 * trainer (exec_one.c): the plan, --init then --resume, the data, training to --steps
 * with validation after every K-th step and the last, the checkpoint and the report.
 * (Every CPU plan runs on pipeline_main.c's driver.) --backend cuda passes a
 * OneBackend (runtime/cuda/exec/cuda_exec_main.c: the GPU as the trainer's device,
 * its banner words, --profile-out's start and its summary lines). The pipelines'
 * driver is pipeline_main.c's; the per-step checks (divergence, token ids) are the
 * interpreter's in both (exec_interp.c), and so is the seed rule's use (rt_run_seed). */
#include "runtime/core/runtime.h"
#include "runtime/exec/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *prog, const char *msg) {
  fprintf(stderr, "%s: error: %s\n", prog, msg);
  return 1;
}

typedef struct OneRun {
  const char *prog;
  const OneBackend *be;
  ExecDevice *dev;      /* the backend's, destroyed after the trainer */
  RtPlan *plan;
  Trainer *t;
  DataFile *df, *vf;
  DataLoader *dl, *vl;
  RtLog *log;
  int T;
  int64_t val_batches;
} OneRun;

/* Checks the outputs, loads the plan, the trainer (--init, --resume) and the data;
 * false once the message is printed. */
static bool one_open(const char *plan_dir, const PipeOptions *a, OneRun *r) {
  char err[RT_ERR_LEN];
  char ierr[IO_ERR_LEN];
  const char *prog = r->prog;
  /* every output path before anything is loaded or trained (runtime/io/io.h) */
  OutputFlag outs[] = {{"--save", a->save_path}, {"--log-json", a->log_json}, {"--trace", a->trace_path},
                       {"--profile-out", a->profile_out}};
  if (!output_paths_check(outs, 4, err, sizeof err)) return fail(prog, err), false;
  RtPlan *plan = r->plan = rt_plan_load(plan_dir, err, sizeof err);
  if (!plan) return fail(prog, err), false;
  /* The schedule's horizon is the plan's; a plan without one spans this run. */
  if (plan->train.steps == 0) plan->train.steps = a->steps;
  const RtStage *st = &plan->stages[0];
  int64_t vocab = 0;
  for (int k = 0; k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) vocab = st->params[k].shape[0];
  if (!a->quiet)
    printf("%s: plan %s (model %s), microbatch %lld x %lld per step, %s\n", prog, plan_dir, plan->model,
           (long long)plan->b, (long long)plan->m, r->be->where);
  /* one seed rule for every mode (runtime.h rt_run_seed): weights, dropout, data order */
  uint64_t seed;
  if (!rt_run_seed(a->resume_path, a->seed_set, a->seed, plan->train.seed, &seed, err, sizeof err))
    return fail(prog, err), false;
  if (!(r->dev = r->be->device(r->be->ctx, plan, a, err, sizeof err))) return fail(prog, err), false;
  TrainerOptions to = {.seed = seed, .seed_set = true, .data_path = a->data_path, .device = r->dev};
  Trainer *t = r->t = trainer_create(plan, &to, err, sizeof err);
  if (!t) return fail(prog, err), false;
  /* --init then --resume: a checkpoint replaces both */
  if (a->init_path && !trainer_init_from(t, a->init_path, err, sizeof err)) return fail(prog, err), false;
  if (a->resume_path) {
    if (!trainer_resume(t, a->resume_path, err, sizeof err)) return fail(prog, err), false;
    if (!a->quiet) printf("%s: resumed from %s at step %lld\n", prog, a->resume_path, (long long)trainer_step_index(t));
    if (trainer_step_index(t) >= a->steps) /* not an error: rerunning a finished job is a no-op, as in llm.c */
      fprintf(stderr, "%s: %s is at step %lld already, --steps %lld: nothing to train\n", prog, a->resume_path,
              (long long)trainer_step_index(t), (long long)a->steps);
  }
  if (r->be->ready) r->be->ready(r->be->ctx, t, plan, a);
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER) r->T = (int)st->inputs[k].shape[1];
  snprintf(err, sizeof err, "the model has no 'tokens'/'targets' inputs: %s trains language models on token files", prog);
  if (!r->T) return fail(prog, err), false;
  r->df = data_open(a->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  /* Shuffled or not, sample n of the stream is a function of (seed, n) alone, so a
   * resumed run reads what the uninterrupted one would have. */
  if (!r->df || !(r->dl = data_loader_create(r->df, (int)(plan->b * plan->m), r->T, a->shuffle, seed, ierr, sizeof ierr)))
    return fail(prog, ierr), false;
  if (a->val_path) {
    r->vf = data_open(a->val_path, DATA_AUTO, vocab, ierr, sizeof ierr);
    if (!r->vf || !(r->vl = data_loader_create(r->vf, (int)(plan->b * plan->m), r->T, false, 0, ierr, sizeof ierr)))
      return fail(prog, ierr), false;
    r->val_batches = data_batches_per_epoch(r->vl);
    int64_t want = a->eval_batches > 0 ? a->eval_batches : 8;
    if (r->val_batches > want) r->val_batches = want;
  }
  r->log = rt_log_open(a->log_json, stdout, a->quiet, err, sizeof err);
  if (!r->log) return fail(prog, err), false;
  rt_log_set_peak(r->log, plan->peak_flops); /* one device */
  return true;
}

bool trainer_train(Trainer *t, DataLoader *dl, DataLoader *vl, int64_t val_batches, int64_t steps, int64_t eval_every,
                   RtLog *log, double tokens, TrainLoop *r, const char **error) {
  double flops = trainer_flops_per_step(t);
  *r = (TrainLoop){.first = trainer_step_index(t), .last_loss = NAN, .last_val = NAN};
  r->ran = steps - r->first;
  for (int64_t s = r->first; s < steps; s++) {
    StepStats ss;
    /* the per-step checks (divergence, token ids) are the interpreter's, as in every mode */
    trainer_step(t, dl, &ss);
    if (ss.error) return *error = ss.error, false;
    r->total_ms += ss.ms;
    if (s > r->first || r->ran == 1) r->steady_ms += ss.ms, r->steady++;
    r->last_loss = ss.loss;
    double val = NAN;
    if (vl && ((eval_every && (s + 1) % eval_every == 0) || s + 1 == steps))
      val = r->last_val = trainer_eval(t, vl, 0, val_batches);
    if (!rt_log_step(log, s + 1, steps, &ss, tokens, flops, val))
      return *error = rt_log_error(log), false;
  }
  return true;
}

/* Trains to --steps, evaluating after every K-th step and the last, then saves and
 * reports; false once the message is printed. */
static bool one_train(const PipeOptions *a, OneRun *r) {
  char err[RT_ERR_LEN];
  char ierr[IO_ERR_LEN];
  Trainer *t = r->t;
  double tokens = (double)(r->plan->b * r->plan->m) * r->T;
  TrainLoop L;
  const char *why = NULL;
  if (!trainer_train(t, r->dl, r->vl, r->val_batches, a->steps, a->eval_every, r->log, tokens, &L, &why))
    return fail(r->prog, why), false;
  if (!rt_log_finish(r->log, err, sizeof err)) return fail(r->prog, err), false;
  if (a->save_path && !trainer_save(t, a->save_path, ierr, sizeof ierr)) return fail(r->prog, ierr), false;
  if (!r->be->finish(r->be->ctx, t, a, &L, tokens)) return false;
  /* resumed at (or past) --steps: nothing to train, so just evaluate the weights */
  if (L.ran <= 0 && r->vl) L.last_val = trainer_eval(t, r->vl, 0, r->val_batches);
  if (!isnan(L.last_val)) printf("%s: validation loss %.4f\n", r->prog, L.last_val);
  return true;
}

int exec_one_main_on(const char *prog, const char *plan_dir, const PipeOptions *a, const OneBackend *be) {
  OneRun r = {.prog = prog, .be = be};
  int rc = one_open(plan_dir, a, &r) && one_train(a, &r) ? 0 : 1;
  rt_log_close(r.log);
  data_loader_destroy(r.dl);
  data_loader_destroy(r.vl);
  if (r.df) data_close(r.df);
  if (r.vf) data_close(r.vf);
  trainer_destroy(r.t);
  exec_device_destroy(r.dev); /* after the trainer, whose rank holds it */
  rt_plan_free(r.plan);
  return rc;
}

