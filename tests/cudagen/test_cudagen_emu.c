/* tests/cudagen/test_cudagen_emu.c — the generated CUDA program computes what the CPU
 * program computes, without a GPU.
 *
 * For a stage of the tiny GPT with dropout (tests/codegen/gpt_dropout.h), the test
 * writes the plan's kernel library (kernels.cu) and stageN.cu and compiles them as
 * host C++ together with the CUDA emulator of tests/cuda/cuda_emu.cpp (each CUDA
 * thread a fibre; it runs every library kernel; the stage's own fused kernels are
 * added to a table of their own here), loads it with dlopen, and REPLAYS THE LAUNCH
 * LIST as a runtime would, each kernel from the module its entry names (library
 * kernels from the emulator's table only, the stage's from the stage's only): blocks allocated from the list's
 * sizes, every argument built from its type ((block, offset) pointers, literals, the
 * seed / training / dropout p the runtime supplies; the microbatch index written
 * into cuda_scratch's microbatch_key first, as cx_program_run does), GEMM descriptors
 * run by a plain row-major GEMM. The CPU program (stageN.c, through the runtime's
 * cc + dlopen path: tests/codegen/stage_harness.h) runs forward and backward from
 * the same bytes. Then the loss, the whole GRADS block, every stashed activation and
 * the boundary block must agree (float32, relative bound below): the launch order,
 * arguments, offsets, GEMM shapes, fused kernels, accumulation and the dropout
 * masks (same Philox streams) all have to be right for that to hold. Stages: the
 * tiny GPT whole (fused) and its last stage (unfused), and a shrunk BERT from
 * models/bert.model (gather, bidirectional attention).
 *
 * Needs a C++ compiler at test time (tests/cudaexec/emu_module.h builds the module).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

/* the shared helpers define more than this file uses */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "gpt_dropout.h"
#include "stage_harness.h"
#pragma GCC diagnostic pop
#include "cudaexec/emu_module.h"
#include "cudagen_util.h"
#include "frontend/frontend.h"
#include "test.h"


enum { NBLK = BUF_CLASS_COUNT + 1, SCRATCH = BUF_CLASS_COUNT };

static int blk_index(const char *buf) {
  if (strcmp(buf, "cuda_scratch") == 0) return SCRATCH;
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    if (strcmp(buf, buf_class_name((BufClass)c)) == 0) return c;
  return -1;
}

typedef struct Replay {
  char *blk[NBLK];
  EmuLaunchFn launch;     /* the stage's own kernels (stageN.cu) */
  EmuLaunchFn lib_launch; /* the library's (kernels.cu) */
  uint64_t seed;
  uint32_t mb;
  int training;
  uint32_t rng_base; /* codegen_rng_base of the stage: "rng_base" arguments add it */
} Replay;

static void *ptr_of(Replay *r, const cJSON *p) {
  const cJSON *buf = cJSON_GetObjectItem(p, "buf");
  if (!cJSON_IsString(buf)) return NULL;
  int c = blk_index(buf->valuestring);
  EXPECT(c > 0);
  return c > 0 ? r->blk[c] + (int64_t)cJSON_GetObjectItem(p, "offset")->valuedouble : NULL;
}

/* C[M,N] = alpha·op(A)·op(B) + beta·C, row-major (pk_sgemm_fn), in double. */
static void gemm_ref(const cJSON *gm, Replay *r) {
#define GI(k) ((int64_t)cJSON_GetObjectItem(gm, k)->valuedouble)
  int64_t ta = GI("transa"), tb = GI("transb"), M = GI("M"), N = GI("N"), K = GI("K");
  int64_t lda = GI("lda"), ldb = GI("ldb"), ldc = GI("ldc");
#undef GI
  double alpha = cJSON_GetObjectItem(gm, "alpha")->valuedouble, beta = cJSON_GetObjectItem(gm, "beta")->valuedouble;
  const float *A = ptr_of(r, cJSON_GetObjectItem(gm, "A")), *B = ptr_of(r, cJSON_GetObjectItem(gm, "B"));
  float *C = ptr_of(r, cJSON_GetObjectItem(gm, "C"));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t p = 0; p < K; p++)
        acc += (double)(ta ? A[p * lda + i] : A[i * lda + p]) * (double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
      float *c = &C[i * ldc + j];
      *c = (float)(alpha * acc + (beta == 0 ? 0.0 : beta * (double)*c));
    }
}

