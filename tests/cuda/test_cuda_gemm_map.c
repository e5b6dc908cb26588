/* tests/cuda/test_cuda_gemm_map.c — cuda_gemm's row-major to cuBLAS mapping.
 *
 * cuBLAS is column-major; cuda_gemm promises the row-major semantics of
 * pk_sgemm_fn. The mapping (cuda_gemm_colmajor) is checked here without a GPU: a
 * column-major reference GEMM with exactly cuBLAS's meaning of (transa, transb, m,
 * n, k, lda, ldb, ldc), fed the mapped arguments, must equal the CPU kernels'
 * row-major GEMM for every transpose combination, odd sizes and padded leading
 * dimensions.
 * The epilogues of cuda_gemm_lt likewise: a column-major reference with
 * cuBLASLt's documented meaning of each cublasLtEpilogue_t (bias along D's rows;
 * BGRADA / BGRADB: op(A) / op(B) summed over k), fed the mapped arguments and the
 * epilogue cuda_lt_epilogue_colmajor picks, must give the row-major epilogue
 * (contract/contract.h GemmEpilogue): bias per column N, the gradient of op(B)'s
 * columns for bgradb (BGRADA after the swap: BGRADB would sum the wrong operand).
 */
#include <cublasLt.h>
#include <math.h>
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
          cuda_gemm_colmajor(ta, tb, M, N, K, (GpuPtr)(uintptr_t)A, lda, (GpuPtr)(uintptr_t)B,
                             ldb, (GpuPtr)(uintptr_t)C2, ldc);
      colmajor_gemm(g.transa, g.transb, g.m, g.n, g.k, 1.5f, (const float *)(uintptr_t)g.A, g.lda,
                    (const float *)(uintptr_t)g.B, g.ldb, 0.5f, (float *)(uintptr_t)g.C, g.ldc);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) /* the padding must be untouched too */
          EXPECT_NEAR(C2[i * ldc + j], C1[i * ldc + j], 1e-5, 1e-6);
      free(A), free(B), free(C1), free(C2);
    }
}

static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double dgelu(double x) {
  double h = 1e-4;
  return (gelu(x + h) - gelu(x - h)) / (2 * h); /* any fixed derivative: both sides use it */
}

/* cuBLASLt's epilogue `epi` after C = alpha·op(A)·op(B) + beta·C, column-major (m, n, k
 * and operands as cublasLtMatmul gets them). */
static void colmajor_epilogue(int epi, int transa, int transb, int m, int n, int k, const float *A, int lda,
                              const float *B, int ldb, float *C, int ldc, float *bias, float *aux, int ldaux) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float *c = &C[i + (int64_t)j * ldc];
      if (epi == CUBLASLT_EPILOGUE_BIAS) *c += bias[i];
      if (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        aux[i + (int64_t)j * ldaux] = *c + bias[i];
        *c = (float)gelu(aux[i + (int64_t)j * ldaux]);
      }
      if (epi == CUBLASLT_EPILOGUE_DGELU) *c = (float)(*c * dgelu(aux[i + (int64_t)j * ldaux]));
    }
  if (epi == CUBLASLT_EPILOGUE_BGRADA) /* length m: op(A) summed over k */
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += transa ? A[p + (int64_t)i * lda] : A[i + (int64_t)p * lda];
      bias[i] = (float)s;
    }
  if (epi == CUBLASLT_EPILOGUE_BGRADB) /* length n: op(B) summed over k */
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += transb ? B[j + (int64_t)p * ldb] : B[p + (int64_t)j * ldb];
      bias[j] = (float)s;
    }
}

