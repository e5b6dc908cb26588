/* tests/cudaexec/test_cudapipe_emu.c — single-GPU pipeline mode (runtime/cuda/pipe/cuda_pipe.h)
 * trains like the sequential reference, without a GPU.
 *
 * The device is the host CUDA emulator (emu_device.h on tests/cuda/cuda_emu.cpp):
 * every module the executor loads (the plan's kernels.cu and each stageN.cu) is
 * compiled as host C++ with it, device memory is host memory, GEMMs run through
 * pd_sgemm. Unlike test_cudaexec_emu's runs, these use STREAMS THAT REORDER: work is
 * queued per stream and only runs when the host must wait (htod, dtoh, sync); then
 * each stream runs as far as it can before the next one starts, lowest stream first
 * or highest first. An event wait holds its stream until the record it captured has
 * run. So a missing event/wait between an SR's stream and the communication stream
 * shows as stale data (a copy before its producer, a forward before its input
 * arrived) and the losses leave the bound; an in-order device would hide it. Kernel
 * arguments are captured at launch with the kernel's own parameter sizes (a table
 * generated with each module), as cuLaunchKernel does. The device has CUDA graphs, so
 * each stage replica's passes are captured (recorded, not run) on their second
 * sighting and replayed as graph launches, queued in those orders like any work: a
 * graph baked with a stale microbatch key or replayed for another stash slot would
 * leave the bound too.
 *
 * Plans of the tiny GPT of tests/pipeline (tied wte/LM head, dropout 0.1, AdamW),
 * float32 GEMMs, 3 steps each:
 *   - 2bw, d = 4, w = 1, m = 4, clip 1 (deferred tied steps, the norm), highest first;
 *   - gpipe, d = 2, w = 2, m = 2, no clip (the replica all-reduce), lowest first;
 *   - 1f1b, d = 3, w = 1, m = 4, clip 1, recomputation on, highest first, through
 *     cx_pipe_main (pd2bwrun --backend cuda --reference --log-json's path);
 *   - pipedream, d = 3, w = 1, m = 4, clip 1, lowest first;
 * each against the CPU sequential reference (pipeline_check_reference: the one-stage
 * trainer on PLAN/reference with the schedule's rule; for pipedream the plan's stage
 * programs run one after another with its per-stage delay): every microbatch loss within
 * TOL = 1e-5 relative, every weight within 10·TOL of its tensor's largest. The bound
 * discriminates: the 2bw run checked against the vanilla rule differs far beyond it.
 * Plus: a device without streams/events, a plan without launch lists, and a plan whose
 * boundaries cannot match (edited plan.json): a stall reported, not a hang.
 *
 * And 2bw, d = 2, with its flushed start (train.flush_steps = 2), weight prediction
 * (train.predict = 1) and delay compensation, 5 steps, against the reference's same
 * rule (part 2bwpredict).
 *
 *   test_cudapipe_emu PD2BWC [2bw|2bwpredict|gpipe|1f1b|pipedream|errors]   (in the source tree)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "emu_train.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/reference/reference.h"
#include "test.h"

#define TOL 1e-5
#define STEPS 3

static char tmp[64] = "/tmp/pd2bw-test-cudapipe-XXXXXX";

/* ---- runs ----------------------------------------------------------------------------------- */

/* Plan WORKDIR/name, or NULL (a failed check, the message printed). */
static PipePlan *load_plan(const char *name) {
  PipePlan *p = emu_pipe_load(name, 0);
  EXPECT(p != NULL);
  return p;
}

/* One step of p on ops must fail (status 1); the message, printed, in err. */
static void expect_refused(const PipePlan *p, const CudaDeviceOps *ops, char *err, size_t errlen) {
  char data[256];
  emu_path(data, sizeof data, "train.bin");
  CxOptions o = {.data_path = data, .steps = 1, .quiet = true};
  PipeOutcome r;
  EXPECT(cx_pipe_train(p, ops, &o, &r, NULL, err, errlen) == 1);
  printf("  %s\n", err);
}

static int cmp_double(const void *a, const void *b) {
  double u = *(const double *)a, v = *(const double *)b;
  return (u > v) - (u < v);
}

