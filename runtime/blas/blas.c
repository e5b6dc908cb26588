/* runtime/blas/blas.c — pd_sgemm over CBLAS (see runtime/blas/blas.h), and which
 * library serves it.
 *
 * The build links BLIS when found, else OpenBLAS (the defines PD_BLAS_BLIS /
 * PD_BLAS_OPENBLAS come from runtime/blas/CMakeLists.txt). BLIS picks its kernel
 * sub-configuration from cpuid when it initialises, and on the machines measured it picks
 * the right one, except on an AVX-512 CPU that BLIS 0.9.0 files under 'haswell': there a
 * BLIS build switches to OpenBLAS loaded with dlopen (blas_choose). PD2BW_BLAS=openblas|blis
 * in the environment overrides the choice (benchmarks, debugging).
 *
 * Invariant: the choice is made once per process (blas_once) and never changes, so every
 * GEMM of a run uses the same library. Measurements: bench/sgemm/RESULTS.md. */
#include "runtime/blas/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"

#if defined(PD_BLAS_BLIS)
#include <blis.h> /* declares the CBLAS API when BLIS was built with it (Debian) */
#elif defined(PD_BLAS_OPENBLAS)
#include <cblas.h>
char *openblas_get_corename(void);
char *openblas_get_config(void);
int openblas_get_parallel(void);
void openblas_set_num_threads(int n);
#else
#error "define PD_BLAS_BLIS or PD_BLAS_OPENBLAS (runtime/blas/CMakeLists.txt does)"
#endif

/* cblas_sgemm with the enums as ints (their values are fixed by the CBLAS standard). */
typedef void (*CblasSgemm)(int order, int ta, int tb, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta,
                           float *C, int ldc);

/* OpenBLAS opened with dlopen (BLIS builds only, see blas_choose). */
typedef struct DlOpenblas {
  CblasSgemm sgemm;
  void (*set_threads)(int);
  char *(*corename)(void);
  char *(*config)(void);
  int (*parallel)(void); /* 0 serial, 1 pthread, 2 OpenMP; NULL: not exported */
} DlOpenblas;

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static DlOpenblas dl;      /* dl.sgemm != NULL: every GEMM goes to it */
static char dl_reason[96]; /* why OpenBLAS replaced the linked library */
static int blas_threads;   /* 0 until pd_blas_init */
static bool blas_quiet;    /* pd_blas_set_quiet: no note on the library chosen */

void pd_blas_set_quiet(int quiet) { blas_quiet = quiet != 0; }
static char blas_name[240];

#if defined(PD_BLAS_BLIS)
/* True when the CPU (and OS) can run AVX-512 F/DQ/CD/BW/VL code (BLIS skx, OpenBLAS
 * SkylakeX). */
static bool cpu_has_avx512(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

/* Loads OpenBLAS for dl; false (with a warning naming the cause) when it cannot. On an
 * AVX-512 CPU its AVX-512 kernels are forced (OPENBLAS_CORETYPE=SkylakeX, read when
 * OpenBLAS loads; OpenBLAS 0.3.21's own detection misfiles these CPUs too). RTLD_DEEPBIND
 * keeps OpenBLAS's internal calls inside OpenBLAS although BLIS exports the same BLAS
 * symbols. */
static bool dl_openblas_load(void) {
  if (cpu_has_avx512()) setenv("OPENBLAS_CORETYPE", "SkylakeX", 0); /* 0: user's wins */
  /* AddressSanitizer refuses RTLD_DEEPBIND (its interceptors must bind first);
   * a sanitizer build loads OpenBLAS without it, which only matters if BLIS is
   * also in the process, and the sanitizer run is about our code, not speed. */
#if defined(__SANITIZE_ADDRESS__)
  int deep = 0;
#else
  int deep = RTLD_DEEPBIND;
#endif
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | deep);
  if (!h) {
    fprintf(stderr, "pd2bw: warning: cannot load OpenBLAS (%s); keeping the linked BLAS\n",
            dlerror());
    return false;
  }
  DlOpenblas d;
  /* POSIX lets dlsym's void * hold a function pointer; memcpy converts it without a
   * cast ISO C leaves undefined. */
  void *p[5] = {dlsym(h, "cblas_sgemm"), dlsym(h, "openblas_set_num_threads"),
                dlsym(h, "openblas_get_corename"), dlsym(h, "openblas_get_config"),
                dlsym(h, "openblas_get_parallel")};
  memcpy(&d.sgemm, &p[0], sizeof p[0]);
  memcpy(&d.set_threads, &p[1], sizeof p[1]);
  memcpy(&d.corename, &p[2], sizeof p[2]);
  memcpy(&d.config, &p[3], sizeof p[3]);
  memcpy(&d.parallel, &p[4], sizeof p[4]); /* (optional: the name's threading word) */
  if (!d.sgemm || !d.set_threads || !d.corename || !d.config) {
    fprintf(stderr, "pd2bw: warning: libopenblas.so.0 lacks cblas_sgemm or the openblas_* "
                    "API; keeping the linked BLAS\n");
    return false; /* h stays open: closing a BLAS that may have started threads is unsafe */
  }
  dl = d;
  return true;
}

