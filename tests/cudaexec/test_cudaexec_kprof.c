/* tests/cudaexec/test_cudaexec_kprof.c — --kernel-profile (runtime/cuda/exec/cuda_exec_kprof.c)
 * on the emulated device: the per-kernel table gpu-check.sh shows when the GPU machine
 * has no Nsight Compute.
 *
 *  - table: a BF16 plan of the emulator tests' small GPT (gpipe, 2 microbatches of 2)
 *    trained 3 steps through cx_run (pd2bwrun --backend cuda's loop) with the
 *    profile on. The file is one comment line, the header `| kernel | calls | ms |
 *    share |` and its rule, then the ten kernels with the most time, in descending
 *    order, and one "(N other kernels)" row; the shares add up to 100% (to the 0.1%
 *    of each row's rounding). Every launch and GEMM the device ran was timed alone:
 *    the calls add up to the emulator's count of launches and GEMMs, and each row's
 *    time is its calls times one tick of the emulator's fake clock (one operation
 *    between the two records: 1 µs). The losses are
 *    those of the same run without the profile (it only adds event records).
 *  - pipe: a 2-stage plan in single-GPU pipeline mode (several streams) profiles too.
 *  - errors: an unwritable --kernel-profile path is refused before training (status 1,
 *    one line, nothing written).
 *
 *   test_cudaexec_kprof PD2BWC [all|table|pipe|errors]   (run in the source tree)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_train.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudaexec-kprof-XXXXXX";

/* The losses of a --log-json file, in order; their number. */
static int read_losses(const char *path, double *out, int max) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (n < max && fgets(line, sizeof line, f)) {
    const char *l = strstr(line, "\"loss\": ");
    if (l) out[n++] = strtod(l + 8, NULL);
  }
  fclose(f);
  return n;
}

/* What check_table read from a profile. */
typedef struct Table {
  int rows;          /* kernel rows, "other kernels" included */
  int64_t calls;     /* their calls */
  double share;      /* their shares, summed */
  bool others;       /* it has the "(N other kernels)" row */
  bool ms_per_call;  /* every row's ms is its calls x 1 tick (0.001 ms) */
} Table;

/* Reads and checks the table's structure; false (with a message) when it breaks it. */
static bool check_table(const char *path, Table *t) {
  memset(t, 0, sizeof *t);
  t->ms_per_call = true;
  FILE *f = fopen(path, "r");
  if (!f) return printf("  cannot open %s\n", path), false;
  char line[1024];
  int n = 0;
  double prev = INFINITY;
  bool ok = true;
  while (fgets(line, sizeof line, f)) {
    printf("  > %s", line);
    n++;
    line[strcspn(line, "\n")] = 0;
    if (n == 1) ok = ok && strncmp(line, "<!-- kernel profile of ", 23) == 0;
    else if (n == 2) ok = ok && line[0] == 0;
    else if (n == 3) ok = ok && strcmp(line, "| kernel | calls | ms | share |") == 0;
    else if (n == 4) ok = ok && strcmp(line, "|---|---|---|---|") == 0;
    else {
      char name[512];
      long long calls;
      double ms, share;
      if (t->others || sscanf(line, "| %511[^|]| %lld | %lf | %lf%% |", name, &calls, &ms, &share) != 4) {
        printf("  line %d is not a row (or follows the others row): %s\n", n, line);
        ok = false;
        break;
      }
      t->others = strncmp(name, "(", 1) == 0 && strstr(name, " other kernels)");
      if (!t->others && ms > prev) printf("  line %d: not in descending order\n", n), ok = false;
      if (!t->others) prev = ms;
      if (fabs(ms - (double)calls * 1e-3) > 1e-9) t->ms_per_call = false;
      t->rows++, t->calls += calls, t->share += share;
    }
  }
  fclose(f);
  if (!ok) printf("  %s does not have the table's structure\n", path);
  return ok;
}

