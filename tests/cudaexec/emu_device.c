/* tests/cudaexec/emu_device.c — see emu_device.h. */
#include "emu_device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "emu_module.h"
#include "codegen/codegen.h"
#include "kernels/cuda_kernel_list.h"
#include "runtime/blas/blas.h"

typedef int (*EmuSizesFn)(const char *name, unsigned char *sizes);
typedef void (*EmuGemmBf16Fn)(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
                              int ldb, float beta, float *C, int ldc);

#define EMU_MAX_ARGS 32
#define EMU_MAX_STREAMS 64
#define EMU_MAX_MODULES 16
#define EMU_MAX_KERNELS 256

typedef struct EmuKernel {
  EmuLaunchFn launch;
  char name[64];
  bool cast; /* pkc_cast_f32_to_bf16 */
  bool adamw_multi, adamw_one, predict; /* the multi-tensor / a per-tensor AdamW kernel, the prediction */
  int att_casts; /* the casts a tensor-core attention launch comes with (EmuCounts) */
  int nargs;
  unsigned char size[EMU_MAX_ARGS];
} EmuKernel;

typedef struct EmuModule {
  void *so;
  EmuLaunchFn launch;
  EmuSizesFn sizes;
  EmuGemmBf16Fn gemm_bf16;
  char hash[17];
} EmuModule;

typedef struct EmuEvent {
  int64_t recorded, done; /* records issued, records that ran */
  int64_t stamp;          /* the device clock when the latest record ran (e_event_ms) */
} EmuEvent;

/* A queued operation. */
typedef enum EmuOpKind {
  Q_LAUNCH, /* a kernel with its captured arguments */
  Q_GEMM,   /* a GEMM of `type` */
  Q_MEMSET, /* zero a bytes at a */
  Q_DTOD,   /* copy bytes from b to a */
  Q_RECORD, /* ev has run up to generation gen */
  Q_WAIT    /* hold the stream until ev ran generation gen */
} EmuOpKind;

typedef struct EmuOp {
  EmuOpKind kind;
  EmuKernel *k;
  unsigned grid, block;
  uint64_t cell[EMU_MAX_ARGS];
  GemmType type;
  int ta, tb, M, N, K, lda, ldb, ldc;
  float alpha, beta;
  GpuPtr a, b, c; /* GEMM operands; memset/dtod: a = dst, b = src */
  GpuEpilogue ep;  /* the GEMM's epilogue (GEMM_EPI_NONE: none) */
  size_t bytes;
  EmuEvent *ev;
  int64_t gen;
} EmuOp;

typedef struct EmuQueue {
  EmuOp *op;
  int n, head, cap;
} EmuQueue;

/* A captured graph: the recorded operations, in order. */
typedef struct EmuGraph {
  EmuOp *op;
  int n;
} EmuGraph;

typedef struct EmuDev {
  const char *workdir;
  void *arena;
  EmuModule mod[EMU_MAX_MODULES];
  int nmod;
  EmuKernel kern[EMU_MAX_KERNELS];
  int nkern;
  EmuOrder order;
  int nstreams;
  EmuQueue q[EMU_MAX_STREAMS];
  EmuCounts n;
  int cap_stream; /* the stream being captured, or -1 */
  int issued_since_wait; /* operations issued (not captured) since the last host wait */
  EmuGraph cap;   /* what it recorded so far */
  int cap_alloc;
  /* A deterministic fake clock for event timing: one tick (reported as 1 µs) per
   * operation run (launch, GEMM, memset, copy; records and waits take none), so an
   * event pair measures how much work its stream ran between the records, in the
   * device's order (with EMU_LOWEST_FIRST / _HIGHEST_FIRST a stream's queued work runs
   * in bursts, so the timeline is the emulator's, not a GPU's). */
  int64_t clock;
} EmuDev;

static EmuDev emu;

static void *P(GpuPtr p) { return (void *)(uintptr_t)p; }

