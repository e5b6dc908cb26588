/* tests/cudagen/test_cudagen.c — the CUDA stage programs of small models.
 *
 * Built through the IR API (tests/ir/build_models.h, tests/codegen/gpt_dropout.h),
 * so it needs neither the front end nor the planner:
 *  - golden: the tiny GPT's stage0.cu (the helpers' text elided) and its launch list
 *    equal tests/golden/codegen/tinygpt.stage0.cu / .launch.json (PD2BW_REGEN=1
 *    rewrites them); generation is deterministic;
 *  - the kernel library (kernels.cu): every library kernel and only the head size
 *    from the model, so two models with the same head size share its text, and a
 *    different head size changes it;
 *  - the launch list is well-formed against the source and the layout, and its GEMMs
 *    are the CPU program's (cudagen_check.h), for whole models and for a two-stage
 *    cut, fused and unfused;
 *  - fusion: bias+gelu and dropout+residual-add kernels exist; dropout draws from the
 *    same (seed, forward op id, microbatch) streams as the CPU program;
 *  - codegen_cuda_stage writes the three files (kernels.cu, stageN.cu, its launch
 *    list) and the stage JSON, and an unwritable directory is an error with no file
 *    left behind;
 *  - with the CUDA toolkit: NVRTC compiles the GPT-with-dropout stage and its library
 *    for sm_90 (every golden plan, both architectures: test_cudagen_plans_nvrtc*), and
 *    each cubin holds every kernel the launch list names in that module.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "cudagen_check.h"
#include "cudagen_util.h"
#include "gpt_dropout.h"
#include "passes/passes.h"
#include "kernels/cuda_kernel_list.h"
#include "test.h"
#ifdef PD2BW_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

static const char *const BEGIN = "/* ==== kernels/philox.h and cuda_helpers.cuh, verbatim ==== */\n";
static const char *const END = "/* ==== end of the helpers ==== */\n";

static const CodegenCudaOptions FUSED = {.fuse = true, .gemm = GEMM_TF32};
static const CodegenCudaOptions UNFUSED = {.fuse = false, .gemm = GEMM_FP32};

static char *without_kernels(const char *src) {
  const char *b = strstr(src, BEGIN), *e = strstr(src, END);
  EXPECT(b && e && b < e);
  if (!b || !e) return pd_strdup(src);
  size_t n = strlen(src) + 128;
  char *out = pd_malloc(n);
  snprintf(out, n, "%.*s%s/* (the helpers' text, elided in the golden file) */\n%s", (int)(b - src), src, BEGIN, e);
  return out;
}

/* Generates stage `stage` = regions [r0, r1] both ways and checks list and GEMMs. */
static void check_stage(Graph *g, int r0, int r1, int64_t b, const CodegenCudaOptions *o, char **src_out,
                        cJSON **list_out) {
  StageLayout *L = layout_stage(g, r0, r1, b);
  cJSON *list = NULL;
  char *src = codegen_cuda_source(g, L, 0, o, &list);
  char *lib = codegen_cuda_library_source(g);
  EXPECT(src != NULL && list != NULL);
  EXPECT_EQ_INT(check_launch_list(list, lib, src), 0);
  free(lib);
  char *csrc = codegen_c_source(g, L, 0, &(CodegenOptions){.fuse = true});
  int ng = 0;
  EXPECT_EQ_INT(check_gemms_match_cpu(list, csrc, &ng), 0);
  EXPECT(ng > 0);
  free(csrc);
  layout_destroy(L);
  if (src_out) *src_out = src;
  else free(src);
  if (list_out) *list_out = list;
  else cJSON_Delete(list);
}

static Graph *gpt(Arena *a, double p) {
  Diag d;
  diag_init(&d, stderr);
  Graph *g = p > 0 ? build_gpt_dropout(a, &d, 64, 16, 32, 2, 2, p) : build_tiny_gpt(a, &d, 64, 16, 32, 2, 2);
  EXPECT(g != NULL);
  EXPECT(pass_autodiff(g, &d));
  return g;
}

