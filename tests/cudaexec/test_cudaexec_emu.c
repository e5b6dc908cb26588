/* tests/cudaexec/test_cudaexec_emu.c — the GPU trainer trains like the CPU trainer,
 * without a GPU.
 *
 * The GPU trainer (runtime/cuda_exec.h) reaches the device only through a
 * CxDeviceOps table. Here that table is the host CUDA emulator of tests/cuda/
 * cuda_emu.cpp: "loading" a stage program compiles the plan's stage0.cu as host C++
 * with the emulator (each CUDA thread a fibre; the stage's own fused kernels added
 * to its table, as tests/cudagen/test_cudagen_emu.c does), device memory is host
 * memory, and GEMMs run through pd_sgemm, the CPU program's BLAS. So what runs is
 * exactly what a GPU would run: the launch lists as the executor decodes them, the
 * executor's norm, clipping and AdamW kernels, its 2bw version swap.
 *
 * A small GPT with dropout (the tinygpt text with its own train section: a large
 * constant learning rate, so that the update rule shows in the losses within a few
 * steps) is compiled by pd2bwc twice, 2bw and gpipe. Each trains 4 steps on the CPU
 * trainer (runtime/trainer.c: stage0.c through cc) and on the emulated GPU from the
 * same initial weights (rt_init_param by name and seed); every microbatch loss and
 * the final weights must agree. The bound is shown to be discriminating: the 2bw and
 * gpipe runs differ by far more than it from step 2 on (the rules differ from then).
 * CUDA graphs: the emulated device captures (records without running) and replays
 * graphs, so every run above captures each pass on its second sighting and launches
 * graphs from then on; each plan (2bw, and 1f1b beside gpipe) also trains with
 * graphs off (eager replay), and the two runs must be BIT-identical, losses and
 * weights, with graphs captured and launched and fewer eager launches. A graph that
 * baked in the microbatch (dropout keys would repeat) or one replayed for other
 * bases would make them differ.
 * Plus the user-error paths: a plan without launch lists, a stage0.cu that does not
 * match its launch list. The device, model, data and runs are emu_device.h's and
 * emu_train.h's (shared with test_cudaexec_bf16.c).
 *
 *   test_cudaexec_emu PD2BWC [all|2bw|gpipe|errors]
 * (run in the source tree: it needs tests/cuda/cuda_emu.cpp; CTest runs the parts in
 * parallel, each about 15 s of emulation on a loaded 2-core machine)
 */
#include <stdlib.h>

#include "emu_train.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudaexec-XXXXXX";

/* The emulated run, with this test's checks of it. */
static bool run_emu(const char *plan, EmuRun *r) {
  bool ok = emu_run_gpu(plan, r);
  EXPECT(ok);
  if (!ok) return false;
  EXPECT(r->bad_ids == 0);
  EXPECT(r->steps == EMU_STEPS);
  EXPECT(r->counts.gemms > 0 && r->counts.launches > r->counts.gemms);
  return true;
}

static bool run_cpu(const char *plan, EmuRun *r) {
  bool ok = emu_run_cpu(plan, r);
  EXPECT(ok);
  return ok;
}

#define LOSS_TOL 2e-5
#define WEIGHT_TOL 1e-4

static EmuRun cpu2bw, emu2bw;

/* The plan once more with graphs off (eager replay): bit-identical to the run with
 * graphs (`on`), which captured graphs and launched them in place of eager launches. */
static void graphs_off_same(const char *plan, const EmuRun *on) {
  EmuRun off = {0};
  emu_device_set_graphs(false);
  bool ok = run_emu(plan, &off);
  emu_device_set_graphs(true);
  if (!ok) return;
  printf("  %s, graphs on: %d captured, %d graph launches (%d operations), %d eager launches, %d eager GEMMs\n", plan,
         on->counts.captures, on->counts.graph_launches, on->counts.graph_ops, on->counts.launches, on->counts.gemms);
  printf("  %s, graphs off: %d captured, %d eager launches, %d eager GEMMs\n", plan, off.counts.captures,
         off.counts.launches, off.counts.gemms);
  EXPECT(on->counts.captures > 0 && on->counts.graph_launches > on->counts.captures);
  EXPECT(off.counts.captures == 0 && off.counts.graph_launches == 0);
  EXPECT(on->counts.launches < off.counts.launches && on->counts.gemms < off.counts.gemms);
  /* all of the work, either way: what graphs ran is what eager replay did not */
  EXPECT_EQ_INT(on->counts.launches + on->counts.gemms + on->counts.graph_ops, off.counts.launches + off.counts.gemms);
  EXPECT(memcmp(on->mb, off.mb, sizeof on->mb) == 0);
  EXPECT(memcmp(on->norm, off.norm, sizeof on->norm) == 0);
  EXPECT(on->nw == off.nw && memcmp(on->w, off.w, (size_t)on->nw * 4) == 0);
  printf("  %s: graphs on and off bit-identical (%d losses, %lld weights)\n", plan, EMU_STEPS * EMU_MB,
         (long long)on->nw);
  free(off.w);
}

