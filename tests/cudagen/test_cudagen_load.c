/* tests/cudagen/test_cudagen_load.c — the runtime loads a stage's two modules.
 *
 * codegen_cuda_stages writes a two-stage tiny GPT (kernels.cu, stageN.cu, their launch
 * lists); cx_program_load (runtime/cuda/exec/cuda_exec_list.c) then loads each stage through a
 * recording CudaDeviceOps whose "modules" hold exactly the kernels their source defines
 * (no compiler: the emulator tests run the kernels). Checked:
 *  - each stage loads the library (kernels.cu) first, then its stageN.cu, and every
 *    launch resolves in the module its entry names (a kernel looked up in the wrong
 *    module is not there, so the load would fail); cx_program_kernel finds the
 *    trainer's optimizer kernels in the library;
 *  - both stages load the same library text (a device can share the module);
 *  - kernels.cu or stageN.cu edited after pd2bwc: refused, naming the file and the
 *    hash, before anything is loaded;
 *  - a library without a kernel the executor launches itself: "regenerate the plan";
 *  - a launch list of format 1 (one module) or with a kernel whose module is missing
 *    or wrong: a message, no crash; one of format 2-5 (no "segments"), or whose
 *    segment counts do not cover its passes: a message.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>

#include "codegen/codegen.h"
/* the shared builders define more than this file uses */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "build_models.h"
#pragma GCC diagnostic pop
#include "passes/passes.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "test.h"

/* ---- a device that records what is loaded ------------------------------------------ */

typedef struct FakeModule {
  char name[64];
  char *src;
} FakeModule;

typedef struct FakeDev {
  FakeModule mod[16];
  int nmod;
  int lookups;
} FakeDev;

static void *f_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  FakeDev *d = dev;
  if (d->nmod == 16) return snprintf(err, errlen, "too many modules"), NULL;
  FakeModule *m = &d->mod[d->nmod++];
  snprintf(m->name, sizeof m->name, "%s", name);
  m->src = pd_strdup(src);
  return m;
}

/* The kernel if the module's source defines it (its address in the source). */
static const char *fake_missing; /* a kernel the fake library lacks (a plan from before it) */

static void *f_kernel(void *dev, void *module, const char *name) {
  FakeDev *d = dev;
  FakeModule *m = module;
  char pat[160];
  d->lookups++;
  if (fake_missing && strcmp(name, fake_missing) == 0) return NULL;
  snprintf(pat, sizeof pat, "__global__ void %s(", name);
  return strstr(m->src, pat);
}

static FakeDev fake;

static CudaDeviceOps fake_ops(void) {
  for (int i = 0; i < fake.nmod; i++) free(fake.mod[i].src);
  memset(&fake, 0, sizeof fake);
  return (CudaDeviceOps){.dev = &fake, .load = f_load, .kernel = f_kernel};
}

/* ---- the plan ------------------------------------------------------------------------- */

static char dir[] = "/tmp/pd2bw-test-cudagen-load-XXXXXX";

static void write_plan(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, 64, 16, 32, 2, 2);
  EXPECT(g != NULL && pass_autodiff(g, &d));
  EXPECT(mkdtemp(dir) != NULL);
  int first[] = {0, 2}, last[] = {1, g->nregions - 1};
  cJSON *stages = cJSON_CreateArray();
  EXPECT(codegen_cuda_stages(g, first, last, 2, 2, &(CodegenCudaOptions){.fuse = true, .gemm = GEMM_TF32}, dir, stages, &d));
  /* the runtime finds each stage's launch list and rng_base in plan.json */
  cJSON *plan = cJSON_CreateObject();
  cJSON_AddItemToObject(plan, "stages", stages);
  char *text = cJSON_Print(plan), path[256];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL && text != NULL);
  if (f && text) fputs(text, f);
  if (f) fclose(f);
  free(text);
  cJSON_Delete(plan);
  graph_destroy(g);
  arena_destroy(a);
}

