/* runtime/cuda/exec/cuda_exec_share.c — one GPU shared by the stage replicas of
 * single-GPU pipeline mode, each driven by its own host thread (cuda_exec.h: CxShare).
 *
 * Each rank gets a VIEW: a CudaDeviceOps table whose stream 0 is the rank's own stream
 * (1 + rank on the GPU; stream 0 stays free), so the one-stage CUDA device
 * (cx_exec_device), which issues everything on stream 0, serves a pipeline rank
 * unchanged, and the same-GPU link reaches the rank's stream through the same view.
 * Memory: the GPU's table allows ONE allocation; cx_share_reserve makes it (the sum of
 * every rank's need, known before the ranks start) and a view's alloc hands its rank
 * its part. Every call runs under one recursive lock, held from capture_begin to
 * capture_end, so a pass being captured never interleaves with another thread's work
 * (the emulator has one capture slot; cuBLAS's stream setting is per handle), and makes
 * the GPU usable from the calling thread first (CudaDeviceOps thread_enter: a context
 * current in it). The lock serialises only the issuing: the GPU still runs the streams
 * concurrently. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec/cuda_exec.h"

typedef struct CxView {
  CudaDeviceOps ops; /* first: ops.dev is this view */
  CxShare *sh;
  int rank;
} CxView;

struct CxShare {
  const CudaDeviceOps *gpu;
  int nranks;
  CxView *views;
  GpuPtr base;
  uint64_t *off, *bytes; /* [nranks] each rank's part of the one allocation */
  pthread_mutex_t mu;
};

static CxView *vw(void *dev) { return dev; }
static const CudaDeviceOps *G(void *dev) { return vw(dev)->sh->gpu; }
static void *GD(void *dev) { return vw(dev)->sh->gpu->dev; }
static int S(void *dev, int stream) {
  PD_CHECK(stream == 0, "(a rank's view has one stream, not %d)", stream);
  return 1 + vw(dev)->rank;
}
static void lk(void *dev) {
  pthread_mutex_lock(&vw(dev)->sh->mu);
  if (G(dev)->thread_enter) G(dev)->thread_enter(GD(dev)); /* a GPU: its context in this thread */
}
static void ul(void *dev) { pthread_mutex_unlock(&vw(dev)->sh->mu); }

static bool v_alloc(void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen) {
  CxShare *sh = vw(dev)->sh;
  int r = vw(dev)->rank;
  if (!sh->base || bytes > sh->bytes[r])
    return snprintf(err, errlen, "rank %d asks for %zu bytes; %llu were reserved for it", r, bytes,
                    (unsigned long long)(sh->base ? sh->bytes[r] : 0)), false;
  *base = sh->base + sh->off[r];
  return true;
}
static void *v_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  lk(dev);
  void *m = G(dev)->load(GD(dev), src, name, err, errlen);
  ul(dev);
  return m;
}
static void *v_kernel(void *dev, void *module, const char *name) {
  lk(dev);
  void *k = G(dev)->kernel(GD(dev), module, name);
  ul(dev);
  return k;
}
static void v_launch(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args) {
  lk(dev);
  G(dev)->launch(GD(dev), S(dev, stream), kernel, grid, block, args);
  ul(dev);
}
static void v_gemm(void *dev, int stream, const GpuGemm *g) {
  lk(dev);
  G(dev)->gemm(GD(dev), S(dev, stream), g);
  ul(dev);
}
static void v_htod(void *dev, GpuPtr dst, const void *src, size_t n) {
  lk(dev);
  G(dev)->htod(GD(dev), dst, src, n);
  ul(dev);
}
static void v_dtoh(void *dev, void *dst, GpuPtr src, size_t n) {
  lk(dev);
  G(dev)->dtoh(GD(dev), dst, src, n);
  ul(dev);
}
static void v_memset0(void *dev, int stream, GpuPtr p, size_t n) {
  lk(dev);
  G(dev)->memset0(GD(dev), S(dev, stream), p, n);
  ul(dev);
}
static void v_sync(void *dev) {
  lk(dev);
  G(dev)->sync(GD(dev));
  ul(dev);
}
static bool v_streams(void *dev, int n, char *err, size_t errlen) {
  (void)dev;
  return n <= 1 || (snprintf(err, errlen, "a rank's view has one stream"), false);
}
static void *v_event_create(void *dev) {
  lk(dev);
  void *e = G(dev)->event_create(GD(dev));
  ul(dev);
  return e;
}
static void v_event_destroy(void *dev, void *ev) {
  lk(dev);
  G(dev)->event_destroy(GD(dev), ev);
  ul(dev);
}
static void v_event_record(void *dev, void *ev, int stream) {
  lk(dev);
  G(dev)->event_record(GD(dev), ev, S(dev, stream));
  ul(dev);
}
static void v_stream_wait(void *dev, int stream, void *ev) {
  lk(dev);
  G(dev)->stream_wait(GD(dev), S(dev, stream), ev);
  ul(dev);
}
static float v_event_ms(void *dev, void *start, void *end) {
  lk(dev);
  float ms = G(dev)->event_ms(GD(dev), start, end);
  ul(dev);
  return ms;
}
static void v_dtod(void *dev, int stream, GpuPtr dst, GpuPtr src, size_t n) {
  lk(dev);
  G(dev)->dtod(GD(dev), S(dev, stream), dst, src, n);
  ul(dev);
}
static void *v_native_stream(void *dev, int stream) { return G(dev)->native_stream(GD(dev), S(dev, stream)); }
/* The lock stays held from a successful capture_begin to its capture_end. */
static bool v_capture_begin(void *dev, int stream, char *err, size_t errlen) {
  lk(dev);
  bool ok = G(dev)->capture_begin(GD(dev), S(dev, stream), err, errlen);
  if (!ok) ul(dev);
  return ok;
}
static void *v_capture_end(void *dev, int stream, char *err, size_t errlen) {
  void *g = G(dev)->capture_end(GD(dev), S(dev, stream), err, errlen);
  ul(dev);
  return g;
}
static void v_graph_launch(void *dev, void *graph, int stream) {
  lk(dev);
  G(dev)->graph_launch(GD(dev), graph, S(dev, stream));
  ul(dev);
}
static void v_graph_destroy(void *dev, void *graph) {
  lk(dev);
  G(dev)->graph_destroy(GD(dev), graph);
  ul(dev);
}

