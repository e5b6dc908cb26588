/* runtime/cuda/exec/cuda_exec_dev.c — the executor's device ops on a real GPU
 * (runtime/cuda/cuda_backend.h), and the cuBLAS rate it is compared with.
 *
 * Stage sources go through cuda_nvrtc_compile for the device's architecture (cached
 * on disk, so the second run of a plan loads in milliseconds). The backend's streams
 * are non-blocking, so host copies first wait for the whole device: the executor
 * relies on htod/dtoh being ordered after everything it launched (cuda_exec.h).
 * Graph capture and replay are the driver's (cuStreamBeginCapture ... cuGraphLaunch). */
#include "runtime/cuda/exec/cuda_exec.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_internal.h" /* cuda_dev_stream: the CUstream NCCL calls take */

/* The modules loaded on one device: the library and every distinct stage program (in
 * single-GPU pipeline mode, every stage's), as many as the plan has: no limit that
 * pd2bwc would have to check (it was 64, CX_MAX_MODULES; issue 24, item 9). */
typedef struct CxCuda {
  CxDeviceOps ops;
  CudaDev *d;
  CudaModule **mod;
  char (*hash)[17]; /* of each module's source: the same text loads once */
  int nmod, cap;
} CxCuda;

static bool d_alloc(void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen) {
  GpuPtr b;
  if (!cuda_arena_create(((CxCuda *)dev)->d, bytes, &b, err, errlen)) return false;
  *base = b;
  return true;
}

static void *d_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  CxCuda *c = dev;
  char h[17];
  codegen_hash_hex(src, strlen(src), h); /* every stage of a plan loads the same kernels.cu */
  for (int i = 0; i < c->nmod; i++)
    if (strcmp(c->hash[i], h) == 0) return c->mod[i];
  CudaCompileOptions o = {.arch = cuda_dev_arch(c->d), .name = name};
  CudaBinary bin;
  char *cerr = NULL;
  if (!cuda_nvrtc_compile(src, &o, &bin, &cerr)) {
    snprintf(err, errlen, "%s: %s", name, cerr ? cerr : "NVRTC failed");
    free(cerr);
    return NULL;
  }
  CudaModule *m = cuda_module_load(c->d, bin.data, bin.size, err, errlen);
  cuda_binary_free(&bin);
  if (m && c->nmod == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 8;
    c->mod = pd_realloc(c->mod, (size_t)c->cap * sizeof *c->mod);
    c->hash = pd_realloc(c->hash, (size_t)c->cap * sizeof *c->hash);
  }
  if (m) {
    memcpy(c->hash[c->nmod], h, sizeof h);
    c->mod[c->nmod++] = m;
  }
  return m;
}

static void *d_kernel(void *dev, void *module, const char *name) {
  (void)dev;
  return cuda_module_kernel(module, name);
}

static void d_launch(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args) {
  cuda_launch(((CxCuda *)dev)->d, (CudaStreamId)stream, kernel, grid, block, args);
}

static void d_gemm(void *dev, int stream, const GpuGemm *g) { cuda_gemm(((CxCuda *)dev)->d, (CudaStreamId)stream, g); }

static void d_htod(void *dev, GpuPtr dst, const void *src, size_t bytes) {
  CxCuda *c = dev;
  cuda_dev_sync(c->d);
  cuda_memcpy_htod(c->d, dst, src, bytes);
}

static void d_dtoh(void *dev, void *dst, GpuPtr src, size_t bytes) {
  CxCuda *c = dev;
  cuda_dev_sync(c->d);
  cuda_memcpy_dtoh(c->d, dst, src, bytes);
}

static void d_memset0(void *dev, int stream, GpuPtr p, size_t bytes) {
  cuda_memset0(((CxCuda *)dev)->d, (CudaStreamId)stream, p, bytes);
}

static void d_sync(void *dev) { cuda_dev_sync(((CxCuda *)dev)->d); }

static bool d_streams(void *dev, int n, char *err, size_t errlen) {
  return cuda_streams_ensure(((CxCuda *)dev)->d, n, err, errlen);
}

static void *d_event_create(void *dev) { return cuda_event_create(((CxCuda *)dev)->d); }

static void d_event_destroy(void *dev, void *ev) {
  (void)dev;
  cuda_event_destroy(ev);
}

static void d_event_record(void *dev, void *ev, int stream) {
  (void)dev;
  cuda_event_record(ev, (CudaStreamId)stream);
}

static void d_stream_wait(void *dev, int stream, void *ev) {
  cuda_stream_wait(((CxCuda *)dev)->d, (CudaStreamId)stream, ev);
}

static float d_event_ms(void *dev, void *start, void *end) {
  (void)dev;
  return cuda_event_ms(start, end);
}