/* Trains plan `name` for `steps` steps on the emulated device; checks it against the
 * sequential reference, and that the step time is the median of the update-to-update
 * times after the first step (as the CPU pipeline measures it; with 4 or more steps
 * the mean would differ). Returns the outcome (caller frees) in *out when out != NULL. */
static bool run_check(const char *name, EmuOrder order, int steps, PipePlan **pp, PipeOutcome *out) {
  char data[256], err[RT_ERR_LEN];
  emu_path(data, sizeof data, "train.bin");
  PipePlan *p = load_plan(name);
  if (!p) return false;
  if (p->rt->train.steps == 0) p->rt->train.steps = steps;
  CudaDeviceOps ops = emu_device_ops(tmp, order);
  CxOptions o = {.data_path = data, .steps = steps, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome r;
  CxPipeStats st = {0};
  double t0 = emu_now_s();
  int rc = cx_pipe_train(p, &ops, &o, &r, &st, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  uint64_t extra = st.extra_bytes;
  EmuCounts emu = emu_device_counts();
  printf("  %s: %d stages x %d replicas, %s, emulated device (%s): %d launches, %d GEMMs, %d device copies, %d "
         "event records, %d stream waits, up to %d operations queued; CUDA graphs: %d captured, %d launched "
         "(%d operations); %.1f s\n", name, p->d, p->w, plan_schedule_name(p->schedule), emu_order_name(order),
         emu.launches, emu.gemms, emu.dtods, emu.records, emu.waits, emu.max_queued, emu.captures, emu.graph_launches,
         emu.graph_ops, emu_now_s() - t0);
  for (int s = 0; !rc && s < p->d; s++) {
    printf("    stage %d: planned part %llu bytes (plan %llu), executor extras <= %llu bytes\n", s,
           (unsigned long long)r.arena_bytes[s], (unsigned long long)r.planned_bytes[s], (unsigned long long)extra);
    EXPECT(r.arena_bytes[s] >= r.planned_bytes[s] && r.arena_bytes[s] < r.planned_bytes[s] + 256);
  }
  EXPECT(emu.gemms > 0 && emu.dtods > 0 && emu.records > 0 && emu.waits >= emu.records);
  if (order != EMU_IN_ORDER) EXPECT(emu.max_queued > 100); /* work really was deferred */
  /* the passes ran as CUDA graphs (the emulator's are on), queued in the same orders */
  EXPECT(emu.captures > 0 && emu.graph_launches > emu.captures);
  /* so did each SR's norm and update (cx_step_graph_run): the norm of batch 2 (the
   * parity of batch 0's) at least replayed, every graph captured on a second sighting */
  printf("    the step's norms and updates: %lld eager, %lld captured, %lld graph launches\n",
         (long long)st.steps.eager, (long long)st.steps.captured, (long long)st.steps.launches);
  EXPECT(st.steps.captured >= p->d * p->w && st.steps.launches >= st.steps.captured && st.steps.eager > 0);
  PipeOptions po = {.data_path = data, .steps = steps};
  bool match = false;
  if (!rc) {
    match = pipeline_check_reference(p, &po, &r, TOL, stdout, err, sizeof err);
    if (!match) fprintf(stderr, "  %s\n", err);
    EXPECT(match);
    /* it trained: the loss moved */
    EXPECT(fabs(r.step_loss[steps - 1] - r.step_loss[0]) > 10 * TOL * r.step_loss[0]);
    double ms[16];
    int n = 0;
    for (int b = 1; b < steps && n < 16; b++) ms[n++] = r.step_ms[b];
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    printf("    step time %.3f ms: the median of %d update-to-update times after the first step (%.3f ms)\n",
           r.step_time_s * 1e3, n, med);
    EXPECT(n > 0 && fabs(r.step_time_s * 1e3 - med) <= 1e-9 * med);
  }
  if (out && !rc) *out = r;
  else pipe_outcome_free(&r);
  if (pp && !rc) *pp = p;
  else pipe_plan_free(p);
  return match;
}

/* No flushed start (pd2bwc's default K, a tenth of train.steps, would drain every step
 * of this short run: all vanilla); weight prediction as pd2bwc defaults it (k = 1). */
static void test_2bw(void) {
  EXPECT(emu_pipe_make_plan("p2bw", "--precision fp32 -D clipv=1.0 --stages 4 --replicas 1 --microbatches 4 "
                                   "--schedule 2bw --recompute off -D train.flush_steps=0"));
  PipePlan *p = NULL;
  PipeOutcome r = {0};
  if (!run_check("p2bw", EMU_HIGHEST_FIRST, STEPS, &p, &r)) return;
  /* the bound discriminates: the same run checked against the vanilla rule differs */
  char data[256], err[RT_ERR_LEN];
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  PipeOptions po = {.data_path = data, .steps = STEPS};
  p->schedule = PS_GPIPE;
  FILE *devnull = fopen("/dev/null", "w");
  bool vanilla = pipeline_check_reference(p, &po, &r, TOL, devnull ? devnull : stdout, err, sizeof err);
  if (devnull) fclose(devnull);
  printf("  2bw run against the vanilla (gpipe) rule: %s\n", vanilla ? "matches (BAD)" : err);
  EXPECT(!vanilla);
  /* the norm and update graphs change no bit: the same run launch by launch */
  p->schedule = PS_2BW;
  emu_device_set_graphs(false);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_HIGHEST_FIRST);
  emu_device_set_graphs(true);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome e = {0};
  CxPipeStats st = {0};
  EXPECT(cx_pipe_train(p, &ops, &o, &e, &st, err, sizeof err) == 0);
  EXPECT(st.steps.captured == 0 && st.steps.launches == 0 && st.steps.eager > 0);
  bool same = e.nparams == r.nparams && memcmp(e.mb_loss, r.mb_loss, (size_t)(STEPS * r.mb_per_step) * 8) == 0;
  for (int k = 0; same && k < r.nparams; k++)
    same = e.numel[k] == r.numel[k] && memcmp(e.weights[k], r.weights[k], (size_t)r.numel[k] * 4) == 0;
  printf("  2bw without CUDA graphs: losses and weights %s\n", same ? "bit for bit the same" : "DIFFER");
  EXPECT(same);
  pipe_outcome_free(&e);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
}

/* 2bw's flushed start and weight prediction (docs/update-rules.md) with delay
 * compensation on: K = 2 drained steps (their gradients fresh: not compensated, the
 * prediction's k 0 until the first 2bw reader), then steps from the master weights
 * with k = 1 written into the version slots. Against the reference's same rule; the
 * bound discriminates: the run against the reference without prediction, and without
 * the flushed start, differs. */
static void test_2bw_predict(void) {
  EXPECT(emu_pipe_make_plan("p2bwk", "--precision fp32 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 "
                                    "--schedule 2bw --recompute off -D train.flush_steps=2 -D train.predict=1 "
                                    "-D train.delay_comp=1000"));
  PipePlan *p = NULL;
  PipeOutcome r = {0};
  if (!run_check("p2bwk", EMU_HIGHEST_FIRST, STEPS + 2, &p, &r)) return;
  EXPECT(p->rt->train.flush_steps == 2 && p->rt->train.predict == 1 && p->rt->train.delay_comp == 1000);
  char data[256], err[RT_ERR_LEN];
  emu_path(data, sizeof data, "train.bin");
  PipeOptions po = {.data_path = data, .steps = STEPS + 2};
  const struct {
    const char *what;
    int64_t K;
    double k;
  } other[] = {{"no weight prediction", 2, 0}, {"no flushed start", 0, 1}};
  for (int i = 0; i < 2; i++) {
    p->rt->train.flush_steps = other[i].K, p->rt->train.predict = other[i].k;
    FILE *devnull = fopen("/dev/null", "w");
    bool same = pipeline_check_reference(p, &po, &r, TOL, devnull ? devnull : stdout, err, sizeof err);
    if (devnull) fclose(devnull);
    printf("  the run against the reference with %s: %s\n", other[i].what, same ? "matches (BAD)" : err);
    EXPECT(!same);
  }
  pipe_outcome_free(&r);
  pipe_plan_free(p);
}

static void test_gpipe(void) {
  EXPECT(emu_pipe_make_plan("pgpipe", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule gpipe "
                                     "--recompute off"));
  run_check("pgpipe", EMU_LOWEST_FIRST, STEPS + 1, NULL, NULL); /* 3 times after the first */
}

/* Through cx_pipe_main, as pd2bwrun --backend cuda --reference --log-json runs it:
 * status 0 only when the reference check matches; a log line per step. */
static void test_1f1b(void) {
  EXPECT(emu_pipe_make_plan("p1f1b", "--precision fp32 -D clipv=1.0 --stages 3 --replicas 1 --microbatches 4 "
                                    "--schedule 1f1b --recompute on"));
  char dir[256], data[256], log[256];
  snprintf(dir, sizeof dir, "%s/p1f1b", tmp);
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  snprintf(log, sizeof log, "%s/p1f1b.jsonl", tmp);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_HIGHEST_FIRST);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = false, .gemm = GEMM_PLAN, .log_json = log,
                       .reference = true, .ref_tol = TOL};
  double t0 = emu_now_s();
  int rc = cx_pipe_main("test_cudapipe_emu", dir, &ops, "emulated", &o, NULL);
  EmuCounts emu = emu_device_counts();
  printf("  p1f1b (recompute on), emulated device (%s): %d launches, %d device copies, %d stream waits; %.1f s\n",
         emu_order_name(EMU_HIGHEST_FIRST), emu.launches, emu.dtods, emu.waits, emu_now_s() - t0);
  EXPECT(rc == 0);
  EXPECT(emu.dtods > 0 && emu.waits > 0 && emu.max_queued > 100);
  FILE *f = fopen(log, "r");
  EXPECT(f != NULL);
  int lines = 0;
  char line[1024];
  /* the one log format of every mode (runtime/core/console.c): the grad norm and the
   * step's time measured here too */
  while (f && fgets(line, sizeof line, f)) {
    lines++;
    EXPECT(strstr(line, "\"grad_norm\": ") && !strstr(line, "\"grad_norm\": null"));
    EXPECT(strstr(line, "\"ms\": ") && !strstr(line, "\"ms\": null"));
    EXPECT(strstr(line, "\"tokens_per_s\": ") && strstr(line, "\"gflops\": ") && strstr(line, "\"mfu\": "));
  }
  if (f) fclose(f);
  EXPECT(lines == STEPS);
}