static bool e_alloc(void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen) {
  EmuDev *d = dev;
  if (d->arena) return snprintf(err, errlen, "second arena"), false;
  d->arena = calloc(1, bytes + 64);
  *base = (GpuPtr)(uintptr_t)d->arena;
  return d->arena != NULL;
}

/* The module's own kernels (every `extern "C" __global__ void NAME(` not from the
 * library) for launching, and the parameter sizes of every kernel it can launch. */
static void write_tables(FILE *f, const char *src) {
  static const char pat[] = "extern \"C\" __global__ void ";
  fprintf(f, "namespace {\ntemplate <typename F> struct ArgSizes;\n"
             "template <typename... A> struct ArgSizes<void(A...)> {\n"
             "  static int get(unsigned char *s) { int n = 0; ((s[n++] = (unsigned char)sizeof(A)), ...); return n; }\n"
             "};\n"
             "struct SizeEntry { const char *name; int (*get)(unsigned char *); };\n"
             "#define EMU_SZ(k, kind) {#k, &ArgSizes<decltype(k)>::get},\n"
             "const SizeEntry size_table[] = {PKC_KERNEL_LIST(EMU_SZ)\n");
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) emu_table_begin(f);
    for (const char *s = strstr(src, pat); s; s = strstr(s + 1, pat)) {
      const char *n = s + sizeof pat - 1, *e = strchr(n, '(');
      if (!e || strncmp(n, "pkc_", 4) == 0 || e - n > 60) continue;
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)(e - n), n);
      if (pass == 0) fprintf(f, "  {\"%s\", &ArgSizes<decltype(%s)>::get},\n", name, name);
      else emu_table_entry(f, name);
    }
    if (pass == 0) fprintf(f, "  {nullptr, nullptr}};\n}\n");
  }
  emu_table_end(f, "emu_launch(name, grid, block, args)");
  fprintf(f, "extern \"C\" int emu_arg_sizes(const char *name, unsigned char *s) {\n"
             "  for (const SizeEntry *e = size_table; e->name; e++)\n"
             "    if (strcmp(e->name, name) == 0) return e->get(s);\n"
             "  return -1;\n}\n");
}

/* "NVRTC": the source as host C++ with the emulator, built once per distinct source. */
static void *e_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  EmuDev *d = dev;
  char hash[17], path[256];
  codegen_hash_hex(src, strlen(src), hash);
  for (int i = 0; i < d->nmod; i++)
    if (strcmp(d->mod[i].hash, hash) == 0) return &d->mod[i];
  snprintf(path, sizeof path, "%s/emu-%s.so", d->workdir, hash);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    char cu[256], cpp[256], berr[1024];
    snprintf(cu, sizeof cu, "%s/emu-%s.cu", d->workdir, hash);
    snprintf(cpp, sizeof cpp, "%s/emu-%s.cpp", d->workdir, hash);
    FILE *f = fopen(cu, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", cu), NULL;
    fputs(src, f);
    fclose(f);
    f = fopen(cpp, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", cpp), NULL;
    emu_include_emulator(f, src);
    fprintf(f, "#include \"emu-%s.cu\"\n", hash);
    write_tables(f, src);
    fclose(f);
    if (!emu_module_build(cpp, path, d->workdir, berr, sizeof berr))
      return snprintf(err, errlen, "%s: %s", name, berr), NULL;
  }
  if (d->nmod == EMU_MAX_MODULES) return snprintf(err, errlen, "more than %d modules", EMU_MAX_MODULES), NULL;
  EmuModule *m = &d->mod[d->nmod++];
  m->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->so) return snprintf(err, errlen, "dlopen: %s", dlerror()), NULL;
  m->launch = (EmuLaunchFn)(uintptr_t)dlsym(m->so, "emu_stage_launch");
  m->sizes = (EmuSizesFn)(uintptr_t)dlsym(m->so, "emu_arg_sizes");
  m->gemm_bf16 = (EmuGemmBf16Fn)(uintptr_t)dlsym(m->so, "emu_gemm_bf16");
  memcpy(m->hash, hash, 17);
  return m;
}

