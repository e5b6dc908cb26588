/* tests/cudaexec/test_cudaprofile_emu.c — pd2bwrun --backend cuda --profile-out
 * (runtime/cuda/exec/cuda_profile.c) on the emulated device (emu_device.h), whose fake clock
 * ticks once (reported as 1 µs) per operation run: a segment's measured time is then
 * exactly its count of launches in the launch list ("segments", format 5), so the
 * checks are exact.
 *
 *  - pipe: 2bw, d = 2, w = 2, m = 2, 3 steps, streams run lowest first, through
 *    cx_pipe_train (cx_pipe_main's path): the file parses, names every segment of the
 *    plan in the plan's order, each segment's forward_s and backward_s is its own
 *    launch count x 1 µs (a stage's time split evenly over its segments is not), and
 *    pd2bwc --profile FILE makes a plan from it; the same run without --profile-out
 *    gives bit-identical losses and weights (the timed passes run the same launches,
 *    eagerly instead of as graphs);
 *  - one: a one-stage plan through cx_run (pd2bwrun --backend cuda's one-stage
 *    path), 6 steps (more timed passes than the event ring holds, so it is read back
 *    mid-run too): the same checks of the file;
 *  - errors: a --profile-out path whose directory is a file: status 1, the path in the
 *    message, nothing written; with --transport nccl: refused before MPI starts.
 *
 *   test_cudaprofile_emu PD2BWC [pipe|one|errors]   (in the source tree)
 */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "emu_train.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudaprof-XXXXXX";

static cJSON *read_json(const char *path) {
  char err[IO_ERR_LEN];
  size_t n = 0;
  char *text = io_read_all(path, &n, err, sizeof err);
  if (!text) fprintf(stderr, "  %s\n", err);
  cJSON *j = text ? cJSON_ParseWithLength(text, n) : NULL;
  free(text);
  return j;
}

/* The profile at `prof` against plan `name`: every segment of every stage in order,
 * each forward_s / backward_s its launch count (the stage's launch list) x 1 µs. */
static void check_profile(const char *name, const char *prof) {
  char dir[256], path[512];
  emu_path(dir, sizeof dir, name);
  snprintf(path, sizeof path, "%s/plan.json", dir);
  cJSON *plan = read_json(path), *pf = read_json(prof);
  EXPECT(plan != NULL && pf != NULL);
  if (!plan || !pf) goto done;
  const cJSON *segs = cJSON_GetObjectItem(pf, "segments");
  EXPECT(cJSON_GetObjectItem(pf, "version")->valueint == 1);
  EXPECT(cJSON_GetObjectItem(pf, "microbatch_size")->valueint == 2);
  int at = 0, uneven = 0;
  const cJSON *st;
  cJSON_ArrayForEach(st, cJSON_GetObjectItem(plan, "stages")) {
    const char *ln = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "program"), "cuda"), "launch_list"));
    EXPECT(ln != NULL);
    if (!ln) break;
    snprintf(path, sizeof path, "%s/%s", dir, ln);
    cJSON *list = read_json(path);
    const cJSON *counts = cJSON_GetObjectItem(list, "segments");
    const cJSON *names = cJSON_GetObjectItem(st, "segments");
    EXPECT(cJSON_GetArraySize(names) == cJSON_GetArraySize(cJSON_GetObjectItem(counts, "forward")));
    for (int k = 0; k < cJSON_GetArraySize(names); k++, at++) {
      const cJSON *e = cJSON_GetArrayItem(segs, at);
      const char *want = cJSON_GetStringValue(cJSON_GetArrayItem(names, k));
      const char *got = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
      EXPECT(got && want && strcmp(got, want) == 0);
      for (int pass = 0; pass < 2; pass++) {
        double n = cJSON_GetArrayItem(cJSON_GetObjectItem(counts, pass ? "backward" : "forward"), k)->valuedouble;
        double s = cJSON_GetObjectItem(e, pass ? "backward_s" : "forward_s")->valuedouble;
        if (fabs(s - n * 1e-6) > 1e-6 * n * 1e-6) {
          printf("  %s %s: %g s measured, %g launches\n", got ? got : "?", pass ? "backward" : "forward", s, n);
          EXPECT(false);
        }
        double first = cJSON_GetArrayItem(cJSON_GetObjectItem(counts, pass ? "backward" : "forward"), 0)->valuedouble;
        uneven += n != first;
      }
    }
    cJSON_Delete(list);
  }
  EXPECT_EQ_INT(at, cJSON_GetArraySize(segs));
  EXPECT(uneven > 0); /* the check can tell an even split from each segment's own time */
  printf("  %s: %d segments, each its own launch count x 1 us\n", name, at);
done:
  cJSON_Delete(plan);
  cJSON_Delete(pf);
}

