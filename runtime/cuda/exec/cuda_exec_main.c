/* runtime/cuda/exec/cuda_exec_main.c — pd2bwrun --backend cuda and tools/pd2bw-cuda-train
 * (cuda_exec.h): the GPU as a backend of pd2bwrun's drivers. A plan with several
 * stages or replicas goes to single-GPU pipeline mode (cuda_pipe.h: cuda_pipe_main,
 * pipeline_main_on's GPU backend), --transport nccl to multi-GPU mode.
 *
 * A one-stage plan runs through the CPU's one-stage driver (runtime/exec/exec_one_main.c
 * exec_one_main_on: the plan as d = w = 1 through the interpreter, so the same data
 * order, per-step checks and log lines, --init then --resume, validation, --save in
 * the CPU trainer's format, one error line and status 1 for every user mistake); this
 * file adds the GPU as the trainer's device (cuda_exec_device.c), --profile-out, the
 * summary's rate and CUDA graph counts and --bench-gemm. The GPU is
 * opened first, so on a machine without one the message is the backend's "no CUDA
 * driver found ... use --backend cpu" before anything else is read. The summary
 * reports the steady-state rate (steps after the first, which pays for NVRTC, module
 * loading and cuBLAS's first calls) and, with bench_gemm, cuBLAS's own rate on the
 * model's MLP GEMM in the same process, so the two figures share a GPU and a clock.
 * cuda_exec_run is the loop on a device that is already open (tests: the emulator). */
#include "runtime/cuda/exec/cuda_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/exec/exec.h"

static int fail(const char *prog, const char *msg) {
  fprintf(stderr, "%s: error: %s\n", prog, msg);
  return 1;
}

/* What cuda_exec_main's --bench-gemm times after the run: the model's MLP GEMM in the
 * dtype training ran, beside the rate training achieved. */
typedef struct Bench {
  CxGemmType type;
  int M, N, K; /* 0: nothing to time */
  double tflops;
} Bench;

/* --profile-out of a one-stage plan: the writer names segments as plan.json's
 * pipeline section does (runtime/pipeline.h). */
static bool write_profile(const char *plan_dir, CxProgram *prog, const char *path, char *err, size_t errlen) {
  PipePlan *p = pipe_plan_load(plan_dir, err, errlen);
  bool ok = p && cx_profile_write(&prog, p, path, err, errlen);
  pipe_plan_free(p);
  return ok;
}

/* The one-stage driver's GPU backend (OneBackend): the device, --profile-out, the summary. */
typedef struct GpuOne {
  const char *prog, *plan_dir;
  const CxDeviceOps *ops;
  const RtPlan *plan;
  ExecDevice *dev;
  Bench *bench; /* NULL: no --bench-gemm */
} GpuOne;

static ExecDevice *one_device(void *ctx, const RtPlan *plan, const PipeOptions *o, char *err, size_t errlen) {
  GpuOne *g = ctx;
  g->plan = plan;
  return g->dev = cx_exec_device(g->ops, plan, 0, o->gemm, plan->b * plan->m, err, errlen);
}

static void one_ready(void *ctx, Trainer *t, const RtPlan *plan, const PipeOptions *o) {
  GpuOne *g = ctx; /* --profile-out: each segment's time, from the second step on (cuda_profile.c) */
  int64_t first = trainer_step_index(t);
  if (o->profile_out) cx_program_profile(cx_exec_device_program(g->dev), o->steps - first > 1 ? (first + 1) * plan->m : 0);
}

/* --profile-out, then the steady-state rate (steps after the first, which pays for
 * NVRTC, module loading and cuBLAS's first calls), how the passes ran, and the rate
 * --bench-gemm compares with. */
static bool one_finish(void *ctx, Trainer *t, const PipeOptions *o, const TrainLoop *L, double tokens) {
  GpuOne *g = ctx;
  char ierr[IO_ERR_LEN];
  if (o->profile_out && !write_profile(g->plan_dir, cx_exec_device_program(g->dev), o->profile_out, ierr, sizeof ierr))
    return fail(g->prog, ierr), false;
  if (!L->steady) return true;
  double sec = L->steady_ms / 1e3 / (double)L->steady, tflops = trainer_flops_per_step(t) / sec / 1e12;
  printf("%s: %lld steps, final loss %.4f, %.1f ms/step, %.0f tok/s, %.2f TFLOP/s achieved (arena %.2f GiB)%s%s\n",
         g->prog, (long long)L->ran, L->last_loss, sec * 1e3, tokens / sec, tflops,
         (double)cx_exec_device_bytes(g->dev) / (1024.0 * 1024 * 1024), o->save_path ? ", saved " : "",
         o->save_path ? o->save_path : "");
  CxGraphStats gs = cx_exec_device_pass_stats(g->dev), us = cx_exec_device_update_stats(g->dev);
  printf("%s: graphs: %lld captured, %lld launches (%lld passes launch by launch); updates: %lld as a graph, %lld "
         "launch by launch%s\n",
         g->prog, (long long)gs.captured, (long long)gs.launches, (long long)gs.eager, (long long)us.launches,
         (long long)us.eager, g->ops->capture_begin ? "" : "; CUDA graphs off");
  const RtStage *st = &g->plan->stages[0];
  int64_t dim = 0;
  for (int k = 0; k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) dim = st->params[k].shape[1];
  if (g->bench && dim > 0) /* the dtype training ran: bf16 plans time BF16 */
    *g->bench = (Bench){.type = cx_exec_device_gemm_type(g->dev), .M = (int)(tokens / (double)g->plan->m),
                        .N = (int)(4 * dim), .K = (int)dim, .tflops = tflops};
  return true;
}