static void run_list(Replay *r, const cJSON *arr) {
  const cJSON *en;
  cJSON_ArrayForEach(en, arr) {
    const cJSON *gm = cJSON_GetObjectItem(en, "gemm");
    if (gm) {
      gemm_ref(gm, r);
      continue;
    }
    uint64_t vals[32];
    void *args[32];
    int n = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(en, "args")) {
      const char *ty = cJSON_GetObjectItem(a, "type")->valuestring;
      const cJSON *rt = cJSON_GetObjectItem(a, "runtime");
      double v = cJSON_IsNumber(cJSON_GetObjectItem(a, "value")) ? cJSON_GetObjectItem(a, "value")->valuedouble : 0;
      if (rt && strcmp(rt->valuestring, "seed") == 0) v = (double)r->seed;
      if (rt && strcmp(rt->valuestring, "training") == 0) v = r->training;
      if (rt && strcmp(rt->valuestring, "dropout_p") == 0 && !r->training) v = 0;
      if (rt && strcmp(rt->valuestring, "rng_base") == 0) v += r->rng_base;
      vals[n] = 0;
      if (strcmp(ty, "ptr") == 0) {
        void *p = ptr_of(r, a);
        memcpy(&vals[n], &p, sizeof p);
      } else if (strcmp(ty, "i32") == 0) {
        int32_t x = (int32_t)v;
        memcpy(&vals[n], &x, 4);
      } else if (strcmp(ty, "u32") == 0) {
        uint32_t x = (uint32_t)v;
        memcpy(&vals[n], &x, 4);
      } else if (strcmp(ty, "i64") == 0) {
        int64_t x = (int64_t)v;
        memcpy(&vals[n], &x, 8);
      } else if (strcmp(ty, "u64") == 0) {
        uint64_t x = rt ? r->seed : (uint64_t)v;
        memcpy(&vals[n], &x, 8);
      } else if (strcmp(ty, "f32") == 0) {
        float x = (float)v;
        memcpy(&vals[n], &x, 4);
      } else if (strcmp(ty, "f64") == 0) {
        memcpy(&vals[n], &v, 8);
      } else {
        EXPECT(false);
      }
      args[n] = &vals[n];
      n++;
    }
    const char *name = cJSON_GetObjectItem(en, "kernel")->valuestring;
    const char *mod = cJSON_GetStringValue(cJSON_GetObjectItem(en, "module"));
    EXPECT(mod != NULL);
    bool lib = mod && strcmp(mod, "library") == 0;
    int rc = (lib ? r->lib_launch : r->launch)(name, (unsigned)cJSON_GetObjectItem(en, "grid")->valuedouble,
                       (unsigned)cJSON_GetObjectItem(en, "block")->valuedouble, args);
    if (rc != 0) fprintf(stderr, "  emulated %s module has no kernel %s\n", lib ? "library" : "stage", name);
    EXPECT(rc == 0);
  }
}

/* The emulated modules: cuda_emu.cpp (library kernels, fibres: emu_launch) +
 * kernels.cu and stage.cu (their pasted headers are skipped by the include guards) +
 * a table of the stage's own kernels (emu_stage_launch, which knows no other). */
static bool build_emulator(const char *dir, const char *lib, const char *src, const cJSON *list, void **so) {
  char path[512], so_path[512], err[2048];
  snprintf(path, sizeof path, "%s/kernels.cu", dir);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fputs(lib, f);
  fclose(f);
  snprintf(path, sizeof path, "%s/stage.cu", dir);
  f = fopen(path, "w");
  if (!f) return false;
  fputs(src, f);
  fclose(f);
  snprintf(path, sizeof path, "%s/emu.cpp", dir);
  f = fopen(path, "w");
  if (!f) return false;
  emu_include_emulator(f, lib);
  fprintf(f, "#include \"kernels.cu\"\n#include \"stage.cu\"\n");
  emu_table_begin(f);
  CG_FOR_EACH_LAUNCH(en, list) {
    const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(en, "kernel"));
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(en, "module"));
    char def[128]; /* the stage module holds what stage.cu defines, nothing else */
    snprintf(def, sizeof def, "__global__ void %.80s(", k ? k : "");
    if (k && m && strcmp(m, "stage") == 0 && strstr(src, def)) emu_table_entry(f, k);
  }
  emu_table_end(f, "-1");
  fclose(f);
  snprintf(so_path, sizeof so_path, "%s/emu.so", dir);
  if (!emu_module_build(path, so_path, dir, err, sizeof err)) {
    fprintf(stderr, "  %s\n", err);
    return false;
  }
  *so = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!*so) fprintf(stderr, "  dlopen: %s\n", dlerror());
  return *so != NULL;
}