static void *e_kernel(void *dev, void *module, const char *name) {
  EmuDev *d = dev;
  EmuModule *m = module;
  for (int i = 0; i < d->nkern; i++)
    if (d->kern[i].launch == m->launch && strcmp(d->kern[i].name, name) == 0) return &d->kern[i];
  /* a kernel the module lacks: probe with no work (grid 0 runs nothing) */
  if (m->launch(name, 0, 1, NULL) != 0 || d->nkern == EMU_MAX_KERNELS || strlen(name) >= 64) return NULL;
  EmuKernel *k = &d->kern[d->nkern++];
  k->launch = m->launch;
  k->cast = strcmp(name, "pkc_cast_f32_to_bf16") == 0;
  k->adamw_multi = strcmp(name, "pkc_adamw_multi_dev_f32") == 0;
  k->adamw_one = strcmp(name, "pkc_adamw_step_f32") == 0 || strcmp(name, "pkc_adamw_step_dev_f32") == 0;
  k->predict = strcmp(name, "pkc_predict_step_dev_f32") == 0;
  k->att_casts = strcmp(name, "pkc_flash_attention_fwd_bf16") == 0         ? 1
                 : strcmp(name, "pkc_flash_attention_bwd_dq_bf16") == 0    ? 2
                                                                           : 0;
  snprintf(k->name, sizeof k->name, "%s", name);
  k->nargs = m->sizes(name, k->size);
  PD_CHECK(k->nargs >= 0 && k->nargs <= EMU_MAX_ARGS, "(no parameter sizes for kernel %s)", name);
  return k;
}

/* The block size of the code generator's launches (codegen's CU_BLOCK): a GEMM
 * epilogue runs as the kernels the unfused launch list would launch, at their block
 * size, because the bias gradient's summation order depends on it. */
#define EMU_EPI_BLOCK 256

static void epi_kernel(EmuDev *d, const char *name, PkcLaunchKind kind, int64_t items, void **args) {
  unsigned grid = pkc_grid(kind, items, EMU_EPI_BLOCK, 1u << 20);
  PD_CHECK(d->nmod > 0 && d->mod[0].launch(name, grid, EMU_EPI_BLOCK, args) == 0, "(emulated epilogue kernel %s)",
           name);
}

/* After the GEMM: the epilogue as those kernels (contract/contract.h says which), on
 * the same bytes in the same order, so the fused path replays the unfused one's bits
 * (gelu_aux_bias's GEMM wrote aux, the pre-GELU value, and C gets its gelu). */
static void exec_epilogue(EmuDev *d, const EmuOp *op) {
  float *C = P(op->c), *aux = P(op->ep.aux), *bias = P(op->ep.bias);
  const float *B = P(op->b);
  int64_t M = op->M, K = op->K, n = (int64_t)op->M * op->N;
  int N = op->N, acc = op->ep.bias_acc;
  switch (op->ep.kind) {
  case GEMM_EPI_BIAS: {
    void *a[] = {&C, &C, &bias, &M, &N};
    epi_kernel(d, "pkc_add_bias_fwd_f32", PKC_ELEM4, n, a);
    break;
  }
  case GEMM_EPI_GELU_AUX_BIAS: {
    void *a[] = {&aux, &aux, &bias, &M, &N}, *g[] = {&C, &aux, &n};
    epi_kernel(d, "pkc_add_bias_fwd_f32", PKC_ELEM4, n, a);
    epi_kernel(d, "pkc_gelu_fwd_f32", PKC_ELEM4, n, g);
    break;
  }
  case GEMM_EPI_DGELU: {
    void *a[] = {&C, &C, &aux, &n};
    epi_kernel(d, "pkc_gelu_bwd_f32", PKC_ELEM4, n, a);
    break;
  }
  case GEMM_EPI_BGRADB: { /* op(B) is B[K, N] (the launch list checks: not transposed, unpadded) */
    void *a[] = {&bias, &B, &K, &N, &acc};
    epi_kernel(d, "pkc_bias_grad_f32", PKC_COL, N, a);
    break;
  }
  case GEMM_EPI_NONE:
  case GEMM_EPI_COUNT: break;
  }
}

