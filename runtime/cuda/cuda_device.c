/* runtime/cuda/cuda_device.c — one GPU through the driver API, GEMMs through cuBLAS. The
 * driver and cuBLAS are dlopen()ed when a device is first asked for (cuda_internal.h).
 * The device uses its ordinal's primary context, which cuBLAS's runtime API uses too, so
 * driver-launched kernels and cuBLAS GEMMs share memory and streams without interop.
 * Memory: the stage's arena is the one big cuMemAlloc (the table's alloc); modules,
 * streams, events and cuBLAS are made at start-up. cuBLAS gets a workspace of our own
 * per stream (32 MiB on Hopper, 4 MiB before), allocated at the stream's first GEMM and
 * set with every GEMM (cublasSetStream resets it): with its own pool cuBLAS would
 * allocate during a graph capture, and one workspace shared by concurrent streams would
 * race. A pass runs eagerly before it is captured, so the only allocations after
 * start-up happen in the first training step. */
#include <cublas_v2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/cuda/cuda_internal.h"

#ifndef PD2BW_CUDA_MAJOR
#define PD2BW_CUDA_MAJOR 13
#endif
#define PD_XSTR_(x) #x
#define PD_XSTR(x) PD_XSTR_(x)

/* ---- the driver, loaded and initialised once ------------------------------------ */

static CuApi cu_api;

/* Names for the results a user may meet before any call has worked (the stub
 * library's cuGetErrorName fails too, so these cannot come from the driver). */
static const char *cu_known_name(CUresult r) {
  switch ((int)r) {
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 34: return "CUDA_ERROR_STUB_LIBRARY";
  case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  default: return NULL;
  }
}

const char *cuda_result_str(const CuApi *api, CUresult r, char *buf, size_t n) {
  const char *name = NULL, *desc = NULL;
  if (api && api->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (api && api->cuGetErrorString(r, &desc) != CUDA_SUCCESS) desc = NULL;
  if (!name) name = cu_known_name(r);
  if (name && desc)
    snprintf(buf, n, "%s (%s)", name, desc);
  else if (name)
    snprintf(buf, n, "%s", name);
  else
    snprintf(buf, n, "CUresult %d", (int)r);
  return buf;
}

void cuda_fail(const CuApi *api, CUresult r, const char *call, const char *file, int line) {
  char buf[256];
  pd_fatal(file, line, "CUDA call failed: %s returned %s", call,
           cuda_result_str(api, r, buf, sizeof buf));
}

CUDA_API_BIND(cu_syms, cu_api, PD_CU_FUNCS, "libcuda.so.1", "cuda backend: the CUDA driver is too old (",
              "); use --backend cpu")

/* The driver's API, then cuInit: a stub library or a machine without a device is
 * said as such. */
static bool cu_bind(void *h, char *why, size_t n) {
  if (!cu_syms(h, why, n)) return false;
  CUresult r = cu_api.cuInit(0);
  char rs[256];
  cuda_result_str(&cu_api, r, rs, sizeof rs);
  if (r == CUDA_ERROR_STUB_LIBRARY)
    snprintf(why, n,
             "cuda backend: no CUDA driver found (libcuda.so.1 is the CUDA toolkit's stub "
             "library, not a driver: cuInit returned %s); use --backend cpu",
             rs);
  else if (r == CUDA_ERROR_NO_DEVICE)
    snprintf(why, n, "cuda backend: no CUDA device found (cuInit returned %s); use --backend cpu", rs);
  else if (r != CUDA_SUCCESS)
    snprintf(why, n, "cuda backend: the CUDA driver failed to start (cuInit returned %s); use --backend cpu", rs);
  return r == CUDA_SUCCESS;
}

static const char *const cu_names[] = {"libcuda.so.1", NULL};
static CudaLib cu_lib =
    CUDA_LIB("PD2BW_LIBCUDA", cu_names, "cuda backend: no CUDA driver found (", "); use --backend cpu", cu_bind);

const CuApi *cuda_driver_api(char *err, size_t errlen) {
  return cuda_lib_load(&cu_lib, err, errlen) ? &cu_api : NULL;
}

/* ---- cuBLAS, loaded with the first device ---------------------------------------- */

/* clang-format off */
#define PD_CUBLAS_FUNCS(X)                                                                \
  X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetMathMode) X(cublasGemmEx) \
  X(cublasGetStatusString) X(cublasSetWorkspace) X(cublasSaxpy)
