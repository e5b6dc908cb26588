/* tests/cudaexec/test_cudaexec_ckpt.c — checkpoints, --init and validation of the GPU
 * trainer (runtime/cuda/exec/cuda_exec.h: the CPU trainer's on the GPU device) and of single-GPU pipeline mode
 * (runtime/cuda/pipe/cuda_pipe.h), without a GPU: the device is the host CUDA emulator
 * (emu_device.h), which runs the very launch lists a GPU would.
 *
 * A checkpoint must move between the CPU and GPU trainers with nothing lost:
 *   - 2bw and 1f1b (one-stage plans of emu_train.h's small GPT with dropout): the CPU
 *     trainer's 6 uninterrupted steps against (a) CPU 3 steps, --save, emulated GPU
 *     --resume, 3 steps and (b) GPU 3 steps, --save, CPU --resume, 3 steps: every
 *     microbatch loss of steps 4..6 within LOSS_TOL relative and the final weights
 *     within WEIGHT_TOL of the largest (test_cudaexec_emu's bounds); the resumed runs
 *     start at step 4 (they run no earlier step);
 *   - init: the GPU trainer with --init (a pd2bw checkpoint) gives the CPU trainer's
 *     losses with the same --init (weights within INIT_WEIGHT_TOL: see there);
 *   - eval: trainer_eval on the GPU device equals it on the CPU for the same weights within EVAL_TOL
 *     (float vs double loss accumulation only), and through cx_run (pd2bwrun
 *     --backend cuda's loop) the logged "val_loss" is that number too;
 *   - pipe: single-GPU pipeline mode (2bw, d = 2) trains 3 steps and saves; the CPU
 *     pipeline (threads) and pipeline mode itself resume it for 3 more and match the
 *     CPU pipeline's 6 uninterrupted steps (losses LOSS_TOL, weights WEIGHT_TOL);
 *   - pipeinit: pipeline mode with --init (a CPU pipeline's checkpoint) matches the CPU
 *     pipeline with that --init (weights within INIT_WEIGHT_TOL);
 *   - pipeeval: pipeline mode's validation loss (gpipe d = 2 w = 2, recomputation) is
 *     the CPU pipeline's on the same weights within EVAL_TOL, per step with
 *     --eval-every 1 within LOSS_TOL, and evaluating changes no training bit;
 *   - errors: resuming (or --init from) a checkpoint of another model (dim 16 for 32)
 *     through cx_run, one-stage and pipeline plans: status 1, one line naming
 *     the file, and no --save file; a --save path in a missing directory; --save,
 *     --log-json and --trace naming a FIFO (refused, the FIFO kept); a validation
 *     file that does not suit the model.
 *
 *   test_cudaexec_ckpt PD2BWC [all|2bw|1f1b|init|eval|pipe|pipeinit|pipeeval|errors]   (in the source tree)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu_train.h"
#include "runtime/exec/exec.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "test.h"

#define STEPS 6
#define HALF 3
#define LOSS_TOL 2e-5
#define WEIGHT_TOL 1e-4
#define EVAL_TOL 1e-5
/* --init zeroes AdamW's moments, so its first update is lr·g/(|g| + eps) per element:
 * gradients near eps (here the attention's q/k weights of the trained checkpoint) turn
 * float summation-order differences into lr-sized ones. Measured 2.8e-4 after one step
 * with bit-equal losses; a missing --init is ~1e-1 off. The losses are the sharp check. */
#define INIT_WEIGHT_TOL 1e-3
/* The pipeline comparisons scale a tensor's difference by its largest weight, but never
 * by less than the rate (emu_train.h's AdamW, lr 1e-2): a weight whose gradient is only
 * rounding noise (the key part of the qkv bias, which softmax ignores) moves by up to
 * lr a step in a direction the noise picks, so its own size is no scale for it. Seen on
 * an EPYC family 26 (OpenBLAS Haswell kernels): h.0.attn_b, largest weight 1.05e-3,
 * 1.3e-7 apart = 1.28e-4 of it; everything else within 1e-5. */
#define WEIGHT_SCALE_FLOOR 1e-2

static char tmp[64] = "/tmp/pd2bw-test-cudackpt-XXXXXX";