static void test_golden_tinygpt(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a, 0);
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, 2);
  cJSON *list = NULL;
  char *src = codegen_cuda_source(g, L, 0, &FUSED, &list);
  char *got = without_kernels(src);
  EXPECT(cg_golden("tests/golden/codegen/tinygpt.stage0.cu", got));
  /* the launch list, without the sources' hashes (they cover the kernels' text) */
  cJSON_DeleteItemFromObjectCaseSensitive(list, "hash");
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(list, "library"), "hash");
  char *text = cJSON_Print(list);
  size_t n = strlen(text);
  char *withnl = pd_malloc(n + 2);
  memcpy(withnl, text, n);
  withnl[n] = '\n', withnl[n + 1] = 0;
  EXPECT(cg_golden("tests/golden/codegen/tinygpt.stage0.launch.json", withnl));
  free(withnl);
  free(text);
  /* deterministic */
  cJSON *list2 = NULL;
  char *again = codegen_cuda_source(g, L, 0, &FUSED, &list2);
  EXPECT(strcmp(again, src) == 0);
  cJSON_DeleteItemFromObjectCaseSensitive(list2, "hash");
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(list2, "library"), "hash");
  EXPECT(cJSON_Compare(list, list2, 1));
  cJSON_Delete(list2);
  free(again);
  free(got);
  free(src);
  cJSON_Delete(list);
  layout_destroy(L);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_lists_and_gemms(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a, 0.1);
  int last = g->nregions - 1;
  check_stage(g, 0, last, 2, &FUSED, NULL, NULL);
  check_stage(g, 0, last, 3, &UNFUSED, NULL, NULL);
  check_stage(g, 0, 1, 2, &FUSED, NULL, NULL);    /* a first stage: sends its boundary */
  check_stage(g, 2, last, 2, &FUSED, NULL, NULL); /* a last stage: receives it */
  check_stage(g, 1, 1, 1, &UNFUSED, NULL, NULL);  /* a middle block */
  graph_destroy(g);
  arena_destroy(a);
  Arena *a2 = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *m = build_mlp(a2, &d, 8, 16, 4);
  EXPECT(pass_autodiff(m, &d));
  check_stage(m, 0, m->nregions - 1, 4, &FUSED, NULL, NULL);
  check_stage(m, 0, m->nregions - 1, 4, &UNFUSED, NULL, NULL);
  graph_destroy(m);
  arena_destroy(a2);
}

/* The checker itself must catch a wrong list: corrupt one offset, one argument type,
 * one kernel's module, the library's hash, one GEMM shape. */
static void test_checker_catches_errors(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a, 0.1);
  char *src = NULL;
  cJSON *list = NULL;
  check_stage(g, 0, g->nregions - 1, 2, &FUSED, &src, &list);
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, 2);
  char *csrc = codegen_c_source(g, L, 0, &(CodegenOptions){.fuse = true});
  char *lib = codegen_cuda_library_source(g);
  /* 1: a pointer past its block */
  cJSON *copy = cJSON_Duplicate(list, 1);
  cJSON *en, *first = cJSON_GetArrayItem(cJSON_GetObjectItem(copy, "forward"), 0);
  cJSON *arg0 = cJSON_GetArrayItem(cJSON_GetObjectItem(first, "args"), 0);
  EXPECT(arg0 != NULL);
  if (arg0) cJSON_SetNumberValue(cJSON_GetObjectItem(arg0, "offset"), 1e12);
  EXPECT(check_launch_list(copy, lib, src) > 0);
  cJSON_Delete(copy);
  /* 2: an argument of the wrong type */
  copy = cJSON_Duplicate(list, 1);
  first = cJSON_GetArrayItem(cJSON_GetObjectItem(copy, "forward"), 0);
  cJSON *args = cJSON_GetObjectItem(first, "args");
  cJSON *last = cJSON_GetArrayItem(args, cJSON_GetArraySize(args) - 1);
  if (last) cJSON_ReplaceItemInObject(last, "type", cJSON_CreateString("f64"));
  EXPECT(check_launch_list(copy, lib, src) > 0);
  cJSON_Delete(copy);
  /* 3: a library kernel said to be the stage's, and a stage kernel the library's */
  for (int want_lib = 0; want_lib < 2; want_lib++) {
    copy = cJSON_Duplicate(list, 1);
    bool flipped = false;
    cJSON_ArrayForEach(en, cJSON_GetObjectItem(copy, "forward")) {
      cJSON *m = cJSON_GetObjectItem(en, "module");
      if (flipped || !m || (strcmp(m->valuestring, "library") == 0) != (want_lib == 0)) continue;
      cJSON_ReplaceItemInObject(en, "module", cJSON_CreateString(want_lib ? "library" : "stage"));
      flipped = true;
    }
    EXPECT(flipped);
    EXPECT(check_launch_list(copy, lib, src) > 0);
    cJSON_Delete(copy);
  }
  /* 4: a list naming another library (its hash) */
  copy = cJSON_Duplicate(list, 1);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(copy, "library"), "hash", cJSON_CreateString("0123456789abcdef"));
  EXPECT(check_launch_list(copy, lib, src) > 0);
  cJSON_Delete(copy);
  /* 5: a GEMM with a different K */
  copy = cJSON_Duplicate(list, 1);
  cJSON *gm = NULL;
  cJSON_ArrayForEach(en, cJSON_GetObjectItem(copy, "backward")) if (!gm) gm = cJSON_GetObjectItem(en, "gemm");
  EXPECT(gm != NULL);
  if (gm) cJSON_SetNumberValue(cJSON_GetObjectItem(gm, "K"), cJSON_GetObjectItem(gm, "K")->valuedouble + 1);
  int ng = 0;
  EXPECT(check_gemms_match_cpu(copy, csrc, &ng) > 0);
  cJSON_Delete(copy);
  free(lib);
  free(csrc);
  free(src);
  cJSON_Delete(list);
  layout_destroy(L);
  graph_destroy(g);
  arena_destroy(a);
}