/* clang-format on */

typedef struct CublasApi {
  CUDA_API_FIELDS(PD_CUBLAS_FUNCS)
} CublasApi;

static CublasApi cublas_api;
CUDA_API_BIND(cublas_bind, cublas_api, PD_CUBLAS_FUNCS, "libcublas", "cuda backend: ", "")

static const char *const cublas_names[] = {"libcublas.so." PD_XSTR(PD2BW_CUDA_MAJOR), "libcublas.so", NULL};
static CudaLib cublas_lib = CUDA_LIB("PD2BW_LIBCUBLAS", cublas_names, "cuda backend: cuBLAS not found (", ")", cublas_bind);

static const CublasApi *cublas_load(char *err, size_t errlen) {
  return cuda_lib_load(&cublas_lib, err, errlen) ? &cublas_api : NULL;
}

bool cuda_cublas_available(char *err, size_t errlen) { return cublas_load(err, errlen) != NULL; }

#define CUBLAS_CHECK(call) \
  CUDA_LIB_CHECK(cublasStatus_t, call, CUBLAS_STATUS_SUCCESS, "cuBLAS", cublas_api.cublasGetStatusString)

/* ---- the device: CudaDeviceOps (cuda_backend.h) -------------------------------------- */

/* A loaded module; `hash` is its source's (codegen_hash_hex): every stage of a plan
 * loads the same kernels.cu, and the same text loads once. */
typedef struct CudaModule {
  CUmodule mod;
  char hash[17];
  struct CudaModule *next; /* the device's list, unloaded by cuda_dev_close */
} CudaModule;

struct CudaDev {
  CudaDeviceOps ops; /* ops.dev is this device */
  const CuApi *api;
  int ordinal;
  CUdevice dev;
  CUcontext ctx; /* the primary context, retained */
  CUstream streams[CUDA_MAX_STREAMS];
  int nstreams; /* CUDA_NSTREAMS, more after d_streams */
  cublasHandle_t blas;
  CUdeviceptr ws[CUDA_MAX_STREAMS]; /* cuBLAS workspace per stream, at its first GEMM */
  size_t ws_bytes;
  CUdeviceptr arena;
  int arch;
  size_t total_mem;
  char name[256];
  CudaModule *modules;
};

CUstream cuda_dev_stream(const CudaDev *d, int s) {
  PD_CHECK(s >= 0 && s < d->nstreams, "stream %d", s);
  return d->streams[s];
}

static bool d_alloc(void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen) {
  CudaDev *d = dev;
  PD_CHECK(!d->arena, "the stage arena is allocated once per device");
  PD_CHECK(bytes > 0);
  CUresult r = d->api->cuMemAlloc(&d->arena, bytes);
  if (r != CUDA_SUCCESS) {
    char rs[256];
    d->arena = 0;
    snprintf(err, errlen,
             "cuda backend: cannot allocate the stage arena of %zu bytes (%.2f GiB) on device %d "
             "(%s, %.2f GiB): %s",
             bytes, (double)bytes / (1 << 30), d->ordinal, d->name,
             (double)d->total_mem / (1 << 30), cuda_result_str(d->api, r, rs, sizeof rs));
    return false;
  }
  *base = (GpuPtr)d->arena;
  return true;
}

/* ---- modules and launches ----------------------------------------------------------- */

static void *d_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  CudaDev *d = dev;
  char h[17];
  codegen_hash_hex(src, strlen(src), h);
  for (CudaModule *m = d->modules; m; m = m->next)
    if (strcmp(m->hash, h) == 0) return m;
  CudaCompileOptions o = {.arch = d->arch, .name = name};
  CudaBinary bin;
  char *cerr = NULL;
  if (!cuda_nvrtc_compile(src, &o, &bin, &cerr)) {
    snprintf(err, errlen, "%s: %s", name, cerr ? cerr : "NVRTC failed");
    free(cerr);
    return NULL;
  }
  CUmodule mod;
  CUresult r = d->api->cuModuleLoadData(&mod, bin.data); /* an ELF image carries its own size */
  cuda_binary_free(&bin);
  if (r != CUDA_SUCCESS) {
    char rs[256];
    snprintf(err, errlen,
             "cuda backend: cannot load the compiled stage on device %d (%s, sm_%d): %s",
             d->ordinal, d->name, d->arch, cuda_result_str(d->api, r, rs, sizeof rs));
    return NULL;
  }
  CudaModule *m = pd_calloc(1, sizeof *m);
  m->mod = mod;
  memcpy(m->hash, h, sizeof h);
  m->next = d->modules;
  d->modules = m;
  return m;
}

