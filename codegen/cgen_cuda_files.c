/* codegen/cgen_cuda_files.c — a plan's CUDA files (codegen.h): kernels.cu once, and each
 * distinct stage program once.
 *
 * Nothing in a stage's .cu or launch list names the stage (cgen_cuda.c: fused kernels
 * by place, launch entries' op ids and dropout streams relative to per-stage bases), so
 * the middle stages of a deep pipeline generate the same files: a 98-stage GPT writes
 * 2 .cu and 3 launch lists, not 98 of each. Each stage's plan.json program.cuda names
 * the files it runs and the rng_base its streams are relative to. */
#include "codegen/cgen_cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool write_in(const char *dir, const char *name, const char *text, Diag *d) {
  size_t plen = strlen(dir) + strlen(name) + 2;
  char *path = pd_malloc(plen);
  snprintf(path, plen, "%s/%s", dir, name);
  bool ok = cgen_write_file(path, text, strlen(text), d);
  free(path);
  return ok;
}

static void remove_in(const char *dir, const char *name) {
  size_t plen = strlen(dir) + strlen(name) + 2;
  char *path = pd_malloc(plen);
  snprintf(path, plen, "%s/%s", dir, name);
  remove(path);
  free(path);
}

/* The stage's plan.json "cuda" object: the files it runs (maybe another stage's) and
 * what a runtime checks before loading them. */
static void cuda_json(cJSON *prog, const cJSON *list, const CodegenCudaOptions *o, int rng_base, const char *name,
                      const char *hash, const char *lname, const char *lhash) {
  cJSON_DeleteItemFromObjectCaseSensitive(prog, "cuda");
  cJSON *c = cJSON_AddObjectToObject(prog, "cuda");
  cJSON_AddStringToObject(c, "source", name);
  cJSON_AddStringToObject(c, "hash", hash);
  cJSON_AddStringToObject(c, "launch_list", lname);
  cJSON_AddStringToObject(c, "launch_hash", lhash);
  cJSON_AddNumberToObject(c, "rng_base", rng_base);
  const cJSON *lj = cJSON_GetObjectItem(list, "library");
  cJSON_AddStringToObject(c, "library", CODEGEN_CUDA_LIBRARY);
  cJSON_AddStringToObject(c, "library_hash", cJSON_GetStringValue(cJSON_GetObjectItem(lj, "hash")));
  cJSON_AddItemToObject(c, "kernels", cJSON_Duplicate(cJSON_GetObjectItem(list, "kernels"), 1));
  cJSON_AddNumberToObject(c, "att_head_size", cJSON_GetObjectItem(list, "att_head_size")->valuedouble);
  cJSON_AddStringToObject(c, "gemm_dtype", gemm_type_name(o->gemm));
  cJSON_AddStringToObject(c, "mixed_precision", o->gemm == GEMM_BF16 ? "bf16-fp32-master" : "none");
  cJSON_AddStringToObject(c, "gemm_epilogues", o->gemm_epilogues ? "on" : "off");
  cJSON_AddNumberToObject(c, "cuda_scratch",
                          cJSON_GetObjectItem(cJSON_GetObjectItem(list, "blocks"), "cuda_scratch")->valuedouble);
}

/* Stages stage0 .. stage0 + n - 1 (layouts L, plan.json "program" objects prog): the
 * library once, then each distinct program once. Stages whose .cu code is the same
 * (comments aside) share the first one's stage<i>.cu, and stages whose launch lists
 * are then the same text share its stage<i>.launch.json: both name nothing of the
 * stage (fused kernels by place, op ids and dropout streams relative to the stage's
 * bases), so a deep pipeline's middle stages write one of each. */
