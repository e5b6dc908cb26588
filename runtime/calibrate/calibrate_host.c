/* runtime/calibrate/calibrate_host.c — the host's rates (calibrate.h): each a best time
 * over repeated runs, so that a busy machine gives its least disturbed figure. */
#include "runtime/calibrate/calibrate.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu_kernels.h"
#include "runtime/blas/blas.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *filled(int64_t n, int salt) {
  float *x = malloc(sizeof(float) * (size_t)n);
  if (x) /* small, varied values: no denormals, nothing a kernel could skip */
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * (7 + salt) % 13) - 6) * 0.01f;
  return x;
}

/* The GEMM sweep: the projections and MLPs of small to GPT-2-small-sized models at
 * the row counts (microbatch x sequence) that CPU plans run. */
static const int sweep[CAL_GEMM_POINTS][3] = {
    {32, 64, 64},     {128, 128, 128},  {512, 128, 128},  {128, 384, 128},
    {256, 256, 256},  {1024, 256, 256}, {256, 768, 768},  {1024, 768, 768},
    {256, 3072, 768}, {256, 768, 3072}, {2048, 768, 768}, {512, 2304, 768},
};

/* Best time of C[M,N] = op(A) op(B) over at least 5 calls and 0.05 s, in the three
 * forms a linear layer runs: forward (A B), input gradient (A B^T), weight gradient
 * (A^T B), taken in turn (trans = point index % 3). */
static double gemm_time(int M, int N, int K, int trans, const float *a, const float *b, float *c) {
  int ta = trans == 2, tb = trans == 1;
  int lda = ta ? M : K, ldb = tb ? K : N;
  pd_sgemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, N);
  double best = INFINITY, start = now_s();
  for (int i = 0; i < 5 || now_s() - start < 0.05; i++) {
    double t0 = now_s();
    pd_sgemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, N);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

/* t = latency + flops·x, least squares in relative error (each point weighs 1/t):
 * the small GEMMs' fixed cost and the large ones' rate both count. */
static void fit_gemm(HostRates *r) {
  double saa = 0, sab = 0, sbb = 0, sa = 0, sb = 0;
  for (int i = 0; i < r->ngemm; i++) {
    double w = 1 / r->gemm_s[i], f = 2.0 * r->gemm_m[i] * r->gemm_n[i] * r->gemm_k[i];
    double a = w, b = f * w; /* (latency·a + x·b) ≈ 1 */
    saa += a * a, sab += a * b, sbb += b * b, sa += a, sb += b;
  }
  double det = saa * sbb - sab * sab, lat = (sa * sbb - sb * sab) / det, x = (saa * sb - sab * sa) / det;
  if (!(lat >= 0)) lat = 0, x = sb / sbb; /* no negative fixed cost: the rate alone */
  r->gemm_latency_s = lat;
  r->gemm_flops = 1 / x;
  r->gemm_worst_err = 0;
  for (int i = 0; i < r->ngemm; i++) {
    double f = 2.0 * r->gemm_m[i] * r->gemm_n[i] * r->gemm_k[i];
    double e = fabs((lat + f * x) / r->gemm_s[i] - 1);
    if (e > r->gemm_worst_err) r->gemm_worst_err = e;
  }
}

static bool measure_gemm(HostRates *r, char *err, size_t errlen) {
  int64_t most = 0;
  for (int i = 0; i < CAL_GEMM_POINTS; i++) {
    int64_t need[3] = {(int64_t)sweep[i][0] * sweep[i][2], (int64_t)sweep[i][2] * sweep[i][1],
                       (int64_t)sweep[i][0] * sweep[i][1]};
    for (int j = 0; j < 3; j++)
      if (need[j] > most) most = need[j];
  }
  float *a = filled(most, 0), *b = filled(most, 2), *c = filled(most, 4);
  bool ok = a && b && c;
  for (int i = 0; ok && i < CAL_GEMM_POINTS; i++) {
    r->gemm_m[i] = sweep[i][0], r->gemm_n[i] = sweep[i][1], r->gemm_k[i] = sweep[i][2];
    r->gemm_s[i] = gemm_time(sweep[i][0], sweep[i][1], sweep[i][2], i % 3, a, b, c);
    ok = r->gemm_s[i] > 0 && isfinite(r->gemm_s[i]);
  }
  free(a), free(b), free(c);
  if (!ok) {
    snprintf(err, errlen, "cannot measure the BLAS (%s): out of memory or a clock that does not advance",
             pd_blas_name());
    return false;
  }
  r->ngemm = CAL_GEMM_POINTS;
  fit_gemm(r);
  return true;
}

