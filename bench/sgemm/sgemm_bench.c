/* bench/sgemm/sgemm_bench.c — GFLOP/s of pd_sgemm and of the other BLAS libraries
 * on the GEMM shapes of GPT-2 small training, in one process.
 *
 *   sgemm_bench [--threads N] [--lib pd|openblas|blis|all] [--seconds S] [--sweep]
 *
 * --sweep times M x 768 x 768 GEMMs for M = 8 .. 4096 instead (the rows a GPT-2
 * small projection has at b·T tokens) and prints each best time in microseconds:
 * the points the planner's GEMM cost (gemm_efficiency, gemm_latency_us in the
 * cluster file, docs/language.md "Compute") is fitted to.
 *
 * "pd" is pd_sgemm (runtime/blas/blas.h), i.e. whatever the runtime was built against
 * (PD2BW_BLAS=openblas makes it OpenBLAS: runtime/blas/blas.c); the others are loaded
 * side by side (load_lib). When pd_sgemm is BLIS (the usual build), "blis" is that
 * same library, so --lib all skips it. Results and commands: RESULTS.md. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/blas/blas.h"

/* The CBLAS enums' values are fixed by the CBLAS standard. */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc);

typedef struct Lib {
  const char *name;
  char label[128];
  cblas_sgemm_fn cblas; /* NULL: use pd_sgemm */
} Lib;

typedef struct Shape {
  int M, N, K, ta, tb;
  const char *what;
} Shape;

static const Shape sweep_shapes[] = {
    {8, 768, 768, 0, 0, "sweep M=8"},       {32, 768, 768, 0, 0, "sweep M=32"},
    {128, 768, 768, 0, 0, "sweep M=128"},   {512, 768, 768, 0, 0, "sweep M=512"},
    {2048, 768, 768, 0, 0, "sweep M=2048"}, {4096, 768, 768, 0, 0, "sweep M=4096"},
};

static const Shape shapes[] = {
    {1024, 1024, 1024, 0, 0, "square 1024^3"},
    {4096, 768, 768, 0, 0, "attn proj fwd, B*T=4096, C=768"},
    {4096, 2304, 768, 0, 0, "qkv fwd (768x2304), B*T=4096"},
    {768, 2304, 4096, 1, 0, "qkv dW = x^T dy, B*T=4096"},
    {256, 50257, 768, 0, 1, "tied LM head fwd, B=4 T=64"},
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void gemm(const Lib *lib, const Shape *s, const float *a, const float *b, float *c) {
  int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  if (lib->cblas)
    lib->cblas(ROW_MAJOR, s->ta ? TRANS : NO_TRANS, s->tb ? TRANS : NO_TRANS, s->M, s->N, s->K,
               1.0f, a, lda, b, ldb, 0.0f, c, s->N);
  else
    pd_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
}

static void *must_sym(void *h, const char *lib, const char *sym) {
  void *p = dlsym(h, sym);
  if (!p) {
    fprintf(stderr, "sgemm_bench: %s has no %s\n", lib, sym);
    exit(1);
  }
  return p;
}

/* Loads a library by soname; returns 0 (with a note) when it is not installed.
 * "openblas" and "blis" are loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so each
 * runs its own code even though both export cblas_sgemm. Which kernels a library
 * picks is decided when it is loaded: set OPENBLAS_CORETYPE=Haswell (etc.) in the
 * environment to try another OpenBLAS kernel set. (BLIS_ARCH_TYPE makes Debian's
 * BLIS 0.9.0 abort; see RESULTS.md.) */
static int load_lib(Lib *lib, const char *which, int threads) {
  memset(lib, 0, sizeof *lib);
  lib->name = which;
  if (strcmp(which, "pd") == 0) {
    pd_blas_init(threads);
    snprintf(lib->label, sizeof lib->label, "pd_sgemm = %s", pd_blas_name());
    return 1;
  }
  const char *so = strcmp(which, "openblas") == 0 ? "libopenblas.so.0" : "libblis.so.4";
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) {
    fprintf(stderr, "sgemm_bench: skipping %s: %s\n", which, dlerror());
    return 0;
  }
  lib->cblas = (cblas_sgemm_fn)must_sym(h, so, "cblas_sgemm");
  if (strcmp(which, "openblas") == 0) {
    void (*set)(int) = (void (*)(int))must_sym(h, so, "openblas_set_num_threads");
    char *(*core)(void) = (char *(*)(void))must_sym(h, so, "openblas_get_corename");
    set(threads);
    snprintf(lib->label, sizeof lib->label, "openblas (%s, pthread, %d threads)", core(),
             threads);
  } else {
    void (*set)(long) = (void (*)(long))must_sym(h, so, "bli_thread_set_num_threads");
    int (*arch)(void) = (int (*)(void))must_sym(h, so, "bli_arch_query_id");
    char *(*arch_str)(int) = (char *(*)(int))must_sym(h, so, "bli_arch_string");
    set(threads);
    snprintf(lib->label, sizeof lib->label, "blis (%s, %d threads)", arch_str(arch()), threads);
  }
  return 1;
}

