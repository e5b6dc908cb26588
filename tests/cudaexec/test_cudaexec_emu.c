/* tests/cudaexec/test_cudaexec_emu.c — the GPU trainer trains like the CPU trainer,
 * without a GPU.
 *
 * The GPU trainer (runtime/cuda/exec/cuda_exec.h) reaches the device only through a
 * CudaDeviceOps table. Here that table is the host CUDA emulator of tests/cuda/
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
 * trainer (runtime/core/trainer.c: stage0.c through cc) and on the emulated GPU from the
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
 * The step itself (parts "upd2bw", "updgpipe", and "updsgd": 2bw with SGD): with a learning rate that changes every step
 * (a warm-up over all of them, set on the loaded plan) and clipping active, 2bw and gpipe
 * train UPD_STEPS steps with graphs on and off: bit-identical losses, norms and
 * weights (an lr, step or clip scale frozen into the update graph at capture would
 * differ), within the bounds of the CPU trainer on the same schedule; every step
 * stalls the host exactly twice (the norm read-back and the end: none between
 * microbatches; the emulator counts host waits that find work issued since the last
 * one: the batch's upload, which waits for the previous update, and the norm; the
 * first step once), and the update runs as a graph from the second step of each weight-version
 * order on (2bw: from step 2, gpipe: from step 1).
 * Part "vocab67": the same model with an odd vocabulary (67), whose logits' rows the
 * layout pads to 128 so that the LM-head GEMMs are aligned: the emulated GPU trains
 * as the CPU trainer, and the launch list really has the padded leading dimension.
 * Plus the user-error paths: a plan without launch lists, a stage0.cu that does not
 * match its launch list. The device, model, data and runs are emu_device.h's and
 * emu_train.h's (shared with test_cudaexec_bf16.c).
 *
 *   test_cudaexec_emu PD2BWC [all|2bw|gpipe|vocab67|upd2bw|updgpipe|updsgd|errors]
 * (run in the source tree: it needs tests/cuda/cuda_emu.cpp; CTest runs the parts in
 * parallel, each about 15 s of emulation on a loaded 2-core machine)
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "emu_train.h"
#include "runtime/exec/exec.h"
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

#define UPD_STEPS 4

/* One run of parts upd2bw / updgpipe. */
typedef struct UpdRun {
  double mb[UPD_STEPS * EMU_MB], norm[UPD_STEPS], lr[UPD_STEPS];
  int stalls[UPD_STEPS], waits[UPD_STEPS];
  CxGraphStats upd[UPD_STEPS]; /* the update's graph stats after each step */
  float *w;
  int64_t nw;
} UpdRun;

static bool upd_sgd; /* the runs use SGD with momentum (part updsgd) instead of AdamW */

/* UPD_STEPS steps of `plan` with a changing lr: on the emulated device (gpu; graph
 * ops as emu_device_set_graphs says) or the CPU trainer. */
static bool upd_run(const char *plan, bool gpu, UpdRun *u) {
  char dir[256], path[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, plan);
  emu_path(path, sizeof path, "train.bin");
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  if (!p) {
    printf("  %s\n", err);
    return false;
  }
  p->train.schedule = LR_COSINE; /* lr changes every step: warm-up 1/4, 2/4, .. 4/4 */
  p->train.warmup = UPD_STEPS;
  p->train.steps = 2 * UPD_STEPS;
  p->train.min_lr = p->train.lr / 10;
  if (upd_sgd) p->train.optimizer = OPT_SGD; /* momentum: beta1, as trainer.c */
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  /* the one-stage trainer, with the GPU as its device (pd2bwrun --backend cuda's) or the CPU */
  ExecDevice *dev = gpu ? cx_exec_device(&ops, p, 0, GEMM_PLAN, p->b * p->m, err, sizeof err) : NULL;
  Trainer *ct = !gpu || dev ? trainer_create(p, &(TrainerOptions){.device = dev}, err, sizeof err) : NULL;
  DataFile *df = data_open(path, DATA_AUTO, 64, err, sizeof err);
  DataLoader *dl = df ? data_loader_create(df, (int)(p->b * p->m), 8, false, 0, err, sizeof err) : NULL;
  bool ok = ct && dl;
  if (!ok) printf("  %s\n", err);
  EmuCounts before = emu_device_counts();
  for (int s = 0; ok && s < UPD_STEPS; s++) {
    StepStats ss;
    trainer_step(ct, dl, &ss);
    EmuCounts now = emu_device_counts();
    u->stalls[s] = now.host_stalls - before.host_stalls;
    u->waits[s] = now.host_waits - before.host_waits;
    before = now;
    for (int j = 0; j < EMU_MB; j++) u->mb[s * EMU_MB + j] = ss.mb_loss[j];
    u->norm[s] = ss.grad_norm;
    u->lr[s] = ss.lr;
    if (dev) u->upd[s] = cx_exec_device_update_stats(dev);
  }
  if (ok) {
    u->nw = p->stages[0].blocks[BUF_PARAMS] / 4;
    u->w = malloc((size_t)u->nw * 4);
    trainer_read_params(ct, u->w);
  }
  data_loader_destroy(dl);
  data_close(df);
  trainer_destroy(ct);
  exec_device_destroy(dev); /* after the trainer, whose rank holds it */
  rt_plan_free(p);
  return ok;
}