/* Largest |a - b| / (|a|, |b| and the block's scale) over a float block. */
static double compare_block(const char *what, const float *cpu, const float *gpu, int64_t n, double rtol) {
  double scale = 0, worst = 0;
  int64_t at = -1, bad = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(cpu[i]));
  for (int64_t i = 0; i < n; i++) {
    double a = cpu[i], b = gpu[i], err = fabs(a - b) / (fmax(fabs(a), fabs(b)) + 1e-3 * scale + 1e-30);
    if (!(err <= worst)) worst = err, at = i;
    if (!(err <= rtol)) bad++;
  }
  printf("  %-8s %8lld floats, worst relative difference %.2e", what, (long long)n, worst);
  if (bad) printf(" (%lld over %.0e; first worst at %lld: cpu %.8g gpu %.8g)", (long long)bad, rtol, (long long)at,
                  cpu[at], gpu[at]);
  printf("\n");
  return worst;
}

/* With fusion, every forward layernorm of an add's output (the residual stream) runs
 * in the add's kernel, a stage kernel (codegen/cgen_cuda_fuse.c), so the comparison
 * below covers that kernel and not the library's layernorm. */
static void check_add_layernorm_fused(const Graph *g, const cJSON *list) {
  int want = 0, got = 0;
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    if (op->kind != OP_LAYERNORM || g->tensors[op->in[0]].producer < 0 ||
        g->ops[g->tensors[op->in[0]].producer].kind != OP_ADD)
      continue;
    want++;
    const cJSON *en;
    cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, "forward")) {
      if ((int)cJSON_GetObjectItem(en, "op")->valuedouble != o) continue;
      const cJSON *m = cJSON_GetObjectItem(en, "module");
      got += cJSON_IsString(m) && strcmp(m->valuestring, "stage") == 0;
    }
  }
  printf("  %d of %d layernorms of a residual add fused with it\n", got, want);
  EXPECT(want > 0 && got == want);
}

/* With fusion, the tiny GPT's forward runs no elementwise add or dropout as a library
 * kernel: the embedding sum's add and its dropout are one stage kernel, and every
 * residual add is fused with what follows it. (A chain that did not start from a
 * linear's bias once skipped the op right after its first, leaving the embedding
 * add and dropout as two library launches.) */
static void check_forward_elementwise_fused(const cJSON *list) {
  int library = 0;
  const cJSON *en;
  cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, "forward")) {
    const cJSON *m = cJSON_GetObjectItem(en, "module"), *k = cJSON_GetObjectItem(en, "kernel");
    if (!cJSON_IsString(m) || strcmp(m->valuestring, "library") != 0 || !cJSON_IsString(k)) continue;
    if (strcmp(k->valuestring, "pkc_add_fwd_f32") == 0 || strcmp(k->valuestring, "pkc_dropout_fwd_f32") == 0) {
      printf("  forward runs %s (op %d) as a library kernel, not fused\n", k->valuestring,
             (int)cJSON_GetObjectItem(en, "op")->valuedouble);
      library++;
    }
  }
  EXPECT(library == 0);
}

/* When set, a fused stage's source must name this op in a fused kernel ("silu(op "). */
static const char *fused_must_hold;

/* Whether a fused kernel's heading comment in the stage source names `what`. */
static bool fused_kernel_names(const char *src, const char *what) {
  for (const char *f = strstr(src, "/* fused:"); f; f = strstr(f + 1, "/* fused:")) {
    const char *end = strchr(f, '\n'), *w = strstr(f, what);
    if (w && (!end || w < end)) return true;
  }
  return false;
}