static void bench_lib(const Lib *lib, double seconds, bool sweep, float *a, float *b, float *c) {
  const Shape *list = sweep ? sweep_shapes : shapes;
  size_t n = sweep ? sizeof sweep_shapes / sizeof sweep_shapes[0] : sizeof shapes / sizeof shapes[0];
  printf("\n%s\n", lib->label);
  printf("  %-34s %22s %9s %9s %6s%s\n", "shape", "M x N x K (ta,tb)", "best", "mean", "calls",
         sweep ? "   best us" : "");
  for (size_t i = 0; i < n; i++) {
    const Shape *s = &list[i];
    double flops = 2.0 * s->M * s->N * s->K;
    gemm(lib, s, a, b, c); /* warm-up: threads, packing buffers */
    double best = 1e30, start = now_s();
    int calls = 0;
    do {
      double t0 = now_s();
      gemm(lib, s, a, b, c);
      double dt = now_s() - t0;
      if (dt < best) best = dt;
      calls++;
    } while (calls < 3 || now_s() - start < seconds);
    double mean = (now_s() - start) / calls;
    char dims[64];
    snprintf(dims, sizeof dims, "%dx%dx%d (%d,%d)", s->M, s->N, s->K, s->ta, s->tb);
    printf("  %-34s %22s %9.1f %9.1f %6d", s->what, dims, flops / best * 1e-9, flops / mean * 1e-9, calls);
    if (sweep) printf(" %9.1f", best * 1e6);
    printf("\n");
    fflush(stdout);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: sgemm_bench [--threads N] [--lib pd|openblas|blis|all] "
                  "[--seconds S] [--sweep]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const char *which = "all";
  double seconds = 1.0;
  bool sweep = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc)
      which = argv[++i];
    else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--sweep") == 0)
      sweep = true;
    else
      usage();
  }
  if (threads < 1 || seconds <= 0) usage();
  if (strcmp(which, "all") && strcmp(which, "pd") && strcmp(which, "openblas") &&
      strcmp(which, "blis"))
    usage();

  /* Buffers for the largest operands: A up to 4096x768, B up to 50257x768,
   * C up to 256x50257 or 4096x2304. */
  size_t na = (size_t)4096 * 4096, nb = (size_t)50257 * 768, nc = (size_t)256 * 50257;
  if (nc < (size_t)4096 * 2304) nc = (size_t)4096 * 2304;
  float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
  float *c = malloc(nc * sizeof(float));
  if (!a || !b || !c) {
    fprintf(stderr, "sgemm_bench: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < na; i++) a[i] = (float)((int)(i % 13) - 6) * 0.01f;
  for (size_t i = 0; i < nb; i++) b[i] = (float)((int)(i % 11) - 5) * 0.01f;
  memset(c, 0, nc * sizeof(float));

  printf("sgemm_bench: %d threads, >= %.1f s per shape; GFLOP/s = 2*M*N*K / time\n", threads,
         seconds);
  const char *order[] = {"pd", "openblas", "blis"};
  for (int i = 0; i < 3; i++) {
    if (strcmp(which, "all") != 0 && strcmp(which, order[i]) != 0) continue;
    /* A BLIS build's pd_sgemm already is the process's one BLIS: dlopen would hand
     * back the same library. */
    if (strcmp(which, "all") == 0 && strcmp(order[i], "blis") == 0 &&
        strncmp(pd_blas_name(), "blis", 4) == 0)
      continue;
    Lib lib;
    if (!load_lib(&lib, order[i], threads)) continue;
    bench_lib(&lib, seconds, sweep, a, b, c);
    usleep(300000); /* let this library's worker threads stop spinning */
  }
  if (strcmp(which, "all") == 0 || strcmp(which, "pd") == 0)
    printf("\npd_sgemm_peak_gflops() = %.1f\n", pd_sgemm_peak_gflops());
  free(a), free(b), free(c);
  return 0;
}
