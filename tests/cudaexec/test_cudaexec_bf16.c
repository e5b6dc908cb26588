/* tests/cudaexec/test_cudaexec_bf16.c — BF16 GEMMs with FP32 master weights train
 * like the CPU trainer, within BF16's precision, without a GPU.
 *
 * The device is the host CUDA emulator of emu_device.h, as in test_cudaexec_emu.c
 * (each stage source compiled as host C++ with tests/cuda/cuda_emu.cpp, device
 * memory = host memory; the model, data and runs are emu_train.h's):
 * launch lists run as the executor decodes them, the cast kernels included. Float32
 * GEMMs run through pd_sgemm; "bf16" GEMMs through the emulator's emu_gemm_bf16
 * (cuda_emu.h: bfloat16 A and B widened exactly, float accumulation), which reads
 * only the 16-bit staging copies the cast launches made, so a missing, misplaced or
 * mis-sized cast shows in the losses.
 *
 * A small GPT with dropout (gpipe, 2 microbatches of 2, a large constant rate) is
 * compiled with --precision fp32 and --precision bf16; 3 steps each from the same
 * initial weights:
 *   - CPU trainer (stage0.c, float32)  vs  emulated fp32 plan: within 2e-5 (the
 *     float32 bound test_cudaexec_emu uses): the harness itself is sound;
 *   - CPU trainer  vs  emulated bf16 plan: every microbatch loss within BF16_TOL =
 *     5e-3 relative (bf16 keeps 8 significant bits: each operand is off by up to
 *     2^-9 = 2e-3 relative; the losses move less: 3.8e-4 at most here);
 *   - emulated bf16  vs  emulated fp32: apart by more than 10x the float32 bound, so
 *     the casts really happen (a list that left the GEMMs float32 would fail);
 *   - every GEMM of the bf16 run was a bf16 GEMM, whose weight operands come from the
 *     bf16 weight copy (no cast of a weight in the launch list; fewer casts than
 *     operands ran), plus the casts of its attention, which ran on the tensor-core
 *     kernels (bf16 q, k, v, dy and probabilities: the losses stayed within the same
 *     bound, 3.9e-4 seen).
 *   - the update (graphs off, so every launch is counted): one multi-tensor AdamW launch
 *     per step, which writes the bf16 copy of the version it writes, and no per-tensor
 *     AdamW; the casts that ran are the lists' (activation operands) x microbatches
 *     plus one per weight version at load: no weight is cast inside a step
 *     (runtime/cuda/exec/cuda_exec_device.c).
 * And (2bw with weight prediction, one stage) the same four runs of a 2bw plan with
 * train.predict = 1 (flushed start K = 1): the bf16 list keeps its bf16 weight copies in
 * the weight versions (bf16_in_versions; docs/update-rules.md, "Memory"), the tied
 * embedding included, whose lookup then reads the copy (pkc_embedding_fwd_bf16_f32);
 * the same bounds hold.
 * Also: a bf16 plan cannot be loaded as fp32/tf32, nor a float32 plan as bf16
 * (cx_program_load's override), each with a message.
 *
 *   test_cudaexec_bf16 PD2BWC    (run in the source tree: it needs tests/cuda/cuda_emu.cpp)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudaexec-bf16-XXXXXX";

#define FP32_PLAN "--schedule gpipe --precision fp32"
#define BF16_PLAN "--schedule gpipe --precision bf16"
#define FP32_TOL 2e-5 /* test_cudaexec_emu's float32 bound on the losses */
#define BF16_TOL 5e-3 /* relative, per microbatch loss (3.7e-4 seen with bf16 attention: 13x margin) */

/* cpu16: the CPU trainer on the bf16 plan's stage0.c (float32 arithmetic, bf16 stash);
 * store: the bf16 list's casts into the stash (a microbatch's) */
