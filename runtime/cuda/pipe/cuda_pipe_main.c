/* runtime/cuda/pipe/cuda_pipe_main.c — pd2bwrun --backend cuda / pd2bw-cuda-train on a plan with
 * several stages or replicas: single-GPU pipeline mode, or with --transport nccl
 * multi-GPU mode under mpirun (cuda_pipe.h), the report in the words of pd2bwrun's
 * pipeline path (rank 0's), and --reference against the sequential trainer on the
 * CPU (pipeline_check_reference, the CPU pipeline's own check). Both modes take
 * --save, --resume, --init and validation (the CPU pipeline's: single-GPU mode through
 * cuda_pipe_threads.c, multi-GPU mode through cuda_pipe_multi.c). */
#include "runtime/cuda/pipe/cuda_pipe.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/io.h"

double cx_pipe_predicted_bubble(const char *plan_dir) {
  char path[4096], ierr[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/plan.json", plan_dir);
  size_t len = 0;
  char *text = io_read_all(path, &len, ierr, sizeof ierr);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "predicted"),
                                                    "bubble_fraction");
  double v = cJSON_IsNumber(b) ? b->valuedouble : -1;
  cJSON_Delete(root);
  return v;
}

static int fail(const char *prog, const char *msg) {
  fprintf(stderr, "%s: error: %s\n", prog, msg);
  return 1;
}

/* Rank 0's (or the one process's) report of a finished run r of plan p. Single-GPU
 * mode also passes gs (the CUDA graph counts) and predicted (the plan's bubble, < 0:
 * none); multi-GPU mode NULL and -1. */
static int report(const char *prog, const PipePlan *p, const PipeOutcome *r, uint64_t extra, const CudaExecOptions *o,
                  const char *where, const CxGraphStats *gs, bool graphs_on, double predicted) {
  char err[RT_ERR_LEN];
  int rc = 0;
  int64_t nb = r->steps - r->first_step;
  double last = nb ? r->step_loss[nb - 1] : NAN; /* finite: cp_outcome_loss_ok checked every step */
  printf("%s: %d stages x %d replicas %s, schedule %s, %lld steps, final loss %.4f, %.1f ms/step\n", prog, p->d,
         p->w, where, plan_schedule_name(p->schedule), (long long)nb, last, r->step_time_s * 1e3);
  if (gs)
    printf("%s: graphs: %lld captured, %lld launches (%lld passes launch by launch)%s\n", prog, (long long)gs->captured,
           (long long)gs->launches, (long long)gs->eager, graphs_on ? "" : "; CUDA graphs off");
  for (int s = 0; s < p->d; s++) {
    char bub[96] = "";
    if (gs && o->trace_path) /* measured from the trace's device events (cuda_pipe_threads.c) */
      snprintf(bub, sizeof bub, "bubble %.1f%% measured", 100 * r->bubble[s]);
    else if (gs)
      snprintf(bub, sizeof bub, "bubble not measured (--trace measures it)");
    if (gs && predicted >= 0)
      snprintf(bub + strlen(bub), sizeof bub - strlen(bub), ", %.1f%% predicted", 100 * predicted);
    char more[64] = ""; /* single-GPU mode's extras beside the arenas (multi-GPU: the device's own) */
    if (gs) snprintf(more, sizeof more, " + %llu executor bytes at most", (unsigned long long)extra);
    printf("  stage %d: %s%smemory %llu bytes per replica (plan %llu)%s\n", s, bub, gs ? ", " : "",
           (unsigned long long)r->arena_bytes[s], (unsigned long long)r->planned_bytes[s], more);
  }
  if (!isnan(r->val_final)) printf("%s: validation loss %.4f\n", prog, r->val_final);
  if (!rc && o->log_json && !pipe_log_write(p, r, o->log_json, err, sizeof err)) rc = fail(prog, err);
  if (!rc && o->reference) {
    PipeOptions po = {.data_path = o->data_path, .steps = o->steps, .quiet = o->quiet, .seed = o->seed,
                      .seed_set = o->seed_set, .shuffle = o->shuffle, .resume_path = o->resume_path};
    if (!pipeline_check_reference(p, &po, r, o->ref_tol > 0 ? o->ref_tol : 1e-5, stdout, err, sizeof err))
      rc = fail(prog, err);
  }
  return rc;
}

