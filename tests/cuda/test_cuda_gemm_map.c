/* tests/cuda/test_cuda_gemm_map.c — cuda_gemm's row-major to cuBLAS mapping.
 *
 * cuBLAS is column-major; cuda_gemm promises the row-major semantics of
 * pk_sgemm_fn. The mapping (cuda_gemm_colmajor) is checked here without a GPU: a
 * column-major reference GEMM with exactly cuBLAS's meaning of (transa, transb, m,
 * n, k, lda, ldb, ldc), fed the mapped arguments, must equal the CPU kernels'
 * row-major GEMM for every transpose combination, odd sizes and padded leading
 * dimensions.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../test.h"
#include "runtime/cuda/cuda_internal.h"
#include "kernels/cpu_kernels.h"

/* C = alpha·op(A)·op(B) + beta·C, column-major, as cublasSgemm defines it. */
static void colmajor_gemm(int transa, int transb, int m, int n, int k, float alpha, const float *A,
                          int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double acc = 0;
      for (int p = 0; p < k; p++) {
        float a = transa ? A[p + (int64_t)i * lda] : A[i + (int64_t)p * lda];
        float b = transb ? B[j + (int64_t)p * ldb] : B[p + (int64_t)j * ldb];
        acc += (double)a * b;
      }
      float *c = &C[i + (int64_t)j * ldc];
      *c = alpha * (float)acc + (beta == 0 ? 0 : beta * *c);
    }
}

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

static void test_all_transposes(void) {
  const int M = 7, N = 5, K = 9, pad = 3;
  unsigned seed = 1;
  for (int ta = 0; ta <= 1; ta++)
    for (int tb = 0; tb <= 1; tb++) {
      /* Row-major storage as pk_sgemm_fn describes it, with padded rows. */
      int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      int arows = ta ? K : M, brows = tb ? N : K;
      float *A = malloc(sizeof(float) * arows * lda), *B = malloc(sizeof(float) * brows * ldb);
      float *C1 = malloc(sizeof(float) * M * ldc), *C2 = malloc(sizeof(float) * M * ldc);
      for (int i = 0; i < arows * lda; i++) A[i] = frand(&seed);
      for (int i = 0; i < brows * ldb; i++) B[i] = frand(&seed);
      for (int i = 0; i < M * ldc; i++) C1[i] = C2[i] = frand(&seed);
      pk_gemm_naive_f32(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, 0.5f, C1, ldc);
      CublasGemmArgs g =
          cuda_gemm_colmajor(ta, tb, M, N, K, (CudaPtr)(uintptr_t)A, lda, (CudaPtr)(uintptr_t)B,
                             ldb, (CudaPtr)(uintptr_t)C2, ldc);
      colmajor_gemm(g.transa, g.transb, g.m, g.n, g.k, 1.5f, (const float *)(uintptr_t)g.A, g.lda,
                    (const float *)(uintptr_t)g.B, g.ldb, 0.5f, (float *)(uintptr_t)g.C, g.ldc);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) /* the padding must be untouched too */
          EXPECT_NEAR(C2[i * ldc + j], C1[i * ldc + j], 1e-5, 1e-6);
      free(A), free(B), free(C1), free(C2);
    }
}

int main(void) {
  RUN(test_all_transposes);
  return TEST_REPORT();
}