/* pd2bwc --profile accepts the file: a plan of the same model made from it. */
static void check_replan(const char *prof) {
  char args[512];
  snprintf(args, sizeof args, "--precision fp32 --stages 2 --replicas 1 --schedule 2bw --profile '%s'", prof);
  EXPECT(emu_pipe_make_plan("replanned", args));
}

static int train(const PipePlan *p, const char *prof, PipeOutcome *r) {
  char data[256], err[RT_ERR_LEN];
  emu_path(data, sizeof data, "train.bin");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  CxOptions o = {.data_path = data, .steps = 3, .quiet = true, .gemm = GEMM_PLAN, .profile_out = prof};
  int rc = cx_pipe_train(p, &ops, &o, r, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  return rc;
}

static void test_pipe(void) {
  EXPECT(emu_pipe_make_plan("pipe", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule 2bw "
                                    "--recompute off"));
  char dir[256], prof[256], err[RT_ERR_LEN];
  emu_path(dir, sizeof dir, "pipe");
  emu_path(prof, sizeof prof, "pipe.profile.json");
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  if (!p) return;
  if (p->rt->train.steps == 0) p->rt->train.steps = 3;
  PipeOutcome on, off;
  EXPECT(train(p, prof, &on) == 0);
  EXPECT(train(p, NULL, &off) == 0);
  check_profile("pipe", prof);
  check_replan(prof);
  /* profiling changes no arithmetic */
  int64_t nl = (on.steps - on.first_step) * on.mb_per_step;
  EXPECT(nl > 0 && nl == (off.steps - off.first_step) * off.mb_per_step);
  for (int64_t i = 0; i < nl; i++) EXPECT(memcmp(&on.mb_loss[i], &off.mb_loss[i], sizeof(double)) == 0);
  EXPECT_EQ_INT(on.nparams, off.nparams);
  for (int j = 0; j < on.nparams && j < off.nparams; j++)
    EXPECT(memcmp(on.weights[j], off.weights[j], (size_t)on.numel[j] * sizeof(float)) == 0);
  pipe_outcome_free(&on);
  pipe_outcome_free(&off);
  pipe_plan_free(p);
}

static void test_one(void) {
  EXPECT(emu_pipe_make_plan("one", "--precision fp32 --stages 1 --replicas 1 --microbatches 4 --schedule 2bw"));
  char dir[256], prof[256], data[256];
  emu_path(dir, sizeof dir, "one");
  emu_path(prof, sizeof prof, "one.profile.json");
  emu_path(data, sizeof data, "train.bin");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  /* 6 steps of 4 microbatches: 40 timed passes, more than cuda_profile.c's ring holds */
  CxOptions o = {.data_path = data, .steps = 6, .quiet = true, .gemm = GEMM_PLAN, .profile_out = prof};
  EXPECT(cx_run("test_cudaprofile_emu", dir, &ops, "emulated", &o) == 0);
  check_profile("one", prof);
  check_replan(prof);
}

static void test_errors(void) {
  EXPECT(emu_pipe_make_plan("err", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw"));
  char dir[256], bad[300], data[256], out[512];
  emu_path(dir, sizeof dir, "err");
  emu_path(bad, sizeof bad, "train.bin/p.json"); /* its directory is a file */
  emu_path(data, sizeof data, "train.bin");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxOptions o = {.data_path = data, .steps = 2, .quiet = true, .gemm = GEMM_PLAN, .profile_out = bad};
  emu_path(out, sizeof out, "err.stderr");
  fflush(stderr);
  int keep = dup(2), fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644); /* the message, to read back */
  EXPECT(keep >= 0 && fd >= 0 && dup2(fd, 2) == 2);
  int rc = cx_run("test_cudaprofile_emu", dir, &ops, "emulated", &o);
  fflush(stderr);
  EXPECT(dup2(keep, 2) == 2);
  close(fd), close(keep);
  cJSON *none = read_json(bad);
  EXPECT(rc == 1 && none == NULL);
  char ierr[IO_ERR_LEN];
  size_t n = 0;
  char *msg = io_read_all(out, &n, ierr, sizeof ierr);
  printf("  unwritable: %s", msg ? msg : "(no message)\n");
  EXPECT(msg && strstr(msg, "--profile-out") && strstr(msg, "train.bin/p.json"));
  free(msg);
  /* multi-GPU mode times nothing yet: refused before MPI starts */
  o.nccl = true;
  o.profile_out = "p.json";
  EXPECT(cx_pipe_nccl_launch("test_cudaprofile_emu", dir, &o) == 1);
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudaprofile_emu PD2BWC [all|pipe|one|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_pipe_files());
  if (emu_test_part(part, "pipe")) RUN(test_pipe);
  if (emu_test_part(part, "one")) RUN(test_one);
  if (emu_test_part(part, "errors")) RUN(test_errors);
  emu_test_end();
  return TEST_REPORT();
}