/* Fusion and the RNG streams. */
static void test_fusion_and_dropout_streams(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a, 0.1);
  char *src = NULL, *plain = NULL;
  cJSON *list = NULL, *plist = NULL;
  check_stage(g, 0, g->nregions - 1, 2, &FUSED, &src, &list);
  check_stage(g, 0, g->nregions - 1, 2, &UNFUSED, &plain, &plist);
  EXPECT(strstr(src, "void fused0(") != NULL);
  EXPECT(strstr(plain, "void fused0(") == NULL);
  /* bias + gelu in one kernel, bias + dropout + residual add in another */
  bool bias_gelu = false, bias_drop_add = false;
  for (const char *p = src; (p = strstr(p, "/* fused: bias of linear")) != NULL; p++) {
    const char *eol = strchr(p, '\n');
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(eol - p), p);
    if (strstr(line, "gelu(op")) bias_gelu = true;
    if (strstr(line, "dropout(op") && strstr(line, "add(op")) bias_drop_add = true;
  }
  EXPECT(bias_gelu);
  EXPECT(bias_drop_add);
  /* Fewer launches when fused. */
  EXPECT(cJSON_GetArraySize(cJSON_GetObjectItem(list, "forward")) <
         cJSON_GetArraySize(cJSON_GetObjectItem(plist, "forward")));
  /* Every dropout (forward and backward) and attention draws from the stream of its
   * FORWARD op id, in both programs: relative to the stage's rng_base in both. */
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, 2);
  int op_base[2] = {codegen_rng_base(L), g->nops}; /* the list's "op" is relative to them */
  for (int k = 0; k < L->nbwd; k++)
    if (L->bwd_ops[k] < op_base[1]) op_base[1] = L->bwd_ops[k];
  char *csrc = codegen_c_source(g, L, 0, &(CodegenOptions){.fuse = true});
  int ndrop = 0;
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    if (!(op_info[op->kind].flags & OPF_RNG)) continue;
    int stream = op->fwd_op >= 0 ? op->fwd_op : op->id;
    /* the C program: relative to its rng_base, which the runtime passes (stage ABI 2) */
    char want_cpu[96], want_cpu_fused[96];
    int rel = stream - codegen_rng_base(L);
    snprintf(want_cpu, sizeof want_cpu, "(PkRng){ctx->seed, ctx->rng_base + %du, ctx->microbatch}", rel);
    snprintf(want_cpu_fused, sizeof want_cpu_fused, "pk_rng_block(ctx->seed, ctx->rng_base + %du, ctx->microbatch,",
             rel);
    /* unfused list: the op's launch passes u32 `stream` right after the seed */
    bool found = false;
    const cJSON *dirs[2] = {cJSON_GetObjectItem(plist, "forward"), cJSON_GetObjectItem(plist, "backward")}, *en;
    for (int d = 0; d < 2; d++)
      cJSON_ArrayForEach(en, dirs[d]) {
        if ((int)cJSON_GetObjectItem(en, "op")->valuedouble != o - op_base[d] || !cJSON_GetObjectItem(en, "kernel"))
          continue;
        const cJSON *ar, *prev = NULL;
        cJSON_ArrayForEach(ar, cJSON_GetObjectItem(en, "args")) {
          const cJSON *rt = prev ? cJSON_GetObjectItem(prev, "runtime") : NULL;
          if (rt && strcmp(rt->valuestring, "seed") == 0) {
            EXPECT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(ar, "runtime")), "rng_base");
            EXPECT_EQ_INT((int)cJSON_GetObjectItem(ar, "value")->valuedouble, rel);
            found = true;
          }
          prev = ar;
        }
      }
    EXPECT(found);
    if (op->kind == OP_DROPOUT || op->kind == OP_DROPOUT_BWD) {
      ndrop++;
      /* the CPU program keys it the same way, fused or not */
      EXPECT(strstr(csrc, want_cpu) != NULL || strstr(csrc, want_cpu_fused) != NULL);
    }
  }
  EXPECT(ndrop >= 4);
  /* the fused GPU kernels draw only from forward dropout ops' streams */
  int nfused_rng = 0;
  for (const char *p = src; (p = strstr(p, "pk_rng_block(seed, ")) != NULL; p++) {
    int id = -1, used = 0;
    if (sscanf(p, "pk_rng_block(seed, rng_base + %du, microbatch, (pkc_u64)i >> 2)%n", &id, &used) != 1 || used == 0)
      continue; /* the library's own calls */
    nfused_rng++;
    id += op_base[0];
    EXPECT(id >= 0 && id < g->nops && g->ops[id].kind == OP_DROPOUT);
  }
  EXPECT(nfused_rng > 0);
  free(csrc);
  layout_destroy(L);
  free(src);
  free(plain);
  cJSON_Delete(list);
  cJSON_Delete(plist);
  graph_destroy(g);
  arena_destroy(a);
}

