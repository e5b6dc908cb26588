/* tests/nccl/test_nccl_emu.c — multi-GPU pipeline mode (cx_pipe_train_nccl: the CPU MPI
 * pipeline with runtime/cuda/exec/cuda_link_nccl.c's link) under mpirun, without GPUs: each MPI rank is one stage replica on its own emulated
 * device (tests/cudaexec/emu_device.h: streams that reorder work), NCCL is
 * tests/nccl/fake_nccl.c (NCCL's calls over MPI on host memory, loaded through
 * PD2BW_LIBNCCL by runtime/cuda/nccl_transport.c, the real code path's loader).
 * Rank 0 checks the gathered losses and weights against the CPU sequential
 * reference (pipeline_check_reference), like test_cudapipe_emu does for single-GPU
 * mode: every microbatch loss within TOL = 1e-5 relative, every weight within 10·TOL.
 *
 * The fake finishes each call before returning, after the device finished what was
 * issued before it (nccl_emu_ops.c's device table syncs when the executor asks for a stream
 * handle, right before each NCCL call): so this checks the executor's use of NCCL —
 * which buffers, which peers and communicators, in which order, the tied exchange and
 * the replica sum — not NCCL's device-side behaviour. THE REAL NCCL PATH HAS NEVER
 * RUN ON GPUs.
 *
 *   mpirun -np 2 test_nccl_emu PD2BWC 2bw     2bw, d = 2, w = 1, m = 4, clip 1
 *       (deferred tied steps, the pipeline norm); also checked against the vanilla
 *       rule, which must NOT match (the bound discriminates);
 *   mpirun -np 4 test_nccl_emu PD2BWC gpipe   gpipe, d = 2, w = 2, m = 2 (the
 *       replica all-reduce, tied exchanges per replica), through cx_pipe_nccl_main with
 *       --reference and --log-json; clipping off, yet every JSON line has a grad
 *       norm, and the step lines (the last stage of replica 0's stdout) give the
 *       global loss and that norm, as the JSON log (issue 16's one console);
 *   mpirun -np 3 test_nccl_emu PD2BWC 1f1b    1f1b, d = 3, w = 1, m = 4, clip 1,
 *       recomputation on (grouped send/receive of both kinds, a middle stage);
 *   mpirun -np 1 test_nccl_emu PD2BWC one     one stage, one replica (2bw, m = 4):
 *       scripts/gpu-check.sh step (g)'s run; it makes no NCCL call (no group of two);
 *   mpirun -np 3 test_nccl_emu PD2BWC tied3   1f1b, d = 3, w = 1, m = 4 on
 *       tests/cudaexec/tied_gain.model: a weight tied across all 3 stages.
 * PD2BW_LIBNCCL must name the fake library (CTest sets it).
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudaexec/emu_train.h"
#include "nccl_emu_ops.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/reference/reference.h"
#include "test.h"

#define TOL 1e-5
#define STEPS 3

static char tmp[64] = "/tmp/pd2bw-test-nccl-XXXXXX";
static Transport *T;

static CudaDeviceOps nccl_ops(EmuOrder order) { return nccl_emu_ops(tmp, order); }

/* the model the plans are made of: tinygpt, or (tied3) tests/cudaexec/tied_gain.model */
static const char *model = "tests/pipeline/tinygpt.model";

static bool make_plan(const char *name, const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' '%s' -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 -D bsz=8 "
           "--cluster tests/pipeline/cpu8.cluster --microbatch-size 2 %s -o '%s/%s'",
           emu_pd2bwc(), model, args, tmp, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  return rc == 0;
}

/* tests/pipeline/common.sh's token file, as test_cudapipe_emu writes it */
static void write_data(void) {
  static const char text[] = "PipeDream-2BW keeps two weight versions per stage and updates them without "
                             "flushing the pipeline. ";
  char path[256];
  emu_path(path, sizeof path, "train.bin");
  FILE *f = fopen(path, "wb");
  EXPECT(f != NULL);
  for (int r = 0; f && r < 200; r++)
    for (size_t i = 0; i + 1 < sizeof text; i++) {
      uint16_t tok = (uint8_t)text[i];
      fwrite(&tok, 2, 1, f);
    }
  if (f) fclose(f);
}

/* Trains plan `name` (made with `args`) through cx_pipe_train_nccl on every rank;
 * rank 0 checks it against the reference, and with `vanilla` also that it does NOT
 * match the vanilla rule. `sends`: the fewest sends+receives per rank. */
