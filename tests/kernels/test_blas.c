/* pd_sgemm (runtime/blas/blas.h) against the naive loop for all four transpose
 * combinations, with padded leading dimensions, alpha and beta; beta = 0 ignores
 * NaNs in C; the kernels' hook drives it; the library reports its name and a
 * positive rate (never asserted against a speed); and the embedded kernel text
 * compiles on its own, as a generated stageN.c will. */
#include <pthread.h>
#include <unistd.h>

#include "kcheck.h"
#include "pk_kernels_src.h"
#include "runtime/blas/blas.h"

enum { M = 37, N = 29, K = 23, PAD = 3 };

static void fill(float *x, int n, int salt) {
  for (int i = 0; i < n; i++) x[i] = (float)(((i * 31 + salt * 17) % 19) - 9) * 0.0625f;
}

static void test_four_transposes(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
      int arows = ta ? K : M, brows = tb ? N : K;
      float *a = malloc(sizeof(float) * arows * lda), *b = malloc(sizeof(float) * brows * ldb);
      float *c = malloc(sizeof(float) * M * ldc), *ref = malloc(sizeof(float) * M * ldc);
      fill(a, arows * lda, 1);
      fill(b, brows * ldb, 2);
      fill(c, M * ldc, 3);
      memcpy(ref, c, sizeof(float) * M * ldc);
      pd_sgemm(ta, tb, M, N, K, 0.75f, a, lda, b, ldb, -0.5f, c, ldc);
      pk_gemm_naive_f32(ta, tb, M, N, K, 0.75f, a, lda, b, ldb, -0.5f, ref, ldc);
      int bad = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
          float want = ref[i * ldc + j], got = c[i * ldc + j];
          /* inputs are small multiples of 1/16: every sum is exact in float, so any
           * correct order of summation gives the same bits; the padding columns
           * j >= N must be left as they were (ref still holds them). */
          if (got != want) bad++;
        }
      if (bad) fprintf(stderr, "ta=%d tb=%d: %d elements differ\n", ta, tb, bad);
      EXPECT_EQ_INT(bad, 0);
      free(a), free(b), free(c), free(ref);
    }
}

