/* tests/cudaexec/test_cudaexec_epilogue.c — GEMM epilogues (pd2bwc --gemm-epilogues
 * on) train to the same bits as the separate kernels, without a GPU.
 *
 * The device is the host CUDA emulator of emu_device.h (the model, data and runs are
 * emu_train.h's: a one-layer GPT with dropout): it runs a GEMM's epilogue as the
 * library kernels the unfused launch list launches (pkc_add_bias_fwd_f32,
 * pkc_gelu_fwd_f32, pkc_gelu_bwd_f32, pkc_bias_grad_f32 at the generated block size),
 * so a plan with epilogues must train BIT-identically to the same plan without:
 * every microbatch loss, step norm and final weight. That holds only if the code
 * generator moved the right ops into the right GEMMs, pointed C, aux and the bias
 * where the unfused ops wrote and read, accumulated the bias gradients, and moved no
 * op past one that touches its bytes; and if the executor decoded the epilogue and
 * handed it to the device. Counts (graphs off, so every GEMM and launch is counted):
 * per microbatch and layer the forward has one "bias" GEMM (qkv: the attention and
 * MLP projections keep their bias in the fused dropout + residual kernel) and one
 * "gelu_aux_bias" (fc), the backward one "dgelu" and four "bgradb"; the GEMM count is
 * unchanged and 7 kernel launches fewer (the qkv bias, the fused bias + GELU, the
 * gelu_bwd and four bias_grad). Both runs are also within test_cudaexec_emu's float32
 * bound of the CPU trainer.
 * Parts: fp32 (2bw), bf16 (gpipe, --precision bf16: no bgradb there, the bias
 * gradient keeps its float32 kernel), errors (damaged epilogues, and GEMM dtypes that are
 * no launch list's: "plan", "bf16_out", refused at load).
 *
 *   test_cudaexec_epilogue PD2BWC [all|fp32|bf16|errors]   (run in the source tree)
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "emu_train.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudaexec-epi-XXXXXX";

#define FP32_TOL 2e-5 /* test_cudaexec_emu's float32 bound on the losses */
#define LAYERS 1      /* emu_train.c's model */

static bool same_bits(const EmuRun *a, const EmuRun *b) {
  return memcmp(a->mb, b->mb, sizeof a->mb) == 0 && memcmp(a->norm, b->norm, sizeof a->norm) == 0 && a->nw == b->nw &&
         memcmp(a->w, b->w, (size_t)a->nw * sizeof *a->w) == 0;
}

/* plan `flags` with epilogues on and off: same bits, the counts of the file comment. */
static void on_off(const char *flags, bool bf16) {
  char on[256], off[256];
  snprintf(on, sizeof on, "%s --gemm-epilogues on", flags);
  snprintf(off, sizeof off, "%s --gemm-epilogues off", flags);
  EXPECT(emu_make_plan("pon", on));
  EXPECT(emu_make_plan("poff", off));
  EmuRun cpu = {0}, r1 = {0}, r0 = {0};
  emu_device_set_graphs(false);
  bool ok = emu_run_cpu("poff", &cpu) && emu_run_gpu("pon", &r1) && emu_run_gpu("poff", &r0);
  emu_device_set_graphs(true);
  EXPECT(ok);
  if (ok) {
    const EmuCounts *a = &r1.counts, *b = &r0.counts;
    int per = EMU_STEPS * EMU_MB * LAYERS;
    printf("  epilogues on: %d GEMMs (bias %d, gelu_aux_bias %d, dgelu %d, bgradb %d), %d launches; off: %d GEMMs, "
           "%d launches\n",
           a->gemms, a->epilogues[GEMM_EPI_BIAS], a->epilogues[GEMM_EPI_GELU_AUX_BIAS], a->epilogues[GEMM_EPI_DGELU],
           a->epilogues[GEMM_EPI_BGRADB], a->launches, b->gemms, b->launches);
    EXPECT(a->epilogues[GEMM_EPI_BIAS] == per && a->epilogues[GEMM_EPI_GELU_AUX_BIAS] == per);
    EXPECT(a->epilogues[GEMM_EPI_DGELU] == per && a->epilogues[GEMM_EPI_BGRADB] == (bf16 ? 0 : 4 * per));
    EXPECT(b->epilogues[GEMM_EPI_NONE] == b->gemms && a->gemms == b->gemms);
    EXPECT(a->launches == b->launches - (bf16 ? 3 : 7) * per);
    bool same = same_bits(&r1, &r0);
    printf("  on vs off: %s; cpu vs on %.2e, vs off %.2e\n", same ? "bit-identical" : "DIFFERENT",
           emu_losses_diff(&cpu, &r1, 0), emu_losses_diff(&cpu, &r0, 0));
    EXPECT(same);
    if (!bf16) EXPECT(emu_losses_diff(&cpu, &r1, 0) <= FP32_TOL);
    EXPECT(r1.bad_ids == 0);
  }
  free(cpu.w);
  free(r1.w);
  free(r0.w);
}

