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
 * Plus the user-error paths: a plan without launch lists, a stage0.cu that does not
 * match its launch list.
 *
 *   test_cudaexec_emu PD2BWC [all|2bw|gpipe|errors]
 * (run in the source tree: it needs tests/cuda/cuda_emu.cpp; CTest runs the parts in
 * parallel, each about 15 s of emulation on a loaded 2-core machine)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cuda_exec.h"
#include "test.h"

#ifndef PD2BW_TEST_CXX
#define PD2BW_TEST_CXX "c++"
#endif

static const char *pd2bwc;
static char tmp[64] = "/tmp/pd2bw-test-cudaexec-XXXXXX";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the emulated device ------------------------------------------------------------ */

typedef int (*EmuLaunchFn)(const char *name, unsigned grid, unsigned block, void **args);

typedef struct EmuKernel {
  EmuLaunchFn launch;
  char name[64];
} EmuKernel;

typedef struct EmuModule {
  void *so;
  EmuLaunchFn launch;
  char hash[17];
} EmuModule;

typedef struct EmuDev {
  void *arena;
  EmuModule mod[4];
  int nmod;
  EmuKernel kern[256];
  int nkern;
  int launches, gemms;
} EmuDev;

static bool e_alloc(void *dev, size_t bytes, CxPtr *base, char *err, size_t errlen) {
  EmuDev *d = dev;
  if (d->arena) return snprintf(err, errlen, "second arena"), false;
  d->arena = calloc(1, bytes + 64);
  *base = (CxPtr)(uintptr_t)d->arena;
  return d->arena != NULL;
}

/* The stage's own kernels: every `extern "C" __global__ void NAME(` not from the library. */
static void write_stage_table(FILE *f, const char *src) {
  static const char pat[] = "extern \"C\" __global__ void ";
  fprintf(f, "namespace {\nstruct StageEntry { const char *name; void (*call)(void **); };\n"
             "const StageEntry stage_kernels[] = {\n");
  for (const char *s = strstr(src, pat); s; s = strstr(s + 1, pat)) {
    const char *n = s + sizeof pat - 1, *e = strchr(n, '(');
    if (!e || strncmp(n, "pkc_", 4) == 0 || e - n > 60) continue;
    fprintf(f, "  {\"%.*s\", &Caller<decltype(%.*s)>::call<%.*s>},\n", (int)(e - n), n, (int)(e - n), n, (int)(e - n), n);
  }
  fprintf(f, "  {nullptr, nullptr}};\n}\n"
             "extern \"C\" int emu_stage_launch(const char *name, unsigned grid, unsigned block, void **args) {\n"
             "  for (const StageEntry *e = stage_kernels; e->name; e++) {\n"
             "    if (strcmp(e->name, name) != 0) continue;\n"
             "    gridDim = {grid, 1, 1};\n    blockDim = {block, 1, 1};\n"
             "    for (unsigned b = 0; b < grid; b++)\n"
             "      for (unsigned t = 0; t < block; t++) {\n"
             "        blockIdx = {b, 0, 0};\n        threadIdx = {t, 0, 0};\n        e->call(args);\n      }\n"
             "    return 0;\n  }\n  return emu_launch(name, grid, block, args);\n}\n");
}

