/* runtime/cuda/pipe/cuda_pipe_main.c — the CUDA pipeline modes as a backend of pd2bwrun's
 * one pipeline driver (runtime/driver/driver.c pipeline_main_on: the plan,
 * the seed rule, the log, the validation, saved and trace lines, --reference): this
 * file adds only the GPU's banner, its training (single-GPU mode: cx_pipe_train,
 * cuda_pipe_threads.c; --transport nccl: cx_pipe_train_nccl, cuda_pipe_multi.c) and
 * the summary in its words (the CUDA graph counts, the executor's bytes, the
 * predicted bubble), and multi-GPU mode's launch (MPI, one GPU per process). A
 * one-stage plan (single-GPU mode on one rank) keeps the one-stage words: the banner
 * with the microbatch, and the summary scripts/gpu-check-lib.sh reads (the
 * steady-state rate: the steps after the first, which pays for NVRTC, module loading
 * and cuBLAS's first calls), the update graphs, and --bench-gemm's figures. */
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

/* The backend's state: the open device, and what single-GPU mode's summary adds. */
typedef struct GpuRun {
  const char *prog, *plan_dir, *device_name;
  const CudaDeviceOps *ops;
  CxPipeStats st;
  bool multi;     /* multi-GPU mode: this rank of a transport */
  CxBench *bench; /* a one-stage plan's --bench-gemm figures, or NULL */
} GpuRun;

static int gpu_train(void *ctx, const PipePlan *p, const PipeOptions *o, Transport *t, PipeOutcome *out, char *err,
                     size_t errlen) {
  GpuRun *g = ctx;
  if (!o->quiet && !t && p->nranks == 1)
    printf("%s: plan %s (model %s), microbatch %lld x %lld per step, GPU %d (%s)\n", g->prog, g->plan_dir,
           p->rt->model, (long long)p->b, (long long)p->m, o->device, g->device_name);
  else if (!o->quiet && !t)
    printf("%s: plan %s (model %s): %d stages x %d replicas, schedule %s%s, on GPU %d (%s): single-GPU pipeline "
           "mode\n", g->prog, g->plan_dir, p->rt->model, p->d, p->w, plan_schedule_name(p->schedule),
           p->recompute ? " + recompute" : "", o->device, g->device_name);
  if (!o->quiet && t && transport_rank(t) == 0)
    printf("%s: plan %s (model %s): %d stages x %d replicas, schedule %s%s: multi-GPU mode, one process per stage "
           "replica, NCCL (rank 0 on GPU %d, %s)\n", g->prog, g->plan_dir, p->rt->model, p->d, p->w,
           plan_schedule_name(p->schedule), p->recompute ? " + recompute" : "", o->device, g->device_name);
  return t ? cx_pipe_train_nccl(p, g->ops, o, t, out, err, errlen)
           : cx_pipe_train(p, g->ops, o, out, &g->st, err, errlen);
}

/* A one-stage plan's summary (tests/gpucheck reads it as gpu-check.sh does): the
 * steady-state rate, the device's bytes, the checkpoint; how the passes and the
 * updates ran; what --bench-gemm compares with. Nothing when nothing ran. */
static void one_summary(GpuRun *g, const PipePlan *p, const PipeOutcome *r, const PipeOptions *o) {
  int64_t nb = r->steps - r->first_step;
  if (nb <= 0) return;
  double ms = 0;
  for (int64_t b = nb > 1; b < nb; b++) ms += r->step_ms[b];
  double sec = ms / 1e3 / (double)(nb > 1 ? nb - 1 : 1), tokens = pipe_tokens_per_step(p);
  double tflops = pipe_flops_per_step(p) / sec / 1e12;
  printf("%s: %lld steps, final loss %.4f, %.1f ms/step, %.0f tok/s, %.2f TFLOP/s achieved (arena %.2f GiB)%s%s\n",
         g->prog, (long long)nb, r->step_loss[nb - 1], sec * 1e3, tokens / sec, tflops,
         (double)g->st.bytes / (1024.0 * 1024 * 1024), o->save_path ? ", saved " : "", o->save_path ? o->save_path : "");
  const CxGraphStats *gs = &g->st.graphs, *us = &g->st.updates;
  printf("%s: graphs: %lld captured, %lld launches (%lld passes launch by launch); updates: %lld as a graph, %lld "
         "launch by launch%s\n", g->prog, (long long)gs->captured, (long long)gs->launches, (long long)gs->eager,
         (long long)us->launches, (long long)us->eager, g->ops->capture_begin ? "" : "; CUDA graphs off");
  const RtStage *st = &p->rt->stages[0];
  int64_t dim = 0;
  for (int k = 0; k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) dim = st->params[k].shape[1];
  if (g->bench && dim > 0) /* the dtype training ran: bf16 plans time BF16 */
    *g->bench = (CxBench){.type = g->st.gemm, .M = (int)(tokens / (double)p->m), .N = (int)(4 * dim), .K = (int)dim,
                          .tflops = tflops};
}