/* Stages with the same program share one .cu and one launch list (issue 14: a
 * 98-stage GPT wrote 98 of each): a 4-block GPT with dropout cut as embeddings | block
 * 0 | block 1 | blocks 2-3 and the head. Stages 1 and 2 name stage1.cu and
 * stage1.launch.json (no stage2.* is written) and keep their own rng_base, so their
 * dropout streams stay distinct; stages 0 and 3 run files of their own. */
static void test_shared_stage_files(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_gpt_dropout(a, &d, 64, 16, 32, 2, 4, 0.1);
  EXPECT(g != NULL && pass_autodiff(g, &d));
  char dir[] = "/tmp/pd2bw-test-cudagen-XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  EXPECT_EQ_INT(g->nregions, 6); /* embeddings, 4 blocks, head */
  int first[] = {0, 1, 2, 3}, last[] = {0, 1, 2, g->nregions - 1};
  cJSON *stages = cJSON_CreateArray();
  EXPECT(codegen_cuda_stages(g, first, last, 4, 2, &FUSED, dir, stages, &d));
  const char *src[4], *ll[4];
  double base[4];
  for (int i = 0; i < 4; i++) {
    cJSON *cu = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(stages, i), "program"), "cuda");
    src[i] = cJSON_GetStringValue(cJSON_GetObjectItem(cu, "source"));
    ll[i] = cJSON_GetStringValue(cJSON_GetObjectItem(cu, "launch_list"));
    base[i] = cJSON_GetNumberValue(cJSON_GetObjectItem(cu, "rng_base"));
    printf("  stage %d: %s, %s, rng_base %g\n", i, src[i] ? src[i] : "?", ll[i] ? ll[i] : "?", base[i]);
  }
  EXPECT_STREQ(src[1], "stage1.cu");
  EXPECT_STREQ(src[2], "stage1.cu");
  EXPECT_STREQ(ll[1], "stage1.launch.json");
  EXPECT_STREQ(ll[2], "stage1.launch.json");
  EXPECT(base[1] > base[0] && base[2] > base[1] && base[3] > base[2]);
  EXPECT(src[3] && strcmp(src[3], "stage1.cu") != 0);
  EXPECT(ll[0] && ll[3] && strcmp(ll[0], "stage0.launch.json") == 0 && strcmp(ll[3], "stage3.launch.json") == 0);
  char p[600];
  snprintf(p, sizeof p, "%s/stage2.cu", dir);
  EXPECT(access(p, F_OK) != 0);
  snprintf(p, sizeof p, "%s/stage2.launch.json", dir);
  EXPECT(access(p, F_OK) != 0);
  /* the shared .cu says who runs it; the list names it, and both stages load it */
  snprintf(p, sizeof p, "%s/stage1.cu", dir);
  char *cu1 = cg_read_all(p);
  EXPECT(cu1 && strstr(cu1, "Also the program of stages 2:") != NULL);
  free(cu1);
  const char *names[] = {"stage0.cu", "stage0.launch.json", "stage1.cu", "stage1.launch.json", "stage3.cu",
                         "stage3.launch.json", CODEGEN_CUDA_LIBRARY};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[k]);
    unlink(p); /* stage0.cu may be stage 3's too: no check */
  }
  EXPECT(rmdir(dir) == 0); /* nothing else was written */
  cJSON_Delete(stages);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_stage_files(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a, 0.1);
  char dir[] = "/tmp/pd2bw-test-cudagen-XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  Diag d;
  diag_init(&d, stderr);
  int first[] = {0, 2}, last[] = {1, g->nregions - 1};
  cJSON *stages = cJSON_CreateArray();
  EXPECT(codegen_c_stages(g, first, last, 2, 2, &(CodegenOptions){.fuse = true}, dir, stages, &d));
  EXPECT(codegen_cuda_stages(g, first, last, 2, 2, &FUSED, dir, stages, &d));
  for (int i = 0; i < 2; i++) {
    char p[512];
    cJSON *prog = cJSON_GetObjectItem(cJSON_GetArrayItem(stages, i), "program");
    cJSON *cu = cJSON_GetObjectItem(prog, "cuda");
    EXPECT(cJSON_GetObjectItem(prog, "source") != NULL); /* the C program's entry survives */
    EXPECT(cu != NULL);
    if (!cu) continue;
    snprintf(p, sizeof p, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(cu, "source")));
    char *src = cg_read_all(p);
    snprintf(p, sizeof p, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(cu, "launch_list")));
    char *lt = cg_read_all(p);
    snprintf(p, sizeof p, "%s/stage%d.c", dir, i);
    char *csrc = cg_read_all(p);
    EXPECT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(cu, "library")), CODEGEN_CUDA_LIBRARY);
    snprintf(p, sizeof p, "%s/%s", dir, CODEGEN_CUDA_LIBRARY);
    char *lib = cg_read_all(p);
    EXPECT(src && lt && csrc && lib);
    if (src && lt && csrc && lib) {
      char h[17];
      codegen_hash_hex(src, strlen(src), h);
      EXPECT_STREQ(h, cJSON_GetStringValue(cJSON_GetObjectItem(cu, "hash")));
      codegen_hash_hex(lib, strlen(lib), h);
      EXPECT_STREQ(h, cJSON_GetStringValue(cJSON_GetObjectItem(cu, "library_hash")));
      cJSON *list = cJSON_Parse(lt);
      EXPECT(list != NULL);
      EXPECT_EQ_INT(check_launch_list(list, lib, src), 0);
      int ng = 0;
      EXPECT_EQ_INT(check_gemms_match_cpu(list, csrc, &ng), 0);
      EXPECT(cJSON_Compare(cJSON_GetObjectItem(list, "kernels"), cJSON_GetObjectItem(cu, "kernels"), 1));
      EXPECT(cJSON_GetArraySize(cJSON_GetObjectItem(cu, "kernels")) > 5);
      cJSON_Delete(list);
    }
    free(src), free(lt), free(csrc), free(lib);
    snprintf(p, sizeof p, "%s/stage%d.cu", dir, i), unlink(p);
    snprintf(p, sizeof p, "%s/stage%d.launch.json", dir, i), unlink(p);
    snprintf(p, sizeof p, "%s/stage%d.c", dir, i), unlink(p);
  }
  cJSON_Delete(stages);
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, CODEGEN_CUDA_LIBRARY);
  EXPECT(unlink(p) == 0);
  /* An unwritable place: an error naming it, nothing left behind. */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/no/such/dir", dir);
  FILE *devnull = fopen("/dev/null", "w");
  Diag d2;
  diag_init(&d2, devnull);
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, 2);
  cJSON *sj = cJSON_CreateObject();
  EXPECT(!codegen_cuda_stage(g, L, 0, &FUSED, bad, sj, &d2));
  EXPECT(d2.nerrors > 0);
  EXPECT(cJSON_GetObjectItem(sj, "cuda") == NULL);
  cJSON_Delete(sj);
  fclose(devnull);
  layout_destroy(L);
  EXPECT(rmdir(dir) == 0); /* empty: no temp or partial file anywhere */
  graph_destroy(g);
  arena_destroy(a);
}