int cuda_pipe_main(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                   const CudaExecOptions *o) {
  char err[RT_ERR_LEN];
  PipePlan *p = pipe_plan_load(plan_dir, err, sizeof err);
  if (!p) return fail(prog, err);
  if (p->rt->train.steps == 0) p->rt->train.steps = o->steps;
  CudaExecOptions mine; /* one seed rule for every mode: weights, dropout, data order */
  if (!cx_run_seed(o, p->rt->train.seed, &mine, err, sizeof err)) {
    pipe_plan_free(p);
    return fail(prog, err);
  }
  o = &mine;
  if (!o->quiet)
    printf("%s: plan %s (model %s): %d stages x %d replicas, schedule %s%s, on GPU %d (%s): single-GPU pipeline "
           "mode\n", prog, plan_dir, p->rt->model, p->d, p->w, plan_schedule_name(p->schedule),
           p->recompute ? " + recompute" : "", o->device, device_name);
  PipeOutcome r;
  CxPipeStats st = {0};
  int rc = cx_pipe_train_stats(p, ops, o, &r, &st, err, sizeof err);
  if (rc) fail(prog, err);
  else rc = report(prog, p, &r, st.extra_bytes, o, "on one GPU", &st.graphs, ops->capture_begin != NULL,
                   cx_pipe_predicted_bubble(plan_dir));
  if (!rc && o->save_path) printf("%s: saved %s\n", prog, o->save_path);
  if (!rc && o->trace_path) printf("%s: trace %s\n", prog, o->trace_path);
  if (!rc && o->trace_path) pipe_report_update(plan_dir, p, &r, o->trace_path, o->quiet);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  return rc;
}

int cuda_pipe_nccl_main(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                        const CudaExecOptions *o, Transport *t) {
  char err[RT_ERR_LEN];
  PipePlan *p = pipe_plan_load(plan_dir, err, sizeof err);
  if (!p) {
    transport_abort(t, err);
    return fail(prog, err);
  }
  if (p->rt->train.steps == 0) p->rt->train.steps = o->steps;
  CudaExecOptions mine; /* one seed rule for every mode: every rank reads the checkpoint's */
  if (!cx_run_seed(o, p->rt->train.seed, &mine, err, sizeof err)) {
    pipe_plan_free(p);
    transport_abort(t, err);
    return fail(prog, err);
  }
  o = &mine;
  bool root = transport_rank(t) == 0;
  if (!o->quiet && root)
    printf("%s: plan %s (model %s): %d stages x %d replicas, schedule %s%s: multi-GPU mode, one process per stage "
           "replica, NCCL (rank 0 on GPU %d, %s)\n", prog, plan_dir, p->rt->model, p->d, p->w,
           plan_schedule_name(p->schedule), p->recompute ? " + recompute" : "", o->device, device_name);
  PipeOutcome r;
  int rc = cx_pipe_train_nccl(p, ops, o, t, &r, err, sizeof err);
  if (rc && err[0]) fail(prog, err); /* empty: a failure every rank agreed on, rank 0 says it */
  else if (!rc && root) rc = report(prog, p, &r, 0, o, "on one GPU each (NCCL)", NULL, false, -1);
  if (!rc && root && o->save_path) printf("%s: saved %s\n", prog, o->save_path);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  return rc;
}

int cuda_pipe_nccl_launch(const char *prog, const char *plan_dir, const CudaExecOptions *o) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  if (o->trace_path) /* NOT done: multi-GPU mode times nothing (single-GPU mode's marks: cuda_pipe_threads.c) */
    return fail(prog, "--trace is not supported with --transport nccl yet (single-GPU pipeline mode takes it)");
  if (o->profile_out) /* NOT done: as --trace */
    return fail(prog, "--profile-out is not supported with --transport nccl yet (single-GPU pipeline mode takes it)");
  Transport *t = transport_mpi_create(NULL, NULL, 0, err, sizeof err);
  if (!t) return fail(prog, err);
  /* one GPU per process: the rank's index among those on its host (Open MPI says it) */
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int local = lr ? atoi(lr) : transport_rank(t) % transport_ranks_on_host(t);
  CudaExecOptions mine = *o;
  mine.device = o->device + local;
  CxDeviceOps *ops = cx_cuda_open(mine.device, err, sizeof err);
  int rc;
  if (!ops) {
    transport_abort(t, err);
    rc = fail(prog, err);
  } else {
    if (mine.graphs_off) cx_ops_no_graphs(ops); /* --cuda-graphs off */
    rc = cuda_pipe_nccl_main(prog, plan_dir, ops, cx_cuda_name(ops), &mine, t);
    cx_cuda_close(ops);
  }
  transport_destroy(t);
  return rc;
}