/* --steps 0 --save: the initial weights, nothing trained (issue 16) */
static void test_steps0(void) {
  EXPECT(emu_pipe_make_plan("p0", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule gpipe "
                                  "--recompute off"));
  char dir[256], data[256], save[256];
  snprintf(dir, sizeof dir, "%s/p0", tmp);
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  snprintf(save, sizeof save, "%s/p0.st", tmp);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxOptions o = {.data_path = data, .steps = 0, .quiet = true, .gemm = GEMM_PLAN, .save_path = save};
  EXPECT(cx_pipe_main("test_cudapipe_emu", dir, &ops, "emulated", &o, NULL) == 0);
  FILE *f = fopen(save, "rb");
  EXPECT(f != NULL);
  if (f) fclose(f);
}

/* pipedream: a weight version per stage lag, stashed; the reference is the plan's
 * own stage programs run sequentially with the per-stage delay rule. */
static void test_pipedream(void) {
  EXPECT(emu_pipe_make_plan("ppd", "--precision fp32 -D clipv=1.0 --stages 3 --replicas 1 --microbatches 4 "
                                  "--schedule pipedream --recompute off"));
  run_check("ppd", EMU_LOWEST_FIRST, STEPS, NULL, NULL);
}

/* A device table without streams/events, a plan without launch lists: messages. */
static void test_errors(void) {
  EXPECT(emu_pipe_make_plan("pcpu", "--stages 2 --replicas 1 --microbatches 4 --schedule gpipe --backend cpu"));
  char err[RT_ERR_LEN] = "";
  PipePlan *p = load_plan("pcpu");
  if (!p) return;
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  expect_refused(p, &ops, err, sizeof err);
  EXPECT(strstr(err, "has no CUDA program") != NULL || strstr(err, "kernels") != NULL);
  ops.streams = NULL;
  expect_refused(p, &ops, err, sizeof err);
  EXPECT(strstr(err, "streams") != NULL);
  pipe_plan_free(p);
}