static void *d_kernel(void *dev, void *module, const char *name) {
  CudaDev *d = dev;
  CUfunction f;
  CUresult r = d->api->cuModuleGetFunction(&f, ((CudaModule *)module)->mod, name);
  if (r == CUDA_ERROR_NOT_FOUND) return NULL;
  CU_CHECK(d->api, r);
  return f;
}

static void d_launch(void *dev, int s, void *k, unsigned grid, unsigned block, void **args) {
  CudaDev *d = dev;
  PD_CHECK(k && grid > 0 && block > 0 && block <= 1024, "grid %u block %u", grid, block);
  CU_CHECK(d->api, d->api->cuLaunchKernel((CUfunction)k, grid, 1, 1, block, 1, 1, 0,
                                          cuda_dev_stream(d, s), args, NULL));
}

/* Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands
 * and the dimensions M and N; each operand's own transpose flag carries over
 * unchanged (a row-major matrix read column-major is already its transpose). */
CublasGemmArgs cuda_gemm_colmajor(int ta, int tb, int M, int N, int K, GpuPtr A, int lda,
                                  GpuPtr B, int ldb, GpuPtr C, int ldc) {
  CublasGemmArgs g = {tb ? 1 : 0, ta ? 1 : 0, N, M, K, B, ldb, A, lda, C, ldc};
  return g;
}

/* A GEMM with an epilogue is one cuBLASLt matmul (cuda_gemm_lt), the rest cuBLAS's. */
static void d_gemm(void *dev, int s, const GpuGemm *gm) {
  CudaDev *d = dev;
  if (gm->ep.kind != GEMM_EPI_NONE) {
    cuda_gemm_lt(d, s, gm);
    return;
  }
  if (gm->M <= 0 || gm->N <= 0) return;
  cudaDataType ab_t = CUDA_R_32F, c_t = CUDA_R_32F;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  GemmType type = gm->type;
  switch (type) {
  case GEMM_FP32: break;
  case GEMM_TF32: ct = CUBLAS_COMPUTE_32F_FAST_TF32; break;
  case GEMM_BF16: ab_t = CUDA_R_16BF; break;
  case GEMM_BF16_OUT: ab_t = c_t = CUDA_R_16BF; break;
  case GEMM_PLAN:
  case GEMM_TYPE_COUNT: PD_CHECK(false, "(GEMM type %s has no cuBLAS call)", gemm_type_name(type));
  }
  CublasGemmArgs g = cuda_gemm_colmajor(gm->ta, gm->tb, gm->M, gm->N, gm->K, gm->A, gm->lda, gm->B, gm->ldb, gm->C,
                                        gm->ldc);
  CUBLAS_CHECK(cublas_api.cublasSetStream(d->blas, (cudaStream_t)cuda_dev_stream(d, s)));
  size_t ws_bytes;
  GpuPtr ws = cuda_dev_workspace(d, s, &ws_bytes);
  CUBLAS_CHECK(cublas_api.cublasSetWorkspace(d->blas, (void *)(uintptr_t)ws, ws_bytes));
  CUBLAS_CHECK(cublas_api.cublasGemmEx(
      d->blas, g.transa ? CUBLAS_OP_T : CUBLAS_OP_N, g.transb ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n,
      g.k, &gm->alpha, (const void *)(uintptr_t)g.A, ab_t, g.lda, (const void *)(uintptr_t)g.B, ab_t,
      g.ldb, &gm->beta, (void *)(uintptr_t)g.C, c_t, g.ldc, ct, CUBLAS_GEMM_DEFAULT));
}

GpuPtr cuda_dev_workspace(CudaDev *d, int s, size_t *bytes) {
  (void)cuda_dev_stream(d, s); /* checks s */
  if (!d->ws[s]) CU_CHECK(d->api, d->api->cuMemAlloc(&d->ws[s], d->ws_bytes)); /* never while capturing: see top */
  *bytes = d->ws_bytes;
  return (GpuPtr)d->ws[s];
}