/* The row-major meaning (contract/contract.h), after C = alpha·op(A)·op(B) + beta·C. */
static void rowmajor_epilogue(GemmEpilogue kind, int tb, int M, int N, int K, const float *B, int ldb, float *C,
                              int ldc, float *bias, float *aux, int ldaux) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float *c = &C[(int64_t)i * ldc + j];
      if (kind == GEMM_EPI_BIAS) *c += bias[j];
      if (kind == GEMM_EPI_GELU_AUX_BIAS) {
        aux[(int64_t)i * ldaux + j] = *c + bias[j];
        *c = (float)gelu(aux[(int64_t)i * ldaux + j]);
      }
      if (kind == GEMM_EPI_DGELU) *c = (float)(*c * dgelu(aux[(int64_t)i * ldaux + j]));
    }
  if (kind == GEMM_EPI_BGRADB)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int p = 0; p < K; p++) s += tb ? B[(int64_t)j * ldb + p] : B[(int64_t)p * ldb + j];
      bias[j] = (float)s;
    }
}

static void test_epilogues(void) {
  enum { M = 6, N = 8, K = 5, pad = 2, ldaux = N };
  unsigned seed = 7;
  const GemmEpilogue kinds[] = {GEMM_EPI_BIAS, GEMM_EPI_GELU_AUX_BIAS, GEMM_EPI_DGELU, GEMM_EPI_BGRADB};
  for (int kk = 0; kk < 4; kk++)
    for (int ta = 0; ta <= 1; ta++)
      for (int tb = 0; tb <= 1; tb++) {
        int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad, ar = ta ? K : M, br = tb ? N : K;
        float *A = malloc(sizeof(float) * ar * lda), *B = malloc(sizeof(float) * br * ldb);
        float *C1 = malloc(sizeof(float) * M * ldc), *C2 = malloc(sizeof(float) * M * ldc);
        float aux1[M * N], aux2[M * N], bias1[N], bias2[N];
        for (int i = 0; i < ar * lda; i++) A[i] = frand(&seed);
        for (int i = 0; i < br * ldb; i++) B[i] = frand(&seed);
        for (int i = 0; i < M * ldc; i++) C1[i] = C2[i] = frand(&seed);
        for (int i = 0; i < M * N; i++) aux1[i] = aux2[i] = frand(&seed);
        for (int i = 0; i < N; i++) bias1[i] = bias2[i] = frand(&seed);
        float beta = kinds[kk] == GEMM_EPI_BIAS || kinds[kk] == GEMM_EPI_BGRADB ? 0.5f : 0;
        pk_gemm_naive_f32(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C1, ldc);
        rowmajor_epilogue(kinds[kk], tb, M, N, K, B, ldb, C1, ldc, bias1, aux1, ldaux);
        CublasGemmArgs g = cuda_gemm_colmajor(ta, tb, M, N, K, (GpuPtr)(uintptr_t)A, lda, (GpuPtr)(uintptr_t)B, ldb,
                                              (GpuPtr)(uintptr_t)C2, ldc);
        const float *gA = (const float *)(uintptr_t)g.A, *gB = (const float *)(uintptr_t)g.B;
        colmajor_gemm(g.transa, g.transb, g.m, g.n, g.k, 1.5f, gA, g.lda, gB, g.ldb, beta, (float *)(uintptr_t)g.C,
                      g.ldc);
        colmajor_epilogue(cuda_lt_epilogue_colmajor(kinds[kk]), g.transa, g.transb, g.m, g.n, g.k, gA, g.lda, gB,
                          g.ldb, (float *)(uintptr_t)g.C, g.ldc, bias2, aux2, ldaux);
        for (int i = 0; i < M; i++)
          for (int j = 0; j < ldc; j++) EXPECT_NEAR(C2[i * ldc + j], C1[i * ldc + j], 1e-5, 1e-6);
        for (int i = 0; i < M * N; i++) EXPECT_NEAR(aux2[i], aux1[i], 1e-5, 1e-6);
        for (int i = 0; i < N; i++) EXPECT_NEAR(bias2[i], bias1[i], 1e-5, 1e-6);
        free(A), free(B), free(C1), free(C2);
      }
}

int main(void) {
  RUN(test_all_transposes);
  RUN(test_epilogues);
  return TEST_REPORT();
}