/* Rank 0's (or the one process's) summary. Single-GPU mode adds the CUDA graph
 * counts, the executor's bytes and the plan's predicted bubble. */
static void gpu_summary(void *ctx, const PipePlan *p, const PipeOutcome *r, const PipeOptions *o) {
  GpuRun *g = ctx;
  bool multi = g->multi;
  if (!multi && p->nranks == 1) {
    one_summary(g, p, r, o);
    return;
  }
  const CxGraphStats *gs = multi ? NULL : &g->st.graphs;
  double predicted = multi ? -1 : cx_pipe_predicted_bubble(g->plan_dir);
  int64_t nb = r->steps - r->first_step;
  double last = nb ? r->step_loss[nb - 1] : NAN; /* finite: the interpreter checked every step */
  printf("%s: %d stages x %d replicas %s, schedule %s, %lld steps, final loss %.4f, %.1f ms/step\n", g->prog, p->d,
         p->w, multi ? "on one GPU each (NCCL)" : "on one GPU", plan_schedule_name(p->schedule), (long long)nb, last,
         r->step_time_s * 1e3);
  if (gs)
    printf("%s: graphs: %lld captured, %lld launches (%lld passes launch by launch)%s\n", g->prog,
           (long long)gs->captured, (long long)gs->launches, (long long)gs->eager,
           g->ops->capture_begin ? "" : "; CUDA graphs off");
  for (int s = 0; s < p->d; s++) {
    char bub[96] = "";
    if (gs && o->trace_path) /* measured from the trace's device events (cuda_pipe_threads.c) */
      snprintf(bub, sizeof bub, "bubble %.1f%% measured", 100 * r->bubble[s]);
    else if (gs)
      snprintf(bub, sizeof bub, "bubble not measured (--trace measures it)");
    if (gs && predicted >= 0)
      snprintf(bub + strlen(bub), sizeof bub - strlen(bub), ", %.1f%% predicted", 100 * predicted);
    char more[64] = ""; /* single-GPU mode's extras beside the arenas (multi-GPU: the device's own) */
    if (gs) snprintf(more, sizeof more, " + %llu executor bytes at most", (unsigned long long)g->st.extra_bytes);
    printf("  stage %d: %s%smemory %llu bytes per replica (plan %llu)%s\n", s, bub, gs ? ", " : "",
           (unsigned long long)r->arena_bytes[s], (unsigned long long)r->planned_bytes[s], more);
  }
}

int cx_pipe_main(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                   const CxOptions *o, CxBench *bench) {
  GpuRun g = {.prog = prog, .plan_dir = plan_dir, .device_name = device_name, .ops = ops, .bench = bench};
  PipeBackend be = {.ctx = &g, .train = gpu_train, .summary = gpu_summary};
  return pipeline_main_on(prog, plan_dir, o, &be, NULL);
}

int cx_pipe_nccl_main(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                        const CxOptions *o, Transport *t) {
  GpuRun g = {.prog = prog, .plan_dir = plan_dir, .device_name = device_name, .ops = ops, .multi = true};
  PipeBackend be = {.ctx = &g, .train = gpu_train, .summary = gpu_summary};
  return pipeline_main_on(prog, plan_dir, o, &be, t);
}

int cx_pipe_nccl_launch(const char *prog, const char *plan_dir, const CxOptions *o) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  if (o->trace_path) /* NOT done: multi-GPU mode times nothing (single-GPU mode's marks: cuda_pipe_threads.c) */
    return rt_fail(prog, "--trace is not supported with --transport nccl yet (single-GPU pipeline mode takes it)");
  if (o->profile_out) /* NOT done: as --trace */
    return rt_fail(prog, "--profile-out is not supported with --transport nccl yet (single-GPU pipeline mode takes it)");
  Transport *t = transport_mpi_create(NULL, NULL, o->timeout_s, err, sizeof err); /* --timeout */
  if (!t) return rt_fail(prog, err);
  /* one GPU per process: the rank's index among those on its host (Open MPI says it) */
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int local = lr ? atoi(lr) : transport_rank(t) % transport_ranks_on_host(t);
  CxOptions mine = *o;
  mine.device = o->device + local;
  CudaDeviceOps *ops = cuda_dev_open(mine.device, err, sizeof err);
  int rc;
  if (!ops) {
    transport_abort(t, err);
    rc = rt_fail(prog, err);
  } else {
    if (mine.graphs_off) cx_ops_no_graphs(ops); /* --cuda-graphs off */
    rc = cx_pipe_nccl_main(prog, plan_dir, ops, cuda_dev_name(ops), &mine, t);
    cuda_dev_close(ops);
  }
  transport_destroy(t);
  return rc;
}