/* The one-stage 2bw plans, with pd2bwc's defaults (weight prediction: the checkpoint
 * holds next.* beside prev.*, so a predicted run resumes exactly). */
#define ONE_2BW "--schedule 2bw"

/* ---- one-stage runs ------------------------------------------------------------------ */

typedef struct Run {
  double mb[STEPS * EMU_MB]; /* microbatch losses by global step; NAN where not run */
  float *w;                  /* newest weights at the end (malloc'd) */
  int64_t nw, from, to;
  double val; /* validation loss at the end (NAN without val) */
} Run;

typedef struct How {
  bool gpu;
  const char *init, *resume, *save; /* paths under the work directory, or NULL */
  int64_t to;                       /* train until this many steps are done */
  bool val;                         /* evaluate (2 batches of train.bin) at the end */
} How;

static DataLoader *open_loader(const RtPlan *p, DataFile **df) {
  char path[256], err[IO_ERR_LEN];
  emu_path(path, sizeof path, "train.bin");
  *df = data_open(path, DATA_AUTO, 64, err, sizeof err);
  DataLoader *dl = *df ? data_loader_create(*df, (int)(p->b * p->m), 8, false, 0, err, sizeof err) : NULL;
  if (!dl) fprintf(stderr, "  %s\n", err);
  return dl;
}

/* Trains plan WORKDIR/plan as h says on the CPU trainer or the emulated GPU. */
static bool train(const char *plan, const How *h, Run *r) {
  char dir[256], path[256], err[RT_ERR_LEN] = "";
  memset(r, 0, sizeof *r);
  for (int i = 0; i < STEPS * EMU_MB; i++) r->mb[i] = NAN;
  r->val = NAN;
  emu_path(dir, sizeof dir, plan);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  if (!p) return fprintf(stderr, "  %s\n", err), false;
  if (p->train.steps == 0) p->train.steps = STEPS;
  CudaDeviceOps ops = {0};
  ExecDevice *dev = NULL;
  if (h->gpu) { /* the one-stage trainer with the GPU as its device (pd2bwrun --backend cuda's) */
    ops = emu_device_ops(tmp, EMU_IN_ORDER);
    dev = cx_exec_device(&ops, p, 0, GEMM_PLAN, p->b * p->m, err, sizeof err);
  }
  Trainer *ct = !h->gpu || dev ? trainer_create(p, &(TrainerOptions){.device = dev}, err, sizeof err) : NULL;
  bool ok = ct != NULL;
  if (ok && h->init) {
    emu_path(path, sizeof path, h->init);
    ok = trainer_init_from(ct, path, err, sizeof err);
  }
  if (ok && h->resume) {
    emu_path(path, sizeof path, h->resume);
    ok = trainer_resume(ct, path, err, sizeof err);
  }
  DataFile *df = NULL;
  DataLoader *dl = ok ? open_loader(p, &df) : NULL;
  ok = ok && dl;
  r->from = ct ? trainer_step_index(ct) : 0;
  for (int64_t s = r->from; ok && s < h->to; s++) {
    StepStats ss;
    trainer_step(ct, dl, &ss);
    for (int j = 0; j < EMU_MB; j++) r->mb[s * EMU_MB + j] = ss.mb_loss[j];
  }
  r->to = h->to;
  if (ok && h->val) r->val = trainer_eval(ct, dl, 0, 2);
  if (ok && h->save) {
    emu_path(path, sizeof path, h->save);
    ok = trainer_save(ct, path, err, sizeof err);
  }
  if (ok) {
    r->nw = p->stages[0].blocks[BUF_PARAMS] / 4;
    r->w = malloc((size_t)r->nw * 4);
    trainer_read_params(ct, r->w);
  }
  if (!ok && err[0]) fprintf(stderr, "  %s\n", err);
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(ct);
  exec_device_destroy(dev); /* after the trainer, whose rank holds it */
  rt_plan_free(p);
  return ok;
}

