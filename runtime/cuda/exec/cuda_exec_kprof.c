/* runtime/cuda/exec/cuda_exec_kprof.c — the per-kernel GPU time of a run without Nsight
 * Compute (pd2bw-cuda-train --kernel-profile FILE). A profiling CudaDeviceOps table wraps
 * the device's: every launch and GEMM is issued between two event records on its
 * stream, each pair's time added to its "site" (a kernel by its resolved name, a GEMM by
 * dtype, transposes, M×N×K and epilogue: cuBLAS picks kernels per shape). The executors
 * issue exactly what they issue without it; the table has no CUDA graphs, so every pass
 * runs eagerly, as under --cuda-graphs off or ncu. Pairs go into a fixed pool read back
 * (one host wait) when full and at the end. A pair measures its stream between the
 * records: the kernel's time plus its launch gap, what ncu's gpu__time_duration
 * approximates from inside. The file is the table bench/gpu/RESULTS.md shows: the ten
 * sites with the most time, one row for the rest, shares of the total to 0.1%. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec/cuda_exec.h"

#define KPROF_PAIRS 4096 /* event pairs in flight before a read-back */
#define KPROF_TOP 10     /* rows of the table before "other kernels" */

typedef struct KprofSite {
  char *name;
  int64_t calls;
  double ms;
} KprofSite;

typedef struct KprofHandle { /* a kernel handle and the site it was resolved as */
  void *kernel;
  int site;
} KprofHandle;

typedef struct KprofPair {
  void *start, *end;
  int site;
} KprofPair;

struct CxKprof {
  const CudaDeviceOps *in;
  KprofSite *site;
  int nsite, capsite;
  KprofHandle *handle;
  int nhandle, caphandle;
  KprofPair pair[KPROF_PAIRS];
  int npending, ncreated; /* pairs recorded but not read back; pairs with events */
};

static int site_of(CxKprof *k, const char *name) {
  for (int i = 0; i < k->nsite; i++)
    if (strcmp(k->site[i].name, name) == 0) return i;
  if (k->nsite == k->capsite) {
    k->capsite = k->capsite ? 2 * k->capsite : 64;
    k->site = pd_realloc(k->site, (size_t)k->capsite * sizeof *k->site);
  }
  k->site[k->nsite] = (KprofSite){.name = pd_strdup(name)};
  return k->nsite++;
}

/* Reads every recorded pair back into its site (one host wait). */
static void flush(CxKprof *k) {
  if (!k->npending) return;
  k->in->sync(k->in->dev);
  for (int i = 0; i < k->npending; i++) {
    KprofPair *p = &k->pair[i];
    k->site[p->site].ms += (double)k->in->event_ms(k->in->dev, p->start, p->end);
    k->site[p->site].calls++;
  }
  k->npending = 0;
}

/* The next pair, its start recorded on `stream`: the caller issues the work, then end(). */
static KprofPair *begin(CxKprof *k, int stream, int site) {
  if (k->npending == KPROF_PAIRS) flush(k);
  KprofPair *p = &k->pair[k->npending++];
  if (k->npending > k->ncreated) {
    p->start = k->in->event_create(k->in->dev);
    p->end = k->in->event_create(k->in->dev);
    k->ncreated = k->npending;
  }
  p->site = site;
  k->in->event_record(k->in->dev, p->start, stream);
  return p;
}

/* ---- the wrapping table: timed launches and GEMMs, everything else passed on ------ */

static bool w_alloc(void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  return in->alloc(in->dev, bytes, base, err, errlen);
}
static void *w_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  return in->load(in->dev, src, name, err, errlen);
}
static void *w_kernel(void *dev, void *module, const char *name) {
  CxKprof *k = dev;
  void *h = k->in->kernel(k->in->dev, module, name);
  if (!h) return NULL;
  for (int i = 0; i < k->nhandle; i++)
    if (k->handle[i].kernel == h) return h;
  if (k->nhandle == k->caphandle) {
    k->caphandle = k->caphandle ? 2 * k->caphandle : 64;
    k->handle = pd_realloc(k->handle, (size_t)k->caphandle * sizeof *k->handle);
  }
  k->handle[k->nhandle++] = (KprofHandle){.kernel = h, .site = site_of(k, name)};
  return h;
}
static void w_launch(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args) {
  CxKprof *k = dev;
  int site = -1;
  for (int i = 0; i < k->nhandle && site < 0; i++)
    if (k->handle[i].kernel == kernel) site = k->handle[i].site;
  PD_CHECK(site >= 0, "(kernel profile: a launch of a kernel not resolved through the profiled table)");
  KprofPair *p = begin(k, stream, site);
  k->in->launch(k->in->dev, stream, kernel, grid, block, args);
  k->in->event_record(k->in->dev, p->end, stream);
}
static void w_gemm(void *dev, int stream, const GpuGemm *g) {
  CxKprof *k = dev;
  char name[128];
  bool epi = g->ep.kind != GEMM_EPI_NONE;
  snprintf(name, sizeof name, "cuBLAS %s GEMM %c%c %dx%dx%d%s%s",
           g->type == GEMM_BF16 ? "BF16" : g->type == GEMM_TF32 ? "TF32" : "FP32", g->ta ? 'T' : 'N',
           g->tb ? 'T' : 'N', g->M, g->N, g->K, epi ? " + " : "", epi ? gemm_epilogue_name(g->ep.kind) : "");
  KprofPair *p = begin(k, stream, site_of(k, name));
  k->in->gemm(k->in->dev, stream, g);
  k->in->event_record(k->in->dev, p->end, stream);
}
static void w_htod(void *dev, GpuPtr dst, const void *src, size_t bytes) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->htod(in->dev, dst, src, bytes);
}
static void w_dtoh(void *dev, void *dst, GpuPtr src, size_t bytes) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->dtoh(in->dev, dst, src, bytes);
}
static void w_memset0(void *dev, int stream, GpuPtr p, size_t bytes) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->memset0(in->dev, stream, p, bytes);
}
static void w_sync(void *dev) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->sync(in->dev);
}
static bool w_streams(void *dev, int n, char *err, size_t errlen) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  return in->streams(in->dev, n, err, errlen);
}
static void *w_event_create(void *dev) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  return in->event_create(in->dev);
}
static void w_event_destroy(void *dev, void *ev) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->event_destroy(in->dev, ev);
}
static void w_event_record(void *dev, void *ev, int stream) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->event_record(in->dev, ev, stream);
}
static void w_stream_wait(void *dev, int stream, void *ev) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->stream_wait(in->dev, stream, ev);
}
static float w_event_ms(void *dev, void *start, void *end) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  return in->event_ms(in->dev, start, end);
}
static void w_dtod(void *dev, int stream, GpuPtr dst, GpuPtr src, size_t bytes) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  in->dtod(in->dev, stream, dst, src, bytes);
}
static void *w_native_stream(void *dev, int stream) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  return in->native_stream ? in->native_stream(in->dev, stream) : NULL;
}

