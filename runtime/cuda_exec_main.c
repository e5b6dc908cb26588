/* runtime/cuda_exec_main.c — the GPU training loop behind pd2bwrun --backend cuda and
 * tools/pd2bw-cuda-train (cuda_exec.h). A plan with several stages or replicas goes to
 * single-GPU pipeline mode (cuda_pipe.h: cuda_pipe_main).
 *
 * The same contract as pd2bwrun's one-stage path: the same data order and log lines
 * (rt_log_step), one error line and status 1 for every user mistake. The GPU is
 * opened first, so on a machine without one the message is the backend's "no CUDA
 * driver found ... use --backend cpu" before anything else is read. The summary
 * reports the steady-state rate (steps after the first, which pays for NVRTC, module
 * loading and cuBLAS's first calls) and, with bench_gemm, cuBLAS's own rate on the
 * model's MLP GEMM in the same process, so the two figures share a GPU and a clock. */
#include "runtime/cuda_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_pipe.h"

static int fail(const char *prog, const char *msg) {
  fprintf(stderr, "%s: error: %s\n", prog, msg);
  return 1;
}

int cuda_exec_main(const char *prog, const char *plan_dir, const CudaExecOptions *o) {
  char err[RT_ERR_LEN], ierr[IO_ERR_LEN];
  if (o->nccl) return cuda_pipe_nccl_launch(prog, plan_dir, o); /* multi-GPU mode, under mpirun */
  CxDeviceOps *ops = cx_cuda_open(o->device, err, sizeof err);
  if (!ops) return fail(prog, err);
  if (pipe_plan_ranks(plan_dir) > 1) { /* several stages or replicas: single-GPU pipeline mode */
    int prc = o->bench_gemm ? fail(prog, "--bench-gemm times one-stage plans only")
                            : cuda_pipe_main(prog, plan_dir, ops, cx_cuda_name(ops), o);
    cx_cuda_close(ops);
    return prc;
  }
  if (o->reference) {
    cx_cuda_close(ops);
    return fail(prog, "--reference checks plans with several stages or replicas (single-GPU pipeline mode); a "
                      "one-stage plan is compared with the CPU backend by scripts/gpu-check.sh");
  }
  RtPlan *plan = NULL;
  CxTrainer *t = NULL;
  DataFile *df = NULL;
  DataLoader *dl = NULL;
  RtLog *log = NULL;
  int rc = 1;
  plan = rt_plan_load(plan_dir, err, sizeof err);
  if (!plan) {
    fail(prog, err);
    goto done;
  }
  if (plan->train.steps == 0) plan->train.steps = o->steps;
  const RtStage *st = &plan->stages[0];
  int64_t vocab = 0, dim = 0;
  for (int k = 0; k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) vocab = st->params[k].shape[0], dim = st->params[k].shape[1];
  if (!o->quiet)
    printf("%s: plan %s (model %s), microbatch %lld x %lld per step, GPU %d (%s)\n", prog, plan_dir, plan->model,
           (long long)plan->b, (long long)plan->m, o->device, cx_cuda_name(ops));
  t = cx_trainer_create(plan, ops, o, err, sizeof err);
  if (!t) {
    fail(prog, err);
    goto done;
  }
  int T = 0;
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER) T = (int)st->inputs[k].shape[1];
  if (!T) {
    fail(prog, "the model has no 'tokens'/'targets' inputs: the trainer trains language models on token files");
    goto done;
  }
  df = data_open(o->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  uint64_t data_seed = o->seed_set ? o->seed : plan->train.seed;
  if (!df || !(dl = data_loader_create(df, (int)(plan->b * plan->m), T, o->shuffle, data_seed, ierr, sizeof ierr))) {
    fail(prog, ierr);
    goto done;
  }
  log = rt_log_open(o->log_json, stdout, o->quiet, err, sizeof err);
  if (!log) {
    fail(prog, err);
    goto done;
  }
  double tokens = (double)(plan->b * plan->m) * T, flops = cx_trainer_flops_per_step(t);
  double steady_ms = 0, last_loss = NAN;
  int64_t steady = 0;
  for (int64_t s = 0; s < o->steps; s++) {
    StepStats ss;
    cx_trainer_step(t, dl, &ss);
    if (ss.bad_ids) {
      snprintf(err, sizeof err, "%s: %lld token ids or targets outside the model's vocabulary in step %lld",
               o->data_path, (long long)ss.bad_ids, (long long)s + 1);
      fail(prog, err);
      goto done;
    }
    if (!isfinite(ss.loss)) {
      snprintf(err, sizeof err, "the loss is %g at step %lld: training diverged", ss.loss, (long long)s + 1);
      fail(prog, err);
      goto done;
    }
    if (s > 0 || o->steps == 1) steady_ms += ss.ms, steady++;
    last_loss = ss.loss;
    rt_log_step(log, s + 1, o->steps, &ss, tokens, flops, NAN);
  }
  double sec = steady_ms / 1e3 / (double)steady, tflops = flops / sec / 1e12;
  printf("%s: %lld steps, final loss %.4f, %.1f ms/step, %.0f tok/s, %.2f TFLOP/s achieved (arena %.2f GiB)\n", prog,
         (long long)o->steps, last_loss, sec * 1e3, tokens / sec, tflops,
         (double)cx_trainer_arena_bytes(t) / (1024.0 * 1024 * 1024));
  rc = 0;
  if (o->bench_gemm && dim > 0) {
    CxGemmType ty = cx_trainer_gemm_type(t); /* the dtype training ran: bf16 plans time BF16 */
    /* the trainer's arena must go before the benchmark's (one arena per device) */
    cx_trainer_destroy(t);
    t = NULL;
    cx_cuda_close(ops);
    ops = NULL;
    int M = (int)(plan->b * T), N = (int)(4 * dim), K = (int)dim;
    double peak = cx_cuda_gemm_tflops(o->device, ty, M, N, K, err, sizeof err);
    if (peak < 0) {
      rc = fail(prog, err);
      goto done;
    }
    printf("%s: cuBLAS %s GEMM %dx%dx%d: %.2f TFLOP/s measured; training achieved %.2f TFLOP/s = %.0f%% of it\n", prog,
           ty == CX_GEMM_TF32 ? "TF32" : ty == CX_GEMM_BF16 ? "BF16" : "FP32", M, N, K, peak, tflops,
           100.0 * tflops / peak);
  }
done:
  rt_log_close(log);
  data_loader_destroy(dl);
  if (df) data_close(df);
  cx_trainer_destroy(t);
  rt_plan_free(plan);
  cx_cuda_close(ops);
  return rc;
}
