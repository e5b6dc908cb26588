/* runtime/cuda/cuda_lt.c — GEMMs with epilogues through cuBLASLt (cuda_internal.h:
 * cuda_gemm_lt, cuda_gemm's path for pd2bwc --gemm-epilogues on).
 *
 * libcublasLt is dlopen()ed like cuBLAS, the first time a GEMM with an epilogue runs.
 * Each call builds a matmul descriptor (compute type by the GEMM's type: fp32 and bf16
 * CUBLAS_COMPUTE_32F, tf32 _FAST_TF32; C, D, the bias and aux always float32), sets the
 * epilogue, bias and aux pointers, asks the heuristic for one algorithm within the
 * stream's workspace and runs it. Rebuilding the descriptors per call costs nothing that
 * matters: a pass runs eagerly once and is then replayed as a CUDA graph.
 *
 * UNTESTED on a GPU (no GPU in CI): compiled, loaded (cuda_lt_available) and its
 * mapping unit-tested; scripts/gpu-check.sh runs it and times it against the plain
 * path (docs/gpu.md). */
#include <cublasLt.h>
#include <pthread.h>
#include <stdio.h>

#include "ir/ir.h"
#include "runtime/cuda/cuda_internal.h"

#ifndef PD2BW_CUDA_MAJOR
#define PD2BW_CUDA_MAJOR 13
#endif
#define LT_XSTR_(x) #x
#define LT_XSTR(x) LT_XSTR_(x)

/* clang-format off */
#define PD_LT_FUNCS(X)                                                                          \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmul)             \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)    \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                    \
  X(cublasLtMatmulAlgoGetHeuristic)
/* clang-format on */

typedef struct LtApi {
  CUDA_API_FIELDS(PD_LT_FUNCS)
} LtApi;

static LtApi lt;
static cublasLtHandle_t lt_handle; /* one per process: a handle is not tied to a device */
CUDA_API_BIND(lt_bind, lt, PD_LT_FUNCS, "libcublasLt", "cuda backend: ", "")

static const char *const lt_names[] = {"libcublasLt.so." LT_XSTR(PD2BW_CUDA_MAJOR), "libcublasLt.so", NULL};
static CudaLib lt_lib = CUDA_LIB("PD2BW_LIBCUBLASLT", lt_names, "cuda backend: cuBLASLt not found (", ")", lt_bind);

bool cuda_lt_available(char *err, size_t errlen) { return cuda_lib_load(&lt_lib, err, errlen); }

#define LT_CHECK(call) \
  CUDA_LIB_CHECK(cublasStatus_t, call, CUBLAS_STATUS_SUCCESS, "cuBLASLt", lt.cublasLtGetStatusString)

static pthread_once_t lt_handle_once = PTHREAD_ONCE_INIT;
static void lt_handle_create(void) { LT_CHECK(lt.cublasLtCreate(&lt_handle)); }

int cuda_lt_epilogue_colmajor(GemmEpilogue k) {
  switch (k) {
  case GEMM_EPI_NONE: return CUBLASLT_EPILOGUE_DEFAULT;
  case GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case GEMM_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case GEMM_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
  case GEMM_EPI_BGRADB: return CUBLASLT_EPILOGUE_BGRADA; /* row-major B is column-major A */
  case GEMM_EPI_COUNT: break;
  }
  PD_CHECK(false, "(epilogue %d)", (int)k);
  return CUBLASLT_EPILOGUE_DEFAULT;
}

static void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
  LT_CHECK(lt.cublasLtMatmulDescSetAttribute(desc, a, v, n));
}