CxShare *cx_share_create(const CudaDeviceOps *gpu, int nranks, char *err, size_t errlen) {
  if (!gpu->streams || !gpu->event_create || !gpu->dtod) {
    snprintf(err, errlen, "the device has no streams, events or device copies (single-GPU pipeline mode needs them)");
    return NULL;
  }
  if (!gpu->streams(gpu->dev, 1 + nranks, err, errlen)) return NULL;
  CxShare *sh = pd_calloc(1, sizeof *sh);
  sh->gpu = gpu;
  sh->nranks = nranks;
  sh->views = pd_calloc((size_t)nranks, sizeof *sh->views);
  sh->off = pd_calloc((size_t)nranks, sizeof *sh->off);
  sh->bytes = pd_calloc((size_t)nranks, sizeof *sh->bytes);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&sh->mu, &a);
  pthread_mutexattr_destroy(&a);
  for (int r = 0; r < nranks; r++) {
    CxView *v = &sh->views[r];
    v->sh = sh;
    v->rank = r;
    v->ops = (CudaDeviceOps){.dev = v, .alloc = v_alloc, .load = v_load, .kernel = v_kernel, .launch = v_launch,
                           .gemm = v_gemm, .htod = v_htod, .dtoh = v_dtoh, .memset0 = v_memset0, .sync = v_sync,
                           .streams = v_streams, .event_create = v_event_create, .event_destroy = v_event_destroy,
                           .event_record = v_event_record, .stream_wait = v_stream_wait, .event_ms = v_event_ms,
                           .dtod = v_dtod, .native_stream = gpu->native_stream ? v_native_stream : NULL};
    if (gpu->capture_begin) {
      v->ops.capture_begin = v_capture_begin;
      v->ops.capture_end = v_capture_end;
      v->ops.graph_launch = v_graph_launch;
      v->ops.graph_destroy = v_graph_destroy;
    }
  }
  return sh;
}

const CudaDeviceOps *cx_share_view(CxShare *sh, int rank) { return &sh->views[rank].ops; }

bool cx_share_reserve(CxShare *sh, const uint64_t *bytes, char *err, size_t errlen) {
  uint64_t at = 0;
  for (int r = 0; r < sh->nranks; r++) {
    sh->off[r] = at;
    sh->bytes[r] = bytes[r];
    at += rt_align256(bytes[r]);
  }
  return sh->gpu->alloc(sh->gpu->dev, (size_t)(at ? at : 256), &sh->base, err, errlen);
}

void cx_share_destroy(CxShare *sh) {
  if (!sh) return;
  pthread_mutex_destroy(&sh->mu);
  free(sh->views);
  free(sh->off);
  free(sh->bytes);
  free(sh);
}