void cuda_dev_axpy(CudaDev *d, int s, int n, GpuPtr x, GpuPtr y) {
  const float one = 1;
  CUBLAS_CHECK(cublas_api.cublasSetStream(d->blas, (cudaStream_t)cuda_dev_stream(d, s)));
  CUBLAS_CHECK(cublas_api.cublasSaxpy(d->blas, n, &one, (const float *)(uintptr_t)x, 1, (float *)(uintptr_t)y, 1));
}

/* ---- copies, streams, events -------------------------------------------------------- */

static void d_sync(void *dev) {
  CudaDev *d = dev;
  CU_CHECK(d->api, d->api->cuCtxSynchronize());
}

/* The streams are non-blocking: a host copy first waits for the whole device. */
static void d_htod(void *dev, GpuPtr dst, const void *src, size_t bytes) {
  CudaDev *d = dev;
  d_sync(d);
  if (bytes) CU_CHECK(d->api, d->api->cuMemcpyHtoD((CUdeviceptr)dst, src, bytes));
}

static void d_dtoh(void *dev, void *dst, GpuPtr src, size_t bytes) {
  CudaDev *d = dev;
  d_sync(d);
  if (bytes) CU_CHECK(d->api, d->api->cuMemcpyDtoH(dst, (CUdeviceptr)src, bytes));
}

static void d_memset0(void *dev, int s, GpuPtr p, size_t bytes) {
  CudaDev *d = dev;
  if (bytes) CU_CHECK(d->api, d->api->cuMemsetD8Async((CUdeviceptr)p, 0, bytes, cuda_dev_stream(d, s)));
}

static void d_dtod(void *dev, int s, GpuPtr dst, GpuPtr src, size_t bytes) {
  CudaDev *d = dev;
  if (bytes) CU_CHECK(d->api, d->api->cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, cuda_dev_stream(d, s)));
}

static bool d_streams(void *dev, int n, char *err, size_t errlen) {
  CudaDev *d = dev;
  if (n > CUDA_MAX_STREAMS) {
    snprintf(err, errlen, "cuda backend: %d streams asked for on device %d; at most %d", n, d->ordinal,
             CUDA_MAX_STREAMS);
    return false;
  }
  for (; d->nstreams < n; d->nstreams++)
    CU_CHECK(d->api, d->api->cuStreamCreate(&d->streams[d->nstreams], CU_STREAM_NON_BLOCKING));
  return true;
}

/* An event is the driver's CUevent itself. */
static void *d_event_create(void *dev) {
  CudaDev *d = dev;
  CUevent e;
  CU_CHECK(d->api, d->api->cuEventCreate(&e, CU_EVENT_DEFAULT));
  return e;
}

static void d_event_destroy(void *dev, void *e) {
  CudaDev *d = dev;
  if (e) CU_CHECK(d->api, d->api->cuEventDestroy(e));
}

static void d_event_record(void *dev, void *e, int s) {
  CudaDev *d = dev;
  CU_CHECK(d->api, d->api->cuEventRecord(e, cuda_dev_stream(d, s)));
}

static void d_stream_wait(void *dev, int s, void *e) {
  CudaDev *d = dev;
  CU_CHECK(d->api, d->api->cuStreamWaitEvent(cuda_dev_stream(d, s), e, 0));
}

static float d_event_ms(void *dev, void *start, void *end) {
  CudaDev *d = dev;
  float ms = 0;
  CU_CHECK(d->api, d->api->cuEventElapsedTime(&ms, start, end));
  return ms;
}

/* The CUstream of s, for multi-GPU mode's NCCL calls (runtime/cuda/exec/cuda_link_nccl.c). */
static void *d_native_stream(void *dev, int s) { return cuda_dev_stream(dev, s); }

/* A rank thread of single-GPU pipeline mode: the context current in it. */
static void d_thread_enter(void *dev) {
  CudaDev *d = dev;
  CU_CHECK(d->api, d->api->cuCtxSetCurrent(d->ctx));
}

/* ---- CUDA graphs: a graph is the driver's CUgraphExec itself ------------------------ */