static int run_plan(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                    const CudaExecOptions *o, Bench *bench) {
  char err[RT_ERR_LEN];
  /* every output path before anything is loaded or trained (runtime/io/io.h) */
  OutputFlag outs[] = {{"--save", o->save_path}, {"--log-json", o->log_json}, {"--trace", o->trace_path},
                       {"--profile-out", o->profile_out}};
  if (!output_paths_check(outs, 4, err, sizeof err)) return fail(prog, err);
  if (pipe_plan_ranks(plan_dir) > 1) /* several stages or replicas: single-GPU pipeline mode */
    return o->bench_gemm ? fail(prog, "--bench-gemm times one-stage plans only")
                         : cuda_pipe_main(prog, plan_dir, ops, device_name, o);
  if (o->reference)
    return fail(prog, "--reference checks plans with several stages or replicas (single-GPU pipeline mode); a "
                      "one-stage plan is compared with the CPU backend by scripts/gpu-check.sh");
  char where[160];
  snprintf(where, sizeof where, "GPU %d (%s)", o->device, device_name);
  GpuOne g = {.prog = prog, .plan_dir = plan_dir, .ops = ops, .bench = bench};
  OneBackend be = {.ctx = &g, .where = where, .device = one_device, .ready = one_ready, .finish = one_finish};
  return exec_one_main_on(prog, plan_dir, o, &be);
}

/* run_plan; with --kernel-profile on the profiling table between the executors and the
 * device (cuda_exec_kprof.c: every launch and GEMM timed, graphs off), the table
 * written after a run that succeeded. The one place the profile hooks in. */
static int run(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
               const CudaExecOptions *o, Bench *bench) {
  if (!o->kernel_profile) return run_plan(prog, plan_dir, ops, device_name, o, bench);
  char err[RT_ERR_LEN];
  if (!output_path_check("--kernel-profile", o->kernel_profile, err, sizeof err)) return fail(prog, err);
  CxDeviceOps prof;
  CxKprof *k = cx_kprof_wrap(ops, &prof);
  int rc = run_plan(prog, plan_dir, &prof, device_name, o, bench);
  if (rc == 0 && !cx_kprof_write(k, o->kernel_profile, plan_dir, err, sizeof err)) rc = fail(prog, err);
  if (rc == 0) printf("%s: kernel profile %s\n", prog, o->kernel_profile);
  cx_kprof_free(k);
  return rc;
}

int cuda_exec_run(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                  const CudaExecOptions *o) {
  return run(prog, plan_dir, ops, device_name, o, NULL);
}

int cuda_exec_main(const char *prog, const char *plan_dir, const CudaExecOptions *o) {
  char err[RT_ERR_LEN];
  if (o->nccl && o->kernel_profile) return fail(prog, "--kernel-profile times one GPU's launches: not with --transport nccl");
  if (o->nccl) return cuda_pipe_nccl_launch(prog, plan_dir, o); /* multi-GPU mode, under mpirun */
  CxDeviceOps *ops = cx_cuda_open(o->device, err, sizeof err);
  if (!ops) return fail(prog, err);
  if (o->graphs_off) cx_ops_no_graphs(ops); /* --cuda-graphs off: every pass launch by launch */
  Bench b = {.M = 0};
  int rc = run(prog, plan_dir, ops, cx_cuda_name(ops), o, o->bench_gemm ? &b : NULL);
  /* the trainer's arena must go before the benchmark's (one arena per device) */
  cx_cuda_close(ops);
  if (rc || !b.M) return rc;
  double peak = cx_cuda_gemm_tflops(o->device, b.type, b.M, b.N, b.K, err, sizeof err);
  if (peak < 0) return fail(prog, err);
  printf("%s: cuBLAS %s GEMM %dx%dx%d: %.2f TFLOP/s measured; training achieved %.2f TFLOP/s = %.0f%% of it\n", prog,
         b.type == CX_GEMM_TF32 ? "TF32" : b.type == CX_GEMM_BF16 ? "BF16" : "FP32", b.M, b.N, b.K, peak, b.tflops,
         100.0 * b.tflops / peak);
  return 0;
}