static void test_beta_zero_ignores_c(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4];
  for (int i = 0; i < 4; i++) c[i] = NAN;
  pd_sgemm(0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  EXPECT(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
  pd_sgemm(0, 0, 0, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2); /* empty: a no-op */
  EXPECT(c[0] == 1);
}

/* The kernels' float32 GEMMs through the hook, as a stage .so runs them. */
static void test_kernels_through_hook(void) {
  enum { R = 20, CI = 16, CO = 12 };
  double xd[R * CI], wd[CI * CO], bd[CO], yd[R * CO];
  kc_fill(xd, R * CI, 0.1, 1);
  kc_fill(wd, CI * CO, 0.1, 1);
  kc_fill(bd, CO, 0.1, 1);
  float *xf = kc_to_f32(xd, R * CI), *wf = kc_to_f32(wd, CI * CO), *bf = kc_to_f32(bd, CO);
  float yf[R * CO];
  pk_linear_fwd_f64(yd, xd, wd, bd, R, CI, CO);
  pk_set_sgemm(pd_sgemm);
  pk_linear_fwd_f32(yf, xf, wf, bf, R, CI, CO);
  pk_set_sgemm(NULL);
  EXPECT(kc_rel_diff_f32(yf, yd, R * CO) < 1e-5);
  free(xf), free(wf), free(bf);
}

/* Ranks of the local transport are threads of one process and call pd_sgemm at the
 * same time: each thread multiplies its own matrices, repeatedly, and must get the
 * exact products. */
enum { CM = 48, CN = 40, CK = 36, CREP = 40 };
static void *concurrent_worker(void *arg) {
  int salt = *(int *)arg, bad = 0;
  float *a = malloc(sizeof(float) * CM * CK), *b = malloc(sizeof(float) * CK * CN);
  float *c = malloc(sizeof(float) * CM * CN), *ref = malloc(sizeof(float) * CM * CN);
  fill(a, CM * CK, salt);
  fill(b, CK * CN, salt + 1);
  pk_gemm_naive_f32(0, 1, CM, CN, CK, 1.0f, a, CK, b, CK, 0.0f, ref, CN);
  for (int r = 0; r < CREP; r++) {
    pd_sgemm(0, 1, CM, CN, CK, 1.0f, a, CK, b, CK, 0.0f, c, CN);
    bad += memcmp(c, ref, sizeof(float) * CM * CN) != 0;
  }
  free(a), free(b), free(c), free(ref);
  *(int *)arg = bad;
  return NULL;
}
static void test_concurrent_callers(void) {
  pthread_t th[3];
  int arg[3] = {5, 9, 13};
  for (int i = 0; i < 3; i++) EXPECT(pthread_create(&th[i], NULL, concurrent_worker, &arg[i]) == 0);
  for (int i = 0; i < 3; i++) EXPECT(pthread_join(th[i], NULL) == 0);
  for (int i = 0; i < 3; i++) EXPECT_EQ_INT(arg[i], 0);
}

static void test_name_and_rate(void) {
  pd_blas_init(1);
  const char *name = pd_blas_name();
  printf("pd_blas_name: %s\n", name);
  EXPECT(strstr(name, "blis") == name || strstr(name, "openblas") == name);
  /* ctest runs this binary a second time with PD2BW_BLAS=openblas: the override
   * must take (in a BLIS build, through dlopen). */
  const char *want = getenv("PD2BW_BLAS");
  if (want && strcmp(want, "openblas") == 0) EXPECT(strstr(name, "openblas") == name);
  EXPECT(strstr(name, ", 1 thread") != NULL);
  double gf = pd_sgemm_peak_gflops();
  printf("pd_sgemm_peak_gflops: %.1f\n", gf);
  EXPECT(gf > 0 && isfinite(gf));
  pd_blas_init(2);
}

/* The embedded text is philox.h then cpu_kernels.h and compiles alone (what the code
 * generator relies on): written to a temp file and run through the system compiler. */
static void test_embedded_source_compiles(void) {
  EXPECT(strstr(pd_cpu_kernels_src, "#define PD2BW_PHILOX_H") != NULL);
  EXPECT(strstr(pd_cpu_kernels_src, "PD2BW_CPU_KERNELS_COMMON") != NULL);
  EXPECT(strstr(pd_cpu_kernels_src, "#define PD2BW_PHILOX_H") <
         strstr(pd_cpu_kernels_src, "PD2BW_CPU_KERNELS_COMMON"));
  char dir[] = "/tmp/pd2bw_kernels_XXXXXX";
  if (!mkdtemp(dir)) {
    EXPECT(!"mkdtemp");
    return;
  }
  char src[128], cmd[512];
  snprintf(src, sizeof src, "%s/stage.c", dir);
  FILE *f = fopen(src, "w");
  EXPECT(f != NULL);
  if (!f) return;
  fputs(pd_cpu_kernels_src, f);
  fputs("\nvoid stage_init(pk_sgemm_fn f);\nvoid stage_init(pk_sgemm_fn f) { pk_set_sgemm(f); }\n",
        f);
  fclose(f);
  /* Run from a directory without philox.h: the text must not need this checkout. */
  snprintf(cmd, sizeof cmd,
           "cd %s && cc -std=c11 -O1 -fopenmp -Wall -Wextra -Werror -fPIC -c stage.c -o stage.o",
           dir);
  EXPECT(system(cmd) == 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  EXPECT(system(cmd) == 0);
}

int main(void) {
  RUN(test_four_transposes);
  RUN(test_beta_zero_ignores_c);
  RUN(test_kernels_through_hook);
  RUN(test_concurrent_callers);
  RUN(test_name_and_rate);
  RUN(test_embedded_source_compiles);
  return TEST_REPORT();
}
