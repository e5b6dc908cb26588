/* runtime/driver/driver.c — pd2bwrun's one pipeline driver (driver.h): the plan, the seed
 * rule, the run (the CPU's ranks as threads or MPI processes, or a backend's train hook,
 * runtime/cuda/pipe/cuda_pipe_main.c; rank 0 streams --log-json meanwhile), then rank
 * 0's report: the summary (the backend's words; a one-rank plan's in the one-stage
 * words), the validation loss, the saved/trace lines, report.html and --reference. */
#include "runtime/driver/driver.h"
#include "runtime/reference/reference.h"
#include "runtime/report/plan_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


bool pipe_options_seed(const PipeOptions *o, uint64_t plan_seed, PipeOptions *out, char *err, size_t errlen) {
  *out = *o;
  out->seed_set = true;
  return rt_run_seed(o->resume_path, o->seed_set, o->seed, plan_seed, &out->seed, err, errlen);
}

/* A one-rank plan's summary, the words the one-stage trainer's driver used (tests/cli,
 * scripts/main-job.sh, docs): the mean step time over every step run, the rates, the
 * checkpoint. Nothing when nothing ran. */
static void one_summary(const PipePlan *p, const PipeOutcome *r, const PipeOptions *o) {
  int64_t nb = r->steps - r->first_step;
  if (nb <= 0) return;
  double ms = 0;
  for (int64_t b = 0; b < nb; b++) ms += r->step_ms ? r->step_ms[b] : r->step_time_s * 1e3;
  double tokens = pipe_tokens_per_step(p), flops = pipe_flops_per_step(p);
  printf("pd2bwrun: %lld steps, final loss %.4f, %.1f ms/step, %.0f tok/s, %.2f GFLOP/s%s%s\n", (long long)nb,
         r->step_loss[nb - 1], ms / (double)nb, tokens * (double)nb / (ms / 1e3), flops * (double)nb / (ms / 1e3) / 1e9,
         o->save_path ? ", saved " : "", o->save_path ? o->save_path : "");
}

/* The CPU ranks' summary: the steady-state step time and the measured bubbles. */
static void cpu_summary(void *ctx, const PipePlan *p, const PipeOutcome *r, const PipeOptions *o) {
  (void)ctx;
  if (p->nranks == 1) {
    one_summary(p, r, o);
    return;
  }
  int64_t nb = r->steps - r->first_step;
  if (nb > 0)
    printf("pd2bwrun: %d stages x %d replicas, schedule %s%s, %lld steps, final loss %.4f, %.1f ms/step (measured, "
           "steady state)\n",
           p->d, p->w, plan_schedule_name(p->schedule), p->recompute ? " + recompute" : "", (long long)nb,
           r->step_loss[nb - 1], r->step_time_s * 1e3);
  else
    printf("pd2bwrun: %d stages x %d replicas, schedule %s%s, nothing trained (at step %lld)\n", p->d, p->w,
           plan_schedule_name(p->schedule), p->recompute ? " + recompute" : "", (long long)r->first_step);
  for (int s = 0; s < p->d; s++)
    printf("  stage %d: bubble %.1f%%, memory %llu bytes (plan %llu)\n", s, 100 * r->bubble[s],
           (unsigned long long)r->arena_bytes[s], (unsigned long long)r->planned_bytes[s]);
}

void pipe_report_update(const char *prog, const char *plan_dir, const PipePlan *p, const PipeOutcome *r,
                        const char *trace_path, bool quiet) {
  ReportRun run = {.trace_path = trace_path, .first_step = r->first_step, .nsteps = r->steps - r->first_step,
                   .step_loss = r->step_loss, .val_loss = r->val_loss, .step_time_s = r->step_time_s,
                   .bubble = r->bubble, .stages = p->d};
  char err[IO_ERR_LEN];
  if (plan_report_write(plan_dir, &run, err, sizeof err)) {
    if (!quiet) printf("%s: report %s/report.html (with this run)\n", prog, plan_dir);
  } else {
    fprintf(stderr, "%s: warning: the plan's report.html was not updated: %s\n", prog, err);
  }
}

/* Rank 0's (or the one process's) report of a finished run r; the exit status. */
static int report(const char *prog, const char *plan_dir, const PipePlan *p, const PipeOptions *o,
                  const PipeOutcome *r, const PipeBackend *be) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  /* (--log-json: streamed by rank 0 as it trained, pipeline_log.c) */
  (be ? be->summary : cpu_summary)(be ? be->ctx : NULL, p, r, o);
  if (!isnan(r->val_final)) printf("%s: validation loss %.4f\n", prog, r->val_final);
  if (o->save_path && p->nranks > 1) printf("%s: saved %s\n", prog, o->save_path); /* one rank: summary's */
  if (o->trace_path) printf("%s: trace %s\n", prog, o->trace_path);
  if (o->trace_path) pipe_report_update(prog, plan_dir, p, r, o->trace_path, o->quiet);
  if (o->reference && !pipeline_check_reference(p, o, r, o->ref_tol > 0 ? o->ref_tol : 1e-5, stdout, err, sizeof err))
    return rt_fail(prog, err);
  return 0;
}

/* Every output path before anything is loaded or trained (runtime/io/io.h), the one
 * check of every entry point, against every input the run reads (no output ever names
 * an input: the token files, the checkpoints, the plan directory and all in it): rank
 * 0's, as it writes them all, and with t agreed on by every rank (transport_agree), so
 * all stop with rank 0's one message and no abort. */
