/* tests/cudaexec/test_cudaexec_seed.c — the one seed rule in the CUDA modes (issue 13;
 * docs/data.md "Seeds"; runtime.h rt_run_seed): --seed when given, else the
 * checkpoint's when resuming, else the plan's, for the weights, dropout and the
 * --shuffle order alike. tests/pipeline/seed.sh holds the CPU modes to it; this holds
 * pd2bwrun --backend cuda's loop (cx_run) on the emulated device:
 *   - one:  a one-stage plan (2bw, dropout; single-GPU pipeline mode on one rank);
 *   - pipe: single-GPU pipeline mode (2bw, 2 stages x 2 replicas, dropout).
 * Each: 4 steps --shuffle --seed 7 (a); 2 steps --shuffle --seed 7 --save ck;
 * --resume ck to step 4 without --seed (b): its step lines are a's steps 3 and 4 to the
 * last printed digit (it continues seed 7: dropout and data order); --resume ck --seed 9
 * (c) trains other losses and saves seed 9; ck holds seed 7.
 *
 *   test_cudaexec_seed PD2BWC [all|one|pipe]   (in the source tree)
 */
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudaseed-XXXXXX";

/* The "loss" values of a --log-json file, as printed, one per step (n at most). */
static int logged_losses(const char *name, char out[][40], int n) {
  char path[256], line[2048];
  emu_path(path, sizeof path, name);
  FILE *f = fopen(path, "r");
  int k = 0;
  while (f && k < n && fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "\"loss\": ");
    if (!at) continue;
    size_t len = strcspn(at + 8, ",}");
    snprintf(out[k++], 40, "%.*s", (int)(len < 39 ? len : 39), at + 8);
  }
  if (f) fclose(f);
  return k;
}

/* The "seed" of a checkpoint's metadata ("" when unreadable). */
static void ckpt_seed(const char *name, char *out, size_t n) {
  char path[256], err[RT_ERR_LEN];
  emu_path(path, sizeof path, name);
  int64_t step;
  uint64_t seed = 0;
  SafeTensors *s = st_open(path, err, sizeof err);
  out[0] = 0;
  if (s && rt_ckpt_meta(s, path, &step, &seed, err, sizeof err)) snprintf(out, n, "%llu", (unsigned long long)seed);
  if (s) st_close(s);
}

/* pd2bwrun --backend cuda PLAN --shuffle --steps steps [--seed seed] [--resume resume]
 * [--save save] --log-json log, on a fresh emulated device. */
static bool run(const char *plan, int64_t steps, int seed, const char *resume, const char *save, const char *log) {
  char dir[256], data[256], rp[256], sp[256], lp[256];
  emu_path(dir, sizeof dir, plan);
  emu_path(data, sizeof data, "train.bin");
  emu_path(rp, sizeof rp, resume ? resume : "");
  emu_path(sp, sizeof sp, save ? save : "");
  emu_path(lp, sizeof lp, log ? log : "");
  CxOptions o = {.data_path = data, .steps = steps, .quiet = true, .shuffle = true, .gemm = GEMM_PLAN,
                       .seed = (uint64_t)seed, .seed_set = seed > 0, .resume_path = resume ? rp : NULL,
                       .save_path = save ? sp : NULL, .log_json = log ? lp : NULL};
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  int rc = cx_run("test_cudaexec_seed", dir, &ops, "emulated", &o);
  if (rc) printf("  FAIL: %s --steps %lld: status %d\n", plan, (long long)steps, rc);
  return rc == 0;
}

static void check_rule(const char *plan) {
  bool ok = run(plan, 4, 7, NULL, NULL, "a.jsonl") && run(plan, 2, 7, NULL, "ck.st", NULL) &&
            run(plan, 4, 0, "ck.st", NULL, "b.jsonl") && run(plan, 4, 9, "ck.st", "c.st", "c.jsonl");
  EXPECT(ok);
  if (!ok) return;
  char a[4][40], b[2][40], c[2][40], sck[32], sc[32];
  EXPECT(logged_losses("a.jsonl", a, 4) == 4);
  EXPECT(logged_losses("b.jsonl", b, 2) == 2);
  EXPECT(logged_losses("c.jsonl", c, 2) == 2);
  printf("  %s: uninterrupted steps 3-4 %s %s; resumed %s %s; resumed --seed 9 %s %s\n", plan, a[2], a[3], b[0], b[1],
         c[0], c[1]);
  EXPECT(strcmp(a[2], b[0]) == 0 && strcmp(a[3], b[1]) == 0);  /* continues seed 7 */
  EXPECT(strcmp(a[2], c[0]) != 0 || strcmp(a[3], c[1]) != 0);  /* seed 9 trains on */
  ckpt_seed("ck.st", sck, sizeof sck);
  ckpt_seed("c.st", sc, sizeof sc);
  printf("  %s: checkpoint seeds %s (want 7), %s (want 9)\n", plan, sck, sc);
  EXPECT(strcmp(sck, "7") == 0);
  EXPECT(strcmp(sc, "9") == 0);
}

/* (pd2bwc's 2bw defaults: weight prediction, the checkpoint's next.*; the pipeline
 * plan's short run is all flushed start, vanilla) */
static void test_one(void) {
  EXPECT(emu_make_plan("p1", "--schedule 2bw"));
  check_rule("p1");
}

static void test_pipe(void) {
  EXPECT(emu_pipe_files());
  EXPECT(emu_pipe_make_plan("p4", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule 2bw "
                                  "--recompute off"));
  check_rule("p4");
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudaexec_seed PD2BWC [all|one|pipe]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "one")) RUN(test_one);
  if (emu_test_part(part, "pipe")) RUN(test_pipe); /* last: it rewrites train.bin */
  emu_test_end();
  return TEST_REPORT();
}
