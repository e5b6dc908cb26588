/* runtime/exec/exec_one_main.c — pd2bwrun's one-stage path (runtime/pipeline/pipeline.h
 * exec_one_main): the driver loop around the one-stage trainer (exec_one.c): the
 * plan, --init then --resume, the data, training to --steps with validation after
 * every K-th step and the last, the checkpoint and the report. The pipelines' loop
 * is pipeline_run.c's pipeline_main; the per-step checks (divergence, token ids)
 * are the interpreter's in both (exec_interp.c), and so is the seed rule's use
 * (rt_run_seed). */
#include "runtime/core/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *msg) {
  fprintf(stderr, "pd2bwrun: error: %s\n", msg);
  return 1;
}

typedef struct OneRun {
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
  /* every output path before anything is loaded or trained (runtime/io/io.h); the
   * pipeline and CUDA paths check theirs in pipeline_main and cuda_exec_main */
  OutputFlag outs[] = {{"--save", a->save_path}, {"--log-json", a->log_json}};
  if (!output_paths_check(outs, 2, err, sizeof err)) return fail(err), false;

  /* Threads: OpenMP in the stage program reads OMP_NUM_THREADS when it starts. */
  int threads = a->threads ? a->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  char tb[16];
  snprintf(tb, sizeof tb, "%d", threads);
  setenv("OMP_NUM_THREADS", tb, 1);
  pd_blas_init(threads);

  RtPlan *plan = r->plan = rt_plan_load(plan_dir, err, sizeof err);
  if (!plan) return fail(err), false;
  /* The schedule's horizon is the plan's; a plan without one spans this run. */
  if (plan->train.steps == 0) plan->train.steps = a->steps;
  const RtStage *st = &plan->stages[0];
  int64_t vocab = 0;
  for (int k = 0; k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) vocab = st->params[k].shape[0];
  if (!a->quiet) printf("pd2bwrun: plan %s (model %s), microbatch %lld x %lld per step, %d thread%s, BLAS %s\n",
                        plan_dir, plan->model, (long long)plan->b, (long long)plan->m, threads,
                        threads == 1 ? "" : "s", pd_blas_name());
  /* one seed rule for every mode (runtime.h rt_run_seed): weights, dropout, data order */
  uint64_t seed;
  if (!rt_run_seed(a->resume_path, a->seed_set, a->seed, plan->train.seed, &seed, err, sizeof err)) return fail(err), false;
  TrainerOptions to = {.seed = seed, .seed_set = true, .data_path = a->data_path};
  Trainer *t = r->t = trainer_create(plan, &to, err, sizeof err);
  if (!t) return fail(err), false;
  if (!a->quiet)
    printf("pd2bwrun: stage program %s (%s)\n", trainer_program(t)->so_path,
           trainer_program(t)->cache_hit ? "cached" : "compiled now");
  if (a->init_path && !trainer_init_from(t, a->init_path, err, sizeof err)) return fail(err), false;
  if (a->resume_path) {
    if (!trainer_resume(t, a->resume_path, err, sizeof err)) return fail(err), false;
    if (!a->quiet) printf("pd2bwrun: resumed from %s at step %lld\n", a->resume_path, (long long)trainer_step_index(t));
    if (trainer_step_index(t) >= a->steps) /* not an error: rerunning a finished job is a no-op, as in llm.c */
      fprintf(stderr, "pd2bwrun: %s is at step %lld already, --steps %lld: nothing to train\n", a->resume_path,
              (long long)trainer_step_index(t), (long long)a->steps);
  }
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER) r->T = (int)st->inputs[k].shape[1];
  if (!r->T) return fail("the model has no 'tokens'/'targets' inputs: pd2bwrun trains language models on token files"), false;
  r->df = data_open(a->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  /* Shuffled or not, sample n of the stream is a function of (seed, n) alone, so a
   * resumed run reads what the uninterrupted one would have. */
  if (!r->df || !(r->dl = data_loader_create(r->df, (int)(plan->b * plan->m), r->T, a->shuffle, seed, ierr, sizeof ierr)))
    return fail(ierr), false;
  if (a->val_path) {
    r->vf = data_open(a->val_path, DATA_AUTO, vocab, ierr, sizeof ierr);
    if (!r->vf || !(r->vl = data_loader_create(r->vf, (int)(plan->b * plan->m), r->T, false, 0, ierr, sizeof ierr)))
      return fail(ierr), false;
    r->val_batches = data_batches_per_epoch(r->vl);
    if (r->val_batches > a->eval_batches) r->val_batches = a->eval_batches;
  }
  r->log = rt_log_open(a->log_json, stdout, a->quiet, err, sizeof err);
  if (!r->log) return fail(err), false;
  rt_log_set_peak(r->log, plan->peak_flops); /* one device */
  return true;
}

/* Trains to --steps, evaluating after every K-th step and the last, then saves and
 * reports; false once the message is printed. */
static bool one_train(const PipeOptions *a, OneRun *r) {
  char err[RT_ERR_LEN];
  char ierr[IO_ERR_LEN];
  Trainer *t = r->t;
  double tokens = (double)(r->plan->b * r->plan->m) * r->T, flops = trainer_flops_per_step(t);
  double total_ms = 0, last_loss = NAN, last_val = NAN;
  int64_t first = trainer_step_index(t);
  for (int64_t s = first; s < a->steps; s++) {
    StepStats ss;
    /* the per-step checks (divergence, token ids) are the interpreter's, as in every mode */
    trainer_step(t, r->dl, &ss);
    if (ss.error) return fail(ss.error), false;
    total_ms += ss.ms;
    last_loss = ss.loss;
    double val = NAN;
    bool last = s + 1 == a->steps;
    if (r->vl && ((a->eval_every && (s + 1) % a->eval_every == 0) || last))
      val = last_val = trainer_eval(t, r->vl, 0, r->val_batches);
    if (!rt_log_step(r->log, s + 1, a->steps, &ss, tokens, flops, val)) return fail(rt_log_error(r->log)), false;
  }
  if (!rt_log_finish(r->log, err, sizeof err)) return fail(err), false;
  if (a->save_path && !trainer_save(t, a->save_path, ierr, sizeof ierr)) return fail(ierr), false;
  int64_t ran = a->steps - first;
  if (ran > 0)
    printf("pd2bwrun: %lld steps, final loss %.4f%s, %.1f ms/step, %.0f tok/s, %.2f GFLOP/s%s%s\n",
           (long long)ran, last_loss, "", total_ms / (double)ran, tokens * (double)ran / (total_ms / 1e3),
           flops * (double)ran / (total_ms / 1e3) / 1e9, a->save_path ? ", saved " : "", a->save_path ? a->save_path : "");
  /* resumed at (or past) --steps: nothing to train, so just evaluate the weights */
  if (ran <= 0 && r->vl) last_val = trainer_eval(t, r->vl, 0, r->val_batches);
  if (!isnan(last_val)) printf("pd2bwrun: validation loss %.4f\n", last_val);
  return true;
}

int exec_one_main(const char *plan_dir, const PipeOptions *a) {
  OneRun r = {0};
  int rc = one_open(plan_dir, a, &r) && one_train(a, &r) ? 0 : 1;
  rt_log_close(r.log);
  data_loader_destroy(r.dl);
  data_loader_destroy(r.vl);
  if (r.df) data_close(r.df);
  if (r.vf) data_close(r.vf);
  trainer_destroy(r.t);
  rt_plan_free(r.plan);
  return rc;
}

