/* runtime/cuda/exec/cuda_exec_main.c — the GPU training loop behind pd2bwrun --backend cuda and
 * tools/pd2bw-cuda-train (cuda_exec.h). A plan with several stages or replicas goes to
 * single-GPU pipeline mode (cuda_pipe.h: cuda_pipe_main).
 *
 * The one-stage trainer is pd2bwrun's CPU one (runtime/exec/exec_one.c: the plan as
 * d = w = 1 through the interpreter) with the GPU as its device (cuda_exec_device.c),
 * so the same data order, per-step checks and log lines (rt_log_step), --init then
 * --resume, validation after every K-th step and the last (trainer_eval), --save at
 * the end (the CPU trainer's format), one error line and status 1 for every user
 * mistake. The GPU is
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

/* Trains a one-stage plan to --steps with validation after every K-th step and the
 * last, then --save, --profile-out and the summary lines (rate, graphs, validation loss). *tflops: the
 * steady-state rate, NAN when nothing trained. false once the error line is printed. */
static bool train_and_report(const char *prog, const char *plan_dir, const CudaExecOptions *o, const CxDeviceOps *ops,
                             const RtPlan *plan,
                             ExecDevice *dev, Trainer *t, DataLoader *dl, DataLoader *vl, int64_t val_batches,
                             RtLog *log, int T, double *tflops_out) {
  char err[RT_ERR_LEN], ierr[IO_ERR_LEN];
  double tokens = (double)(plan->b * plan->m) * T, flops = trainer_flops_per_step(t);
  int64_t first = trainer_step_index(t);
  if (first >= o->steps && o->resume_path && !o->quiet) /* not --steps 0 of a fresh run */
    printf("%s: the checkpoint is at step %lld already (--steps %lld)\n", prog, (long long)first,
           (long long)o->steps);
  TrainLoop L; /* the one-stage step loop of every device (runtime.h) */
  const char *why = NULL;
  if (!trainer_train(t, dl, vl, val_batches, o->steps, o->eval_every, log, tokens, &L, &why))
    return fail(prog, why), false;
  if (!rt_log_finish(log, err, sizeof err)) return fail(prog, err), false;
  if ((o->save_path && !trainer_save(t, o->save_path, ierr, sizeof ierr)) ||
      (o->profile_out && !write_profile(plan_dir, cx_exec_device_program(dev), o->profile_out, ierr, sizeof ierr)))
    return fail(prog, ierr), false;
  int64_t steady = L.steady;
  double last_loss = L.last_loss, last_val = L.last_val;
  double sec = steady ? L.steady_ms / 1e3 / (double)steady : NAN, tflops = flops / sec / 1e12;
  if (steady)
    printf("%s: %lld steps, final loss %.4f, %.1f ms/step, %.0f tok/s, %.2f TFLOP/s achieved (arena %.2f GiB)%s%s\n",
           prog, (long long)(o->steps - first), last_loss, sec * 1e3, tokens / sec, tflops,
           (double)cx_exec_device_bytes(dev) / (1024.0 * 1024 * 1024), o->save_path ? ", saved " : "",
           o->save_path ? o->save_path : "");
  if (steady) { /* how the passes ran (cx_program_run): captured once, then one launch each */
    CxGraphStats gs = cx_exec_device_pass_stats(dev), us = cx_exec_device_update_stats(dev);
    printf("%s: graphs: %lld captured, %lld launches (%lld passes launch by launch); updates: %lld as a graph, %lld "
           "launch by launch%s\n",
           prog, (long long)gs.captured, (long long)gs.launches, (long long)gs.eager, (long long)us.launches,
           (long long)us.eager, ops->capture_begin ? "" : "; CUDA graphs off");
  }
  /* resumed at (or past) --steps: nothing to train, so just evaluate the weights */
  if (!steady && vl) last_val = trainer_eval(t, vl, 0, val_batches);
  if (!isnan(last_val)) printf("%s: validation loss %.4f\n", prog, last_val);
  *tflops_out = steady ? tflops : NAN;
  return true;
}