static void run_check(const char *name, const char *args, EmuOrder order, long sends, bool vanilla) {
  int rank = transport_rank(T);
  EXPECT(make_plan(name, args));
  char data[256], err[RT_ERR_LEN];
  emu_path(data, sizeof data, "train.bin");
  PipePlan *p = emu_pipe_load(name, STEPS);
  EXPECT(p != NULL);
  if (!p) return;
  CudaDeviceOps ops = nccl_ops(order);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome r;
  double t0 = emu_now_s();
  int rc = cx_pipe_train_nccl(p, &ops, &o, T, &r, err, sizeof err);
  if (rc) fprintf(stderr, "  rank %d: %s\n", rank, err);
  EXPECT(rc == 0);
  long c[3];
  nccl_fake_counts(c);
  EmuCounts emu = emu_device_counts();
  printf("  %s rank %d: fake NCCL: %ld sends+receives, %ld all-reduces, %ld communicators; emulated device (%s): "
         "%d launches, %d event records, %d stream waits; %.1f s\n", name, rank, c[0], c[1], c[2],
         emu_order_name(order), emu.launches, emu.records, emu.waits, emu_now_s() - t0);
  if (transport_size(T) > 1) EXPECT(c[0] >= sends && c[2] >= 1); /* a middle stage holds no tied parameter */
  else EXPECT(c[0] == 0 && c[1] == 0 && c[2] == 0); /* one rank: no group of two, no NCCL at all */
  EXPECT(emu.max_queued > 10); /* work really was deferred between the syncs */
  if (!rc && rank == 0) {
    PipeOptions po = {.data_path = data, .steps = STEPS};
    EXPECT(pipeline_check_reference(p, &po, &r, TOL, stdout, err, sizeof err));
    EXPECT(fabs(r.step_loss[STEPS - 1] - r.step_loss[0]) > 10 * TOL * r.step_loss[0]); /* it trained */
    if (vanilla) {
      p->schedule = PS_GPIPE;
      FILE *devnull = fopen("/dev/null", "w");
      bool same = pipeline_check_reference(p, &po, &r, TOL, devnull ? devnull : stdout, err, sizeof err);
      if (devnull) fclose(devnull);
      printf("  %s run against the vanilla (gpipe) rule: %s\n", name, same ? "matches (BAD)" : err);
      EXPECT(!same);
    }
  }
  pipe_outcome_free(&r);
  pipe_plan_free(p);
}

/* per batch: 4 activations or gradients each way; a tied sum and the norm. No flushed
 * start (pd2bwc's default K, a tenth of train.steps, would drain every step of this
 * short run: all vanilla); weight prediction as pd2bwc defaults it (k = 1) */
static void test_2bw(void) {
  run_check("p2bw", "--precision fp32 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw "
            "--recompute off -D train.flush_steps=0", EMU_HIGHEST_FIRST, 2 * 4 * STEPS, true);
}

/* 1F1B's grouped "send activation, receive gradient" and recomputation */
static void test_1f1b(void) {
  run_check("p1f1b", "--precision fp32 -D clipv=1.0 --stages 3 --replicas 1 --microbatches 4 --schedule 1f1b "
            "--recompute on", EMU_LOWEST_FIRST, 2 * 4 * STEPS, false);
}

/* a weight tied across all 3 stages (tied_gain.model's ln1_w): the last member's
 * tied sum is into its own buffer, the third source (cuda_exec_device.c's sum_ordered;
 * before pkc_sum_ordered_f32 an internal abort) */
static void test_tied3(void) {
  model = "tests/cudaexec/tied_gain.model";
  run_check("ptied3", "--precision fp32 --stages 3 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off",
            EMU_HIGHEST_FIRST, 2 * 4 * STEPS, false);
}

/* one rank, a one-stage plan: what scripts/gpu-check.sh step (g) runs under mpirun -np 1
 * on a GPU machine. It trains like the reference and makes no NCCL call at all (no
 * group has two ranks), which is why step (g) drives libnccl with gpu_nccl_check. */
static void test_one(void) {
  run_check("p1", "--precision fp32 -D clipv=1.0 --stages 1 --replicas 1 --microbatches 4 --schedule 2bw",
            EMU_LOWEST_FIRST, 0, false);
}

#define TAG_LINES 777 /* the printing rank's step-line numbers, to rank 0 */