static bool has_op(const Graph *g, OpKind kind) {
  for (int o = 0; o < g->nops; o++)
    if (g->ops[o].kind == kind) return true;
  return false;
}

static void check_stage(Graph *g, int r0, int r1, int64_t b, uint32_t mb, bool fuse, int id_range) {
  Harness h;
  EXPECT(harness_build_range(&h, g, r0, r1, b, false, true));
  StageLayout *L = h.L;
  /* Every block starts as the same random bytes on both sides (what the stage
   * receives from its neighbours included); grads start at zero. */
  for (int c = BUF_STASH; c < BUF_CLASS_COUNT; c++) {
    float *x = (float *)h.block[c];
    for (int64_t i = 0; i < L->total[c] / 4; i++) x[i] = (float)hrand();
  }
  harness_randomize(&h, 0.5, id_range);
  memset(h.block[BUF_GRADS], 0, (size_t)L->total[BUF_GRADS]);

  cJSON *list = NULL;
  char *src = codegen_cuda_source(g, L, 0, &(CodegenCudaOptions){.fuse = fuse, .gemm = GEMM_TF32}, &list);
  char *lib = codegen_cuda_library_source(g);
  if (fuse && has_op(g, OP_LAYERNORM)) check_add_layernorm_fused(g, list);
  if (fuse && fused_must_hold) {
    bool held = fused_kernel_names(src, fused_must_hold);
    printf("  %s in a fused kernel: %s\n", fused_must_hold, held ? "yes" : "no");
    EXPECT(held);
  }
  if (fuse && r0 == 0 && r1 == g->nregions - 1 && has_op(g, OP_LAYERNORM)) check_forward_elementwise_fused(list);
  Replay r = {.seed = 1234, .mb = mb, .training = 1, .rng_base = (uint32_t)codegen_rng_base(L)};
  for (int c = BUF_PARAMS; c < NBLK; c++) {
    const char *nm = c == SCRATCH ? "cuda_scratch" : buf_class_name((BufClass)c);
    int64_t n = (int64_t)cJSON_GetObjectItem(cJSON_GetObjectItem(list, "blocks"), nm)->valuedouble;
    EXPECT(c == SCRATCH || n == L->total[c]);
    r.blk[c] = calloc((size_t)n + 64, 1);
    if (c != SCRATCH) memcpy(r.blk[c], h.block[c], (size_t)n);
  }
  /* the microbatch key, where the random kernels read it (format 3) */
  const cJSON *mbk = cJSON_GetObjectItem(cJSON_GetObjectItem(list, "cuda_scratch"), "microbatch_key");
  EXPECT(cJSON_IsNumber(mbk));
  if (cJSON_IsNumber(mbk)) memcpy(r.blk[SCRATCH] + (int64_t)mbk->valuedouble, &mb, 4);
  char dir[] = "/tmp/pd2bw-test-cudagen-emu-XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  void *so = NULL;
  bool built = build_emulator(dir, lib, src, list, &so);
  EXPECT(built);
  if (built) {
    r.launch = (EmuLaunchFn)(uintptr_t)dlsym(so, "emu_stage_launch");
    r.lib_launch = (EmuLaunchFn)(uintptr_t)dlsym(so, "emu_launch");
    EXPECT(r.launch != NULL && r.lib_launch != NULL);
  }
  if (r.launch && r.lib_launch) {
    double cpu_loss = harness_fwd_bwd(&h, mb);
    run_list(&r, cJSON_GetObjectItem(list, "forward"));
    run_list(&r, cJSON_GetObjectItem(list, "backward"));
    if (L->loss >= 0) {
      float gl;
      memcpy(&gl, r.blk[SCRATCH] + (int64_t)cJSON_GetObjectItem(cJSON_GetObjectItem(list, "loss"), "offset")->valuedouble, 4);
      printf("  loss: cpu %.7f, emulated gpu %.7f\n", cpu_loss, gl);
      EXPECT_NEAR(gl, cpu_loss, 1e-5, 0);
      uint64_t bad_ids;
      memcpy(&bad_ids, r.blk[SCRATCH], 8);
      EXPECT(bad_ids == 0);
    }
    EXPECT(compare_block("grads", (float *)h.block[BUF_GRADS], (float *)r.blk[BUF_GRADS], L->total[BUF_GRADS] / 4,
                         2e-3) <= 2e-3);
    EXPECT(compare_block("stash", (float *)h.block[BUF_STASH], (float *)r.blk[BUF_STASH], L->total[BUF_STASH] / 4,
                         1e-3) <= 1e-3);
    EXPECT(compare_block("boundary", (float *)h.block[BUF_BOUNDARY], (float *)r.blk[BUF_BOUNDARY],
                         L->total[BUF_BOUNDARY] / 4, 2e-3) <= 2e-3);
  }
  if (so) dlclose(so);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  EXPECT(system(cmd) == 0);
  for (int c = BUF_PARAMS; c < NBLK; c++) free(r.blk[c]);
  free(src);
  free(lib);
  cJSON_Delete(list);
  harness_free(&h);
}

