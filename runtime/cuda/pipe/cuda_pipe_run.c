/* runtime/cuda/pipe/cuda_pipe_run.c — pd2bwrun --backend cuda and tools/pd2bw-cuda-train
 * (cuda_pipe.h cx_main): the GPU as a backend of pd2bwrun's one pipeline driver. Every plan,
 * one-stage included, runs in single-GPU pipeline mode (cuda_pipe.h: cx_pipe_main,
 * pipeline_main_on's GPU backend: a one-stage plan is one rank, d = w = 1, so the data
 * order, per-step checks, log lines, --init then --resume, validation and --save are
 * the CPU pipelines'); --transport nccl goes to multi-GPU mode. This file adds the
 * output paths' check before anything runs, --kernel-profile (the profiling table
 * between the executors and the device) and --bench-gemm. The GPU is opened first, so
 * on a machine without one the message is the backend's "no CUDA driver found ... use
 * --backend cpu" before anything else is read. --bench-gemm times cuBLAS's own rate on
 * a one-stage plan's MLP GEMM after the run, in the same process, so the two figures
 * share a GPU and a clock. cx_run is the path on a device that is already open
 * (tests: the emulator). */
#include "runtime/cuda/pipe/cuda_pipe.h"

static int run_plan(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                    const CxOptions *o, CxBench *bench) {
  bool one = pipe_plan_ranks(plan_dir) == 1; /* (an unreadable plan counts as one: the driver says why) */
  if (!one && o->bench_gemm) return rt_fail(prog, "--bench-gemm times one-stage plans only");
  if (one && o->reference)
    return rt_fail(prog, "--reference checks plans with several stages or replicas (single-GPU pipeline mode); a "
                      "one-stage plan is compared with the CPU backend by scripts/gpu-check.sh");
  return cx_pipe_main(prog, plan_dir, ops, device_name, o, one ? bench : NULL);
}

/* run_plan; with --kernel-profile on the profiling table between the executors and the
 * device (cuda_exec_kprof.c: every launch and GEMM timed, graphs off), the table
 * written after a run that succeeded. The one place the profile hooks in. */
static int run(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
               const CxOptions *o, CxBench *bench) {
  if (!o->kernel_profile) return run_plan(prog, plan_dir, ops, device_name, o, bench);
  char err[RT_ERR_LEN];
  if (!output_path_check("--kernel-profile", o->kernel_profile, err, sizeof err)) return rt_fail(prog, err);
  CudaDeviceOps prof;
  CxKprof *k = cx_kprof_wrap(ops, &prof);
  int rc = run_plan(prog, plan_dir, &prof, device_name, o, bench);
  if (rc == 0 && !cx_kprof_write(k, o->kernel_profile, plan_dir, err, sizeof err)) rc = rt_fail(prog, err);
  if (rc == 0) printf("%s: kernel profile %s\n", prog, o->kernel_profile);
  cx_kprof_free(k);
  return rc;
}

int cx_run(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                  const CxOptions *o) {
  return run(prog, plan_dir, ops, device_name, o, NULL);
}

int cx_main(const char *prog, const char *plan_dir, const CxOptions *o) {
  char err[RT_ERR_LEN];
  if (o->nccl && o->kernel_profile) return rt_fail(prog, "--kernel-profile times one GPU's launches: not with --transport nccl");
  if (o->nccl) return cx_pipe_nccl_launch(prog, plan_dir, o); /* multi-GPU mode, under mpirun */
  CudaDeviceOps *ops = cuda_dev_open(o->device, err, sizeof err);
  if (!ops) return rt_fail(prog, err);
  if (o->graphs_off) cx_ops_no_graphs(ops); /* --cuda-graphs off: every pass launch by launch */
  CxBench b = {.M = 0};
  int rc = run(prog, plan_dir, ops, cuda_dev_name(ops), o, o->bench_gemm ? &b : NULL);
  /* the trainer's arena must go before the benchmark's (one arena per device) */
  cuda_dev_close(ops);
  if (rc || !b.M) return rc;
  double peak = cuda_gemm_tflops(o->device, b.type, b.M, b.N, b.K, err, sizeof err);
  if (peak < 0) return rt_fail(prog, err);
  printf("%s: cuBLAS %s GEMM %dx%dx%d: %.2f TFLOP/s measured; training achieved %.2f TFLOP/s = %.0f%% of it\n", prog,
         b.type == GEMM_TF32 ? "TF32" : b.type == GEMM_BF16 ? "BF16" : "FP32", b.M, b.N, b.K, peak, b.tflops,
         100.0 * b.tflops / peak);
  return 0;
}
