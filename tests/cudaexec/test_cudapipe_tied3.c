/* tests/cudaexec/test_cudapipe_tied3.c — a weight tied across 3 or more pipeline stages
 * trains on the GPU device (single-GPU pipeline mode, emulated) as on the CPU.
 *
 * The model is tied_gain.model (tests/planner/tied_layernorm.model with a warmup: see
 * its header): one layernorm gain (ln1_w) shared by every block copy and the final
 * layernorm, so cut into d stages it is a tied group of d members (and wte/LM head a
 * group of 2). Each member sums the group's gradients with the device's sum_ordered
 * into its OWN buffer, which is source `member` of the sum: the last member of a group
 * of 3 sums into src[2]. The GPU device's sum (cuda_exec_device.c
 * on kernels/cuda_kernels.cuh pkc_sum_ordered_f32) must read every source of an element
 * before writing it; the copy-then-axpy sum it had could not, and aborted there
 * ("a tied group of more than 2 stages").
 *
 * Parts, 5 steps each (2bw's deferred updates reach a forward late) on the emulated device whose streams reorder work, against the
 * CPU sequential reference (pipeline_check_reference: every microbatch loss within
 * TOL = 1e-5 relative, every weight within 10·TOL of its tensor's largest):
 *   - 2bw2:   2bw, d = 2, w = 1, m = 4 (groups of 2 only: what the device always did);
 *   - 2bw3:   2bw, d = 3, w = 1, m = 4 (ln1_w in 3 stages; 2bw's deferred tied steps);
 *   - 1f1b4:  1f1b, d = 4, w = 1, m = 4 (ln1_w in 4 stages);
 *   - gpipe3: gpipe, d = 3, w = 2, m = 4 (the group of 3 and the replica all-reduce);
 *   - gpipe9: gpipe, d = 1, w = 9, m = 1 (an all-reduce of 9: the sum in two launches).
 *
 *   test_cudapipe_tied3 PD2BWC [2bw2|2bw3|1f1b4|gpipe3|gpipe9]   (in the source tree)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/reference/reference.h"
#include "test.h"

#define TOL 1e-5
#define STEPS 5

static char tmp[64] = "/tmp/pd2bw-test-cudatied3-XXXXXX";

/* pd2bwc on tied_gain.model (fp32, on WORKDIR/cpu16.cluster: room for 9 replicas)
 * plus `args`, into WORKDIR/name. */
static bool make_plan(const char *name, const char *args) {
  char out[256], cluster[256], cmd[1024];
  emu_path(out, sizeof out, name);
  emu_path(cluster, sizeof cluster, "cpu16.cluster");
  FILE *f = fopen(cluster, "w");
  if (!f) return fprintf(stderr, "  %s: cannot write\n", cluster), false;
  fputs("cluster cpu16 { nodes = 1; devices_per_node = 16; device = \"cpu\"; memory_gib = 24; tflops = 0.1; "
        "memory_gbs = 20; intra_node_gbs = 10; inter_node_gbs = 1; }\n", f);
  if (fclose(f) != 0) return false;
  snprintf(cmd, sizeof cmd, "'%s' tests/cudaexec/tied_gain.model -q --precision fp32 --cluster '%s' %s -o '%s'",
           emu_pd2bwc(), cluster, args, out);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  return rc == 0;
}

/* Plan `name` has ln1_w tied across `want` stages (so the test tests what it says;
 * 1: held by one stage, no group). */
static void expect_group(const PipePlan *p, int want) {
  int found = 1;
  for (int g = 0; g < p->ngroups; g++)
    if (strcmp(p->group_names[g], "ln1_w") == 0) found = p->groups[g].nstages;
  printf("  ln1_w tied across %d stages (of %d), %d replica(s)\n", found, p->d, p->w);
  EXPECT(found == want);
}

/* Trains plan `name` on the emulated device, checks it against the sequential reference. */
static void run_check(const char *name, const char *args, int group, EmuOrder order) {
  char data[256], err[RT_ERR_LEN];
  EXPECT(make_plan(name, args));
  emu_path(data, sizeof data, "train.bin");
  PipePlan *p = emu_pipe_load(name, 0);
  EXPECT(p != NULL);
  if (!p) return;
  expect_group(p, group);
  CudaDeviceOps ops = emu_device_ops(tmp, order);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome r;
  double t0 = emu_now_s();
  int rc = cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  EmuCounts emu = emu_device_counts();
  printf("  %s: %s, emulated device (%s): %d launches; %.1f s\n", name, plan_schedule_name(p->schedule),
         emu_order_name(order), emu.launches, emu_now_s() - t0);
  if (!rc) {
    PipeOptions po = {.data_path = data, .steps = STEPS};
    bool match = pipeline_check_reference(p, &po, &r, TOL, stdout, err, sizeof err);
    if (!match) fprintf(stderr, "  %s\n", err);
    EXPECT(match);
    EXPECT(fabs(r.step_loss[STEPS - 1] - r.step_loss[0]) > 10 * TOL * r.step_loss[0]); /* it trained */
    pipe_outcome_free(&r);
  }
  pipe_plan_free(p);
}

static void test_2bw2(void) {
  run_check("t2bw2", "--microbatches 4 --stages 2 --replicas 1 --schedule 2bw --recompute off", 2, EMU_HIGHEST_FIRST);
}

static void test_2bw3(void) {
  run_check("t2bw3", "--microbatches 4 --stages 3 --replicas 1 --schedule 2bw --recompute off", 3, EMU_HIGHEST_FIRST);
}

static void test_1f1b4(void) {
  run_check("t1f1b4", "--microbatches 4 --stages 4 --replicas 1 --schedule 1f1b --recompute off", 4, EMU_LOWEST_FIRST);
}

static void test_gpipe3(void) {
  run_check("tgpipe3", "-D bsz=8 --microbatches 4 --stages 3 --replicas 2 --schedule gpipe --recompute off", 3, EMU_HIGHEST_FIRST);
}

/* 9 replicas: their all-reduce is the device's ordered sum of 9 sources, more than one
 * launch takes (cuda_exec_device.c: 8, then the sum so far plus the ninth). */
static void test_gpipe9(void) {
  run_check("tgpipe9", "-D bsz=9 --microbatches 1 --stages 1 --replicas 9 --schedule gpipe --recompute off", 1,
            EMU_LOWEST_FIRST);
}

int main(int argc, char **argv) {
  const char *part =
      emu_test_begin(argc, argv, true, "usage: test_cudapipe_tied3 PD2BWC [all|2bw2|2bw3|1f1b4|gpipe3|gpipe9]", tmp);
  if (!part) return 2;
  EXPECT(emu_pipe_files());
  if (emu_test_part(part, "2bw2")) RUN(test_2bw2);
  if (emu_test_part(part, "2bw3")) RUN(test_2bw3);
  if (emu_test_part(part, "1f1b4")) RUN(test_1f1b4);
  if (emu_test_part(part, "gpipe3")) RUN(test_gpipe3);
  if (emu_test_part(part, "gpipe9")) RUN(test_gpipe9);
  emu_test_end();
  return TEST_REPORT();
}