static void check_runs(const EmuRun *cpu, const EmuRun *cpu16, const EmuRun *f32, const EmuRun *b16, int store) {
  EXPECT(f32->bad_ids == 0 && b16->bad_ids == 0);
  printf("  step  mb  cpu (fp32)    cpu bf16 plan gpu fp32      gpu bf16\n");
  for (int i = 0; i < EMU_STEPS * EMU_MB; i++)
    printf("  %4d %3d  %.8f  %.8f  %.8f  %.8f\n", i / EMU_MB, i % EMU_MB, cpu->mb[i], cpu16->mb[i], f32->mb[i],
           b16->mb[i]);
  double d32 = emu_losses_diff(cpu, f32, 0), d16 = emu_losses_diff(cpu16, b16, 0), apart = emu_losses_diff(f32, b16, 0);
  double dst = emu_losses_diff(cpu, cpu16, 0);
  printf("  cpu vs gpu fp32 %.2e (bound %.0e); cpu bf16 plan vs gpu bf16 %.2e (bound %.0e); cpu fp32 vs cpu bf16 "
         "plan %.2e (bound %.0e); gpu bf16 vs fp32 %.2e (must exceed %.0e)\n",
         d32, FP32_TOL, d16, BF16_TOL, dst, BF16_TOL, apart, 10 * FP32_TOL);
  EXPECT(d32 <= FP32_TOL);
  EXPECT(d16 <= BF16_TOL);
  EXPECT(dst <= BF16_TOL && dst > 10 * FP32_TOL); /* the CPU program does store bf16 */
  EXPECT(apart > 10 * FP32_TOL);
  /* every GEMM was bf16; a weight operand is read from the bf16 weight copy, only the
   * others are cast (fewer casts than operands, the stash's casts aside), the attention
   * ran on the tensor-core kernels (head size 16) with its casts; the fp32 run had
   * none of these */
  const EmuCounts *b = &b16->counts, *f = &f32->counts;
  /* (with CUDA graphs on, what ran outside them: one microbatch's passes, captured) */
  int gemm_casts = b->casts - store;
  printf("  gpu bf16: %d casts, %d of them into the stash, %d by the attention; %d GEMMs\n", b->casts, store,
         b->att_casts, b->gemms);
  EXPECT(store > 0);
  EXPECT(b->gemms > 0 && b->bf16_gemms == b->gemms && gemm_casts > b->att_casts &&
         gemm_casts < 2 * b->gemms + b->att_casts);
  EXPECT(b->att_casts > 0);
  EXPECT(f->gemms == b->gemms && f->bf16_gemms == 0 && f->casts == 0 && f->att_casts == 0);
  /* it trained: the loss moved by far more than the bf16 bound */
  EXPECT(fabs(b16->mb[EMU_STEPS * EMU_MB - 1] - b16->mb[0]) > 5 * BF16_TOL * b16->mb[0]);
}

static void test_bf16_trains(void) {
  EmuRun cpu = {0}, cpu16 = {0}, f32 = {0}, b16 = {0};
  EXPECT(emu_make_plan("pf32", FP32_PLAN));
  EXPECT(emu_make_plan("pbf16", BF16_PLAN));
  /* the list casts no weight: its GEMMs read the weight copy */
  char dir[256];
  int casts, weight_casts, w16;
  emu_path(dir, sizeof dir, "pbf16");
  EXPECT(emu_list_casts(dir, 0, &casts, &weight_casts, &w16));
  printf("  pbf16's list: %d casts, %d of a weight; %d GEMM operands read params_bf16\n", casts, weight_casts, w16);
  EXPECT(weight_casts == 0 && w16 > 0);
  bool ok = emu_run_cpu("pf32", &cpu) && emu_run_cpu("pbf16", &cpu16) && emu_run_gpu("pf32", &f32) &&
            emu_run_gpu("pbf16", &b16);
  EXPECT(ok);
  if (ok) check_runs(&cpu, &cpu16, &f32, &b16, emu_list_store_casts(dir, 0));
  free(cpu.w);
  free(cpu16.w);
  free(f32.w);
  free(b16.w);
}