#ifdef PD2BW_HAVE_CUDA
/* Compiles one module and checks it holds every kernel the list launches from it
 * (module "library" or "stage"); returns how many that is. */
static int compile_and_check(const char *src, const cJSON *list, const char *module, int arch, const char *cache) {
  CudaCompileOptions co = {arch, module, cache, NULL, 0};
  CudaBinary bin;
  char *err = NULL;
  bool ok = cuda_nvrtc_compile(src, &co, &bin, &err);
  if (!ok) fprintf(stderr, "%s\n", err ? err : "?");
  EXPECT(ok);
  int n = 0;
  if (ok) {
    EXPECT(!bin.cache_hit);
    CG_FOR_EACH_LAUNCH(en, list) {
      const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(en, "kernel"));
      if (!k || strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(en, "module")), module) != 0) continue;
      if (!cuda_cubin_has_symbol(&bin, k)) fprintf(stderr, "  sm_%d %s cubin lacks %s\n", arch, module, k);
      EXPECT(cuda_cubin_has_symbol(&bin, k));
      n++;
    }
    cuda_binary_free(&bin);
  }
  free(err);
  return n;
}

static void test_nvrtc_gpt_stage(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a, 0.1);
  char cache[] = "/tmp/pd2bw-test-cudagen-nvrtc-XXXXXX";
  EXPECT(mkdtemp(cache) != NULL);
  char *src = NULL;
  cJSON *list = NULL;
  check_stage(g, 0, g->nregions - 1, 2, &FUSED, &src, &list);
  char *lib = codegen_cuda_library_source(g);
  /* sm_80, and every golden plan: test_cudagen_plans_nvrtc90/80 */
  EXPECT(compile_and_check(lib, list, "library", 90, cache) > 5);
  EXPECT(compile_and_check(src, list, "stage", 90, cache) > 2);
  free(lib);
  free(src);
  cJSON_Delete(list);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  EXPECT(system(cmd) == 0);
  graph_destroy(g);
  arena_destroy(a);
}
#endif