static int run_plan(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                    const CudaExecOptions *o, Bench *bench) {
  char err[RT_ERR_LEN], ierr[IO_ERR_LEN];
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
  RtPlan *plan = NULL;
  ExecDevice *dev = NULL;
  Trainer *t = NULL;
  DataFile *df = NULL, *vf = NULL;
  DataLoader *dl = NULL, *vl = NULL;
  RtLog *log = NULL;
  int rc = 1;
  plan = rt_plan_load(plan_dir, err, sizeof err);
  if (!plan) {
    fail(prog, err);
    goto done;
  }
  if (plan->train.steps == 0) plan->train.steps = o->steps;
  CudaExecOptions mine; /* one seed rule for every mode: weights, dropout, data order */
  if (!cx_run_seed(o, plan->train.seed, &mine, err, sizeof err)) {
    fail(prog, err);
    goto done;
  }
  o = &mine;
  const RtStage *st = &plan->stages[0];
  int64_t vocab = 0, dim = 0;
  for (int k = 0; k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) vocab = st->params[k].shape[0], dim = st->params[k].shape[1];
  if (!o->quiet)
    printf("%s: plan %s (model %s), microbatch %lld x %lld per step, GPU %d (%s)\n", prog, plan_dir, plan->model,
           (long long)plan->b, (long long)plan->m, o->device, device_name);
  /* the one-stage trainer: the plan as d = w = 1 through the interpreter (runtime/exec/),
   * on the GPU as its device */
  dev = cx_exec_device(ops, plan, 0, o->gemm, plan->b * plan->m, err, sizeof err);
  TrainerOptions to = {.seed = o->seed, .seed_set = true, .data_path = o->data_path, .device = dev};
  if (!dev || !(t = trainer_create(plan, &to, err, sizeof err))) {
    fail(prog, err);
    goto done;
  }
  /* --init then --resume, as the CPU trainer: a checkpoint replaces both */
  if (o->init_path && !trainer_init_from(t, o->init_path, ierr, sizeof ierr)) {
    fail(prog, ierr);
    goto done;
  }
  if (o->resume_path) {
    if (!trainer_resume(t, o->resume_path, ierr, sizeof ierr)) {
      fail(prog, ierr);
      goto done;
    }
    if (!o->quiet)
      printf("%s: resumed from %s at step %lld\n", prog, o->resume_path, (long long)trainer_step_index(t));
  }
  if (o->profile_out) /* each segment's time, from the second step on (cuda_profile.c) */
    cx_program_profile(cx_exec_device_program(dev), o->steps - trainer_step_index(t) > 1
                                                        ? (trainer_step_index(t) + 1) * plan->m : 0);
  int T = 0;
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER) T = (int)st->inputs[k].shape[1];
  if (!T) {
    fail(prog, "the model has no 'tokens'/'targets' inputs: the trainer trains language models on token files");
    goto done;
  }
  df = data_open(o->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  if (!df || !(dl = data_loader_create(df, (int)(plan->b * plan->m), T, o->shuffle, o->seed, ierr, sizeof ierr))) {
    fail(prog, ierr);
    goto done;
  }
  /* validation: pd2bwrun's CPU path (the first batches of the file, in order) */
  int64_t val_batches = 0;
  if (o->val_path) {
    vf = data_open(o->val_path, DATA_AUTO, vocab, ierr, sizeof ierr);
    if (!vf || !(vl = data_loader_create(vf, (int)(plan->b * plan->m), T, false, 0, ierr, sizeof ierr))) {
      fail(prog, ierr);
      goto done;
    }
    val_batches = data_batches_per_epoch(vl);
    int64_t want = o->eval_batches > 0 ? o->eval_batches : 8;
    if (val_batches > want) val_batches = want;
  }
  log = rt_log_open(o->log_json, stdout, o->quiet, err, sizeof err);
  if (!log) {
    fail(prog, err);
    goto done;
  }
  rt_log_set_peak(log, plan->peak_flops); /* one GPU */
  double tflops = NAN;
  if (!train_and_report(prog, plan_dir, o, ops, plan, dev, t, dl, vl, val_batches, log, T, &tflops)) goto done;
  rc = 0;
  if (bench && dim > 0 && !isnan(tflops)) /* the dtype training ran: bf16 plans time BF16 */
    *bench = (Bench){.type = cx_exec_device_gemm_type(dev), .M = (int)(plan->b * T), .N = (int)(4 * dim), .K = (int)dim,
                     .tflops = tflops};
done:
  rt_log_close(log);
  data_loader_destroy(dl);
  data_loader_destroy(vl);
  if (df) data_close(df);
  if (vf) data_close(vf);
  trainer_destroy(t);
  exec_device_destroy(dev); /* after the trainer, whose rank holds it */
  rt_plan_free(plan);
  return rc;
}

bool cx_run_seed(const CudaExecOptions *o, uint64_t plan_seed, CudaExecOptions *out, char *err, size_t errlen) {
  *out = *o;
  out->seed_set = true;
  return rt_run_seed(o->resume_path, o->seed_set, o->seed, plan_seed, &out->seed, err, errlen);
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
