/* tests/cudagen/test_cudagen_epilogue.c — GEMM epilogues in the generated launch list
 * (CodegenCudaOptions.gemm_epilogues, pd2bwc --gemm-epilogues on).
 *
 * The tiny GPT with dropout (tests/codegen/gpt_dropout.h, 2 layers, one stage, fusion
 * on) must use the epilogues for its MLP and projections, and the switch off must
 * use none. Per layer:
 *  - forward: the fc linear + gelu is ONE GEMM with gelu_aux_bias whose C is the
 *    gelu's output and aux the linear's output; the qkv linear's GEMM has "bias"
 *    (the attention and MLP projections' biases stay in their fused dropout + residual
 *    kernels, which add them for free);
 *  - backward: the fc-projection's dx GEMM has dgelu, C = the gelu_bwd's output, aux =
 *    the gelu's input; each of the four dW GEMMs has bgradb into its linear's bias
 *    gradient, accumulating as the layout says;
 *  - no pkc_add_bias_fwd_f32, pkc_gelu_fwd_f32, pkc_gelu_bwd_f32 or pkc_bias_grad_f32
 *    launch is left, and the list is otherwise well-formed (cudagen_check.h, which
 *    sizes operands as float32: not for the bf16 lists);
 *  - bf16 GEMMs: the same but no bgradb (the bias gradient stays float32's kernel);
 *  - the list says "gemm_epilogues": "on" / "off".
 * That the epilogues compute what the kernels did is tests/cudaexec/
 * test_cudaexec_epilogue's part (bit-identical training on the emulator).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

/* the shared helpers define more than this file uses */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cudagen_check.h"
#include "gpt_dropout.h"
#pragma GCC diagnostic pop
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "test.h"

#define LAYERS 2

typedef struct Counts {
  int epi[GEMM_EPI_COUNT];
  int unfused; /* launches of the kernels the epilogues replace */
} Counts;

static bool at(const cJSON *p, const StageLayout *L, int t) {
  const TensorPlace *pl = &L->place[t];
  return strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "buf")), buf_class_name(pl->cls)) == 0 &&
         (int64_t)cJSON_GetObjectItem(p, "offset")->valuedouble == pl->offset;
}

/* The op of kind k (forward or backward pass op ids are relative: op_base) whose
 * output / input sits at pointer p. */
static const Op *writer_at(const Graph *g, const StageLayout *L, OpKind k, const cJSON *p) {
  for (int o = 0; o < g->nops; o++)
    if (g->ops[o].kind == k && at(p, L, g->ops[o].out[0])) return &g->ops[o];
  return NULL;
}

static Counts generate(const Graph *g, const StageLayout *L, GemmType dt, bool on) {
  Counts c = {0};
  CodegenCudaOptions o = {.fuse = true, .gemm = dt, .gemm_epilogues = on};
  cJSON *list = NULL;
  char *src = codegen_cuda_source(g, L, 0, &o, &list);
  char *lib = codegen_cuda_library_source(g);
  if (dt != GEMM_BF16) EXPECT_EQ_INT(check_launch_list(list, lib, src), 0); /* it sizes operands as float32 */
  EXPECT(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(list, "gemm_epilogues")), on ? "on" : "off") == 0);
  static const char *const replaced[] = {"pkc_add_bias_fwd_f32", "pkc_gelu_fwd_f32", "pkc_gelu_bwd_f32",
                                         "pkc_bias_grad_f32"};
  for (int pass = 0; pass < 2; pass++) {
    const cJSON *en;
    cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, pass ? "backward" : "forward")) {
      const cJSON *gm = cJSON_GetObjectItem(en, "gemm");
      if (!gm) {
        for (int i = 0; i < 4; i++) c.unfused += strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(en, "kernel")), replaced[i]) == 0;
        continue;
      }
      const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(gm, "epilogue"));
      GemmEpilogue k = GEMM_EPI_NONE;
      EXPECT(!name || gemm_epilogue_parse(name, &k));
      c.epi[k]++;
      const cJSON *C = cJSON_GetObjectItem(gm, "C"), *aux = cJSON_GetObjectItem(gm, "aux"),
                  *bias = cJSON_GetObjectItem(gm, "bias");
      if (k == GEMM_EPI_GELU_AUX_BIAS) { /* C is a gelu's output, aux its input */
        const Op *ge = writer_at(g, L, OP_GELU, C);
        EXPECT(ge && at(aux, L, ge->in[0]) && writer_at(g, L, OP_LINEAR, aux));
      } else if (k == GEMM_EPI_DGELU) { /* C is a gelu_bwd's output, aux its pre-GELU input */
        const Op *gb = writer_at(g, L, OP_GELU_BWD, C);
        EXPECT(gb && at(aux, L, gb->in[1]));
      } else if (k == GEMM_EPI_BGRADB) { /* the bias gradient of the dW GEMM's dy */
        const Op *bg = writer_at(g, L, OP_BIAS_GRAD, bias);
        EXPECT(bg && at(cJSON_GetObjectItem(gm, "B"), L, bg->in[0]));
        if (bg)
          EXPECT_EQ_INT(cJSON_GetObjectItem(gm, "bias_accumulate")->valueint, L->place[bg->out[0]].accumulate);
      }
    }
  }
  free(lib);
  free(src);
  cJSON_Delete(list);
  return c;
}

static void test_tinygpt(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_gpt_dropout(a, &d, 64, 16, 32, 2, LAYERS, 0.1);
  EXPECT(g != NULL && pass_autodiff(g, &d));
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, 2);
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    GemmType dt = bf16 ? GEMM_BF16 : GEMM_TF32;
    Counts on = generate(g, L, dt, true), off = generate(g, L, dt, false);
    printf("  %s on: bias %d, gelu_aux_bias %d, dgelu %d, bgradb %d, plain %d; replaced kernels left %d (off: %d)\n",
           bf16 ? "bf16" : "tf32", on.epi[GEMM_EPI_BIAS], on.epi[GEMM_EPI_GELU_AUX_BIAS], on.epi[GEMM_EPI_DGELU],
           on.epi[GEMM_EPI_BGRADB], on.epi[GEMM_EPI_NONE], on.unfused, off.unfused);
    EXPECT_EQ_INT(on.epi[GEMM_EPI_GELU_AUX_BIAS], LAYERS);
    EXPECT_EQ_INT(on.epi[GEMM_EPI_BIAS], LAYERS);
    EXPECT_EQ_INT(on.epi[GEMM_EPI_DGELU], LAYERS);
    EXPECT_EQ_INT(on.epi[GEMM_EPI_BGRADB], bf16 ? 0 : 4 * LAYERS);
    EXPECT_EQ_INT(on.unfused, bf16 ? 4 * LAYERS : 0); /* bf16 keeps pkc_bias_grad_f32 */
    int total = 0;
    for (int k = 0; k < GEMM_EPI_COUNT; k++) total += on.epi[k];
    EXPECT_EQ_INT(off.epi[GEMM_EPI_NONE], total); /* same GEMMs, none with an epilogue */
    EXPECT(off.unfused > on.unfused);
  }
  layout_destroy(L);
  graph_destroy(g);
  arena_destroy(a);
}

int main(void) {
  RUN(test_tinygpt);
  return TEST_REPORT();
}