/* One run of plan WORKDIR/plan through cx_run, 3 steps, with the profile when
 * kprof is set; the log in WORKDIR/log. */
static int run(const char *plan, const char *log, const char *kprof, EmuCounts *counts) {
  char dir[256], data[256], logp[256];
  emu_path(dir, sizeof dir, plan);
  emu_path(data, sizeof data, "train.bin");
  emu_path(logp, sizeof logp, log);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxOptions o = {.data_path = data, .steps = EMU_STEPS, .log_json = logp, .quiet = true,
                       .gemm = GEMM_PLAN, .kernel_profile = kprof};
  int rc = cx_run("test_cudaexec_kprof", dir, &ops, "emulated", &o);
  if (counts) *counts = emu_device_counts();
  return rc;
}

static void test_table(void) {
  char prof[256];
  emu_path(prof, sizeof prof, "kprof.md");
  EXPECT(emu_make_plan("kp", "--schedule gpipe --precision bf16"));
  EmuCounts c;
  EXPECT(run("kp", "plain.jsonl", NULL, NULL) == 0);
  EXPECT(run("kp", "prof.jsonl", prof, &c) == 0);
  Table t;
  EXPECT(check_table(prof, &t));
  printf("  %d rows, %lld calls (device: %d launches + %d GEMMs), shares sum %.2f%%\n", t.rows, (long long)t.calls,
         c.launches, c.gemms, t.share);
  EXPECT(t.rows == 11 && t.others);
  EXPECT(fabs(t.share - 100.0) <= 0.05 * t.rows);
  EXPECT(t.calls == c.launches + c.gemms);
  EXPECT(c.captures == 0 && c.graph_launches == 0); /* every pass launch by launch */
  EXPECT(t.ms_per_call);
  double a[EMU_STEPS], b[EMU_STEPS];
  char pa[256], pb[256];
  emu_path(pa, sizeof pa, "plain.jsonl");
  emu_path(pb, sizeof pb, "prof.jsonl");
  EXPECT(read_losses(pa, a, EMU_STEPS) == EMU_STEPS && read_losses(pb, b, EMU_STEPS) == EMU_STEPS);
  for (int i = 0; i < EMU_STEPS; i++) EXPECT(a[i] == b[i]);
}

static void test_pipe(void) {
  char prof[256];
  emu_path(prof, sizeof prof, "kpipe.md");
  EXPECT(emu_pipe_files());
  EXPECT(emu_pipe_make_plan("kpipe", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw"));
  EmuCounts c;
  EXPECT(run("kpipe", "pipe.jsonl", prof, &c) == 0);
  Table t;
  EXPECT(check_table(prof, &t));
  printf("  single-GPU pipeline mode: %d rows, %lld calls (device: %d + %d), shares sum %.2f%%\n", t.rows,
         (long long)t.calls, c.launches, c.gemms, t.share);
  EXPECT(t.rows >= 2 && fabs(t.share - 100.0) <= 0.05 * t.rows);
  EXPECT(t.calls == c.launches + c.gemms);
}

static void test_errors(void) {
  EXPECT(emu_make_plan("kp", "--schedule gpipe --precision bf16"));
  /* a directory that does not exist: refused before anything trains, nothing written */
  char bad[256], log[256];
  emu_path(bad, sizeof bad, "no-such-dir/kprof.md");
  emu_path(log, sizeof log, "bad.jsonl");
  unlink(log);
  EXPECT(run("kp", "bad.jsonl", bad, NULL) == 1);
  EXPECT(access(bad, F_OK) != 0);
  EXPECT(access(log, F_OK) != 0);
}

int main(int argc, char **argv) {
  const char *part =
      emu_test_begin(argc, argv, true, "usage: test_cudaexec_kprof PD2BWC [all|table|pipe|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "table")) RUN(test_table);
  if (emu_test_part(part, "pipe")) RUN(test_pipe);
  if (emu_test_part(part, "errors")) RUN(test_errors);
  emu_test_end();
  return TEST_REPORT();
}