void cuda_gemm_lt(CudaDev *d, int s, const GpuGemm *gm) {
  GemmType type = gm->type;
  int ta = gm->ta, tb = gm->tb, M = gm->M, N = gm->N, lda = gm->lda, ldb = gm->ldb, ldc = gm->ldc;
  const GpuEpilogue *ep = &gm->ep;
  char err[640];
  if (!cuda_lt_available(err, sizeof err)) pd_fatal(__FILE__, __LINE__, "%s; make the plan with pd2bwc --gemm-epilogues off", err);
  pthread_once(&lt_handle_once, lt_handle_create);
  if (M <= 0 || N <= 0) return;
  PD_CHECK(type != GEMM_BF16_OUT, "(a bf16 output takes no epilogue)");
  cudaDataType ab_t = type == GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasComputeType_t ct = type == GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CublasGemmArgs g = cuda_gemm_colmajor(ta, tb, M, N, gm->K, gm->A, lda, gm->B, ldb, gm->C, ldc);

  size_t ws_bytes = 0;
  GpuPtr ws = cuda_dev_workspace(d, s, &ws_bytes);
  GpuPtr bias = ep->bias;
  bool add_after = ep->kind == GEMM_EPI_BGRADB && ep->bias_acc;
  /* The stream's cuBLAS workspace serves cuBLASLt too (calls on one stream run in turn).
   * An accumulating bias gradient is the one thing cuBLASLt cannot do (it only writes
   * the vector): it writes it into the workspace's last (256-aligned) bytes, the matmul
   * gets the rest, and cuBLAS adds it (cuda_dev_axpy). */
  if (add_after) {
    size_t tb_bytes = ((size_t)N * 4 + 255) / 256 * 256;
    PD_CHECK(tb_bytes * 2 <= ws_bytes, "(a bias gradient of %d floats in a %zu-byte workspace)", N, ws_bytes);
    ws_bytes -= tb_bytes;
    bias = ws + ws_bytes;
  }

  cublasLtMatmulDesc_t desc;
  LT_CHECK(lt.cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F));
  cublasOperation_t opa = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  uint32_t epi = (uint32_t)cuda_lt_epilogue_colmajor(ep->kind);
  set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (ep->kind == GEMM_EPI_BIAS || ep->kind == GEMM_EPI_GELU_AUX_BIAS || ep->kind == GEMM_EPI_BGRADB) {
    void *bp = (void *)(uintptr_t)bias;
    int32_t bt = CUDA_R_32F; /* the bias, and the bias gradient, stay float32 with bf16 operands */
    set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  }
  if (ep->kind == GEMM_EPI_GELU_AUX_BIAS || ep->kind == GEMM_EPI_DGELU) {
    void *ap = (void *)(uintptr_t)ep->aux;
    int64_t ld = ep->ldaux;
    int32_t at = CUDA_R_32F;
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof ap);
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at);
  }
  cublasLtMatrixLayout_t la, lb, lc;
  LT_CHECK(lt.cublasLtMatrixLayoutCreate(&la, ab_t, g.transa ? g.k : g.m, g.transa ? g.m : g.k, g.lda));
  LT_CHECK(lt.cublasLtMatrixLayoutCreate(&lb, ab_t, g.transb ? g.n : g.k, g.transb ? g.k : g.n, g.ldb));
  LT_CHECK(lt.cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, g.m, g.n, g.ldc));
  cublasLtMatmulPreference_t pref;
  LT_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsmax = ws_bytes;
  LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
                                                   sizeof wsmax));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  cublasStatus_t hs = lt.cublasLtMatmulAlgoGetHeuristic(lt_handle, desc, la, lb, lc, lc, pref, 1, &h, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found < 1)
    pd_fatal(__FILE__, __LINE__,
             "cuBLASLt has no algorithm for a GEMM with the %s epilogue (row-major M %d N %d K %d, transposes %d %d, "
             "ld %d %d %d, aux ld %d: %s); make the plan with pd2bwc --gemm-epilogues off",
             gemm_epilogue_name(ep->kind), M, N, gm->K, ta, tb, lda, ldb, ldc, ep->ldaux,
             hs != CUBLAS_STATUS_SUCCESS ? lt.cublasLtGetStatusString(hs) : "none found");
  CUstream st = cuda_dev_stream(d, s);
  LT_CHECK(lt.cublasLtMatmul(lt_handle, desc, &gm->alpha, (const void *)(uintptr_t)g.A, la, (const void *)(uintptr_t)g.B,
                             lb, &gm->beta, (const void *)(uintptr_t)g.C, lc, (void *)(uintptr_t)g.C, lc, &h.algo,
                             (void *)(uintptr_t)ws, ws_bytes, (cudaStream_t)st));
  LT_CHECK(lt.cublasLtMatmulPreferenceDestroy(pref));
  LT_CHECK(lt.cublasLtMatrixLayoutDestroy(la));
  LT_CHECK(lt.cublasLtMatrixLayoutDestroy(lb));
  LT_CHECK(lt.cublasLtMatrixLayoutDestroy(lc));
  LT_CHECK(lt.cublasLtMatmulDescDestroy(desc));
  if (add_after) cuda_dev_axpy(d, s, N, bias, ep->bias);
}
