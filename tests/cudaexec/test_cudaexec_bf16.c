/* tests/cudaexec/test_cudaexec_bf16.c — BF16 GEMMs with FP32 master weights train
 * like the CPU trainer, within BF16's precision, without a GPU.
 *
 * The device is the host CUDA emulator, as in test_cudaexec_emu.c (each stage source
 * compiled as host C++ with tests/cuda/cuda_emu.cpp, device memory = host memory):
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
 *   - every GEMM of the bf16 run was a bf16 GEMM, and it launched 2 casts per GEMM.
 * Also: a bf16 plan cannot be loaded as fp32/tf32, nor a float32 plan as bf16
 * (cx_program_load's override), each with a message.
 *
 *   test_cudaexec_bf16 PD2BWC    (run in the source tree: it needs tests/cuda/cuda_emu.cpp)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cuda_exec.h"
#include "test.h"

#ifndef PD2BW_TEST_CXX
#define PD2BW_TEST_CXX "c++"
#endif

static const char *pd2bwc;
static char tmp[64] = "/tmp/pd2bw-test-cudaexec-bf16-XXXXXX";

/* ---- the emulated device (test_cudaexec_emu.c's, plus the bf16 GEMM) ---------------- */

typedef int (*EmuLaunchFn)(const char *name, unsigned grid, unsigned block, void **args);
typedef void (*EmuGemmBf16Fn)(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
                              int ldb, float beta, float *C, int ldc);

typedef struct EmuKernel {
  EmuLaunchFn launch;
  char name[64];
  bool cast; /* pkc_cast_f32_to_bf16 */
} EmuKernel;

typedef struct EmuModule {
  void *so;
  EmuLaunchFn launch;
  EmuGemmBf16Fn gemm_bf16;
  char hash[17];
} EmuModule;

typedef struct EmuDev {
  void *arena;
  EmuModule mod[4];
  int nmod;
  EmuKernel kern[256];
  int nkern;
  int launches, casts, gemms, bf16_gemms;
} EmuDev;

static EmuDev emu;

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
  if (d->nmod == 4) return snprintf(err, errlen, "too many modules"), NULL;
  EmuModule *m = &d->mod[d->nmod++];
  m->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->so) return snprintf(err, errlen, "dlopen: %s", dlerror()), NULL;
  m->launch = (EmuLaunchFn)(uintptr_t)dlsym(m->so, "emu_stage_launch");
  m->gemm_bf16 = (EmuGemmBf16Fn)(uintptr_t)dlsym(m->so, "emu_gemm_bf16");
  memcpy(m->hash, hash, 17);
  return m;
}

static void *e_kernel(void *dev, void *module, const char *name) {
  EmuDev *d = dev;
  EmuModule *m = module;
  for (int i = 0; i < d->nkern; i++)
    if (d->kern[i].launch == m->launch && strcmp(d->kern[i].name, name) == 0) return &d->kern[i];
  if (m->launch(name, 0, 1, NULL) != 0 || d->nkern == 256 || strlen(name) >= 64) return NULL;
  EmuKernel *k = &d->kern[d->nkern++];
  k->launch = m->launch;
  k->cast = strcmp(name, "pkc_cast_f32_to_bf16") == 0;
  snprintf(k->name, sizeof k->name, "%s", name);
  return k;
}

static void e_launch(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args) {
  EmuDev *d = dev;
  EmuKernel *k = kernel;
  (void)stream;
  d->launches++;
  d->casts += k->cast;
  PD_CHECK(k->launch(k->name, grid, block, args) == 0, "(emulated launch of %s)", k->name);
}

static void *P(CxPtr p) { return (void *)(uintptr_t)p; }