/* Largest relative difference of the microbatch losses of steps [from, to). */
static double loss_diff(const Run *a, const Run *b, int64_t from, int64_t to) {
  double worst = 0;
  for (int64_t i = from * EMU_MB; i < to * EMU_MB; i++) {
    double d = fabs(a->mb[i] - b->mb[i]) / fmax(fabs(a->mb[i]), 1e-30);
    if (!(d <= worst)) worst = d; /* NAN (a step not run) is the worst */
  }
  return worst;
}

static double weight_diff(const Run *a, const Run *b) {
  if (!a->w || !b->w || a->nw != b->nw) return INFINITY;
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < a->nw; i++) scale = fmax(scale, fabs(a->w[i]));
  for (int64_t i = 0; i < a->nw; i++) worst = fmax(worst, fabs((double)a->w[i] - (double)b->w[i]));
  return worst / (scale + 1e-30);
}

static void expect_match(const char *what, const Run *ref, const Run *got, int64_t from) {
  printf("  %s: step mb  uninterrupted  resumed\n", what);
  for (int64_t i = from * EMU_MB; i < STEPS * EMU_MB; i++)
    printf("        %4lld %2lld  %.8f     %.8f\n", (long long)(i / EMU_MB + 1), (long long)(i % EMU_MB), ref->mb[i],
           got->mb[i]);
  double dl = loss_diff(ref, got, from, STEPS), dw = weight_diff(ref, got);
  printf("  %s: worst loss difference %.2e (bound %.0e), weights %.2e of the largest (bound %.0e)\n", what, dl,
         LOSS_TOL, dw, WEIGHT_TOL);
  EXPECT(dl <= LOSS_TOL);
  EXPECT(dw <= WEIGHT_TOL);
}

/* CPU 6 steps == CPU 3 + save + GPU resume 3, and == GPU 3 + save + CPU resume 3. */
static void resume_both_ways(const char *plan, const char *flags) {
  EXPECT(emu_make_plan(plan, flags));
  Run full = {0}, cpu3 = {0}, gpu_rest = {0}, gpu3 = {0}, cpu_rest = {0};
  char c3[128], g3[128];
  snprintf(c3, sizeof c3, "%s-cpu3.safetensors", plan);
  snprintf(g3, sizeof g3, "%s-gpu3.safetensors", plan);
  bool ok = train(plan, &(How){.to = STEPS}, &full);
  ok = ok && train(plan, &(How){.to = HALF, .save = c3}, &cpu3);
  ok = ok && train(plan, &(How){.gpu = true, .resume = c3, .to = STEPS}, &gpu_rest);
  ok = ok && train(plan, &(How){.gpu = true, .to = HALF, .save = g3}, &gpu3);
  ok = ok && train(plan, &(How){.resume = g3, .to = STEPS}, &cpu_rest);
  EXPECT(ok);
  if (ok) {
    EXPECT(gpu_rest.from == HALF && cpu_rest.from == HALF);
    expect_match("CPU 3 + GPU 3", &full, &gpu_rest, HALF);
    expect_match("GPU 3 + CPU 3", &full, &cpu_rest, HALF);
    /* the GPU's first half is the CPU's too (the checkpoint it wrote came from there) */
    EXPECT(loss_diff(&full, &gpu3, 0, HALF) <= LOSS_TOL);
    /* the resumed runs went on from step 3 (not from the start): their losses are not the
     * first steps' (the bound is far tighter than the distance) */
    double apart = loss_diff(&full, &gpu_rest, 0, 1);
    printf("  resumed step 4 vs step 1: %.2e apart\n", fabs(gpu_rest.mb[HALF * EMU_MB] - full.mb[0]) / full.mb[0]);
    EXPECT(isnan(apart)); /* step 1 was not run again */
    EXPECT(fabs(gpu_rest.mb[HALF * EMU_MB] - full.mb[0]) > 100 * LOSS_TOL * full.mb[0]);
  }
  free(full.w);
  free(cpu3.w);
  free(gpu_rest.w);
  free(gpu3.w);
  free(cpu_rest.w);
}

static void test_2bw(void) { resume_both_ways("p2bw", ONE_2BW); }
static void test_1f1b(void) { resume_both_ways("p1f1b", "--schedule 1f1b"); }