/* "NVRTC": the source as host C++ with the emulator, built once per distinct source. */
static void *e_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  EmuDev *d = dev;
  char hash[17], path[256], cmd[2048], cwd[512];
  codegen_hash_hex(src, strlen(src), hash);
  snprintf(path, sizeof path, "%s/emu-%s.so", tmp, hash);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    char cu[256], cpp[256];
    snprintf(cu, sizeof cu, "%s/emu-%s.cu", tmp, hash);
    snprintf(cpp, sizeof cpp, "%s/emu-%s.cpp", tmp, hash);
    FILE *f = fopen(cu, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", cu), NULL;
    fputs(src, f);
    fclose(f);
    f = fopen(cpp, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", cpp), NULL;
    fprintf(f, "#include \"tests/cuda/cuda_emu.cpp\"\n#include \"emu-%s.cu\"\n", hash);
    write_stage_table(f, src);
    fclose(f);
    if (!getcwd(cwd, sizeof cwd)) return snprintf(err, errlen, "getcwd"), NULL;
    snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -w -fPIC -shared -I'%s' -I'%s' '%s' -o '%s'", PD2BW_TEST_CXX, cwd, tmp,
             cpp, path);
    if (system(cmd) != 0) return snprintf(err, errlen, "%s: emulator build failed: %s", name, cmd), NULL;
  }
  for (int i = 0; i < d->nmod; i++)
    if (strcmp(d->mod[i].hash, hash) == 0) return &d->mod[i];
  EmuModule *m = &d->mod[d->nmod++];
  m->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->so) return snprintf(err, errlen, "dlopen: %s", dlerror()), NULL;
  m->launch = (EmuLaunchFn)(uintptr_t)dlsym(m->so, "emu_stage_launch");
  memcpy(m->hash, hash, 17);
  return m;
}

static void *e_kernel(void *dev, void *module, const char *name) {
  EmuDev *d = dev;
  EmuModule *m = module;
  for (int i = 0; i < d->nkern; i++)
    if (d->kern[i].launch == m->launch && strcmp(d->kern[i].name, name) == 0) return &d->kern[i];
  /* a kernel the module lacks: probe with no work (grid 0 runs nothing) */
  if (m->launch(name, 0, 1, NULL) != 0 || d->nkern == 256 || strlen(name) >= 64) return NULL;
  EmuKernel *k = &d->kern[d->nkern++];
  k->launch = m->launch;
  snprintf(k->name, sizeof k->name, "%s", name);
  return k;
}

static void e_launch(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args) {
  EmuDev *d = dev;
  EmuKernel *k = kernel;
  (void)stream;
  d->launches++;
  PD_CHECK(k->launch(k->name, grid, block, args) == 0, "(emulated launch of %s)", k->name);
}

static float *F(CxPtr p) { return (float *)(uintptr_t)p; }

static void e_gemm(void *dev, int stream, CxGemmType type, int ta, int tb, int M, int N, int K, float alpha, CxPtr A,
                   int lda, CxPtr B, int ldb, float beta, CxPtr C, int ldc) {
  EmuDev *d = dev;
  (void)stream, (void)type;
  d->gemms++;
  pd_sgemm(ta, tb, M, N, K, alpha, F(A), lda, F(B), ldb, beta, F(C), ldc);
}

static void e_htod(void *dev, CxPtr dst, const void *src, size_t n) {
  (void)dev;
  memcpy((void *)(uintptr_t)dst, src, n);
}
static void e_dtoh(void *dev, void *dst, CxPtr src, size_t n) {
  (void)dev;
  memcpy(dst, (const void *)(uintptr_t)src, n);
}
static void e_memset0(void *dev, int stream, CxPtr p, size_t n) {
  (void)dev, (void)stream;
  memset((void *)(uintptr_t)p, 0, n);
}
static void e_sync(void *dev) { (void)dev; }

static EmuDev emu;
static CxDeviceOps emu_ops(void) {
  free(emu.arena);
  emu.arena = NULL;
  emu.launches = emu.gemms = 0;
  return (CxDeviceOps){.dev = &emu, .alloc = e_alloc, .load = e_load, .kernel = e_kernel, .launch = e_launch,
                       .gemm = e_gemm, .htod = e_htod, .dtoh = e_dtoh, .memset0 = e_memset0, .sync = e_sync};
}

/* ---- the model, plans and data --------------------------------------------------------- */