static bool d_capture_begin(void *dev, int s, char *err, size_t errlen) {
  CudaDev *d = dev;
  CUresult r = d->api->cuStreamBeginCapture(cuda_dev_stream(d, s), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r == CUDA_SUCCESS) return true;
  char rs[256];
  snprintf(err, errlen, "cuStreamBeginCapture on stream %d: %s", s, cuda_result_str(d->api, r, rs, sizeof rs));
  return false;
}

static void *d_capture_end(void *dev, int s, char *err, size_t errlen) {
  CudaDev *d = dev;
  CUgraph graph = NULL;
  char rs[256];
  CUresult r = d->api->cuStreamEndCapture(cuda_dev_stream(d, s), &graph);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "cuStreamEndCapture on stream %d: %s", s, cuda_result_str(d->api, r, rs, sizeof rs));
    if (graph) d->api->cuGraphDestroy(graph);
    return NULL;
  }
  CUgraphExec exec = NULL;
  r = d->api->cuGraphInstantiate(&exec, graph, 0);
  CU_CHECK(d->api, d->api->cuGraphDestroy(graph)); /* the executable graph is a copy */
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "cuGraphInstantiateWithFlags: %s", cuda_result_str(d->api, r, rs, sizeof rs));
    return NULL;
  }
  return exec;
}

static void d_graph_launch(void *dev, void *g, int s) {
  CudaDev *d = dev;
  CU_CHECK(d->api, d->api->cuGraphLaunch(g, cuda_dev_stream(d, s)));
}

static void d_graph_destroy(void *dev, void *g) {
  CudaDev *d = dev;
  if (g) CU_CHECK(d->api, d->api->cuGraphExecDestroy(g));
}

/* ---- opening and closing ------------------------------------------------------------ */

static const CudaDeviceOps gpu_ops = {
    .alloc = d_alloc, .load = d_load, .kernel = d_kernel, .launch = d_launch, .gemm = d_gemm, .htod = d_htod,
    .dtoh = d_dtoh, .memset0 = d_memset0, .sync = d_sync, .streams = d_streams, .event_create = d_event_create,
    .event_destroy = d_event_destroy, .event_record = d_event_record, .stream_wait = d_stream_wait,
    .event_ms = d_event_ms, .dtod = d_dtod, .native_stream = d_native_stream, .thread_enter = d_thread_enter,
    .capture_begin = d_capture_begin, .capture_end = d_capture_end, .graph_launch = d_graph_launch,
    .graph_destroy = d_graph_destroy};

CudaDeviceOps *cuda_dev_open(int ordinal, char *err, size_t errlen) {
  const CuApi *api = cuda_driver_api(err, errlen);
  if (!api) return NULL;
  int count = 0;
  char rs[256];
  CUresult r = api->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "cuda backend: cuDeviceGetCount returned %s; use --backend cpu",
             cuda_result_str(api, r, rs, sizeof rs));
    return NULL;
  }
  if (ordinal < 0 || ordinal >= count) {
    snprintf(err, errlen, "cuda backend: device %d requested but this machine has %d CUDA device%s",
             ordinal, count, count == 1 ? "" : "s");
    return NULL;
  }
  const CublasApi *bl = cublas_load(err, errlen);
  if (!bl) return NULL;

  CudaDev *d = pd_calloc(1, sizeof *d);
  d->ops = gpu_ops;
  d->ops.dev = d;
  d->api = api;
  d->ordinal = ordinal;
  CU_CHECK(api, api->cuDeviceGet(&d->dev, ordinal));
  CU_CHECK(api, api->cuDevicePrimaryCtxRetain(&d->ctx, d->dev));
  CU_CHECK(api, api->cuCtxSetCurrent(d->ctx));
  int major = 0, minor = 0;
  CU_CHECK(api,
           api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev));
  CU_CHECK(api,
           api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev));
  d->arch = major * 10 + minor;
  d->ws_bytes = (size_t)(d->arch >= 90 ? 32 : 4) << 20;
  CU_CHECK(api, api->cuDeviceGetName(d->name, (int)sizeof d->name, d->dev));
  CU_CHECK(api, api->cuDeviceTotalMem(&d->total_mem, d->dev));
  for (int s = 0; s < CUDA_NSTREAMS; s++)
    CU_CHECK(api, api->cuStreamCreate(&d->streams[s], CU_STREAM_NON_BLOCKING));
  d->nstreams = CUDA_NSTREAMS;
  cublasStatus_t bs = bl->cublasCreate(&d->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errlen, "cuda backend: cublasCreate failed on device %d: %s", ordinal,
             bl->cublasGetStatusString(bs));
    for (int s = 0; s < CUDA_NSTREAMS; s++) api->cuStreamDestroy(d->streams[s]);
    api->cuDevicePrimaryCtxRelease(d->dev);
    free(d);
    return NULL;
  }
  return &d->ops;
}