/* --init from a pd2bw checkpoint (the CPU trainer's after 3 steps): same losses. */
static void test_init(void) {
  EXPECT(emu_make_plan("p2bw", ONE_2BW));
  Run src = {0}, cpu = {0}, gpu = {0}, plain = {0};
  bool ok = train("p2bw", &(How){.to = HALF, .save = "src.safetensors"}, &src);
  ok = ok && train("p2bw", &(How){.init = "src.safetensors", .to = HALF}, &cpu);
  ok = ok && train("p2bw", &(How){.gpu = true, .init = "src.safetensors", .to = HALF}, &gpu);
  ok = ok && train("p2bw", &(How){.gpu = true, .to = 1}, &plain);
  EXPECT(ok);
  if (ok) {
    double dl = loss_diff(&cpu, &gpu, 0, HALF), dw = weight_diff(&cpu, &gpu);
    printf("  --init: CPU vs GPU losses %.2e apart (bound %.0e), weights %.2e (bound %.0e); step 1 with and "
           "without --init: %.4f vs %.4f\n", dl, LOSS_TOL, dw, INIT_WEIGHT_TOL, gpu.mb[0], plain.mb[0]);
    EXPECT(dl <= LOSS_TOL);
    EXPECT(dw <= INIT_WEIGHT_TOL);
    /* --init took effect: the first loss is not the initial weights' */
    EXPECT(fabs(gpu.mb[0] - plain.mb[0]) > 100 * LOSS_TOL * plain.mb[0]);
  }
  free(src.w);
  free(cpu.w);
  free(gpu.w);
  free(plain.w);
}

/* A JSON log's last "val_loss", or NAN. */
static double last_val_loss(const char *path) {
  FILE *f = fopen(path, "r");
  double v = NAN;
  char line[1024];
  while (f && fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "\"val_loss\": ");
    if (at) v = strtod(at + 12, NULL);
  }
  if (f) fclose(f);
  return v;
}

/* Validation on the GPU is trainer_eval for the same weights (2bw: the newest). */
static void test_eval(void) {
  EXPECT(emu_make_plan("p2bw", ONE_2BW));
  Run cpu = {0}, gpu = {0};
  bool ok = train("p2bw", &(How){.to = 2, .val = true, .save = "e2.safetensors"}, &cpu);
  ok = ok && train("p2bw", &(How){.gpu = true, .resume = "e2.safetensors", .to = 2, .val = true}, &gpu);
  EXPECT(ok);
  if (ok) {
    double d = fabs(cpu.val - gpu.val) / cpu.val;
    printf("  validation loss after 2 steps: CPU %.9f, emulated GPU %.9f (%.2e apart, bound %.0e)\n", cpu.val,
           gpu.val, d, EVAL_TOL);
    EXPECT(d <= EVAL_TOL);
  }
  /* through pd2bwrun --backend cuda's loop: the log's val_loss after step 2 */
  char dir[256], data[256], log[256], ck[256];
  emu_path(dir, sizeof dir, "p2bw");
  emu_path(data, sizeof data, "train.bin");
  emu_path(log, sizeof log, "eval.jsonl");
  emu_path(ck, sizeof ck, "e2.safetensors");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxOptions o = {.data_path = data, .steps = 2, .log_json = log, .quiet = true, .gemm = GEMM_PLAN,
                       .val_path = data, .eval_every = 1, .eval_batches = 2};
  EXPECT(cx_run("test_cudaexec_ckpt", dir, &ops, "emulated", &o) == 0);
  double logged = last_val_loss(log);
  printf("  cx_run --val-data: logged val_loss %.9f\n", logged);
  if (ok) EXPECT_NEAR(logged, cpu.val, LOSS_TOL, 0); /* GPU-trained weights: the training bound */
  /* resumed at --steps: nothing trains, the weights are evaluated */
  o.resume_path = ck;
  o.log_json = NULL;
  ops = emu_device_ops(tmp, EMU_IN_ORDER);
  EXPECT(cx_run("test_cudaexec_ckpt", dir, &ops, "emulated", &o) == 0);
  free(cpu.w);
  free(gpu.w);
}

/* ---- pipeline mode -------------------------------------------------------------------- */