static void exec_op(EmuDev *d, EmuOp *op) {
  switch (op->kind) {
  case Q_LAUNCH: {
    void *args[EMU_MAX_ARGS];
    for (int i = 0; i < op->k->nargs; i++) args[i] = &op->cell[i];
    PD_CHECK(op->k->launch(op->k->name, op->grid, op->block, args) == 0, "(emulated launch of %s)", op->k->name);
    break;
  }
  case Q_GEMM: {
    bool to_aux = op->ep.kind == GEMM_EPI_GELU_AUX_BIAS; /* the product is the pre-GELU value */
    GpuPtr c = to_aux ? op->ep.aux : op->c;
    int ldc = to_aux ? op->ep.ldaux : op->ldc;
    if (op->type == GEMM_BF16) {
      /* every module holds the emulator, so the first one's will do */
      PD_CHECK(d->nmod > 0 && d->mod[0].gemm_bf16, "(the emulator module has no emu_gemm_bf16)");
      d->mod[0].gemm_bf16(op->ta, op->tb, op->M, op->N, op->K, op->alpha, P(op->a), op->lda, P(op->b), op->ldb,
                          op->beta, P(c), ldc);
    } else {
      pd_sgemm(op->ta, op->tb, op->M, op->N, op->K, op->alpha, P(op->a), op->lda, P(op->b), op->ldb, op->beta, P(c),
               ldc);
    }
    exec_epilogue(d, op);
    break;
  }
  case Q_MEMSET: memset(P(op->a), 0, op->bytes); break;
  case Q_DTOD: memcpy(P(op->a), P(op->b), op->bytes); break;
  case Q_RECORD:
    op->ev->done = op->gen;
    op->ev->stamp = d->clock;
    return;
  case Q_WAIT: return;
  }
  d->clock++;
}

static bool capturing(const EmuDev *d, int stream) { return d->cap_stream >= 0 && stream == d->cap_stream; }

static void issue(EmuDev *d, int stream, EmuOp *op) {
  PD_CHECK(stream >= 0 && stream < (d->nstreams > 1 ? d->nstreams : 1), "(stream %d of %d)", stream, d->nstreams);
  if (capturing(d, stream)) { /* recorded, not run */
    PD_CHECK(op->kind != Q_RECORD && op->kind != Q_WAIT, "(emulated device: an event on a capturing stream)");
    if (d->cap.n == d->cap_alloc) {
      d->cap_alloc = d->cap_alloc ? 2 * d->cap_alloc : 256;
      d->cap.op = pd_realloc(d->cap.op, (size_t)d->cap_alloc * sizeof *d->cap.op);
    }
    d->cap.op[d->cap.n++] = *op;
    return;
  }
  d->issued_since_wait++;
  if (d->order == EMU_IN_ORDER) {
    exec_op(d, op);
    return;
  }
  EmuQueue *q = &d->q[stream];
  if (q->n == q->cap) {
    q->cap = q->cap ? 2 * q->cap : 256;
    q->op = pd_realloc(q->op, (size_t)q->cap * sizeof *q->op);
  }
  q->op[q->n++] = *op;
  int queued = 0;
  for (int s = 0; s < EMU_MAX_STREAMS; s++) queued += d->q[s].n - d->q[s].head;
  if (queued > d->n.max_queued) d->n.max_queued = queued;
}

/* Runs everything queued: each stream as far as it can (up to a wait whose record has
 * not run), in the device's order, until all are empty. */