static Graph *gpt(Arena *a) {
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_gpt_dropout(a, &d, 64, 16, 32, 2, 2, 0.1);
  EXPECT(g != NULL && pass_autodiff(g, &d));
  return g;
}

/* The whole model as one stage: embeddings, two blocks, head and loss; fused. */
static void test_whole_model(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a);
  check_stage(g, 0, g->nregions - 1, 2, 5, true, 64);
  graph_destroy(g);
  arena_destroy(a);
}

/* The last stage of a two-stage cut (receives its input, sends a gradient back),
 * unfused: every elementwise op through the library kernels. */
static void test_last_stage(void) {
  Arena *a = arena_create();
  Graph *g = gpt(a);
  check_stage(g, 2, g->nregions - 1, 3, 11, false, 64);
  graph_destroy(g);
  arena_destroy(a);
}

/* BERT from models/bert.model, shrunk: bidirectional attention, the masked-LM head's
 * gather and gather_bwd, dropout everywhere. Ids (tokens, masked positions, their
 * targets) drawn in [0, 16) = [0, seq). */
static void test_bert(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  const char *over[] = {"vocab=40", "seq=16", "layers=1", "dim=32", "heads=2", "npred=5"};
  Graph *g = frontend_load_model(a, &d, "models/bert.model", over, 6);
  EXPECT(g != NULL);
  PassOptions po = {.print_after = NULL, .print_to = stdout, .verify = true};
  if (g && passes_run(g, &d, &po)) check_stage(g, 0, g->nregions - 1, 2, 7, true, 16);
  if (g) graph_destroy(g);
  arena_destroy(a);
}

/* The ops Llama-family models add, in tests/cudagen/llama_ops.model: rmsnorm (its
 * dx and its gain's gradient), rope of two projections (their gradients through
 * rope_bwd) into grouped-query attention (two query heads on one key/value head, with
 * dropout), silu in a SwiGLU product (stored for its gradient) and in a fused chain
 * with a residual add (the stage's own kernel must hold it), and through the library
 * kernels (unfused), forward and backward. Targets in [0, 16) = [0, classes). */
static void test_llama_ops(void) {
  for (int fuse = 0; fuse <= 1; fuse++) {
    Arena *a = arena_create();
    Diag d;
    diag_init(&d, stderr);
    Graph *g = frontend_load_model(a, &d, "tests/cudagen/llama_ops.model", NULL, 0);
    EXPECT(g != NULL);
    PassOptions po = {.print_after = NULL, .print_to = stdout, .verify = true};
    if (g && passes_run(g, &d, &po)) {
      EXPECT(has_op(g, OP_SILU) && has_op(g, OP_SILU_BWD));
      EXPECT(has_op(g, OP_RMSNORM) && has_op(g, OP_RMSNORM_BWD) && has_op(g, OP_RMSNORM_DGAMMA));
      EXPECT(has_op(g, OP_ROPE) && has_op(g, OP_ROPE_BWD));
      EXPECT(has_op(g, OP_ATTENTION_GQA) && has_op(g, OP_ATTENTION_GQA_BWD));
      fused_must_hold = "silu(op ";
      check_stage(g, 0, g->nregions - 1, 3, 5, fuse, 16);
      fused_must_hold = NULL;
    }
    if (g) graph_destroy(g);
    arena_destroy(a);
  }
}

int main(void) {
  RUN(test_llama_ops);
  RUN(test_whole_model);
  RUN(test_last_stage);
  RUN(test_bert);
  return TEST_REPORT();
}