/* memcpy of 64 MiB, best of 5: what a transfer between two ranks of the local
 * transport does, and the bandwidth a memory-bound op sees (read + write). */
static double copy_rate(void) {
  const size_t n = (size_t)64 << 20;
  char *src = malloc(n), *dst = malloc(n);
  if (!src || !dst) {
    free(src), free(dst);
    return 0;
  }
  memset(src, 1, n), memset(dst, 2, n);
  double best = INFINITY;
  for (int i = 0; i < 5; i++) {
    double t0 = now_s();
    memcpy(dst, src, n);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
  }
  volatile char sink = dst[n / 2];
  (void)sink;
  free(src), free(dst);
  return (double)n / best;
}

/* The optimizer step per parameter: the gradient norm's sum of squares and AdamW, as
 * a stage program's OPT_STEP runs them, over 4 Mi parameters (beyond the caches). */
static double optimizer_ns(void) {
  const int64_t n = (int64_t)4 << 20;
  float *w = filled(n, 0), *w2 = filled(n, 1), *g = filled(n, 2), *m = filled(n, 3), *v = filled(n, 5);
  double best = INFINITY;
  if (w && w2 && g && m && v) {
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    for (int i = 0; i < 5; i++) {
      double t0 = now_s();
      double ss = pk_sumsq_f32(g, n);
      pk_adamw_step_f32(w2, w, g, m, v, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, i + 1, 1.0 / (1.0 + ss), 0);
      double dt = now_s() - t0;
      if (dt < best) best = dt;
    }
  }
  free(w), free(w2), free(g), free(m), free(v);
  return isfinite(best) ? best / (double)n * 1e9 : 0;
}

CpuIdent calibrate_cpu_ident(void) {
  CpuIdent id = {"", "?", "?"};
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return id;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char *v = strchr(line, ':');
    if (!v) continue;
    v += strspn(v + 1, " \t") + 1;
    v[strcspn(v, "\n")] = 0;
    if (!id.name[0] && strncmp(line, "model name", 10) == 0) snprintf(id.name, sizeof id.name, "%s", v);
    else if (strncmp(line, "cpu family", 10) == 0) snprintf(id.family, sizeof id.family, "%s", v);
    else if (strncmp(line, "model\t", 6) == 0) snprintf(id.model, sizeof id.model, "%s", v);
    if (strncmp(line, "processor", 9) == 0 && id.name[0]) break; /* the second CPU: enough */
  }
  fclose(f);
  return id;
}

bool calibrate_host(HostRates *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  r->cores = cores > 0 ? (int)cores : 1;
  CpuIdent id = calibrate_cpu_ident();
  snprintf(r->cpu, sizeof r->cpu, "%.60s (family %.8s, model %.8s)", id.name[0] ? id.name : "unknown CPU", id.family,
           id.model);
  pd_blas_set_quiet(1);
  pd_blas_init(r->cores);
  /* the best of three windows: one taken while something else briefly held a core
   * read 1.45x instead of the 2.0x every quiet repeat gives (bench/pipeline/RESULTS.md) */
  for (int i = 0; i < 3; i++) {
    double g = pd_sgemm_peak_gflops() * 1e9;
    if (g > r->gemm_flops_all) r->gemm_flops_all = g;
  }
  pd_blas_init(1); /* a rank of a plan with one stage per core */
  snprintf(r->blas, sizeof r->blas, "%s", pd_blas_name());
  if (!measure_gemm(r, err, errlen)) return false;
  r->copy_bytes_s = copy_rate();
  r->optimizer_ns = optimizer_ns();
  if (!(r->copy_bytes_s > 0) || !(r->optimizer_ns > 0)) {
    snprintf(err, errlen, "cannot measure memory: 3 x 64 MiB could not be allocated");
    return false;
  }
  return true;
}
