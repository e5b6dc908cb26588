/* tests/cudaexec/test_cudaexec_diverge.c — the divergence check of every mode (issue
 * 13; runtime.h rt_loss_ok; tests/pipeline/diverge.sh holds the CPU modes to it) in
 * pd2bwrun --backend cuda's loop (cx_run) on the emulated device: a loss that
 * is not finite ends the run with status 1, the one message "error: the loss is nan at
 * step S: training diverged (lower the learning rate?)" naming the first step whose
 * loss is not finite, and no --save checkpoint.
 *   - one:  a one-stage plan (gpipe; single-GPU pipeline mode on one rank);
 *   - pipe: single-GPU pipeline mode (gpipe, 2 stages x 2 replicas), which checks the
 *           step losses after the run, before --save: the same step as the one-stage
 *           run of the same model (gpipe computes the reference's losses).
 * tests/pipeline/tinygpt.model with a learning rate of 1e30 makes the loss NaN within
 * a few steps.
 *
 *   test_cudaexec_diverge PD2BWC [all|one|pipe]   (in the source tree)
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu_train.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudadiverge-XXXXXX";

/* WORKDIR/nan.model: tests/pipeline/tinygpt.model with lr = 1e30. */
static bool nan_model(void) {
  char err[IO_ERR_LEN], path[256];
  size_t n = 0;
  char *text = io_read_all("tests/pipeline/tinygpt.model", &n, err, sizeof err);
  char *at = text ? strstr(text, "lr = 1e-3") : NULL;
  if (!at) {
    printf("  FAIL: tests/pipeline/tinygpt.model's 'lr = 1e-3' not found\n");
    free(text);
    return false;
  }
  emu_path(path, sizeof path, "nan.model");
  FILE *f = fopen(path, "w");
  bool ok = f && fprintf(f, "%.*slr = 1e30%s", (int)(at - text), text, at + strlen("lr = 1e-3")) > 0;
  if (f) ok = fclose(f) == 0 && ok;
  free(text);
  return ok;
}

/* pd2bwc on nan.model (tests/pipeline's small GPT, as emu_pipe_make_plan) plus args. */
static bool make_plan(const char *name, const char *args) {
  char cmd[1024], model[256], out[256];
  emu_path(model, sizeof model, "nan.model");
  emu_path(out, sizeof out, name);
  snprintf(cmd, sizeof cmd,
           "'%s' '%s' -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 -D bsz=8 --cluster tests/pipeline/cpu8.cluster "
           "--microbatch-size 2 --precision fp32 --schedule gpipe --recompute off %s -o '%s'",
           emu_pd2bwc(), model, args, out);
  return system(cmd) == 0;
}

/* pd2bwrun --backend cuda PLAN --steps 20 --save ck.st on a fresh emulated device;
 * stderr into msg. The status. */
static int run(const char *plan, char *msg, size_t n) {
  char dir[256], data[256], ck[256], path[256];
  emu_path(dir, sizeof dir, plan);
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "ck.st");
  emu_path(path, sizeof path, "stderr.txt");
  CxOptions o = {.data_path = data, .steps = 20, .quiet = true, .gemm = GEMM_PLAN, .save_path = ck};
  fflush(stderr);
  int fd = dup(2);
  FILE *f = freopen(path, "w", stderr);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  int rc = f ? cx_run("pd2bwrun", dir, &ops, "emulated", &o) : -1;
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
  return rc;
}

/* The step the message names (0: not the message). */
static long diverged_at(const char *plan) {
  char msg[1024], ck[256];
  emu_path(ck, sizeof ck, "ck.st");
  unlink(ck);
  int rc = run(plan, msg, sizeof msg);
  printf("  %s: status %d: %s", plan, rc, msg);
  const char *at = strstr(msg, "pd2bwrun: error: the loss is ");
  const char *step = at ? strstr(at, " at step ") : NULL;
  long s = step ? strtol(step + 9, NULL, 10) : 0;
  struct stat sb;
  EXPECT(rc == 1);
  EXPECT(step && strstr(step, ": training diverged (lower the learning rate?)\n") != NULL);
  EXPECT(stat(ck, &sb) != 0); /* no checkpoint of a diverged run */
  return s;
}

static long one_step;

static void test_one(void) {
  EXPECT(make_plan("p1", "--stages 1 --replicas 1 --microbatches 4"));
  one_step = diverged_at("p1");
  EXPECT(one_step > 0);
}

static void test_pipe(void) {
  EXPECT(make_plan("p4", "--stages 2 --replicas 2 --microbatches 2"));
  long s = diverged_at("p4");
  EXPECT(s > 0);
  if (one_step == 0) test_one(); /* the part alone */
  printf("  the pipeline diverged at step %ld, the one-stage trainer at %ld\n", s, one_step);
  EXPECT(s == one_step); /* the reference's losses: the same step */
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudaexec_diverge PD2BWC [all|one|pipe]", tmp);
  if (!part) return 2;
  EXPECT(emu_pipe_files());
  EXPECT(nan_model());
  if (emu_test_part(part, "one")) RUN(test_one);
  if (emu_test_part(part, "pipe")) RUN(test_pipe);
  emu_test_end();
  return TEST_REPORT();
}