static const char model[] =
    "model cxgpt {\n"
    "  param vocab = 64; param seq = 8; param layers = 1; param dim = 32; param heads = 2; param pdrop = 0.1;\n"
    "  input tokens : i32[B, seq];\n  input targets : i32[B, seq];\n"
    "  weight wte : f32[vocab, dim] = normal(0.02);\n  weight wpe : f32[seq, dim] = normal(0.01);\n"
    "  x = add(embedding(wte, tokens), positions(wpe, tokens));\n  x = dropout(x, p = pdrop);\n"
    "  repeat h[layers] {\n"
    "    weight ln1_w : f32[dim] = ones;\n    weight ln1_b : f32[dim] = zeros;\n"
    "    weight attn_w : f32[dim, 3*dim] = normal(0.02);\n    weight attn_b : f32[3*dim] = zeros;\n"
    "    weight attnproj_w : f32[dim, dim] = normal(0.02);\n    weight attnproj_b : f32[dim] = zeros;\n"
    "    weight ln2_w : f32[dim] = ones;\n    weight ln2_b : f32[dim] = zeros;\n"
    "    weight fc_w : f32[dim, 4*dim] = normal(0.02);\n    weight fc_b : f32[4*dim] = zeros;\n"
    "    weight fcproj_w : f32[4*dim, dim] = normal(0.02);\n    weight fcproj_b : f32[dim] = zeros;\n"
    "    a = attention(linear(layernorm(x, ln1_w, ln1_b, eps = 1e-5), attn_w, attn_b), heads = heads, causal = 1, p = pdrop);\n"
    "    x = add(x, dropout(linear(a, attnproj_w, attnproj_b), p = pdrop));\n"
    "    m = gelu(linear(layernorm(x, ln2_w, ln2_b, eps = 1e-5), fc_w, fc_b));\n"
    "    x = add(x, dropout(linear(m, fcproj_w, fcproj_b), p = pdrop));\n"
    "  }\n"
    "  weight lnf_w : f32[dim] = ones;\n  weight lnf_b : f32[dim] = zeros;\n"
    "  x = layernorm(x, lnf_w, lnf_b, eps = 1e-5);\n"
    "  logits = matmul(x, wte, transpose_b = 1);\n  loss = cross_entropy(logits, targets);\n  minimize loss;\n"
    "  train {\n    batch = 4;\n    microbatch = 2;\n"
    "    optimizer = adamw(lr = 1e-2, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1);\n"
    "    lr_schedule = constant;\n    clip = 0.5;\n    seed = 77;\n  }\n}\n";

#define STEPS 3
#define M_MB 2

static bool make_plan(const char *name, const char *extra) {
  char cmd[1024];
  double t0 = now_s();
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/cx.model' --stages 1 --replicas 1 --microbatch-size 2 --microbatches %d %s -o '%s/%s' -q", pd2bwc,
           tmp, M_MB, extra, tmp, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  printf("  pd2bwc %s: %.1f s\n", extra, now_s() - t0);
  return rc == 0;
}

static void setup(void) {
  EXPECT(mkdtemp(tmp) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/cx.model", tmp);
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL);
  if (f) {
    fputs(model, f);
    fclose(f);
  }
  /* tokens: a repeating pattern with noise, so the loss has something to learn */
  snprintf(path, sizeof path, "%s/train.bin", tmp);
  f = fopen(path, "wb");
  EXPECT(f != NULL);
  uint64_t s = 12345;
  for (int i = 0; f && i < 8192; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint16_t tok = (uint16_t)((s >> 33) % 8 == 0 ? (s >> 40) % 64 : (uint64_t)(i * 7 % 64));
    fwrite(&tok, 2, 1, f);
  }
  if (f) fclose(f);
}

/* ---- training both ways ---------------------------------------------------------------- */

typedef struct Run {
  double mb[STEPS * M_MB];
  double norm[STEPS];
  float *w;
  int64_t nw;
} Run;