static void e_gemm(void *dev, int stream, CxGemmType type, int ta, int tb, int M, int N, int K, float alpha, CxPtr A,
                   int lda, CxPtr B, int ldb, float beta, CxPtr C, int ldc) {
  EmuDev *d = dev;
  (void)stream;
  d->gemms++;
  if (type == CX_GEMM_BF16) {
    d->bf16_gemms++;
    PD_CHECK(d->nmod > 0 && d->mod[0].gemm_bf16, "(the emulator module has no emu_gemm_bf16)");
    d->mod[0].gemm_bf16(ta, tb, M, N, K, alpha, P(A), lda, P(B), ldb, beta, P(C), ldc);
    return;
  }
  pd_sgemm(ta, tb, M, N, K, alpha, P(A), lda, P(B), ldb, beta, P(C), ldc);
}

static void e_htod(void *dev, CxPtr dst, const void *src, size_t n) {
  (void)dev;
  memcpy(P(dst), src, n);
}
static void e_dtoh(void *dev, void *dst, CxPtr src, size_t n) {
  (void)dev;
  memcpy(dst, P(src), n);
}
static void e_memset0(void *dev, int stream, CxPtr p, size_t n) {
  (void)dev, (void)stream;
  memset(P(p), 0, n);
}
static void e_sync(void *dev) { (void)dev; }

