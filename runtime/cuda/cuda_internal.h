/* runtime/cuda/cuda_internal.h — private to runtime/cuda/: library loading and the
 * device's innards that nccl_transport.c needs.
 *
 * Every NVIDIA entry point is reached through a function pointer filled by dlsym.
 * The pointer types come from the toolkit's own headers with __typeof__, and the
 * names from the headers' own macros (cuda.h maps cuMemAlloc to cuMemAlloc_v2,
 * cublas_v2.h cublasCreate to cublasCreate_v2), so a signature or version suffix can
 * never be spelled wrong by hand: PD_SYMNAME(cuMemAlloc) is "cuMemAlloc_v2",
 * PD_SYMNAME(cuStreamBeginCapture) "cuStreamBeginCapture_v2" (the form with a capture
 * mode) and PD_SYMNAME(cuGraphInstantiate) "cuGraphInstantiateWithFlags" (CUDA 12+).
 */
#ifndef PD2BW_CUDA_INTERNAL_H
#define PD2BW_CUDA_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/cuda/cuda_backend.h"

/* One GPU (cuda_device.c), behind its CudaDeviceOps. */
typedef struct CudaDev CudaDev;

#define PD_STR2_(x) #x
#define PD_SYMNAME(x) PD_STR2_(x)

/* A message around a reason: before, the reason, after. */
typedef struct CudaMsg {
  const char *before, *after;
} CudaMsg;

/* One NVIDIA library, loaded once per process by whichever thread asks first (rank
 * threads open their devices concurrently): the first of getenv(env_var) (a path),
 * each soname, each soname in the toolkit's lib directory this build was configured
 * with (cuda_dlopen.c), then bind(h) resolves its API (and checks what it must),
 * false with a message. A library that is missing says `missing` around the loader's
 * reason. */
typedef struct CudaLib {
  const char *env_var;
  const char *const *sonames;
  CudaMsg missing;
  bool (*bind)(void *h, char *why, size_t n);
  pthread_mutex_t mu;
  int state; /* 0 not tried, 1 ready, -1 failed (why) */
  char why[768];
} CudaLib;
#define CUDA_LIB(env_var, sonames, missing_before, missing_after, bind) \
  {env_var, sonames, {missing_before, missing_after}, bind, PTHREAD_MUTEX_INITIALIZER, 0, ""}
/* true once the library is ready; else false with its message in err */
bool cuda_lib_load(CudaLib *l, char *err, size_t errlen);
/* Resolves `sym` into *fn (a function pointer's address) or fails with `msg` around
 * "<libname> has no symbol <sym> (too old?)" in why; for the bind functions. */
bool cuda_lib_sym(void *h, const char *sym, const char *libname, void *fn, CudaMsg msg, char *why, size_t n);

/* A library's API as an X-macro list FUNCS of its functions: CUDA_API_FIELDS(FUNCS) in a
 * struct declares a pointer of each function's own type; CUDA_API_BIND defines
 * `static bool name(void *h, char *why, size_t n)`, which resolves every one of them
 * into the struct `api` (cuda_lib_sym, libname and before/after in its message). */
#define CUDA_API_FIELD_(f) __typeof__(f) *f;
#define CUDA_API_FIELDS(FUNCS) FUNCS(CUDA_API_FIELD_)
#define CUDA_API_SYM_(f) \
  if (!cuda_lib_sym(h_, PD_SYMNAME(f), lib_, &api_->f, msg_, why_, n_)) return false;
#define CUDA_API_BIND(name, api, FUNCS, libname, before, after) \
  static bool name(void *h_, char *why_, size_t n_) {          \
    __typeof__(api) *api_ = &(api);                            \
    const char *lib_ = libname;                                \
    const CudaMsg msg_ = {before, after};                      \
    FUNCS(CUDA_API_SYM_)                                       \
    return true;                                               \
  }

/* A failed library call during normal operation: pd_fatal naming the call, its status
 * of type T (not ok) and the library's text for it, str(status). */
#define CUDA_LIB_CHECK(T, call, ok, lib, str)                                                     \
  do {                                                                                            \
    T st_ = (call);                                                                               \
    if (st_ != (ok))                                                                              \
      pd_fatal(__FILE__, __LINE__, lib " call failed: %s returned %s (%d)", #call, str(st_), (int)st_); \
  } while (0)

/* The driver API functions pd2bw uses (one X per function). */
/* clang-format off */
#define PD_CU_FUNCS(X)                                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)          \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)            \
  X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)         \
  X(cuMemsetD8Async) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)        \
  X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)          \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)               \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuStreamBeginCapture) X(cuStreamEndCapture) \
  X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)        \
  X(cuMemcpyDtoDAsync)
/* clang-format on */

typedef struct CuApi {
  CUDA_API_FIELDS(PD_CU_FUNCS)
} CuApi;

/* The driver API, loaded once per process (cuda_device.c); NULL with a message
 * naming the library and the failure. */
const CuApi *cuda_driver_api(char *err, size_t errlen);

/* "CUDA_ERROR_X (description)" for r, for messages. */
const char *cuda_result_str(const CuApi *api, CUresult r, char *buf, size_t n);

/* A failed driver call during normal operation: pd_fatal naming call, file, line. */
void cuda_fail(const CuApi *api, CUresult r, const char *call, const char *file, int line)
    __attribute__((noreturn));
#define CU_CHECK(api, call)                                                                        \
  do {                                                                                             \
    CUresult cu_r_ = (call);                                                                       \
    if (cu_r_ != CUDA_SUCCESS) cuda_fail((api), cu_r_, #call, __FILE__, __LINE__);                 \
  } while (0)

/* The column-major (cuBLAS) call that computes a row-major GEMM with cuda_gemm's
 * semantics: a pure function, so the operand swap is unit-tested without a GPU.
 * transa/transb are 0 (CUBLAS_OP_N) or 1 (CUBLAS_OP_T). */
typedef struct CublasGemmArgs {
  int transa, transb;
  int m, n, k;
  GpuPtr A;
  int lda;
  GpuPtr B;
  int ldb;
  GpuPtr C;
  int ldc;
} CublasGemmArgs;
CublasGemmArgs cuda_gemm_colmajor(int ta, int tb, int M, int N, int K, GpuPtr A, int lda,
                                  GpuPtr B, int ldb, GpuPtr C, int ldc);

/* The stream's cuBLAS workspace (cuda_device.c allocates it at its first use) and its
 * size: cuBLAS and cuBLASLt (cuda_lt.c) share it, their calls on one stream being in
 * order. */
GpuPtr cuda_dev_workspace(CudaDev *d, int s, size_t *bytes);
/* y[0..n) += x[0..n) (float32) on stream s, through cuBLAS (cublasSaxpy). */
void cuda_dev_axpy(CudaDev *d, int s, int n, GpuPtr x, GpuPtr y);
/* cuda_gemm of a GEMM with an epilogue: one cuBLASLt matmul (cuda_lt.c). */
void cuda_gemm_lt(CudaDev *d, int s, const GpuGemm *g);
/* The cublasLtEpilogue_t that runs row-major epilogue k after cuda_gemm_colmajor's
 * operand swap: row-major N is column-major m, the rows of D, so the bias (length N)
 * and aux (ld ldaux) keep their meaning, and the bias gradient of the row-major B
 * operand is column-major A's, CUBLASLT_EPILOGUE_BGRADA (tests/cuda/test_cuda_gemm_map.c). */
int cuda_lt_epilogue_colmajor(GemmEpilogue k);

CUstream cuda_dev_stream(const CudaDev *d, int s);

#endif /* PD2BW_CUDA_INTERNAL_H */