static char *path_of(const char *name) {
  static char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

static char *read_file(const char *name) {
  size_t n;
  char err[IO_ERR_LEN];
  return io_read_all(path_of(name), &n, err, sizeof err);
}

static void write_text(const char *name, const char *text) {
  FILE *f = fopen(path_of(name), "w");
  EXPECT(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* ---- the tests ---------------------------------------------------------------------- */

static void test_two_modules(void) {
  char *lib0 = NULL;
  for (int s = 0; s < 2; s++) {
    CudaDeviceOps ops = fake_ops();
    char err[512] = "";
    CxProgram *p = cx_program_load(&ops, dir, s, GEMM_PLAN, err, sizeof err);
    if (!p) fprintf(stderr, "  %s\n", err);
    EXPECT(p != NULL);
    if (!p) continue;
    char want[32];
    snprintf(want, sizeof want, "stage%d.cu", s);
    EXPECT_EQ_INT(fake.nmod, 2);
    EXPECT_STREQ(fake.mod[0].name, CODEGEN_CUDA_LIBRARY);
    EXPECT_STREQ(fake.mod[1].name, want);
    EXPECT(strstr(fake.mod[1].src, "__global__ void pkc_") == NULL); /* the stage has no library kernel */
    EXPECT(strstr(fake.mod[1].src, "__global__ void fused") != NULL); /* but its own */
    EXPECT(fake.lookups > 5);
    EXPECT(cx_program_nlaunches(p, CX_FORWARD) > 5 && cx_program_nlaunches(p, CX_BACKWARD) > 5);
    EXPECT(cx_program_segments(p) >= 1);
    /* the trainer's own kernels, from the library */
    EXPECT(cx_program_kernel(p, "pkc_adamw_step_f32") != NULL);
    EXPECT(cx_program_kernel(p, "pkc_sumsq_partial_f32") != NULL);
    if (s == 0) lib0 = pd_strdup(fake.mod[0].src);
    else EXPECT(lib0 && strcmp(lib0, fake.mod[0].src) == 0); /* one library text for the plan */
    cx_program_free(p);
  }
  free(lib0);
}

/* An edited source is refused before anything is loaded. */
static void edited(const char *name, int stage) {
  char *orig = read_file(name);
  EXPECT(orig != NULL);
  if (!orig) return;
  size_t n = strlen(orig);
  char *mod = pd_malloc(n + 16);
  snprintf(mod, n + 16, "%s// edited\n", orig);
  write_text(name, mod);
  CudaDeviceOps ops = fake_ops();
  char err[512] = "";
  CxProgram *p = cx_program_load(&ops, dir, stage, GEMM_PLAN, err, sizeof err);
  printf("  %s edited: %s\n", name, err);
  EXPECT(p == NULL);
  EXPECT(strstr(err, name) != NULL && strstr(err, "hash") != NULL);
  EXPECT_EQ_INT(fake.nmod, 0);
  cx_program_free(p);
  write_text(name, orig);
  free(mod);
  free(orig);
}

static void test_edited_sources(void) {
  edited(CODEGEN_CUDA_LIBRARY, 0);
  edited("stage1.cu", 1);
}

/* The launch list rewritten by `edit`; the load must fail with a message containing
 * `want`. */
static void bad_list(void (*edit)(cJSON *), const char *want) {
  char *orig = read_file("stage0.launch.json");
  cJSON *j = orig ? cJSON_Parse(orig) : NULL;
  EXPECT(j != NULL);
  if (!j) {
    free(orig);
    return;
  }
  edit(j);
  char *text = cJSON_Print(j);
  write_text("stage0.launch.json", text);
  CudaDeviceOps ops = fake_ops();
  char err[512] = "";
  CxProgram *p = cx_program_load(&ops, dir, 0, GEMM_PLAN, err, sizeof err);
  printf("  %s\n", err);
  EXPECT(p == NULL);
  EXPECT(strstr(err, want) != NULL);
  cx_program_free(p);
  write_text("stage0.launch.json", orig);
  free(text);
  cJSON_Delete(j);
  free(orig);
}

static void old_format(cJSON *j) {
  cJSON_ReplaceItemInObject(j, "format", cJSON_CreateNumber(1));
  cJSON_DeleteItemFromObject(j, "library");
}
/* A format-2 list: the microbatch passed by value (a "runtime": "microbatch" u32
 * argument), no key in cuda_scratch. Refused whole: a runtime that captures passes as
 * graphs must not replay one. */
/* A format-3 list: each stage's own, dropout streams as absolute op ids. */
static void format3(cJSON *j) { cJSON_ReplaceItemInObject(j, "format", cJSON_CreateNumber(3)); }
/* format 4: no GEMM epilogues (pd2bwc --gemm-epilogues) */
static void format4(cJSON *j) { cJSON_ReplaceItemInObject(j, "format", cJSON_CreateNumber(4)); }

static void format2(cJSON *j) {
  cJSON_ReplaceItemInObject(j, "format", cJSON_CreateNumber(2));
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "cuda_scratch"), "microbatch_key");
}
/* A format-5 list: no "segments" (where each segment's launches are: --profile-out). */
static void format5(cJSON *j) {
  cJSON_ReplaceItemInObject(j, "format", cJSON_CreateNumber(5));
  cJSON_DeleteItemFromObject(j, "segments");
}
/* Segment counts that do not cover the pass, or not one per segment in each pass. */
static void segments_short(cJSON *j) {
  cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "segments"), "forward");
  cJSON *last = cJSON_GetArrayItem(f, cJSON_GetArraySize(f) - 1);
  cJSON_SetNumberValue(last, last->valuedouble - 1);
}
static void segments_uneven(cJSON *j) {
  cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "segments"), "backward"), 0);
}
static void no_segments(cJSON *j) { cJSON_DeleteItemFromObject(j, "segments"); }
static void no_key(cJSON *j) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "cuda_scratch"), "microbatch_key"); }