static DataLoader *open_data(const RtPlan *p, DataFile **df) {
  char path[256], err[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/train.bin", tmp);
  *df = data_open(path, DATA_AUTO, 64, err, sizeof err);
  EXPECT(*df != NULL);
  DataLoader *dl = *df ? data_loader_create(*df, (int)(p->b * p->m), 8, false, 0, err, sizeof err) : NULL;
  EXPECT(dl != NULL);
  return dl;
}

static bool run_cpu(const char *plan, Run *r) {
  char dir[256], err[RT_ERR_LEN];
  double t0 = now_s();
  snprintf(dir, sizeof dir, "%s/%s", tmp, plan);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  if (!p) fprintf(stderr, "  %s\n", err);
  EXPECT(p != NULL);
  Trainer *t = p ? trainer_create(p, NULL, err, sizeof err) : NULL;
  if (p && !t) fprintf(stderr, "  %s\n", err);
  EXPECT(t != NULL);
  if (!t) return false;
  DataFile *df;
  DataLoader *dl = open_data(p, &df);
  for (int s = 0; dl && s < STEPS; s++) {
    StepStats ss;
    trainer_step(t, dl, &ss);
    for (int j = 0; j < M_MB; j++) r->mb[s * M_MB + j] = ss.mb_loss[j];
    r->norm[s] = ss.grad_norm;
  }
  printf("  CPU trainer: %.1f s\n", now_s() - t0);
  r->nw = p->stages[0].blocks[BUF_PARAMS] / 4;
  r->w = malloc((size_t)r->nw * 4);
  memcpy(r->w, trainer_params(t), (size_t)r->nw * 4);
  data_loader_destroy(dl);
  data_close(df);
  trainer_destroy(t);
  rt_plan_free(p);
  return true;
}

static bool run_emu(const char *plan, Run *r) {
  char dir[256], err[RT_ERR_LEN];
  snprintf(dir, sizeof dir, "%s/%s", tmp, plan);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  double t0 = now_s();
  CxDeviceOps ops = emu_ops();
  CudaExecOptions o = {.gemm = CX_GEMM_PLAN};
  CxTrainer *t = p ? cx_trainer_create(p, &ops, &o, err, sizeof err) : NULL;
  if (p && !t) fprintf(stderr, "  %s\n", err);
  EXPECT(t != NULL);
  if (!t) return false;
  DataFile *df;
  DataLoader *dl = open_data(p, &df);
  for (int s = 0; dl && s < STEPS; s++) {
    StepStats ss;
    cx_trainer_step(t, dl, &ss);
    EXPECT(ss.bad_ids == 0);
    for (int j = 0; j < M_MB; j++) r->mb[s * M_MB + j] = ss.mb_loss[j];
    r->norm[s] = ss.grad_norm;
  }
  EXPECT(cx_trainer_step_index(t) == STEPS);
  r->nw = p->stages[0].blocks[BUF_PARAMS] / 4;
  r->w = malloc((size_t)r->nw * 4);
  cx_trainer_read_params(t, r->w);
  printf("  emulated GPU: %d kernel launches, %d GEMMs in %d steps, %.1f s\n", emu.launches, emu.gemms, STEPS,
         now_s() - t0);
  EXPECT(emu.gemms > 0 && emu.launches > emu.gemms);
  data_loader_destroy(dl);
  data_close(df);
  cx_trainer_destroy(t);
  rt_plan_free(p);
  return true;
}

/* Largest |a - b| over the block, relative to the block's largest |a|. */
static double weights_diff(const Run *a, const Run *b) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < a->nw; i++) scale = fmax(scale, fabs(a->w[i]));
  for (int64_t i = 0; i < a->nw; i++) {
    double d = fabs((double)a->w[i] - (double)b->w[i]);
    if (!(d <= worst)) worst = d;
  }
  return worst / (scale + 1e-30);
}