/* Largest relative difference of the microbatch losses of steps [from, to) between two
 * outcomes (each indexed from its own first_step), and of the final weights. */
static double outcome_loss_diff(const PipeOutcome *a, const PipeOutcome *b, int64_t from, int64_t to) {
  double worst = 0;
  for (int64_t s = from; s < to; s++)
    for (int64_t j = 0; j < a->mb_per_step; j++) {
      double x = a->mb_loss[(s - a->first_step) * a->mb_per_step + j];
      double y = b->mb_loss[(s - b->first_step) * b->mb_per_step + j];
      double d = fabs(x - y) / fmax(fabs(x), 1e-30);
      if (!(d <= worst)) worst = d;
    }
  return worst;
}

static double outcome_weight_diff(const PipeOutcome *a, const PipeOutcome *b) {
  double worst = 0;
  for (int k = 0; k < a->nparams; k++) {
    int q = -1;
    for (int j = 0; j < b->nparams; j++)
      if (strcmp(a->names[k], b->names[j]) == 0) q = j;
    if (q < 0 || b->numel[q] != a->numel[k]) return INFINITY;
    double scale = 0, d = 0;
    for (int64_t i = 0; i < a->numel[k]; i++) {
      scale = fmax(scale, fabs(a->weights[k][i]));
      d = fmax(d, fabs((double)a->weights[k][i] - (double)b->weights[q][i]));
    }
    worst = fmax(worst, d / fmax(scale, WEIGHT_SCALE_FLOOR));
  }
  return worst;
}

static void test_pipe(void) {
  EXPECT(emu_pipe_files());
  EXPECT(emu_pipe_make_plan("pp", "--precision fp32 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 "
                                  "--schedule 2bw"));
  char data[256], ck[256], err[RT_ERR_LEN] = "";
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "pipe3.safetensors");
  PipePlan *p = emu_pipe_load("pp", STEPS);
  if (!p) return;
  /* the GPU: 3 steps, --save */
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_HIGHEST_FIRST);
  CxOptions o = {.data_path = data, .steps = HALF, .quiet = true, .gemm = GEMM_PLAN, .save_path = ck};
  PipeOutcome g = {0}, full = {0}, rest = {0}, grest = {0};
  int rc = cx_pipe_train(p, &ops, &o, &g, NULL, err, sizeof err);
  if (rc) printf("  %s\n", err);
  EXPECT(rc == 0);
  EXPECT(access(ck, F_OK) == 0);
  /* the CPU pipeline: 6 uninterrupted steps, and 3 resumed from the GPU's checkpoint */
  PipeOptions po = {.data_path = data, .steps = STEPS, .quiet = true, .threads = 1};
  rc = pipeline_run_local(p, &po, &full, err, sizeof err);
  EXPECT(rc == 0);
  po.resume_path = ck;
  rc = rc || pipeline_run_local(p, &po, &rest, err, sizeof err);
  if (rc) printf("  %s\n", err);
  EXPECT(rc == 0);
  if (!rc) {
    EXPECT(rest.first_step == HALF);
    double dg = outcome_loss_diff(&full, &g, 0, HALF), dl = outcome_loss_diff(&full, &rest, HALF, STEPS);
    double dw = outcome_weight_diff(&full, &rest);
    printf("  pipeline: GPU steps 1..3 vs CPU %.2e; CPU resumed from the GPU's checkpoint, steps 4..6: losses %.2e "
           "(bound %.0e), final weights %.2e (bound %.0e)\n", dg, dl, LOSS_TOL, dw, WEIGHT_TOL);
    EXPECT(dg <= LOSS_TOL);
    EXPECT(dl <= LOSS_TOL);
    EXPECT(dw <= WEIGHT_TOL);
  }
  /* the GPU resumes its own checkpoint too (streams of batches 3..5 only) */
  ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  o.steps = STEPS;
  o.save_path = NULL;
  o.resume_path = ck;
  int grc = cx_pipe_train(p, &ops, &o, &grest, NULL, err, sizeof err);
  if (grc) printf("  %s\n", err);
  EXPECT(grc == 0);
  if (!rc && !grc) {
    EXPECT(grest.first_step == HALF && grest.steps == STEPS);
    double dl = outcome_loss_diff(&full, &grest, HALF, STEPS), dw = outcome_weight_diff(&full, &grest);
    printf("  pipeline: GPU resumed from its checkpoint, steps 4..6: losses %.2e, final weights %.2e\n", dl, dw);
    EXPECT(dl <= LOSS_TOL);
    EXPECT(dw <= WEIGHT_TOL);
  }
  pipe_outcome_free(&g);
  pipe_outcome_free(&full);
  pipe_outcome_free(&rest);
  pipe_outcome_free(&grest);
  pipe_plan_free(p);
}