static void w_thread_enter(void *dev) {
  const CudaDeviceOps *in = ((CxKprof *)dev)->in;
  if (in->thread_enter) in->thread_enter(in->dev);
}

CxKprof *cx_kprof_wrap(const CudaDeviceOps *in, CudaDeviceOps *out) {
  CxKprof *k = pd_calloc(1, sizeof *k);
  k->in = in;
  *out = (CudaDeviceOps){.dev = k, .alloc = w_alloc, .load = w_load, .kernel = w_kernel, .launch = w_launch,
                       .gemm = w_gemm, .htod = w_htod, .dtoh = w_dtoh, .memset0 = w_memset0, .sync = w_sync,
                       .streams = w_streams, .event_create = w_event_create, .event_destroy = w_event_destroy,
                       .event_record = w_event_record, .stream_wait = w_stream_wait, .event_ms = w_event_ms,
                       .dtod = w_dtod, .native_stream = w_native_stream, .thread_enter = w_thread_enter};
  /* no graph entries: eager */
  return k;
}

static int by_time(const void *a, const void *b) {
  const KprofSite *x = a, *y = b;
  if (x->ms != y->ms) return x->ms < y->ms ? 1 : -1;
  return strcmp(x->name, y->name);
}

static void append(char **s, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char **s, size_t *len, size_t *cap, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*s + *len, *cap - *len, fmt, ap);
    va_end(ap);
    if ((size_t)n < *cap - *len) {
      *len += (size_t)n;
      return;
    }
    *cap = 2 * *cap + (size_t)n;
    *s = pd_realloc(*s, *cap);
  }
}

bool cx_kprof_write(CxKprof *k, const char *path, const char *what, char *err, size_t errlen) {
  flush(k);
  qsort(k->site, (size_t)k->nsite, sizeof *k->site, by_time);
  double total = 0;
  int64_t calls = 0;
  for (int i = 0; i < k->nsite; i++) total += k->site[i].ms, calls += k->site[i].calls;
  size_t len = 0, cap = 4096;
  char *s = pd_malloc(cap);
  s[0] = 0;
  append(&s, &len, &cap,
         "<!-- kernel profile of %s: %lld launches and GEMMs of %d kernels and GEMM shapes, %.3f ms of GPU time "
         "(CUDA events around each, passes launch by launch) -->\n\n| kernel | calls | ms | share |\n|---|---|---|---|\n",
         what, (long long)calls, k->nsite, total);
  double rest_ms = 0;
  int64_t rest_calls = 0;
  for (int i = 0; i < k->nsite; i++) {
    const KprofSite *t = &k->site[i];
    if (i < KPROF_TOP)
      append(&s, &len, &cap, "| %s | %lld | %.3f | %.1f%% |\n", t->name, (long long)t->calls, t->ms,
             total > 0 ? 100.0 * t->ms / total : 0.0);
    else
      rest_ms += t->ms, rest_calls += t->calls;
  }
  if (k->nsite > KPROF_TOP)
    append(&s, &len, &cap, "| (%d other kernels) | %lld | %.3f | %.1f%% |\n", k->nsite - KPROF_TOP,
           (long long)rest_calls, rest_ms, total > 0 ? 100.0 * rest_ms / total : 0.0);
  bool ok = atomic_write_text(path, s, err, errlen);
  free(s);
  return ok;
}

void cx_kprof_free(CxKprof *k) {
  if (!k) return;
  for (int i = 0; i < k->ncreated; i++) {
    k->in->event_destroy(k->in->dev, k->pair[i].start);
    k->in->event_destroy(k->in->dev, k->pair[i].end);
  }
  for (int i = 0; i < k->nsite; i++) free(k->site[i].name);
  free(k->site);
  free(k->handle);
  free(k);
}