/* Part upd2bw or updgpipe; `first_graph`: the first step whose update is a graph. */
static void update_case(const char *plan, const char *flags, int first_graph) {
  UpdRun on = {0}, off = {0}, cpu = {0};
  EXPECT(emu_make_plan(plan, flags));
  bool ok = upd_run(plan, true, &on);
  emu_device_set_graphs(false);
  ok = upd_run(plan, true, &off) && ok;
  emu_device_set_graphs(true);
  ok = upd_run(plan, false, &cpu) && ok;
  EXPECT(ok);
  if (ok) {
    printf("  %s: step  lr        host waits  stalls  update: eager captured graph launches\n", plan);
    for (int s = 0; s < UPD_STEPS; s++)
      printf("        %4d  %.6f  %10d  %6d          %5lld %8lld %14lld\n", s, on.lr[s], on.waits[s], on.stalls[s],
             (long long)on.upd[s].eager, (long long)on.upd[s].captured, (long long)on.upd[s].launches);
    for (int s = 0; s < UPD_STEPS; s++) {
      if (s > 0) EXPECT(on.lr[s] > on.lr[s - 1] * 1.1); /* the lr really changes */
      /* (a) the batch's upload (it waits for the previous step's update) and the norm's
       * read-back, m microbatches or not; the first step has no update to wait for */
      EXPECT_EQ_INT(on.stalls[s], s ? 2 : 1);
      EXPECT_EQ_INT(off.stalls[s], s ? 2 : 1);
      /* (b) eager until each version order was seen once, a graph from then on */
      int64_t graphs = s >= first_graph ? s - first_graph + 1 : 0;
      EXPECT_EQ_INT((int)on.upd[s].launches, (int)graphs);
      EXPECT_EQ_INT((int)on.upd[s].eager, s + 1 - (int)graphs);
      EXPECT_EQ_INT((int)on.upd[s].captured, (int)(graphs < first_graph ? graphs : first_graph));
      EXPECT_EQ_INT((int)off.upd[s].eager, s + 1);
      EXPECT_EQ_INT((int)off.upd[s].launches, 0);
    }
    bool same = memcmp(on.mb, off.mb, sizeof on.mb) == 0 && memcmp(on.norm, off.norm, sizeof on.norm) == 0 &&
                on.nw == off.nw && memcmp(on.w, off.w, (size_t)on.nw * 4) == 0;
    EXPECT(same);
    double dl = 0, dw = 0, scale = 0;
    for (int i = 0; i < UPD_STEPS * EMU_MB; i++) dl = fmax(dl, fabs(on.mb[i] - cpu.mb[i]) / fabs(cpu.mb[i]));
    for (int64_t i = 0; i < on.nw; i++) {
      scale = fmax(scale, fabs(cpu.w[i]));
      dw = fmax(dw, fabs((double)on.w[i] - (double)cpu.w[i]));
    }
    dw /= scale;
    printf("  %s: graphs on and off %s; against the CPU trainer: losses %.2e (bound %.0e), weights %.2e "
           "(bound %.0e)\n",
           plan, same ? "bit-identical" : "DIFFER", dl, LOSS_TOL, dw, WEIGHT_TOL);
    EXPECT(dl <= LOSS_TOL);
    EXPECT(dw <= WEIGHT_TOL);
    for (int s = 0; s < UPD_STEPS; s++) {
      EXPECT_NEAR(on.norm[s], cpu.norm[s], 1e-4, 0);
      EXPECT(cpu.norm[s] > 0.5); /* clipping active: the scale changes every step */
    }
  }
  free(on.w);
  free(off.w);
  free(cpu.w);
}