/* The step lines' (loss, grad norm) pairs in file `path`, at most n. */
static int read_step_lines(const char *path, double *v, int n) {
  FILE *f = fopen(path, "r");
  char line[512];
  int got = 0;
  while (f && got < n && fgets(line, sizeof line, f)) {
    const char *l = strstr(line, "| loss "), *g = strstr(line, "| grad norm ");
    if (strncmp(line, "step ", 5) == 0 && l && g) {
      v[2 * got] = atof(l + 7);
      v[2 * got + 1] = atof(g + 12);
      got++;
    }
  }
  if (f) fclose(f);
  return got;
}

/* The number after "key": in JSON line `line` (NAN for null or absent). */
static double json_num(const char *line, const char *key) {
  const char *at = strstr(line, key);
  if (!at || strncmp(at + strlen(key), "null", 4) == 0) return NAN;
  return atof(at + strlen(key));
}

static void test_gpipe(void) {
  int rank = transport_rank(T);
  /* the step lines' printer: stage d-1 = 1 of replica 0, rank 1·w + 0 */
  char lines_path[256];
  emu_path(lines_path, sizeof lines_path, "steplines.txt");
  int saved = -1;
  if (rank == 2) {
    fflush(stdout);
    saved = dup(1);
    int fd = open(lines_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT(fd >= 0 && saved >= 0);
    if (fd >= 0) {
      dup2(fd, 1);
      close(fd);
    }
  }
  EXPECT(make_plan("pgpipe", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule gpipe "
                             "--recompute off"));
  char dir[256], data[256], log[256];
  emu_path(dir, sizeof dir, "pgpipe");
  emu_path(data, sizeof data, "train.bin");
  emu_path(log, sizeof log, "pgpipe.jsonl");
  CudaDeviceOps ops = nccl_ops(EMU_LOWEST_FIRST);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = false, .gemm = GEMM_PLAN, .log_json = log,
                       .reference = true, .ref_tol = TOL};
  int rc = cx_pipe_nccl_main("test_nccl_emu", dir, &ops, "emulated", &o, T);
  EXPECT(rc == 0);
  double shown[2 * STEPS] = {0};
  if (rank == 2) {
    fflush(stdout);
    if (saved >= 0) {
      dup2(saved, 1);
      close(saved);
    }
    EXPECT(read_step_lines(lines_path, shown, STEPS) == STEPS);
    EXPECT(transport_send(T, 0, TAG_LINES, shown, sizeof shown, "step lines") == TRANSPORT_OK);
  } else if (rank == 0) {
    EXPECT(transport_recv(T, 2, TAG_LINES, shown, sizeof shown, "step lines") == TRANSPORT_OK);
  }
  long c[3];
  nccl_fake_counts(c);
  printf("  rank %d: fake NCCL: %ld sends+receives, %ld all-reduces, %ld communicators\n", rank, c[0], c[1], c[2]);
  /* pipeline, replica and tied communicators; a replica all-reduce per batch, the tied
   * sum's exchange among the messages (the link's: a send and a receive per batch) */
  EXPECT(c[2] == 3 && c[1] >= STEPS && c[0] >= 2 * 2 * STEPS + 2 * STEPS);
  if (rank == 0) {
    FILE *f = fopen(log, "r");
    EXPECT(f != NULL);
    int lines = 0;
    char line[512];
    while (f && lines < STEPS && fgets(line, sizeof line, f)) {
      double loss = json_num(line, "\"loss\": "), gn = json_num(line, "\"grad_norm\": ");
      printf("  step %d: JSON loss %.9g grad_norm %.9g; step line loss %.4f grad norm %.4f\n", lines + 1, loss, gn,
             shown[2 * lines], shown[2 * lines + 1]);
      EXPECT(isfinite(gn) && gn > 0); /* taken with clipping off too */
      EXPECT(fabs(loss - shown[2 * lines]) <= 0.6e-4);  /* the global loss, not replica 0's */
      EXPECT(fabs(gn - shown[2 * lines + 1]) <= 0.6e-4);
      lines++;
    }
    for (int ch; f && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    if (f) fclose(f);
    EXPECT(lines == STEPS);
  }
}

int main(int argc, char **argv) {
  const char *part = nccl_test_begin(&argc, &argv, "test_nccl_emu", 120, 0,
                                     "usage: mpirun -np N test_nccl_emu PD2BWC [2bw|gpipe|1f1b|one|tied3]", tmp, &T);
  if (!part) return 2;
  write_data();
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "gpipe")) RUN(test_gpipe);
  if (emu_test_part(part, "1f1b")) RUN(test_1f1b);
  if (emu_test_part(part, "one")) RUN(test_one);
  if (emu_test_part(part, "tied3")) RUN(test_tied3);
  emu_test_end();
  int rc = TEST_REPORT();
  transport_destroy(T);
  return rc;
}