static void test_fp32(void) { on_off("--schedule 2bw --precision fp32", false); }
static void test_bf16(void) { on_off("--schedule gpipe --precision bf16", true); }

/* stage0.launch.json of WORKDIR/pon with the first GEMM carrying epilogue `kind`
 * edited by `edit`, then loaded: refused with a message containing `want`. */
static void damaged(const char *kind, void (*edit)(cJSON *gm), const char *want) {
  char dir[256], path[300], ioerr[IO_ERR_LEN], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "pon");
  snprintf(path, sizeof path, "%s/stage0.launch.json", dir);
  size_t n = 0;
  char *text = io_read_all(path, &n, ioerr, sizeof ioerr);
  EXPECT(text != NULL);
  if (!text) return;
  cJSON *list = cJSON_ParseWithLength(text, n), *en;
  cJSON *gm = NULL;
  for (int pass = 0; pass < 2 && !gm; pass++)
    cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, pass ? "backward" : "forward")) {
      cJSON *g = cJSON_GetObjectItem(en, "gemm");
      if (g && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(g, "epilogue")) ?: "", kind) == 0) {
        gm = g;
        break;
      }
    }
  EXPECT(gm != NULL);
  if (gm) {
    edit(gm);
    char *out = cJSON_PrintUnformatted(list);
    FILE *f = fopen(path, "w");
    EXPECT(f && fputs(out, f) >= 0 && fclose(f) == 0);
    free(out);
    CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
    CxProgram *p = cx_program_load(&ops, dir, 0, GEMM_PLAN, err, sizeof err);
    printf("  %s\n", err);
    EXPECT(p == NULL && strstr(err, want) != NULL);
    cx_program_free(p);
  }
  cJSON_Delete(list);
  FILE *f = fopen(path, "w"); /* restored for the next case */
  EXPECT(f && fwrite(text, 1, n, f) == n && fclose(f) == 0);
  free(text);
}

static void unknown_kind(cJSON *gm) { cJSON_ReplaceItemInObject(gm, "epilogue", cJSON_CreateString("relu_bias")); }
static void far_bias(cJSON *gm) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(gm, "bias"), "offset", cJSON_CreateNumber(1e9));
}
static void no_aux(cJSON *gm) { cJSON_DeleteItemFromObject(gm, "aux"); }
static void padded_aux(cJSON *gm) {
  cJSON_ReplaceItemInObject(gm, "ldaux", cJSON_CreateNumber(cJSON_GetObjectItem(gm, "N")->valuedouble + 8));
}

/* GemmType names that are no launch-list dtype (contract/contract.h gemm_type_parse):
 * "plan" is only an override, "bf16_out" only the GPU op checks'. */
static void dtype_plan(cJSON *gm) { cJSON_ReplaceItemInObject(gm, "dtype", cJSON_CreateString("plan")); }
static void dtype_bf16_out(cJSON *gm) { cJSON_ReplaceItemInObject(gm, "dtype", cJSON_CreateString("bf16_out")); }

static void test_errors(void) {
  EXPECT(emu_make_plan("pon", "--schedule 2bw --gemm-epilogues on"));
  damaged("bias", unknown_kind, "GEMM epilogue is not none, bias, gelu_aux_bias, dgelu or bgradb");
  damaged("bias", far_bias, "outside the block");
  damaged("gelu_aux_bias", no_aux, "without its bias or aux");
  damaged("dgelu", padded_aux, "aux rows padded");
  damaged("bias", dtype_plan, "GEMM dtype is not fp32, tf32 or bf16");
  damaged("bias", dtype_bf16_out, "GEMM dtype is not fp32, tf32 or bf16");
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudaexec_epilogue PD2BWC [all|fp32|bf16|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "fp32")) RUN(test_fp32);
  if (emu_test_part(part, "bf16")) RUN(test_bf16);
  if (emu_test_part(part, "errors")) RUN(test_errors);
  emu_test_end();
  return TEST_REPORT();
}