static void drain(EmuDev *d) {
  PD_CHECK(d->cap_stream < 0, "(emulated device: the host waits while stream %d is being captured)", d->cap_stream);
  d->n.host_waits++;
  d->n.host_stalls += d->issued_since_wait > 0;
  d->issued_since_wait = 0;
  for (;;) {
    bool left = false, moved = false;
    for (int i = 0; i < EMU_MAX_STREAMS; i++) {
      EmuQueue *q = &d->q[d->order == EMU_HIGHEST_FIRST ? EMU_MAX_STREAMS - 1 - i : i];
      while (q->head < q->n) {
        EmuOp *op = &q->op[q->head];
        if (op->kind == Q_WAIT && op->ev->done < op->gen) break;
        exec_op(d, op);
        q->head++;
        moved = true;
      }
      if (q->head < q->n) left = true;
      else q->head = q->n = 0;
    }
    if (!left) return;
    PD_CHECK(moved, "(emulated device: the streams wait for each other in a cycle)");
  }
}

static void e_launch(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args) {
  EmuDev *d = dev;
  EmuKernel *k = kernel;
  EmuOp op = {.kind = Q_LAUNCH, .k = k, .grid = grid, .block = block};
  for (int i = 0; i < k->nargs; i++) memcpy(&op.cell[i], args[i], k->size[i]);
  if (!capturing(d, stream)) {
    d->n.launches++;
    d->n.casts += k->cast;
    d->n.adamw_multi += k->adamw_multi;
    d->n.adamw_one += k->adamw_one;
    d->n.predicts += k->predict;
    d->n.att_casts += k->att_casts;
  }
  issue(d, stream, &op);
}

static void e_gemm(void *dev, int stream, const GpuGemm *g) {
  EmuDev *d = dev;
  EmuOp op = {.kind = Q_GEMM, .type = g->type, .ta = g->ta, .tb = g->tb, .M = g->M, .N = g->N, .K = g->K,
              .alpha = g->alpha, .a = g->A, .lda = g->lda, .b = g->B, .ldb = g->ldb, .beta = g->beta, .c = g->C,
              .ldc = g->ldc, .ep = g->ep};
  if (!capturing(d, stream)) {
    d->n.gemms++;
    d->n.bf16_gemms += g->type == GEMM_BF16;
    d->n.epilogues[op.ep.kind]++;
  }
  issue(d, stream, &op);
}

static void e_htod(void *dev, GpuPtr dst, const void *src, size_t n) {
  drain(dev);
  memcpy(P(dst), src, n);
}
static void e_dtoh(void *dev, void *dst, GpuPtr src, size_t n) {
  drain(dev);
  memcpy(dst, P(src), n);
}
static void e_memset0(void *dev, int stream, GpuPtr p, size_t n) {
  EmuOp op = {.kind = Q_MEMSET, .a = p, .bytes = n};
  issue(dev, stream, &op);
}
static void e_sync(void *dev) { drain(dev); }

static bool e_streams(void *dev, int n, char *err, size_t errlen) {
  EmuDev *d = dev;
  if (n > EMU_MAX_STREAMS) return snprintf(err, errlen, "%d streams: the emulator has %d", n, EMU_MAX_STREAMS), false;
  if (n > d->nstreams) d->nstreams = n;
  return true;
}
static void *e_event_create(void *dev) {
  (void)dev;
  return pd_calloc(1, sizeof(EmuEvent));
}
static void e_event_destroy(void *dev, void *ev) {
  (void)dev;
  free(ev);
}
static void e_event_record(void *dev, void *ev, int stream) {
  EmuDev *d = dev;
  EmuEvent *e = ev;
  EmuOp op = {.kind = Q_RECORD, .ev = e, .gen = ++e->recorded};
  d->n.records++;
  issue(d, stream, &op);
}
static void e_stream_wait(void *dev, int stream, void *ev) {
  EmuDev *d = dev;
  EmuEvent *e = ev;
  d->n.waits++;
  if (!e->recorded) return; /* CUDA: waiting for a never-recorded event waits for nothing */
  EmuOp op = {.kind = Q_WAIT, .ev = e, .gen = e->recorded};
  issue(d, stream, &op);
}
/* The fake clock's ticks between the two records (exec_op), a tick being 1 µs. */
static float e_event_ms(void *dev, void *start, void *end) {
  (void)dev;
  const EmuEvent *a = start, *b = end;
  PD_CHECK(a->recorded && a->done == a->recorded && b->recorded && b->done == b->recorded,
           "(emulated device: elapsed time of an event not recorded or not run yet)");
  return (float)(b->stamp - a->stamp) * 1e-3f;
}