#endif /* PD_BLAS_BLIS */

/* Decides, once, which library serves pd_sgemm. The one case BLIS gets wrong: an AVX-512
 * CPU whose model BLIS 0.9.0 does not know (newer Xeons) is filed under 'haswell', half
 * the FLOP rate of 'skx'. It cannot be corrected inside BLIS: BLIS_ARCH_TYPE makes
 * Debian's 0.9.0 abort on ANY value ("Accessed uninitialized context in gks"; tried 0, 3,
 * 6, 7, 8, 12 and names), and bli_arch_set_id is not exported. So that case goes to
 * OpenBLAS (dl_openblas_load). */
static void blas_choose(void) {
#if defined(PD_BLAS_BLIS)
  const char *want = getenv("PD2BW_BLAS");
  if (want && strcmp(want, "openblas") == 0) {
    if (dl_openblas_load()) snprintf(dl_reason, sizeof dl_reason, "PD2BW_BLAS=openblas");
    return;
  }
  if (want && strcmp(want, "blis") != 0)
    fprintf(stderr, "pd2bw: warning: PD2BW_BLAS=%s is neither blis nor openblas; ignored\n",
            want);
  if (want) return; /* "blis": stay */
  const char *arch = bli_arch_string(bli_arch_query_id());
  if (cpu_has_avx512() && strcmp(arch, "skx") != 0 && dl_openblas_load()) {
    snprintf(dl_reason, sizeof dl_reason, "AVX-512 CPU, BLIS chose '%s'", arch);
    if (!blas_quiet)
      fprintf(stderr,
            "pd2bw: note: this CPU has AVX-512 but BLIS %s chose '%s' (256-bit); using "
            "OpenBLAS with OPENBLAS_CORETYPE=%s instead (bench/sgemm/RESULTS.md)\n",
            bli_info_get_version_str(), arch, getenv("OPENBLAS_CORETYPE"));
  }
#endif
}

/* OpenBLAS allocates one GEMM buffer for the calling thread and one for each of its
 * worker threads at their first GEMM, and when that allocation fails it retries
 * forever (blas_memory_alloc; seen under ulimit -v with Debian's 0.3.21), so a run
 * short of memory would hang inside a library call. The first GEMM of each thread
 * therefore makes the same allocations first, all at once: BUFFER_SIZE (128 MiB on
 * x86_64) plus the page OpenBLAS adds (the size seen failing there), once per GEMM
 * thread. They are address space only (never touched), so this costs nothing when
 * memory is there. */
#define OPENBLAS_BUFFER_BYTES (((size_t)128 << 20) + 4096)

static void probe_openblas_buffers(void) {
  static _Thread_local bool probed;
  if (probed) return;
  enum { MOST = 256 };
  void *p[MOST];
  int n = blas_threads < 1 ? 1 : blas_threads > MOST ? MOST : blas_threads, got = 0;
  while (got < n && (p[got] = malloc(OPENBLAS_BUFFER_BYTES)) != NULL) got++;
  for (int i = 0; i < got; i++) free(p[i]);
  if (got < n) {
    char what[160];
    snprintf(what, sizeof what, "OpenBLAS's GEMM buffers (one for each of %d thread%s; OpenBLAS would retry forever)", n,
             n == 1 ? "" : "s");
    pd_out_of_memory((size_t)n * OPENBLAS_BUFFER_BYTES, what, __FILE__, __LINE__);
  }
  probed = true;
}