/* The first library launch said to be the stage's (then the second edit: no module). */
static cJSON *first_library_launch(cJSON *j) {
  cJSON *en;
  cJSON_ArrayForEach(en, cJSON_GetObjectItem(j, "forward")) {
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(en, "module"));
    if (m && strcmp(m, "library") == 0) return en;
  }
  return NULL;
}
static void wrong_module(cJSON *j) {
  cJSON *en = first_library_launch(j);
  EXPECT(en != NULL);
  if (en) cJSON_ReplaceItemInObject(en, "module", cJSON_CreateString("stage"));
}
static void no_module(cJSON *j) {
  cJSON *en = first_library_launch(j);
  EXPECT(en != NULL);
  if (en) cJSON_DeleteItemFromObject(en, "module");
}

/* Numbers a damaged list may hold where the loader casts to int or indexes memory:
 * each refused with its place and range, never converted (a double beyond the type's
 * range is undefined behaviour to cast). */
static cJSON *first_launch(cJSON *j, const char *kind) {
  cJSON *en;
  cJSON_ArrayForEach(en, cJSON_GetObjectItem(j, "forward")) if (cJSON_GetObjectItem(en, kind)) return en;
  return NULL;
}
static void set_number(cJSON *o, const char *key, double v) {
  EXPECT(o != NULL && cJSON_GetObjectItem(o, key) != NULL);
  if (o) cJSON_ReplaceItemInObject(o, key, cJSON_CreateNumber(v));
}
static void huge_m(cJSON *j) { set_number(cJSON_GetObjectItem(first_launch(j, "gemm"), "gemm"), "M", 1e20); }
static void half_lda(cJSON *j) { set_number(cJSON_GetObjectItem(first_launch(j, "gemm"), "gemm"), "lda", 2.5); }
static void far_a(cJSON *j) {
  set_number(cJSON_GetObjectItem(cJSON_GetObjectItem(first_launch(j, "gemm"), "gemm"), "A"), "offset", 1e30);
}
static void negative_grid(cJSON *j) { set_number(first_launch(j, "kernel"), "grid", -5); }
static void wide_i32(cJSON *j) {
  cJSON *a;
  cJSON_ArrayForEach(a, cJSON_GetObjectItem(first_launch(j, "kernel"), "args")) {
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(a, "type"));
    if (t && strcmp(t, "i32") == 0 && !cJSON_GetObjectItem(a, "runtime")) {
      set_number(a, "value", 4e9);
      return;
    }
  }
  EXPECT(!"an i32 literal in the first kernel");
}