/* Validation in pipeline mode (gpipe, d = 2, w = 2: the replicas' order; recomputation
 * on: the incoming activation's place): on the same weights (a CPU checkpoint at step
 * 2, resumed at --steps so nothing trains) the GPU's loss is the CPU pipeline's; with
 * --eval-every 1 over 2 steps every logged loss is within the training bound, and the
 * training losses are bit-identical with and without the evaluations. */
static void test_pipe_eval(void) {
  EXPECT(emu_pipe_files());
  EXPECT(emu_pipe_make_plan("pe", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule gpipe "
                                  "--recompute on"));
  char data[256], ck[256], err[RT_ERR_LEN] = "";
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "pe2.safetensors");
  PipePlan *p = emu_pipe_load("pe", HALF);
  if (!p) return;
  PipeOutcome c2 = {0}, cv = {0}, gv = {0}, ce = {0}, ge = {0}, gn = {0};
  PipeOptions ps = {.data_path = data, .steps = 2, .quiet = true, .threads = 1, .save_path = ck};
  int rc = pipeline_run_local(p, &ps, &c2, err, sizeof err);
  /* the same weights: resumed at --steps 2, evaluated only */
  PipeOptions pv = {.data_path = data, .steps = 2, .quiet = true, .threads = 1, .resume_path = ck, .val_path = data,
                    .eval_batches = 2};
  rc = rc || pipeline_run_local(p, &pv, &cv, err, sizeof err);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_HIGHEST_FIRST);
  CxOptions o = {.data_path = data, .steps = 2, .quiet = true, .gemm = GEMM_PLAN, .resume_path = ck,
                       .val_path = data, .eval_batches = 2};
  rc = rc || cx_pipe_train(p, &ops, &o, &gv, NULL, err, sizeof err);
  if (rc) printf("  %s\n", err);
  EXPECT(rc == 0);
  if (!rc) {
    double d = fabs(cv.val_final - gv.val_final) / cv.val_final;
    printf("  pipeline validation on the same weights: CPU %.9f, GPU %.9f (%.2e apart, bound %.0e)\n", cv.val_final,
           gv.val_final, d, EVAL_TOL);
    EXPECT(d <= EVAL_TOL);
  }
  /* --eval-every 1 over 2 steps from the start */
  PipeOptions pe = {.data_path = data, .steps = 2, .quiet = true, .threads = 1, .val_path = data,
                    .eval_every = 1, .eval_batches = 2};
  rc = pipeline_run_local(p, &pe, &ce, err, sizeof err);
  ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  o = (CxOptions){.data_path = data, .steps = 2, .quiet = true, .gemm = GEMM_PLAN, .val_path = data,
                        .eval_every = 1, .eval_batches = 2};
  rc = rc || cx_pipe_train(p, &ops, &o, &ge, NULL, err, sizeof err);
  ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  o.val_path = NULL;
  o.eval_every = 0;
  rc = rc || cx_pipe_train(p, &ops, &o, &gn, NULL, err, sizeof err);
  if (rc) printf("  %s\n", err);
  EXPECT(rc == 0);
  if (!rc) {
    for (int s = 0; s < 2; s++) {
      printf("  step %d: val loss CPU %.9f, GPU %.9f\n", s + 1, ce.val_loss[s], ge.val_loss[s]);
      EXPECT_NEAR(ce.val_loss[s], ge.val_loss[s], LOSS_TOL, 0);
    }
    EXPECT(fabs(ge.val_loss[0] - ge.val_loss[1]) > 20 * LOSS_TOL * ge.val_loss[0]); /* it trained */
    double same = outcome_loss_diff(&ge, &gn, 0, 2);
    printf("  GPU training losses with and without the evaluations: %.2e apart\n", same);
    EXPECT(same == 0);
    EXPECT(outcome_weight_diff(&ge, &gn) == 0);
  }
  pipe_outcome_free(&c2);
  pipe_outcome_free(&cv);
  pipe_outcome_free(&gv);
  pipe_outcome_free(&ce);
  pipe_outcome_free(&ge);
  pipe_outcome_free(&gn);
  pipe_plan_free(p);
}