static void e_dtod(void *dev, int stream, GpuPtr dst, GpuPtr src, size_t n) {
  EmuDev *d = dev;
  EmuOp op = {.kind = Q_DTOD, .a = dst, .b = src, .bytes = n};
  if (!capturing(d, stream)) d->n.dtods++;
  issue(d, stream, &op);
}

static bool e_capture_begin(void *dev, int stream, char *err, size_t errlen) {
  EmuDev *d = dev;
  if (d->cap_stream >= 0)
    return snprintf(err, errlen, "stream %d is being captured already", d->cap_stream), false;
  d->cap_stream = stream;
  d->cap.n = 0;
  return true;
}

static void *e_capture_end(void *dev, int stream, char *err, size_t errlen) {
  EmuDev *d = dev;
  if (d->cap_stream != stream) return snprintf(err, errlen, "stream %d is not being captured", stream), NULL;
  d->cap_stream = -1;
  EmuGraph *g = pd_calloc(1, sizeof *g);
  g->n = d->cap.n;
  g->op = pd_malloc(((size_t)g->n + 1) * sizeof *g->op);
  memcpy(g->op, d->cap.op, (size_t)g->n * sizeof *g->op);
  d->n.captures++;
  return g;
}

static void e_graph_launch(void *dev, void *graph, int stream) {
  EmuDev *d = dev;
  EmuGraph *g = graph;
  PD_CHECK(!capturing(d, stream), "(emulated device: a graph launched into a capture)");
  d->n.graph_launches++;
  d->n.graph_ops += g->n;
  for (int i = 0; i < g->n; i++) {
    EmuOp op = g->op[i]; /* a copy: the graph stays as recorded */
    issue(d, stream, &op);
  }
}

static void e_graph_destroy(void *dev, void *graph) {
  (void)dev;
  EmuGraph *g = graph;
  free(g->op);
  free(g);
}

/* ---- thread safety: one lock around the device ---------------------------------------
 * Single-GPU pipeline mode drives the device from one host thread per stage replica.
 * Every entry of the table runs under one recursive lock, so queued work runs (at a
 * host wait) with no other thread issuing; a capture holds the lock from capture_begin
 * to capture_end, so no other thread issues or waits in the middle of it (a GPU's
 * thread-local capture mode allows that; the emulator's one capture slot does not). */

static pthread_mutex_t emu_mu;
static pthread_once_t emu_mu_once = PTHREAD_ONCE_INIT;
static void emu_mu_init(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&emu_mu, &a);
  pthread_mutexattr_destroy(&a);
}
static void lk(void) {
  pthread_once(&emu_mu_once, emu_mu_init);
  pthread_mutex_lock(&emu_mu);
}
static void ul(void) { pthread_mutex_unlock(&emu_mu); }

#define LOCKED(ret, name, params, args)                                                                               \
  static ret l_##name params {                                                                                       \
    lk();                                                                                                            \
    ret r = e_##name args;                                                                                           \
    ul();                                                                                                            \
    return r;                                                                                                        \
  }
#define LOCKED_VOID(name, params, args)                                                                               \
  static void l_##name params {                                                                                      \
    lk();                                                                                                            \
    e_##name args;                                                                                                   \
    ul();                                                                                                            \
  }
LOCKED(bool, alloc, (void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen), (dev, bytes, base, err, errlen))
LOCKED(void *, load, (void *dev, const char *src, const char *name, char *err, size_t errlen),
       (dev, src, name, err, errlen))
LOCKED(void *, kernel, (void *dev, void *module, const char *name), (dev, module, name))
LOCKED_VOID(launch, (void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args),
            (dev, stream, kernel, grid, block, args))