/* The library holds every library kernel and nothing of the model but its head size:
 * the tiny GPT with and without dropout (other ops, other shapes) share it; another
 * head size, or no attention (the MLP), does not. */
static void test_library_shared(void) {
  Arena *a = arena_create();
  Graph *g1 = gpt(a, 0.1), *g2 = gpt(a, 0);
  Diag d;
  diag_init(&d, stderr);
  Graph *g3 = build_tiny_gpt(a, &d, 64, 16, 32, 4, 2); /* 4 heads: head size 8 */
  Graph *m = build_mlp(a, &d, 8, 16, 4);
  EXPECT(g3 && m);
  char *l1 = codegen_cuda_library_source(g1), *l2 = codegen_cuda_library_source(g2);
  char *l3 = g3 ? codegen_cuda_library_source(g3) : NULL, *lm = m ? codegen_cuda_library_source(m) : NULL;
  EXPECT_STREQ(l1, l2);
  EXPECT(strstr(l1, "#define PKC_ATT_HS 16\n") != NULL);
  EXPECT(l3 && strstr(l3, "#define PKC_ATT_HS 8\n") != NULL);
  EXPECT(lm && strstr(lm, "PKC_ATT_HS 1") == NULL && strstr(lm, "#define PKC_ATT_HS ") == NULL);
  /* every kernel of cuda_kernel_list.h, defined once */
#define HAS_KERNEL(k, kind)                                                                                        \
  {                                                                                                                \
    const char *at = strstr(l1, "__global__ void " #k "(");                                                        \
    EXPECT(at != NULL && strstr(at + 1, "__global__ void " #k "(") == NULL);                                        \
  }
  PKC_KERNEL_LIST(HAS_KERNEL)
#undef HAS_KERNEL
  free(l1), free(l2), free(l3), free(lm);
  if (g3) graph_destroy(g3);
  if (m) graph_destroy(m);
  graph_destroy(g1);
  graph_destroy(g2);
  arena_destroy(a);
}

/* `test_cudagen nvrtc` runs the NVRTC compile alone (CTest test_cudagen_nvrtc, label
 * nvrtc: seconds of NVRTC's own time on every run, out of the unit label). */
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "nvrtc") == 0) {
#ifdef PD2BW_HAVE_CUDA
    RUN(test_nvrtc_gpt_stage);
#else
    fprintf(stderr, "test_cudagen: built without the CUDA toolkit: no nvrtc part\n");
    return 2;
#endif
    return TEST_REPORT();
  }
  RUN(test_golden_tinygpt);
  RUN(test_lists_and_gemms);
  RUN(test_checker_catches_errors);
  RUN(test_fusion_and_dropout_streams);
  RUN(test_stage_files);
  RUN(test_shared_stage_files);
  RUN(test_library_shared);
  return TEST_REPORT();
}