/* --init from a CPU pipeline's checkpoint: GPU pipeline == CPU pipeline with that --init */
static void test_pipe_init(void) {
  EXPECT(emu_pipe_files());
  EXPECT(emu_pipe_make_plan("pp", "--precision fp32 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 "
                                  "--schedule 2bw"));
  char data[256], ck[256], err[RT_ERR_LEN] = "";
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "cpu2.safetensors");
  PipePlan *p = emu_pipe_load("pp", STEPS);
  if (!p) return;
  PipeOutcome g = {0}, gi = {0}, ci = {0};
  PipeOptions ps = {.data_path = data, .steps = 2, .quiet = true, .threads = 1, .save_path = ck};
  int rc = pipeline_run_local(p, &ps, &g, err, sizeof err);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  CxOptions o = {.data_path = data, .steps = HALF, .quiet = true, .gemm = GEMM_PLAN, .init_path = ck};
  rc = rc || cx_pipe_train(p, &ops, &o, &gi, NULL, err, sizeof err);
  PipeOptions pi = {.data_path = data, .steps = HALF, .quiet = true, .threads = 1, .init_path = ck};
  rc = rc || pipeline_run_local(p, &pi, &ci, err, sizeof err);
  if (rc) printf("  %s\n", err);
  EXPECT(rc == 0);
  if (!rc) {
    double dl = outcome_loss_diff(&ci, &gi, 0, HALF), dw = outcome_weight_diff(&ci, &gi);
    double moved = outcome_loss_diff(&g, &gi, 0, 1);
    printf("  pipeline --init: GPU vs CPU losses %.2e, weights %.2e; step 1 with and without --init %.2e apart\n",
           dl, dw, moved);
    EXPECT(dl <= LOSS_TOL);
    EXPECT(dw <= INIT_WEIGHT_TOL);
    EXPECT(moved > 20 * LOSS_TOL); /* --init took effect */
  }
  pipe_outcome_free(&g);
  pipe_outcome_free(&gi);
  pipe_outcome_free(&ci);
  pipe_plan_free(p);
}

/* ---- user errors ------------------------------------------------------------------------ */

static int run_cli(const char *plan, CxOptions *o, char *msg, size_t n) {
  char dir[256], path[256];
  emu_path(dir, sizeof dir, plan);
  emu_path(path, sizeof path, "stderr.txt");
  fflush(stderr);
  int fd = dup(2);
  FILE *f = freopen(path, "w", stderr);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  int rc = f ? cx_run("pd2bwrun", dir, &ops, "emulated", o) : -1;
  fflush(stderr);
  dup2(fd, 2);
  close(fd);
  msg[0] = 0;
  FILE *r = fopen(path, "r");
  if (r) {
    size_t got = fread(msg, 1, n - 1, r);
    msg[got] = 0;
    fclose(r);
  }
  printf("  status %d: %s", rc, msg);
  return rc;
}