static double losses_diff(const Run *a, const Run *b, int from_step) {
  double worst = 0;
  for (int i = from_step * M_MB; i < STEPS * M_MB; i++) {
    double d = fabs(a->mb[i] - b->mb[i]) / fmax(fabs(a->mb[i]), 1e-30);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

#define LOSS_TOL 2e-5
#define WEIGHT_TOL 1e-4

static Run cpu2bw, emu2bw;

static void compare(const char *what, const Run *c, const Run *g) {
  printf("  %s: step  mb  cpu loss     emulated gpu loss\n", what);
  for (int i = 0; i < STEPS * M_MB; i++) printf("        %4d %3d  %.8f   %.8f\n", i / M_MB, i % M_MB, c->mb[i], g->mb[i]);
  double dl = losses_diff(c, g, 0), dw = weights_diff(c, g);
  printf("  %s: worst loss difference %.2e (bound %.0e), weights %.2e of the largest (bound %.0e)\n", what, dl,
         LOSS_TOL, dw, WEIGHT_TOL);
  EXPECT(dl <= LOSS_TOL);
  EXPECT(dw <= WEIGHT_TOL);
  for (int s = 0; s < STEPS; s++) EXPECT_NEAR(c->norm[s], g->norm[s], 1e-4, 0);
  /* it trained: the loss moved */
  EXPECT(fabs(c->mb[(STEPS - 1) * M_MB] - c->mb[0]) > 100 * LOSS_TOL * c->mb[0]);
}

static void test_2bw(void) {
  EXPECT(make_plan("p2bw", "--schedule 2bw"));
  if (!run_cpu("p2bw", &cpu2bw) || !run_emu("p2bw", &emu2bw)) return;
  compare("2bw", &cpu2bw, &emu2bw);
}

static void test_gpipe(void) {
  Run c = {0}, g = {0};
  EXPECT(make_plan("pgpipe", "--schedule gpipe"));
  if (!cpu2bw.w) {
    EXPECT(make_plan("p2bw", "--schedule 2bw"));
    EXPECT(run_cpu("p2bw", &cpu2bw));
  }
  if (run_cpu("pgpipe", &c) && run_emu("pgpipe", &g)) {
    compare("gpipe", &c, &g);
    /* the bound discriminates: step 0 runs on W(0) under both rules; from step 1 2bw
     * still trains on W(0) while gpipe uses W(1), and the losses differ by far more
     * than the bound */
    double apart = losses_diff(&cpu2bw, &c, 1);
    printf("  2bw vs gpipe (CPU), steps 1..%d: %.2e apart\n", STEPS - 1, apart);
    EXPECT(apart > 20 * LOSS_TOL);
    EXPECT(losses_diff(&cpu2bw, &c, 0) >= apart); /* step 0 is the same batch on W(0) */
    EXPECT_NEAR(cpu2bw.mb[0], c.mb[0], 1e-12, 0);
  }
  free(c.w);
  free(g.w);
}

/* A plan made with --backend cpu has no launch lists: a message naming the file. */
static void test_cpu_only_plan(void) {
  EXPECT(make_plan("pcpu", "--backend cpu"));
  char dir[256], err[RT_ERR_LEN] = "";
  snprintf(dir, sizeof dir, "%s/pcpu", tmp);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  CxDeviceOps ops = emu_ops();
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
  EXPECT(make_plan("p2bw", "--schedule 2bw"));
  snprintf(cmd, sizeof cmd, "cp -r '%s/p2bw' '%s/pedit' && echo '// edited' >> '%s/pedit/stage0.cu'", tmp, tmp, tmp);
  EXPECT(system(cmd) == 0);
  snprintf(cmd, sizeof cmd, "%s/pedit", tmp);
  CxDeviceOps ops = emu_ops();
  CxProgram *prog = cx_program_load(&ops, cmd, 0, CX_GEMM_PLAN, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.cu") != NULL && strstr(err, "hash") != NULL);
  cx_program_free(prog);
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: test_cudaexec_emu PD2BWC [all|2bw|gpipe|errors]\n");
    return 2;
  }
  pd2bwc = argv[1];
  char cache[128];
  snprintf(cache, sizeof cache, "/tmp/pd2bw-test-cache-%ld", (long)getuid());
  setenv("PD2BW_CACHE", cache, 0);
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  setup();
  const char *part = argc > 2 ? argv[2] : "all";
  bool all = strcmp(part, "all") == 0;
  if (all || strcmp(part, "2bw") == 0) RUN(test_2bw);
  if (all || strcmp(part, "gpipe") == 0) RUN(test_gpipe);
  if (all || strcmp(part, "errors") == 0) {
    RUN(test_cpu_only_plan);
    RUN(test_edited_source);
  }
  free(cpu2bw.w);
  free(emu2bw.w);
  free(emu.arena);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return TEST_REPORT();
}