LOCKED_VOID(gemm, (void *dev, int stream, const GpuGemm *g), (dev, stream, g))
LOCKED_VOID(htod, (void *dev, GpuPtr dst, const void *src, size_t n), (dev, dst, src, n))
LOCKED_VOID(dtoh, (void *dev, void *dst, GpuPtr src, size_t n), (dev, dst, src, n))
LOCKED_VOID(memset0, (void *dev, int stream, GpuPtr p, size_t n), (dev, stream, p, n))
LOCKED_VOID(sync, (void *dev), (dev))
LOCKED(bool, streams, (void *dev, int n, char *err, size_t errlen), (dev, n, err, errlen))
LOCKED(void *, event_create, (void *dev), (dev))
LOCKED_VOID(event_destroy, (void *dev, void *ev), (dev, ev))
LOCKED_VOID(event_record, (void *dev, void *ev, int stream), (dev, ev, stream))
LOCKED_VOID(stream_wait, (void *dev, int stream, void *ev), (dev, stream, ev))
LOCKED(float, event_ms, (void *dev, void *start, void *end), (dev, start, end))
LOCKED_VOID(dtod, (void *dev, int stream, GpuPtr dst, GpuPtr src, size_t n), (dev, stream, dst, src, n))
LOCKED_VOID(graph_launch, (void *dev, void *graph, int stream), (dev, graph, stream))
LOCKED_VOID(graph_destroy, (void *dev, void *graph), (dev, graph))

/* The lock stays held from a successful capture_begin to its capture_end. */
static bool l_capture_begin(void *dev, int stream, char *err, size_t errlen) {
  lk();
  bool ok = e_capture_begin(dev, stream, err, errlen);
  if (!ok) ul();
  return ok;
}
static void *l_capture_end(void *dev, int stream, char *err, size_t errlen) {
  lk();
  bool was = ((EmuDev *)dev)->cap_stream == stream;
  void *g = e_capture_end(dev, stream, err, errlen);
  ul();
  if (was) ul(); /* capture_begin's */
  return g;
}

static bool emu_graphs = true; /* emu_device_set_graphs */

void emu_device_set_graphs(bool on) { emu_graphs = on; }

CudaDeviceOps emu_device_ops(const char *workdir, EmuOrder order) {
  free(emu.arena);
  emu.arena = NULL;
  emu.workdir = workdir;
  emu.order = order;
  emu.nstreams = 1;
  for (int s = 0; s < EMU_MAX_STREAMS; s++) emu.q[s].n = emu.q[s].head = 0; /* nothing of the last run */
  emu.n = (EmuCounts){0};
  emu.issued_since_wait = 0;
  emu.cap_stream = -1;
  emu.clock = 0;
  CudaDeviceOps ops = {.dev = &emu, .alloc = l_alloc, .load = l_load, .kernel = l_kernel, .launch = l_launch,
                     .gemm = l_gemm, .htod = l_htod, .dtoh = l_dtoh, .memset0 = l_memset0, .sync = l_sync,
                     .streams = l_streams, .event_create = l_event_create, .event_destroy = l_event_destroy,
                     .event_record = l_event_record, .stream_wait = l_stream_wait, .event_ms = l_event_ms, .dtod = l_dtod,
                     .capture_begin = l_capture_begin, .capture_end = l_capture_end, .graph_launch = l_graph_launch,
                     .graph_destroy = l_graph_destroy};
  if (!emu_graphs) cx_ops_no_graphs(&ops);
  return ops;
}

EmuCounts emu_device_counts(void) { return emu.n; }

const char *emu_order_name(EmuOrder o) {
  return o == EMU_IN_ORDER ? "in order" : o == EMU_LOWEST_FIRST ? "lowest stream first" : "highest stream first";
}

void emu_device_release(void) {
  for (int s = 0; s < EMU_MAX_STREAMS; s++) {
    free(emu.q[s].op);
    emu.q[s] = (EmuQueue){0};
  }
  free(emu.arena);
  emu.arena = NULL;
  free(emu.cap.op);
  emu.cap = (EmuGraph){0};
  emu.cap_alloc = 0;
}