static void test_errors(void) {
  EXPECT(emu_make_plan("p2bw", ONE_2BW));
  EXPECT(emu_make_plan("pd16", ONE_2BW " -D dim=16"));
  Run r = {0};
  EXPECT(train("pd16", &(How){.to = 1, .save = "d16.safetensors"}, &r));
  free(r.w);
  char data[256], ck[256], out[256], msg[1024];
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "d16.safetensors");
  emu_path(out, sizeof out, "never.safetensors");
  CxOptions o = {.data_path = data, .steps = 2, .quiet = true, .gemm = GEMM_PLAN, .resume_path = ck,
                       .save_path = out};
  EXPECT(run_cli("p2bw", &o, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "pd2bwrun: error: ") == msg && strstr(msg, "d16.safetensors") && strstr(msg, "wte"));
  EXPECT(strchr(msg, '\n') == msg + strlen(msg) - 1); /* one line */
  EXPECT(access(out, F_OK) != 0);
  /* --init of another model: the same */
  o.resume_path = NULL;
  o.init_path = ck;
  EXPECT(run_cli("p2bw", &o, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "d16.safetensors") != NULL);
  EXPECT(access(out, F_OK) != 0);
  /* --save into a directory that does not exist: a message, nothing left behind */
  emu_path(out, sizeof out, "nodir/x.safetensors");
  o.init_path = NULL;
  o.steps = 1;
  EXPECT(run_cli("p2bw", &o, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "nodir/x.safetensors") != NULL);
  /* output flags naming a FIFO: refused before anything runs, the FIFO left as it was
   * (runtime/io/io.h: output_paths_check), one-stage and single-GPU pipeline mode alike */
  char fifo[256];
  emu_path(fifo, sizeof fifo, "out.fifo");
  EXPECT(mkfifo(fifo, 0644) == 0);
  CxOptions of = {.data_path = data, .steps = 1, .quiet = true, .save_path = fifo};
  EXPECT(run_cli("p2bw", &of, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "--save ") && strstr(msg, "FIFO"));
  of = (CxOptions){.data_path = data, .steps = 1, .quiet = true, .log_json = fifo};
  EXPECT(run_cli("p2bw", &of, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "--log-json ") && strstr(msg, "FIFO"));
  struct stat fst;
  EXPECT(lstat(fifo, &fst) == 0 && S_ISFIFO(fst.st_mode));
  /* a pipeline plan (single-GPU pipeline mode): the same checkpoint, the same refusal */
  EXPECT(emu_pipe_make_plan("pp", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule gpipe"));
  emu_path(out, sizeof out, "never.safetensors");
  of = (CxOptions){.data_path = data, .steps = 1, .quiet = true, .trace_path = fifo};
  EXPECT(run_cli("pp", &of, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "--trace ") && strstr(msg, "FIFO"));
  of = (CxOptions){.data_path = data, .steps = 1, .quiet = true, .save_path = fifo};
  EXPECT(run_cli("pp", &of, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "--save ") && strstr(msg, "FIFO"));
  EXPECT(lstat(fifo, &fst) == 0 && S_ISFIFO(fst.st_mode));
  CxOptions pr = {.data_path = data, .steps = 1, .quiet = true, .resume_path = ck, .save_path = out};
  EXPECT(run_cli("pp", &pr, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "pd2bwrun: error: ") == msg && strstr(msg, "d16.safetensors") != NULL);
  EXPECT(access(out, F_OK) != 0);
  /* a validation file that does not suit the model (token ids past its vocabulary) */
  char bad[256];
  emu_path(bad, sizeof bad, "bad.bin");
  FILE *f = fopen(bad, "wb");
  for (int i = 0; f && i < 4096; i++) fputc(0xff, f);
  if (f) fclose(f);
  CxOptions pv = {.data_path = data, .steps = 1, .quiet = true, .val_path = bad};
  EXPECT(run_cli("pp", &pv, msg, sizeof msg) == 1);
  EXPECT(strstr(msg, "bad.bin") != NULL);
}

int main(int argc, char **argv) {
  const char *part =
      emu_test_begin(argc, argv, true, "usage: test_cudaexec_ckpt PD2BWC [all|2bw|1f1b|init|eval|pipe|pipeinit|pipeeval|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "1f1b")) RUN(test_1f1b);
  if (emu_test_part(part, "init")) RUN(test_init);
  if (emu_test_part(part, "eval")) RUN(test_eval);
  if (emu_test_part(part, "errors")) RUN(test_errors);
  /* last: they rewrite train.bin */
  if (emu_test_part(part, "pipe")) RUN(test_pipe);
  if (emu_test_part(part, "pipeinit")) RUN(test_pipe_init);
  if (emu_test_part(part, "pipeeval")) RUN(test_pipe_eval);
  emu_test_end();
  return TEST_REPORT();
}