/* Stage 1 told that nothing comes in from stage 0: stage 0's first send never matches
 * and everything else ends up waiting on it. The run stops after the timeout with the
 * wait named, not a hang. plan.json cannot say so any more (the program's manifest
 * refuses it at load, issue 24: the first half below), so the loaded plan is edited in
 * memory, as a runtime fault would leave it. */
static void test_stall(void) {
  EXPECT(emu_pipe_make_plan("pstall", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule gpipe"));
  char path[300], err[RT_ERR_LEN] = "", ierr[IO_ERR_LEN];
  emu_path(path, sizeof path, "pstall/plan.json");
  size_t len = 0;
  char *text = io_read_all(path, &len, ierr, sizeof ierr);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  cJSON *st1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "stages"), 1);
  cJSON *pipe = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st1, "program"), "pipeline");
  cJSON *bnd = cJSON_GetObjectItemCaseSensitive(pipe, "boundary");
  int removed = 0;
  for (int i = cJSON_GetArraySize(bnd) - 1; i >= 0; i--) {
    cJSON *role = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bnd, i), "role");
    if (cJSON_IsString(role) && strcmp(role->valuestring, "act_in") == 0) cJSON_DeleteItemFromArray(bnd, i), removed++;
  }
  EXPECT(removed > 0);
  char *out = cJSON_Print(root);
  FILE *f = out ? fopen(path, "w") : NULL;
  EXPECT(f != NULL);
  if (f) {
    fputs(out, f);
    fclose(f);
  }
  free(out);
  cJSON_Delete(root);
  char dir[300];
  emu_path(dir, sizeof dir, "pstall");
  EXPECT(pipe_plan_load(dir, err, sizeof err) == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stages[1].program.pipeline.boundary: 1 entries; the program stage1.c was compiled with 2") != NULL);
  f = fopen(path, "w"); /* the plan as pd2bwc wrote it; then the fault in memory */
  EXPECT(f != NULL);
  if (f) {
    fwrite(text, 1, len, f);
    fclose(f);
  }
  free(text);
  PipePlan *p = load_plan("pstall");
  if (!p) return;
  PipeStage *s1 = &p->st[1];
  int k = 0;
  for (int i = 0; i < s1->nbnd; i++)
    if (s1->bnd[i].role != PIPE_ACT_IN) s1->bnd[k++] = s1->bnd[i];
  EXPECT(k < s1->nbnd);
  s1->nbnd = k;
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  char data[256];
  emu_path(data, sizeof data, "train.bin");
  CxOptions o = {.data_path = data, .steps = 1, .quiet = true, .timeout_s = 2};
  PipeOutcome r;
  EXPECT(cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err) == 1);
  printf("  %s\n", err);
  /* the local transport's timeout names the wait (runtime/transport/transport_local.c):
   * stage 0's activation nobody takes, or stage 1's gradient, whichever times out first */
  EXPECT(strstr(err, "timed out after 2 s waiting for rank") != NULL && strstr(err, "of microbatch 1 for stage") != NULL);
  pipe_plan_free(p);
}

int main(int argc, char **argv) {
  const char *part =
      emu_test_begin(argc, argv, true, "usage: test_cudapipe_emu PD2BWC [all|2bw|2bwpredict|gpipe|1f1b|pipedream|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_pipe_files());
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "2bwpredict")) RUN(test_2bw_predict);
  if (emu_test_part(part, "gpipe")) RUN(test_gpipe);
  if (emu_test_part(part, "1f1b")) RUN(test_1f1b);
  if (emu_test_part(part, "1f1b")) RUN(test_steps0);
  if (emu_test_part(part, "pipedream")) RUN(test_pipedream);
  if (emu_test_part(part, "errors")) {
    RUN(test_errors);
    RUN(test_stall);
  }
  emu_test_end();
  return TEST_REPORT();
}