void cuda_dev_close(CudaDeviceOps *ops) {
  if (!ops) return;
  CudaDev *d = ops->dev;
  const CuApi *api = d->api;
  CU_CHECK(api, api->cuCtxSetCurrent(d->ctx));
  CU_CHECK(api, api->cuCtxSynchronize());
  while (d->modules) {
    CudaModule *m = d->modules;
    d->modules = m->next;
    CU_CHECK(api, api->cuModuleUnload(m->mod));
    free(m);
  }
  CUBLAS_CHECK(cublas_api.cublasDestroy(d->blas));
  for (int s = 0; s < d->nstreams; s++) {
    CU_CHECK(api, api->cuStreamDestroy(d->streams[s]));
    if (d->ws[s]) CU_CHECK(api, api->cuMemFree(d->ws[s]));
  }
  if (d->arena) CU_CHECK(api, api->cuMemFree(d->arena));
  CU_CHECK(api, api->cuDevicePrimaryCtxRelease(d->dev));
  free(d);
}

const char *cuda_dev_name(const CudaDeviceOps *ops) { return ops ? ((const CudaDev *)ops->dev)->name : ""; }
int cuda_dev_arch(const CudaDeviceOps *ops) { return ((const CudaDev *)ops->dev)->arch; }
size_t cuda_dev_total_mem(const CudaDeviceOps *ops) { return ((const CudaDev *)ops->dev)->total_mem; }

double cuda_gemm_tflops(int device, GemmType type, int M, int N, int K, char *err, size_t errlen) {
  CudaDeviceOps *o = cuda_dev_open(device, err, errlen);
  if (!o) return -1;
  size_t el = type == GEMM_BF16 ? 2 : 4; /* A and B; C is always float32 */
  size_t a = (size_t)M * (size_t)K * el, b = (size_t)K * (size_t)N * el, cb = (size_t)M * (size_t)N * 4;
  GpuPtr base;
  if (!o->alloc(o->dev, a + b + cb, &base, err, errlen)) {
    cuda_dev_close(o);
    return -1;
  }
  /* small values: the rate does not depend on them, only finite ones matter */
  float *h = pd_malloc(a > b ? a : b);
  for (size_t i = 0; i < (a > b ? a : b) / el; i++) {
    float v = (float)((int)(i % 17) - 8) / 64.0f;
    uint32_t u;
    memcpy(&u, &v, 4);
    if (el == 2) ((uint16_t *)h)[i] = (uint16_t)(u >> 16); /* exact: v has 4 significant bits */
    else h[i] = v;
  }
  o->htod(o->dev, base, h, a);
  o->htod(o->dev, base + a, h, b);
  free(h);
  GpuGemm g = {type, 0, 0, M, N, K, 1, 0, base, base + a, base + a + b, K, N, N, {GEMM_EPI_NONE}};
  void *e0 = o->event_create(o->dev), *e1 = o->event_create(o->dev);
  for (int i = 0; i < 3; i++) /* warm-up: cuBLAS picks and loads its kernel */
    o->gemm(o->dev, CUDA_STREAM_COMPUTE, &g);
  int reps = 20;
  o->event_record(o->dev, e0, CUDA_STREAM_COMPUTE);
  for (int i = 0; i < reps; i++)
    o->gemm(o->dev, CUDA_STREAM_COMPUTE, &g);
  o->event_record(o->dev, e1, CUDA_STREAM_COMPUTE);
  o->sync(o->dev);
  double ms = o->event_ms(o->dev, e0, e1);
  o->event_destroy(o->dev, e0);
  o->event_destroy(o->dev, e1);
  cuda_dev_close(o);
  return 2.0 * M * N * (double)K * reps / (ms / 1e3) / 1e12;
}