static bool outputs_agreed(const char *prog, const char *plan_dir, const PipeOptions *o, Transport *t) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN] = "";
  PathFlag outs[] = {{"--save", o->save_path, false},          {"--log-json", o->log_json, false},
                     {"--trace", o->trace_path, false},        {"--profile-out", o->profile_out, false},
                     {"--kernel-profile", o->kernel_profile, false}};
  struct stat sb; /* --init DIR: a Hugging Face directory (runtime/io/ckpt_llama.c), all in it inputs */
  bool init_dir = o->init_path && stat(o->init_path, &sb) == 0 && S_ISDIR(sb.st_mode);
  PathFlag ins[] = {{"--data", o->data_path, false}, {"--val-data", o->val_path, false},
                    {"the plan directory", plan_dir, true}, {"--resume", o->resume_path, false},
                    {"--init", o->init_path, init_dir}};
  /* --save may name the checkpoint it resumes or starts from, as `--resume c.st --save
   * c.st` keeps one checkpoint current: that file is read whole before the first step
   * and replaced whole (a temporary renamed) after the last */
  bool ok = (t && transport_rank(t) != 0) ||
            (output_paths_check(outs, 5, ins, 3, err, sizeof err) && output_paths_check(outs + 1, 4, ins + 3, 2, err, sizeof err));
  bool together = true;
  if (t) ok = transport_agree(t, ok, err, sizeof err, &together);
  if (!ok && err[0]) rt_fail(prog, err);
  if (!ok && !together) transport_abort(t, err);
  return ok;
}

int pipeline_main_on(const char *prog, const char *plan_dir, const PipeOptions *opt, const PipeBackend *be,
                     Transport *t) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  PipeOptions o;
  if (!outputs_agreed(prog, plan_dir, opt, t)) return 1;
  PipePlan *p = pipe_plan_load(plan_dir, err, sizeof err);
  /* one seed rule for every mode (runtime.h rt_run_seed): every rank, the reference
   * and the checkpoint get the resolved seed */
  if (p && !pipe_options_seed(opt, p->rt->train.seed, &o, err, sizeof err)) {
    pipe_plan_free(p);
    p = NULL;
  }
  if (p && !be && t && transport_size(t) != p->nranks) { /* (a backend's train checks its own) */
    snprintf(err, sizeof err, "%s: the plan has %d ranks (%d stages x %d replicas) but mpirun started %d", plan_dir,
             p->nranks, p->d, p->w, transport_size(t));
    pipe_plan_free(p);
    p = NULL;
  }
  if (!p) {
    rt_fail(prog, err);
    if (t) transport_abort(t, err);
    return 1;
  }
  bool together = true; /* MPI: every rank trains the same thing, or none does */
  if (t && transport_size(t) > 1 && !pipe_ranks_agree(plan_dir, p, &o, t, err, sizeof err, &together)) {
    if (err[0]) rt_fail(prog, err);
    if (!together) transport_abort(t, err);
    pipe_plan_free(p);
    return 1;
  }
  if (p->rt->train.steps == 0) p->rt->train.steps = o.steps;
  o.prog = prog;
  if (!be) { /* Threads: the host's cores shared by the ranks it runs. */
    int on_host = t ? transport_ranks_on_host(t) : p->nranks;
    int threads = o.threads ? o.threads : transport_host_cores();
    int per = threads / on_host > 0 ? threads / on_host : 1;
    char tb[16];
    snprintf(tb, sizeof tb, "%d", per);
    setenv("OMP_NUM_THREADS", tb, 1); /* (for processes this one starts: the C compiler) */
    o.threads_per_rank = per;
    pd_blas_init(per);
    pipe_rank_threads(per); /* this thread's; each rank sets its own (run_rank) */
    if (p->nranks == 1 && !o.quiet) /* the one-stage banner (tests/cli, scripts/main-job.sh, docs) */
      printf("%s: plan %s (model %s), microbatch %lld x %lld per step, %d thread%s, BLAS %s\n", prog, plan_dir,
             p->rt->model, (long long)p->b, (long long)p->m, per, per == 1 ? "" : "s", pd_blas_name());
  }
  PipeOutcome r = {0};
  int rc = be ? be->train(be->ctx, p, &o, t, &r, err, sizeof err)
           : t ? pipeline_run_rank(p, &o, t, &r, err, sizeof err)
               : pipeline_run_local(p, &o, &r, err, sizeof err);
  if (rc && err[0]) rt_fail(prog, err); /* empty: a failure all agreed on, rank 0 says it */
  else if (!rc && (!t || transport_rank(t) == 0)) rc = report(prog, plan_dir, p, &o, &r, be);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  return rc;
}

int pipeline_main(const char *plan_dir, const PipeOptions *o, const char *transport, int *argc, char ***argv) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  bool mpi = transport && strcmp(transport, "mpi") == 0;
  if (transport && !mpi && strcmp(transport, "local") != 0) {
    snprintf(err, sizeof err, "--transport must be local or mpi, got '%s'", transport);
    return rt_fail("pd2bwrun", err);
  }
  Transport *t = NULL;
  if (mpi && !(t = transport_mpi_create(argc, argv, o->timeout_s, err, sizeof err))) return rt_fail("pd2bwrun", err);
  int rc = pipeline_main_on("pd2bwrun", plan_dir, o, NULL, t);
  if (t) transport_destroy(t);
  return rc;
}