static void d_dtod(void *dev, int stream, GpuPtr dst, GpuPtr src, size_t bytes) {
  cuda_memcpy_dtod_async(((CxCuda *)dev)->d, (CudaStreamId)stream, dst, src, bytes);
}

/* CUDA graphs (cuda_backend.h): cx_program_run captures a pass once and replays it. */
static bool d_capture_begin(void *dev, int stream, char *err, size_t errlen) {
  return cuda_capture_begin(((CxCuda *)dev)->d, (CudaStreamId)stream, err, errlen);
}

static void *d_capture_end(void *dev, int stream, char *err, size_t errlen) {
  return cuda_capture_end(((CxCuda *)dev)->d, (CudaStreamId)stream, err, errlen);
}

static void d_graph_launch(void *dev, void *graph, int stream) {
  cuda_graph_launch(((CxCuda *)dev)->d, graph, (CudaStreamId)stream);
}

static void d_graph_destroy(void *dev, void *graph) { cuda_graph_destroy(((CxCuda *)dev)->d, graph); }

/* The driver's handle of stream s, for multi-GPU mode's NCCL calls
 * (runtime/cuda/exec/cuda_link_nccl.c). */
static void *d_native_stream(void *dev, int s) { return (void *)cuda_dev_stream(((CxCuda *)dev)->d, (CudaStreamId)s); }

/* A rank thread of single-GPU pipeline mode: the context current in it. */
static void d_thread_enter(void *dev) { cuda_dev_make_current(((CxCuda *)dev)->d); }

CxDeviceOps *cx_cuda_open(int device, char *err, size_t errlen) {
  CudaDev *d = cuda_dev_create(device, err, errlen);
  if (!d) return NULL;
  CxCuda *c = pd_calloc(1, sizeof *c);
  c->d = d;
  c->ops = (CxDeviceOps){.dev = c, .alloc = d_alloc, .load = d_load, .kernel = d_kernel, .launch = d_launch,
                         .gemm = d_gemm, .htod = d_htod, .dtoh = d_dtoh, .memset0 = d_memset0, .sync = d_sync,
                         .streams = d_streams, .event_create = d_event_create, .event_destroy = d_event_destroy,
                         .event_record = d_event_record, .stream_wait = d_stream_wait, .event_ms = d_event_ms,
                         .dtod = d_dtod, .native_stream = d_native_stream, .capture_begin = d_capture_begin,
                         .capture_end = d_capture_end, .graph_launch = d_graph_launch,
                         .graph_destroy = d_graph_destroy, .thread_enter = d_thread_enter};
  return &c->ops;
}

void cx_cuda_close(CxDeviceOps *ops) {
  if (!ops) return;
  CxCuda *c = ops->dev;
  cuda_dev_sync(c->d);
  for (int i = 0; i < c->nmod; i++) cuda_module_unload(c->mod[i]);
  cuda_dev_destroy(c->d);
  free(c->mod);
  free(c->hash);
  free(c);
}

const char *cx_cuda_name(const CxDeviceOps *ops) { return ops ? cuda_dev_name(((CxCuda *)ops->dev)->d) : ""; }

double cx_cuda_gemm_tflops(int device, GemmType type, int M, int N, int K, char *err, size_t errlen) {
  CudaDev *d = cuda_dev_create(device, err, errlen);
  if (!d) return -1;
  size_t el = type == GEMM_BF16 ? 2 : 4; /* A and B; C is always float32 */
  size_t a = (size_t)M * (size_t)K * el, b = (size_t)K * (size_t)N * el, cb = (size_t)M * (size_t)N * 4;
  GpuPtr base;
  if (!cuda_arena_create(d, a + b + cb, &base, err, errlen)) {
    cuda_dev_destroy(d);
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
  cuda_memcpy_htod(d, base, h, a);
  cuda_memcpy_htod(d, base + a, h, b);
  free(h);
  GpuGemm g = {type, 0, 0, M, N, K, 1, 0, base, base + a, base + a + b, K, N, N, {GEMM_EPI_NONE}};
  CudaEvent *e0 = cuda_event_create(d), *e1 = cuda_event_create(d);
  for (int i = 0; i < 3; i++) /* warm-up: cuBLAS picks and loads its kernel */
    cuda_gemm(d, CUDA_STREAM_COMPUTE, &g);
  int reps = 20;
  cuda_event_record(e0, CUDA_STREAM_COMPUTE);
  for (int i = 0; i < reps; i++)
    cuda_gemm(d, CUDA_STREAM_COMPUTE, &g);
  cuda_event_record(e1, CUDA_STREAM_COMPUTE);
  cuda_event_sync(e1);
  double ms = cuda_event_ms(e0, e1);
  cuda_event_destroy(e0);
  cuda_event_destroy(e1);
  cuda_dev_destroy(d);
  return 2.0 * M * N * (double)K * reps / (ms / 1e3) / 1e12;
}