static void compare(const char *what, const EmuRun *c, const EmuRun *g) {
  printf("  %s: step  mb  cpu loss     emulated gpu loss\n", what);
  for (int i = 0; i < EMU_STEPS * EMU_MB; i++) printf("        %4d %3d  %.8f   %.8f\n", i / EMU_MB, i % EMU_MB, c->mb[i], g->mb[i]);
  double dl = emu_losses_diff(c, g, 0), dw = emu_weights_diff(c, g);
  printf("  %s: worst loss difference %.2e (bound %.0e), weights %.2e of the largest (bound %.0e)\n", what, dl,
         LOSS_TOL, dw, WEIGHT_TOL);
  EXPECT(dl <= LOSS_TOL);
  EXPECT(dw <= WEIGHT_TOL);
  for (int s = 0; s < EMU_STEPS; s++) EXPECT_NEAR(c->norm[s], g->norm[s], 1e-4, 0);
  /* it trained: the loss moved */
  EXPECT(fabs(c->mb[(EMU_STEPS - 1) * EMU_MB] - c->mb[0]) > 100 * LOSS_TOL * c->mb[0]);
}

static void test_2bw(void) {
  EXPECT(emu_make_plan("p2bw", "--schedule 2bw"));
  if (!run_cpu("p2bw", &cpu2bw) || !run_emu("p2bw", &emu2bw)) return;
  compare("2bw", &cpu2bw, &emu2bw);
  graphs_off_same("p2bw", &emu2bw);
}

/* 1f1b (one stage: gpipe's update rule) with graphs, against the CPU and graphs off. */
static void test_1f1b_graphs(void) {
  EmuRun c = {0}, g = {0};
  EXPECT(emu_make_plan("p1f1b", "--schedule 1f1b"));
  if (run_cpu("p1f1b", &c) && run_emu("p1f1b", &g)) {
    compare("1f1b", &c, &g);
    graphs_off_same("p1f1b", &g);
  }
  free(c.w);
  free(g.w);
}

static void test_gpipe(void) {
  EmuRun c = {0}, g = {0};
  EXPECT(emu_make_plan("pgpipe", "--schedule gpipe"));
  if (!cpu2bw.w) {
    EXPECT(emu_make_plan("p2bw", "--schedule 2bw"));
    EXPECT(run_cpu("p2bw", &cpu2bw));
  }
  if (run_cpu("pgpipe", &c) && run_emu("pgpipe", &g)) {
    compare("gpipe", &c, &g);
    /* the bound discriminates: step 0 runs on W(0) under both rules; from step 1 2bw
     * still trains on W(0) while gpipe uses W(1), and the losses differ by far more
     * than the bound */
    double apart = emu_losses_diff(&cpu2bw, &c, 1);
    printf("  2bw vs gpipe (CPU), steps 1..%d: %.2e apart\n", EMU_STEPS - 1, apart);
    EXPECT(apart > 20 * LOSS_TOL);
    EXPECT(emu_losses_diff(&cpu2bw, &c, 0) >= apart); /* step 0 is the same batch on W(0) */
    EXPECT_NEAR(cpu2bw.mb[0], c.mb[0], 1e-12, 0);
  }
  free(c.w);
  free(g.w);
}

/* A plan made with --backend cpu has no launch lists: a message naming the file. */
static void test_cpu_only_plan(void) {
  EXPECT(emu_make_plan("pcpu", "--backend cpu"));
  char dir[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "pcpu");
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  CxDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxTrainer *t = p ? cx_trainer_create(p, &ops, NULL, err, sizeof err) : NULL;
  EXPECT(t == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.launch.json") != NULL && strstr(err, "--backend cpu") != NULL);
  cx_trainer_destroy(t);
  rt_plan_free(p);
}

/* stage0.cu edited after pd2bwc: its hash no longer matches; refused before loading. */
static void test_edited_source(void) {
  char cmd[512], err[RT_ERR_LEN] = "";
  EXPECT(emu_make_plan("p2bw", "--schedule 2bw"));
  snprintf(cmd, sizeof cmd, "cp -r '%s/p2bw' '%s/pedit' && echo '// edited' >> '%s/pedit/stage0.cu'", tmp, tmp, tmp);
  EXPECT(system(cmd) == 0);
  snprintf(cmd, sizeof cmd, "%s/pedit", tmp);
  CxDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxProgram *prog = cx_program_load(&ops, cmd, 0, CX_GEMM_PLAN, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.cu") != NULL && strstr(err, "hash") != NULL);
  cx_program_free(prog);
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudaexec_emu PD2BWC [all|2bw|gpipe|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "gpipe")) {
    RUN(test_gpipe);
    RUN(test_1f1b_graphs);
  }
  if (emu_test_part(part, "errors")) {
    RUN(test_cpu_only_plan);
    RUN(test_edited_source);
  }
  free(cpu2bw.w);
  free(emu2bw.w);
  emu_test_end();
  return TEST_REPORT();
}