void pd_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  PD_CHECK(M >= 0 && N >= 0 && K >= 0, "(pd_sgemm M=%d N=%d K=%d)", M, N, K);
  int need_a = transa ? M : K, need_b = transb ? K : N;
  PD_CHECK(lda >= (need_a > 1 ? need_a : 1) && ldb >= (need_b > 1 ? need_b : 1) &&
               ldc >= (N > 1 ? N : 1),
           "(pd_sgemm lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d ta=%d tb=%d)", lda, ldb, ldc, M,
           N, K, transa, transb);
  if (M == 0 || N == 0) return;
  PD_CHECK(pthread_once(&blas_once, blas_choose) == 0);
  if (dl.sgemm) {
    probe_openblas_buffers();
    dl.sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
             transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#if defined(PD_BLAS_OPENBLAS)
  probe_openblas_buffers();
#endif
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
              transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void pd_blas_init(int nthreads) {
  if (nthreads < 1) nthreads = 1;
  blas_threads = nthreads;
  PD_CHECK(pthread_once(&blas_once, blas_choose) == 0);
  if (dl.sgemm) {
    dl.set_threads(nthreads);
    return;
  }
#if defined(PD_BLAS_BLIS)
  bli_init();
  bli_thread_set_num_threads(nthreads);
#else
  openblas_set_num_threads(nthreads);
#endif
}

/* "openblas 0.3.21 (Zen, pthread, 2 threads)" from OpenBLAS's own queries (parallel:
 * openblas_get_parallel's 0 serial, 1 pthread, 2 OpenMP; -1 unknown). */
static void openblas_name(const char *config, const char *core, int parallel, const char *extra) {
  char version[32] = "?"; /* config is "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." */
  sscanf(config, "OpenBLAS %31s", version);
  const char *threading = parallel == 0 ? "serial" : parallel == 1 ? "pthread" : parallel == 2 ? "openmp" : "?";
  if (blas_threads)
    snprintf(blas_name, sizeof blas_name, "openblas %s (%s, %s, %d thread%s%s)", version, core, threading,
             blas_threads, blas_threads == 1 ? "" : "s", extra);
  else
    snprintf(blas_name, sizeof blas_name, "openblas %s (%s, %s%s)", version, core, threading, extra);
}

int pd_blas_own_pool(void) {
  PD_CHECK(pthread_once(&blas_once, blas_choose) == 0);
  if (dl.sgemm) return !dl.parallel || dl.parallel() != 2;
#if defined(PD_BLAS_BLIS)
  return !bli_info_get_enable_openmp();
#else
  return openblas_get_parallel() != 2;
#endif
}

const char *pd_blas_name(void) {
  PD_CHECK(pthread_once(&blas_once, blas_choose) == 0);
  if (dl.sgemm) {
    char extra[128];
    snprintf(extra, sizeof extra, "; dlopen: %s", dl_reason);
    openblas_name(dl.config(), dl.corename(), dl.parallel ? dl.parallel() : -1, extra);
    return blas_name;
  }
#if defined(PD_BLAS_BLIS)
  const char *threading = bli_info_get_enable_openmp()     ? "openmp"
                          : bli_info_get_enable_pthreads() ? "pthread"
                                                           : "serial";
  int n = blas_threads ? blas_threads : (int)bli_thread_get_num_threads();
  snprintf(blas_name, sizeof blas_name, "blis %s (%s, %s, %d thread%s)",
           bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()), threading, n,
           n == 1 ? "" : "s");
#else
  openblas_name(openblas_get_config(), openblas_get_corename(), openblas_get_parallel(), "");
#endif
  return blas_name;
}

static double now_s(void) {
  struct timespec ts;
  PD_CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double pd_sgemm_peak_gflops(void) {
  enum { N = 1024 };
  float *a = pd_malloc(sizeof(float) * N * N);
  float *b = pd_malloc(sizeof(float) * N * N);
  float *c = pd_malloc(sizeof(float) * N * N);
  /* Small, varied values: no denormals, no overflow, nothing a kernel could skip. */
  for (int i = 0; i < N * N; i++) {
    a[i] = (float)((i * 7 % 13) - 6) * 0.01f;
    b[i] = (float)((i * 5 % 11) - 5) * 0.01f;
  }
  pd_sgemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warm-up: threads, packing */
  double best = 0, start = now_s();
  do {
    double t0 = now_s();
    pd_sgemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
    double dt = now_s() - t0;
    double gf = 2.0 * N * N * N / dt * 1e-9;
    if (gf > best) best = gf;
  } while (now_s() - start < 0.3);
  free(a);
  free(b);
  free(c);
  return best;
}