static void test_update_2bw(void) { update_case("p2bw", "--schedule 2bw", 2); }
static void test_update_gpipe(void) { update_case("pgpipe", "--schedule gpipe", 1); }
static void test_update_sgd(void) {
  upd_sgd = true;
  update_case("p2bw", "--schedule 2bw", 2);
  upd_sgd = false;
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

/* The LM-head GEMM's leading dimension in plan's launch list (the forward GEMM whose
 * C row is vocab wide, padded or not), or -1. */
static long long lm_head_ldc(const char *plan, int vocab) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s/stage0.launch.json", tmp, plan);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  char *text = calloc(1 << 22, 1);
  size_t n = fread(text, 1, (1 << 22) - 1, f);
  fclose(f);
  text[n] = 0;
  cJSON *list = cJSON_Parse(text), *en;
  free(text);
  long long ld = -1;
  cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, "forward")) {
    const cJSON *gm = cJSON_GetObjectItem(en, "gemm");
    if (gm && (int)cJSON_GetObjectItem(gm, "N")->valuedouble == vocab)
      ld = (long long)cJSON_GetObjectItem(gm, "ldc")->valuedouble;
  }
  cJSON_Delete(list);
  return ld;
}

/* An odd vocabulary (67): the layout pads the logits' rows to 128 (passes/layout.h),
 * so the LM-head GEMMs run with N = 67, ld = 128 and the cross-entropy kernels read
 * 67 of every 128; the emulated GPU still trains as the CPU trainer, whose program
 * keeps the rows contiguous. */
static void test_odd_vocab(void) {
  EmuRun c = {0}, g = {0};
  EXPECT(emu_make_plan("pv67", "--schedule 2bw -D vocab=67"));
  long long ld = lm_head_ldc("pv67", 67);
  printf("  vocab 67: LM-head GEMM ldc %lld\n", ld);
  EXPECT(ld == 128);
  if (run_cpu("pv67", &c) && run_emu("pv67", &g)) compare("vocab 67", &c, &g);
  free(c.w);
  free(g.w);
}

/* A plan made with --backend cpu has no launch lists: a message naming the stage. */
static void test_cpu_only_plan(void) {
  EXPECT(emu_make_plan("pcpu", "--backend cpu"));
  char dir[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "pcpu");
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  ExecDevice *t = p ? cx_exec_device(&ops, p, 0, GEMM_PLAN, p->b * p->m, err, sizeof err) : NULL;
  EXPECT(t == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage 0 has no CUDA program") != NULL && strstr(err, "--backend cpu") != NULL);
  exec_device_destroy(t);
  rt_plan_free(p);
}

/* stage0.cu edited after pd2bwc: its hash no longer matches; refused before loading. */
static void test_edited_source(void) {
  char cmd[512], err[RT_ERR_LEN] = "";
  EXPECT(emu_make_plan("p2bw", "--schedule 2bw"));
  snprintf(cmd, sizeof cmd, "cp -r '%s/p2bw' '%s/pedit' && echo '// edited' >> '%s/pedit/stage0.cu'", tmp, tmp, tmp);
  EXPECT(system(cmd) == 0);
  snprintf(cmd, sizeof cmd, "%s/pedit", tmp);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxProgram *prog = cx_program_load(&ops, cmd, 0, GEMM_PLAN, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.cu") != NULL && strstr(err, "hash") != NULL);
  cx_program_free(prog);
}

int main(int argc, char **argv) {
  const char *part =
      emu_test_begin(argc, argv, true, "usage: test_cudaexec_emu PD2BWC [all|2bw|gpipe|vocab67|upd2bw|updgpipe|updsgd|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "gpipe")) {
    RUN(test_gpipe);
    RUN(test_1f1b_graphs);
  }
  if (emu_test_part(part, "vocab67")) RUN(test_odd_vocab);
  if (emu_test_part(part, "upd2bw")) RUN(test_update_2bw);
  if (emu_test_part(part, "updgpipe")) RUN(test_update_gpipe);
  if (emu_test_part(part, "updsgd")) RUN(test_update_sgd);
  if (emu_test_part(part, "errors")) {
    RUN(test_cpu_only_plan);
    RUN(test_edited_source);
  }
  free(cpu2bw.w);
  free(emu2bw.w);
  emu_test_end();
  return TEST_REPORT();
}