static CxDeviceOps emu_ops(void) {
  free(emu.arena);
  emu.arena = NULL;
  emu.launches = emu.casts = emu.gemms = emu.bf16_gemms = 0;
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
#define FP32_TOL 2e-5 /* test_cudaexec_emu's float32 bound on the losses */
#define BF16_TOL 5e-3 /* relative, per microbatch loss (3.8e-4 seen: 13x margin) */

static bool make_plan(const char *name, const char *precision) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/cx.model' --stages 1 --replicas 1 --microbatch-size 2 --microbatches %d --schedule gpipe "
           "--precision %s -o '%s/%s' -q",
           pd2bwc, tmp, M_MB, precision, tmp, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
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

typedef struct Run {
  double mb[STEPS * M_MB];
  int gemms, bf16_gemms, casts;
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
  snprintf(dir, sizeof dir, "%s/%s", tmp, plan);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  if (!p) fprintf(stderr, "  %s\n", err);
  Trainer *t = p ? trainer_create(p, NULL, err, sizeof err) : NULL;
  if (p && !t) fprintf(stderr, "  %s\n", err);
  EXPECT(t != NULL);
  if (!t) {
    rt_plan_free(p);
    return false;
  }
  DataFile *df;
  DataLoader *dl = open_data(p, &df);
  for (int s = 0; dl && s < STEPS; s++) {
    StepStats ss;
    trainer_step(t, dl, &ss);
    for (int j = 0; j < M_MB; j++) r->mb[s * M_MB + j] = ss.mb_loss[j];
  }
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
  if (!p) fprintf(stderr, "  %s\n", err);
  CxDeviceOps ops = emu_ops();
  CudaExecOptions o = {.gemm = CX_GEMM_PLAN};
  CxTrainer *t = p ? cx_trainer_create(p, &ops, &o, err, sizeof err) : NULL;
  if (p && !t) fprintf(stderr, "  %s\n", err);
  EXPECT(t != NULL);
  if (!t) {
    rt_plan_free(p);
    return false;
  }
  DataFile *df;
  DataLoader *dl = open_data(p, &df);
  for (int s = 0; dl && s < STEPS; s++) {
    StepStats ss;
    cx_trainer_step(t, dl, &ss);
    EXPECT(ss.bad_ids == 0);
    for (int j = 0; j < M_MB; j++) r->mb[s * M_MB + j] = ss.mb_loss[j];
  }
  r->gemms = emu.gemms;
  r->bf16_gemms = emu.bf16_gemms;
  r->casts = emu.casts;
  printf("  %s on the emulated GPU: %d launches (%d casts), %d GEMMs (%d bf16)\n", plan, emu.launches, emu.casts,
         emu.gemms, emu.bf16_gemms);
  data_loader_destroy(dl);
  data_close(df);
  cx_trainer_destroy(t);
  rt_plan_free(p);
  return true;
}

/* Largest relative difference of the microbatch losses. */
static double losses_diff(const Run *a, const Run *b) {
  double worst = 0;
  for (int i = 0; i < STEPS * M_MB; i++) {
    double d = fabs(a->mb[i] - b->mb[i]) / fmax(fabs(a->mb[i]), 1e-30);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

static void test_bf16_trains(void) {
  Run cpu = {0}, f32 = {0}, b16 = {0};
  EXPECT(make_plan("pf32", "fp32"));
  EXPECT(make_plan("pbf16", "bf16"));
  if (!run_cpu("pf32", &cpu) || !run_emu("pf32", &f32) || !run_emu("pbf16", &b16)) return;
  printf("  step  mb  cpu (fp32)    gpu fp32      gpu bf16\n");
  for (int i = 0; i < STEPS * M_MB; i++)
    printf("  %4d %3d  %.8f  %.8f  %.8f\n", i / M_MB, i % M_MB, cpu.mb[i], f32.mb[i], b16.mb[i]);
  double d32 = losses_diff(&cpu, &f32), d16 = losses_diff(&cpu, &b16), apart = losses_diff(&f32, &b16);
  printf("  cpu vs gpu fp32 %.2e (bound %.0e); cpu vs gpu bf16 %.2e (bound %.0e); gpu bf16 vs fp32 %.2e "
         "(must exceed %.0e)\n",
         d32, FP32_TOL, d16, BF16_TOL, apart, 10 * FP32_TOL);
  EXPECT(d32 <= FP32_TOL);
  EXPECT(d16 <= BF16_TOL);
  EXPECT(apart > 10 * FP32_TOL);
  /* every GEMM was bf16 and had its two casts; the fp32 run had neither */
  EXPECT(b16.gemms > 0 && b16.bf16_gemms == b16.gemms && b16.casts == 2 * b16.gemms);
  EXPECT(f32.gemms == b16.gemms && f32.bf16_gemms == 0 && f32.casts == 0);
  /* it trained: the loss moved by far more than the bf16 bound */
  EXPECT(fabs(b16.mb[STEPS * M_MB - 1] - b16.mb[0]) > 5 * BF16_TOL * b16.mb[0]);
}

/* The override of cx_program_load cannot mix float32 and bf16 lists. */
static void test_overrides_refused(void) {
  char dir[256], err[RT_ERR_LEN] = "";
  EXPECT(make_plan("pf32", "fp32"));
  EXPECT(make_plan("pbf16", "bf16"));
  snprintf(dir, sizeof dir, "%s/pbf16", tmp);
  CxDeviceOps ops = emu_ops();
  CxProgram *prog = cx_program_load(&ops, dir, 0, CX_GEMM_TF32, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.launch.json") && strstr(err, "bf16 GEMM") && strstr(err, "fp32/tf32"));
  cx_program_free(prog);
  prog = cx_program_load(&ops, dir, 0, CX_GEMM_PLAN, err, sizeof err);
  EXPECT(prog != NULL);
  if (prog) EXPECT(cx_program_gemm_type(prog) == CX_GEMM_BF16);
  cx_program_free(prog);
  snprintf(dir, sizeof dir, "%s/pf32", tmp);
  err[0] = 0;
  prog = cx_program_load(&ops, dir, 0, CX_GEMM_BF16, err, sizeof err);
  EXPECT(prog == NULL);
  printf("  %s\n", err);
  EXPECT(strstr(err, "--precision bf16") != NULL);
  cx_program_free(prog);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_cudaexec_bf16 PD2BWC\n");
    return 2;
  }
  pd2bwc = argv[1];
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  setup();
  RUN(test_bf16_trains);
  RUN(test_overrides_refused);
  free(emu.arena);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return TEST_REPORT();
}