static void test_bf16_2bw_predict(void) {
  EmuRun cpu = {0}, cpu16 = {0}, f32 = {0}, b16 = {0};
  const char *k = "--schedule 2bw -D train.flush_steps=1 -D train.predict=1";
  char a32[256], a16[256], dir[256], path[300];
  snprintf(a32, sizeof a32, "%s --precision fp32", k);
  snprintf(a16, sizeof a16, "%s --precision bf16", k);
  EXPECT(emu_make_plan("q32", a32) && emu_make_plan("q16", a16));
  emu_path(dir, sizeof dir, "q16");
  snprintf(path, sizeof path, "%s/stage0.launch.json", dir);
  cJSON *l = emu_read_json(path);
  const cJSON *fold = cJSON_GetObjectItemCaseSensitive(l, "bf16_in_versions"), *e;
  int lookups16 = 0;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(l, "forward")) {
    const cJSON *kn = cJSON_GetObjectItemCaseSensitive(e, "kernel");
    lookups16 += cJSON_IsString(kn) && strcmp(kn->valuestring, "pkc_embedding_fwd_bf16_f32") == 0;
  }
  printf("  q16's list: %d weights read from their versions' bf16 copies, %d lookup(s) of one\n",
         cJSON_GetArraySize(fold), lookups16);
  EXPECT(cJSON_GetArraySize(fold) > 0 && lookups16 == 1);
  cJSON_Delete(l);
  bool ok = emu_run_cpu("q32", &cpu) && emu_run_cpu("q16", &cpu16) && emu_run_gpu("q32", &f32) &&
            emu_run_gpu("q16", &b16);
  EXPECT(ok);
  if (ok) check_runs(&cpu, &cpu16, &f32, &b16, emu_list_store_casts(dir, 0));
  free(cpu.w), free(cpu16.w), free(f32.w), free(b16.w);
}

/* One AdamW launch a step, and no weight cast but at load (the copies are written
 * by the update). */
static void test_bf16_update_writes_copy(void) {
  EXPECT(emu_make_plan("pbf16", BF16_PLAN));
  char dir[256], path[300];
  int casts, weight_casts, w16;
  emu_path(dir, sizeof dir, "pbf16");
  EXPECT(emu_list_casts(dir, 0, &casts, &weight_casts, &w16));
  snprintf(path, sizeof path, "%s/plan.json", dir);
  cJSON *plan = emu_read_json(path);
  const cJSON *st0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(plan, "stages"), 0);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(st0, "weight_versions");
  EXPECT(cJSON_IsNumber(v));
  int versions = cJSON_IsNumber(v) ? v->valueint : 0;
  cJSON_Delete(plan);
  EmuRun b16 = {0};
  emu_device_set_graphs(false);
  bool ok = emu_run_gpu("pbf16", &b16);
  emu_device_set_graphs(true);
  EXPECT(ok);
  const EmuCounts *n = &b16.counts;
  int want = casts * EMU_STEPS * EMU_MB + versions;
  printf("  pbf16, graphs off: AdamW %d multi-tensor, %d per tensor in %d steps; %d casts (want %d: %d in the lists "
         "x %d microbatches + %d weight versions at load)\n",
         n->adamw_multi, n->adamw_one, EMU_STEPS, n->casts, want, casts, EMU_STEPS * EMU_MB, versions);
  EXPECT_EQ_INT(n->adamw_multi, EMU_STEPS);
  EXPECT_EQ_INT(n->adamw_one, 0);
  EXPECT_EQ_INT(n->casts, want);
  free(b16.w);
}

/* models/llama.model in miniature (vocabulary 64 as the tokens, 2 layers of width 64,
 * 2 query heads of 32 over 1 key/value head, SwiGLU 96, T 8, dropout-free): its bf16
 * plan runs attention_gqa on the tensor-core kernels (q, k, v and dy cast to bf16),
 * the fp32 plan on the fp32 ones. Losses: emulated fp32 plan vs CPU within FP32_TOL,
 * emulated bf16 plan vs the CPU trainer on that plan within BF16_TOL, and the two
 * emulated runs apart (the casts happen: with weights of 0.02 bf16 moves these losses
 * by ~6.5e-5, less than the GPT's, so "apart" is only "not equal": 1e-6, where the
 * float32 runs agree to 0). */
#define LLAMA_MINI                                                                                    \
  "-D vocab=64 -D seq=8 -D layers=2 -D dim=64 -D heads=2 -D kv_heads=1 -D ffn=96 -D train.batch=4 " \
  "-D train.microbatch=2 -D train.lr_schedule=constant --schedule gpipe"