static bool write_stages(const Graph *g, const StageLayout *const *L, int stage0, int n, const CodegenCudaOptions *o,
                         const char *dir, cJSON *const *prog, Diag *d) {
  char **src = pd_calloc((size_t)n, sizeof *src), **code = pd_calloc((size_t)n, sizeof *code);
  char **text = pd_calloc((size_t)n, sizeof *text);
  cJSON **list = pd_calloc((size_t)n, sizeof *list);
  int *owner = pd_calloc((size_t)n, sizeof *owner), *lowner = pd_calloc((size_t)n, sizeof *lowner);
  char (*name)[64] = pd_calloc((size_t)n, sizeof *name), (*lname)[64] = pd_calloc((size_t)n, sizeof *lname);
  char (*hash)[17] = pd_calloc((size_t)n, sizeof *hash), (*lhash)[17] = pd_calloc((size_t)n, sizeof *lhash);
  for (int i = 0; i < n; i++) {
    src[i] = codegen_cuda_source(g, L[i], stage0 + i, o, &list[i]);
    code[i] = cgen_code_only(src[i]);
  }
  cgen_share_owners(code, n, owner);
  /* the library first (the same bytes for every stage of the plan), so that no stage
   * program exists without the module it launches from */
  char *lib = codegen_cuda_library_source(g);
  bool ok = write_in(dir, CODEGEN_CUDA_LIBRARY, lib, d);
  free(lib);
  int wrote = 0; /* .cu files written, removed again if a launch list cannot be */
  for (int i = 0; i < n && ok; i++) {
    if (owner[i] != i) continue;
    bool shared = false;
    for (int j = i + 1; j < n && !shared; j++) shared = owner[j] == i;
    char *t = shared ? cgen_with_sharers(src[i], owner, n, i) : NULL;
    const char *body = t ? t : src[i];
    snprintf(name[i], sizeof name[i], "stage%d.cu", stage0 + i);
    codegen_hash_hex(body, strlen(body), hash[i]);
    ok = write_in(dir, name[i], body, d);
    wrote += ok;
    free(t);
  }
  for (int i = 0; i < n && ok; i++) { /* each list names the .cu it runs */
    cJSON_ReplaceItemInObjectCaseSensitive(list[i], "source", cJSON_CreateString(name[owner[i]]));
    cJSON_ReplaceItemInObjectCaseSensitive(list[i], "hash", cJSON_CreateString(hash[owner[i]]));
    text[i] = cJSON_Print(list[i]);
    PD_CHECK(text[i] != NULL, "(cJSON_Print)");
  }
  if (ok) cgen_share_owners(text, n, lowner);
  for (int i = 0; i < n && ok; i++) {
    if (lowner[i] != i) continue;
    snprintf(lname[i], sizeof lname[i], "stage%d.launch.json", stage0 + i);
    codegen_hash_hex(text[i], strlen(text[i]), lhash[i]);
    ok = write_in(dir, lname[i], text[i], d);
  }
  for (int i = 0; i < n && !ok && wrote; i++) /* no program without its launch list */
    if (owner[i] == i && name[i][0]) remove_in(dir, name[i]);
  for (int i = 0; i < n && ok; i++)
    cuda_json(prog[i], list[i], o, codegen_rng_base(L[i]), name[owner[i]], hash[owner[i]], lname[lowner[i]],
              lhash[lowner[i]]);
  for (int i = 0; i < n; i++) free(src[i]), free(code[i]), free(text[i]), cJSON_Delete(list[i]);
  free(src), free(code), free(text), free(list), free(owner), free(lowner), free(name), free(lname), free(hash),
      free(lhash);
  return ok;
}

bool codegen_cuda_stage(const Graph *g, const StageLayout *L, int stage, const CodegenCudaOptions *o,
                        const char *dir, cJSON *stage_json, Diag *d) {
  return write_stages(g, &L, stage, 1, o, dir, &stage_json, d);
}

bool codegen_cuda_stages(const Graph *g, const int *first_region, const int *last_region, int nstages,
                         int64_t b, const CodegenCudaOptions *o, const char *dir, cJSON *stages, Diag *d) {
  StageLayout **L = pd_calloc((size_t)nstages + 1, sizeof *L);
  const StageLayout **cl = pd_calloc((size_t)nstages + 1, sizeof *cl);
  cJSON **prog = pd_calloc((size_t)nstages + 1, sizeof *prog);
  for (int i = 0; i < nstages; i++) {
    cJSON *st = cgen_stage_element(stages, i);
    prog[i] = cJSON_GetObjectItem(st, "program");
    if (!prog[i]) prog[i] = cJSON_AddObjectToObject(st, "program");
    /* a bf16 list runs on the C program's bf16 layout (the blocks must be the same) */
    cl[i] = L[i] = layout_stage_bf16(g, first_region[i], last_region[i], b, o->gemm == GEMM_BF16);
  }
  bool ok = write_stages(g, cl, 0, nstages, o, dir, prog, d);
  for (int i = 0; i < nstages; i++) layout_destroy(L[i]);
  free(L);
  free(cl);
  free(prog);
  return ok;
}