/* A plan from before shared CUDA programs: program.cuda without rng_base (its launch
 * lists were each stage's own). Refused, with what to do. */
static void test_old_plan(void) {
  char *orig = read_file("plan.json");
  cJSON *j = orig ? cJSON_Parse(orig) : NULL;
  EXPECT(j != NULL);
  if (!j) {
    free(orig);
    return;
  }
  cJSON *cu = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stages"), 1),
                                                      "program"),
                                  "cuda");
  EXPECT(cJSON_GetObjectItem(cu, "rng_base") != NULL);
  cJSON_DeleteItemFromObject(cu, "rng_base");
  char *text = cJSON_Print(j);
  write_text("plan.json", text);
  CudaDeviceOps ops = fake_ops();
  char err[512] = "";
  CxProgram *p = cx_program_load(&ops, dir, 1, GEMM_PLAN, err, sizeof err);
  printf("  %s\n", err);
  EXPECT(p == NULL && strstr(err, "stage 1") && strstr(err, "regenerate the plan with this pd2bwc"));
  EXPECT_EQ_INT(fake.nmod, 0);
  cx_program_free(p);
  write_text("plan.json", orig);
  free(text);
  cJSON_Delete(j);
  free(orig);
}

/* A library from before a kernel the executor launches itself (pkc_sum_ordered_f32
 * came after plans were compiled): refused at load with what to do, not a failed
 * internal check when the device first wants it. */
static void test_library_without_own_kernel(void) {
  CudaDeviceOps ops = fake_ops();
  char err[512] = "";
  fake_missing = "pkc_sum_ordered_f32";
  CxProgram *p = cx_program_load(&ops, dir, 0, GEMM_PLAN, err, sizeof err);
  fake_missing = NULL;
  printf("  %s\n", err);
  EXPECT(p == NULL && strstr(err, "has no pkc_sum_ordered_f32") && strstr(err, "regenerate the plan with this pd2bwc"));
  cx_program_free(p);
}

static void test_bad_lists(void) {
  bad_list(old_format, "regenerate the plan with this pd2bwc");
  bad_list(format2, "a launch list of format 2, older than this runtime's 6");
  bad_list(format3, "a launch list of format 3, older than this runtime's 6");
  bad_list(format4, "a launch list of format 4, older than this runtime's 6");
  bad_list(format4, "regenerate the plan with this pd2bwc");
  bad_list(format5, "a launch list of format 5, older than this runtime's 6");
  bad_list(format5, "for --profile-out");
  bad_list(no_segments, "segments.forward: missing");
  bad_list(segments_short, "the segments' launches do not add up to the pass's");
  bad_list(segments_uneven, "segments.backward: missing, empty, or not one count per segment");
  bad_list(format2, "regenerate the plan with this pd2bwc");
  bad_list(no_key, "cuda_scratch.microbatch_key: missing");
  bad_list(wrong_module, "is not in the compiled stage program");
  bad_list(no_module, "module");
  bad_list(huge_m, ".gemm.M = 1e+20: must be an integer 1..2147483647");
  bad_list(half_lda, ".gemm.lda = 2.5: must be an integer 1..2147483647");
  bad_list(far_a, ".gemm.A.offset = 1e+30: must be an integer 0..");
  bad_list(negative_grid, "].grid = -5: must be an integer 1..2147483647");
  bad_list(wide_i32, ".value = 4000000000: must be an integer -2147483648..2147483647");
}

int main(void) {
  write_plan();
  RUN(test_two_modules);
  RUN(test_edited_sources);
  RUN(test_bad_lists);
  RUN(test_old_plan);
  RUN(test_library_without_own_kernel);
  fake_ops();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  EXPECT(system(cmd) == 0);
  return TEST_REPORT();
}