static void test_bf16_llama(void) {
  EXPECT(emu_make_plan_of("lf32", "models/llama.model", LLAMA_MINI " --precision fp32"));
  EXPECT(emu_make_plan_of("lbf16", "models/llama.model", LLAMA_MINI " --precision bf16"));
  char path[300];
  emu_path(path, sizeof path, "lbf16/stage0.launch.json");
  FILE *f = fopen(path, "r");
  long size = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
  char *list = calloc((size_t)(size > 0 ? size : 0) + 1, 1);
  if (f && list && size > 0 && fseek(f, 0, SEEK_SET) == 0) list[fread(list, 1, (size_t)size, f)] = 0;
  if (f) fclose(f);
  EXPECT(list && strstr(list, "pkc_flash_attention_gqa_fwd_bf16") && strstr(list, "pkc_flash_attention_gqa_bwd_dq_bf16") &&
         strstr(list, "pkc_flash_attention_gqa_bwd_dkv_bf16"));
  free(list);
  EmuRun cpu = {0}, cpu16 = {0}, f32 = {0}, b16 = {0};
  bool ok = emu_run_cpu("lf32", &cpu) && emu_run_cpu("lbf16", &cpu16) && emu_run_gpu("lf32", &f32) &&
            emu_run_gpu("lbf16", &b16);
  EXPECT(ok);
  if (ok) {
    double d32 = emu_losses_diff(&cpu, &f32, 0), d16 = emu_losses_diff(&cpu16, &b16, 0);
    double apart = emu_losses_diff(&f32, &b16, 0);
    printf("  llama: loss %.6f -> %.6f; cpu vs gpu fp32 %.2e (bound %.0e); cpu bf16 plan vs gpu bf16 %.2e (bound "
           "%.0e); gpu bf16 vs fp32 %.2e (must exceed 1e-6)\n",
           b16.mb[0], b16.mb[EMU_STEPS * EMU_MB - 1], d32, FP32_TOL, d16, BF16_TOL, apart);
    EXPECT(d32 <= FP32_TOL);
    EXPECT(d16 <= BF16_TOL);
    EXPECT(apart > 1e-6);
  }
  free(cpu.w), free(cpu16.w), free(f32.w), free(b16.w);
}

/* The override of cx_program_load cannot mix float32 and bf16 lists. */
static void test_overrides_refused(void) {
  char dir[256], err[RT_ERR_LEN] = "";
  EXPECT(emu_make_plan("pf32", FP32_PLAN));
  EXPECT(emu_make_plan("pbf16", BF16_PLAN));
  emu_path(dir, sizeof dir, "pbf16");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxProgram *prog = cx_program_load(&ops, dir, 0, GEMM_TF32, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.launch.json") && strstr(err, "bf16 GEMM") && strstr(err, "fp32/tf32"));
  cx_program_free(prog);
  prog = cx_program_load(&ops, dir, 0, GEMM_PLAN, err, sizeof err);
  EXPECT(prog != NULL);
  if (prog) EXPECT(cx_program_gemm_type(prog) == GEMM_BF16);
  cx_program_free(prog);
  emu_path(dir, sizeof dir, "pf32");
  err[0] = 0;
  prog = cx_program_load(&ops, dir, 0, GEMM_BF16, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "--precision bf16") != NULL);
  cx_program_free(prog);
}

/* An odd vocabulary (67): the logits' rows are padded to 128 on the GPU (their bf16
 * stash copy and working places too) and contiguous on the CPU; both store the same
 * values as bf16, so the GPU trains as the CPU running the same bf16 plan. */
static void test_bf16_padded_logits(void) {
  EmuRun c = {0}, g = {0};
  EXPECT(emu_make_plan("pv67", BF16_PLAN " -D vocab=67"));
  bool ok = emu_run_cpu("pv67", &c) && emu_run_gpu("pv67", &g);
  EXPECT(ok);
  if (ok) {
    double d = emu_losses_diff(&c, &g, 0), dw = emu_weights_diff(&c, &g);
    printf("  vocab 67, bf16 plan: cpu vs gpu losses %.2e (bound %.0e), weights %.2e\n", d, BF16_TOL, dw);
    EXPECT(g.bad_ids == 0 && d <= BF16_TOL);
    EXPECT(fabs(g.mb[EMU_STEPS * EMU_MB - 1] - g.mb[0]) > 5 * BF16_TOL * g.mb[0]);
  }
  free(c.w);
  free(g.w);
}

int main(int argc, char **argv) {
  if (!emu_test_begin(argc, argv, false, "usage: test_cudaexec_bf16 PD2BWC", tmp)) return 2;
  EXPECT(emu_train_files());
  RUN(test_bf16_trains);
  RUN(test_bf16_update_writes_copy);
  RUN(test_bf16_2bw_predict);
  RUN(test_bf16_padded_logits);
  RUN(test_overrides_refused);
  RUN(test_bf16_llama);
  emu_test_end();
  return TEST_REPORT();
}
