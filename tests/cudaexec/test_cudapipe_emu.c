/* tests/cudaexec/test_cudapipe_emu.c — single-GPU pipeline mode (runtime/cuda_pipe.h)
 * trains like the sequential reference, without a GPU.
 *
 * The device is the host CUDA emulator (tests/cuda/cuda_emu.cpp): every module the
 * executor loads (the plan's kernels.cu and each stageN.cu) is compiled as host C++
 * with it, device memory is host memory, GEMMs run through pd_sgemm. Unlike
 * test_cudaexec_emu's device, this one has STREAMS THAT REORDER: work is queued per
 * stream and only runs when the host must wait (htod, dtoh, sync); then each stream
 * runs as far as it can before the next one starts, lowest stream first or highest
 * first. An event wait holds its stream until the record it captured has run. So a
 * missing event/wait between an SR's stream and the communication stream shows as
 * stale data (a copy before its producer, a forward before its input arrived) and
 * the losses leave the bound; an in-order device would hide it. Kernel arguments are
 * captured at launch with the kernel's own parameter sizes (a table generated with
 * each module), as cuLaunchKernel does.
 *
 * Plans of the tiny GPT of tests/pipeline (tied wte/LM head, dropout 0.1, AdamW),
 * float32 GEMMs, 3 steps each:
 *   - 2bw, d = 4, w = 1, m = 4, clip 1 (deferred tied steps, the norm), highest first;
 *   - gpipe, d = 2, w = 2, m = 2, no clip (the replica all-reduce), lowest first;
 *   - 1f1b, d = 3, w = 1, m = 4, clip 1, recomputation on, highest first, through
 *     cuda_pipe_main (pd2bwrun --backend cuda --reference --log-json's path);
 *   - pipedream, d = 3, w = 1, m = 4, clip 1, lowest first;
 * each against the CPU sequential reference (pipeline_check_reference: the one-stage
 * trainer on PLAN/reference with the schedule's rule; for pipedream the plan's stage
 * programs run one after another with its per-stage delay): every microbatch loss within
 * TOL = 1e-5 relative, every weight within 10·TOL of its tensor's largest. The bound
 * discriminates: the 2bw run checked against the vanilla rule differs far beyond it.
 * Plus: a device without streams/events, a plan without launch lists, and a plan whose
 * boundaries cannot match (edited plan.json): a stall reported, not a hang.
 *
 *   test_cudapipe_emu PD2BWC [2bw|gpipe|1f1b|pipedream|errors]   (in the source tree)
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/cuda_pipe.h"
#include "test.h"

#ifndef PD2BW_TEST_CXX
#define PD2BW_TEST_CXX "c++"
#endif

#define TOL 1e-5
#define STEPS 3

static const char *pd2bwc;
static char tmp[64] = "/tmp/pd2bw-test-cudapipe-XXXXXX";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the emulated device ------------------------------------------------------------ */

typedef int (*EmuLaunchFn)(const char *name, unsigned grid, unsigned block, void **args);
typedef int (*EmuSizesFn)(const char *name, unsigned char *sizes);

#define EMU_MAX_ARGS 32
#define EMU_MAX_STREAMS 64

typedef struct EmuKernel {
  EmuLaunchFn launch;
  char name[64];
  int nargs;
  unsigned char size[EMU_MAX_ARGS];
} EmuKernel;

typedef struct EmuModule {
  void *so;
  EmuLaunchFn launch;
  EmuSizesFn sizes;
  char hash[17];
} EmuModule;

typedef struct EmuEvent {
  int64_t recorded, done; /* records issued, records that ran */
} EmuEvent;

typedef enum EmuOpKind { Q_LAUNCH, Q_GEMM, Q_MEMSET, Q_DTOD, Q_RECORD, Q_WAIT } EmuOpKind;

typedef struct EmuOp {
  EmuOpKind kind;
  EmuKernel *k;
  unsigned grid, block;
  uint64_t cell[EMU_MAX_ARGS];
  int ta, tb, M, N, K, lda, ldb, ldc;
  float alpha, beta;
  CxPtr a, b, c; /* GEMM operands; memset/dtod: a = dst, b = src */
  size_t bytes;
  EmuEvent *ev;
  int64_t gen;
} EmuOp;

typedef struct EmuQueue {
  EmuOp *op;
  int n, head, cap;
} EmuQueue;

/* How queued work runs. */
typedef enum EmuOrder {
  EMU_IN_ORDER,     /* at once, as issued (events are no-ops) */
  EMU_LOWEST_FIRST, /* queued; at a host wait, stream 0 runs as far as it can, then 1, ... */
  EMU_HIGHEST_FIRST /* queued; the highest stream first */
} EmuOrder;

typedef struct EmuDev {
  void *arena;
  EmuModule mod[16];
  int nmod;
  EmuKernel kern[256];
  int nkern;
  EmuOrder order;
  int nstreams;
  EmuQueue q[EMU_MAX_STREAMS];
  int launches, gemms, dtods, records, waits, max_queued;
} EmuDev;

static EmuDev emu;

static bool e_alloc(void *dev, size_t bytes, CxPtr *base, char *err, size_t errlen) {
  EmuDev *d = dev;
  if (d->arena) return snprintf(err, errlen, "second arena"), false;
  d->arena = calloc(1, bytes + 64);
  *base = (CxPtr)(uintptr_t)d->arena;
  return d->arena != NULL;
}

/* The module's own kernels (every `extern "C" __global__ void NAME(` not from the
 * library) for launching, and the parameter sizes of every kernel it can launch. */
static void write_tables(FILE *f, const char *src) {
  static const char pat[] = "extern \"C\" __global__ void ";
  fprintf(f, "namespace {\nstruct StageEntry { const char *name; void (*call)(void **); };\n"
             "template <typename F> struct ArgSizes;\n"
             "template <typename... A> struct ArgSizes<void(A...)> {\n"
             "  static int get(unsigned char *s) { int n = 0; ((s[n++] = (unsigned char)sizeof(A)), ...); return n; }\n"
             "};\n"
             "struct SizeEntry { const char *name; int (*get)(unsigned char *); };\n"
             "const StageEntry stage_kernels[] = {\n");
  for (int pass = 0; pass < 2; pass++) {
    for (const char *s = strstr(src, pat); s; s = strstr(s + 1, pat)) {
      const char *n = s + sizeof pat - 1, *e = strchr(n, '(');
      if (!e || strncmp(n, "pkc_", 4) == 0 || e - n > 60) continue;
      int len = (int)(e - n);
      if (pass == 0) fprintf(f, "  {\"%.*s\", &Caller<decltype(%.*s)>::call<%.*s>},\n", len, n, len, n, len, n);
      else fprintf(f, "  {\"%.*s\", &ArgSizes<decltype(%.*s)>::get},\n", len, n, len, n);
    }
    if (pass == 0)
      fprintf(f, "  {nullptr, nullptr}};\n"
                 "#define EMU_SZ(k, kind) {#k, &ArgSizes<decltype(k)>::get},\n"
                 "const SizeEntry size_table[] = {PKC_KERNEL_LIST(EMU_SZ)\n");
  }
  fprintf(f, "  {nullptr, nullptr}};\n}\n"
             "extern \"C\" int emu_stage_launch(const char *name, unsigned grid, unsigned block, void **args) {\n"
             "  for (const StageEntry *e = stage_kernels; e->name; e++) {\n"
             "    if (strcmp(e->name, name) != 0) continue;\n"
             "    gridDim = {grid, 1, 1};\n    blockDim = {block, 1, 1};\n"
             "    for (unsigned b = 0; b < grid; b++)\n"
             "      for (unsigned t = 0; t < block; t++) {\n"
             "        blockIdx = {b, 0, 0};\n        threadIdx = {t, 0, 0};\n        e->call(args);\n      }\n"
             "    return 0;\n  }\n  return emu_launch(name, grid, block, args);\n}\n"
             "extern \"C\" int emu_arg_sizes(const char *name, unsigned char *s) {\n"
             "  for (const SizeEntry *e = size_table; e->name; e++)\n"
             "    if (strcmp(e->name, name) == 0) return e->get(s);\n"
             "  return -1;\n}\n");
}

/* "NVRTC": the source as host C++ with the emulator, built once per distinct source. */
static void *e_load(void *dev, const char *src, const char *name, char *err, size_t errlen) {
  EmuDev *d = dev;
  char hash[17], path[256], cmd[2048], cwd[512];
  codegen_hash_hex(src, strlen(src), hash);
  for (int i = 0; i < d->nmod; i++)
    if (strcmp(d->mod[i].hash, hash) == 0) return &d->mod[i];
  snprintf(path, sizeof path, "%s/emu-%s.so", tmp, hash);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    char cu[256], cpp[256];
    snprintf(cu, sizeof cu, "%s/emu-%s.cu", tmp, hash);
    snprintf(cpp, sizeof cpp, "%s/emu-%s.cpp", tmp, hash);
    FILE *f = fopen(cu, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", cu), NULL;
    fputs(src, f);
    fclose(f);
    f = fopen(cpp, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", cpp), NULL;
    fprintf(f, "#include \"tests/cuda/cuda_emu.cpp\"\n#include \"emu-%s.cu\"\n", hash);
    write_tables(f, src);
    fclose(f);
    if (!getcwd(cwd, sizeof cwd)) return snprintf(err, errlen, "getcwd"), NULL;
    snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -w -fPIC -shared -I'%s' -I'%s' '%s' -o '%s'", PD2BW_TEST_CXX, cwd, tmp,
             cpp, path);
    if (system(cmd) != 0) return snprintf(err, errlen, "%s: emulator build failed: %s", name, cmd), NULL;
  }
  if (d->nmod == 16) return snprintf(err, errlen, "more than 16 modules"), NULL;
  EmuModule *m = &d->mod[d->nmod++];
  m->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->so) return snprintf(err, errlen, "dlopen: %s", dlerror()), NULL;
  m->launch = (EmuLaunchFn)(uintptr_t)dlsym(m->so, "emu_stage_launch");
  m->sizes = (EmuSizesFn)(uintptr_t)dlsym(m->so, "emu_arg_sizes");
  memcpy(m->hash, hash, 17);
  return m;
}

static void *e_kernel(void *dev, void *module, const char *name) {
  EmuDev *d = dev;
  EmuModule *m = module;
  for (int i = 0; i < d->nkern; i++)
    if (d->kern[i].launch == m->launch && strcmp(d->kern[i].name, name) == 0) return &d->kern[i];
  /* a kernel the module lacks: probe with no work (grid 0 runs nothing) */
  if (m->launch(name, 0, 1, NULL) != 0 || d->nkern == 256 || strlen(name) >= 64) return NULL;
  EmuKernel *k = &d->kern[d->nkern++];
  k->launch = m->launch;
  snprintf(k->name, sizeof k->name, "%s", name);
  k->nargs = m->sizes(name, k->size);
  PD_CHECK(k->nargs >= 0 && k->nargs <= EMU_MAX_ARGS, "(no parameter sizes for kernel %s)", name);
  return k;
}

static float *F(CxPtr p) { return (float *)(uintptr_t)p; }

static void exec_op(EmuDev *d, EmuOp *op) {
  switch (op->kind) {
  case Q_LAUNCH: {
    void *args[EMU_MAX_ARGS];
    for (int i = 0; i < op->k->nargs; i++) args[i] = &op->cell[i];
    PD_CHECK(op->k->launch(op->k->name, op->grid, op->block, args) == 0, "(emulated launch of %s)", op->k->name);
    break;
  }
  case Q_GEMM:
    pd_sgemm(op->ta, op->tb, op->M, op->N, op->K, op->alpha, F(op->a), op->lda, F(op->b), op->ldb, op->beta, F(op->c),
             op->ldc);
    break;
  case Q_MEMSET: memset((void *)(uintptr_t)op->a, 0, op->bytes); break;
  case Q_DTOD: memcpy((void *)(uintptr_t)op->a, (const void *)(uintptr_t)op->b, op->bytes); break;
  case Q_RECORD: op->ev->done = op->gen; break;
  case Q_WAIT: break;
  }
  (void)d;
}

static void issue(EmuDev *d, int stream, EmuOp *op) {
  PD_CHECK(stream >= 0 && stream < (d->nstreams > 1 ? d->nstreams : 1), "(stream %d of %d)", stream, d->nstreams);
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
  if (queued > d->max_queued) d->max_queued = queued;
}

/* Runs everything queued: each stream as far as it can (up to a wait whose record has
 * not run), in the device's order, until all are empty. */
static void drain(EmuDev *d) {
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
  d->launches++;
  issue(d, stream, &op);
}

static void e_gemm(void *dev, int stream, CxGemmType type, int ta, int tb, int M, int N, int K, float alpha, CxPtr A,
                   int lda, CxPtr B, int ldb, float beta, CxPtr C, int ldc) {
  EmuDev *d = dev;
  PD_CHECK(type != CX_GEMM_BF16, "(this emulated device has float32 GEMMs only)");
  EmuOp op = {.kind = Q_GEMM, .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .a = A, .lda = lda, .b = B,
              .ldb = ldb, .beta = beta, .c = C, .ldc = ldc};
  d->gemms++;
  issue(d, stream, &op);
}

static void e_htod(void *dev, CxPtr dst, const void *src, size_t n) {
  drain(dev);
  memcpy((void *)(uintptr_t)dst, src, n);
}
static void e_dtoh(void *dev, void *dst, CxPtr src, size_t n) {
  drain(dev);
  memcpy(dst, (const void *)(uintptr_t)src, n);
}
static void e_memset0(void *dev, int stream, CxPtr p, size_t n) {
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
  d->records++;
  issue(d, stream, &op);
}
static void e_stream_wait(void *dev, int stream, void *ev) {
  EmuDev *d = dev;
  EmuEvent *e = ev;
  d->waits++;
  if (!e->recorded) return; /* CUDA: waiting for a never-recorded event waits for nothing */
  EmuOp op = {.kind = Q_WAIT, .ev = e, .gen = e->recorded};
  issue(d, stream, &op);
}
static void e_dtod(void *dev, int stream, CxPtr dst, CxPtr src, size_t n) {
  EmuDev *d = dev;
  EmuOp op = {.kind = Q_DTOD, .a = dst, .b = src, .bytes = n};
  d->dtods++;
  issue(d, stream, &op);
}

static CxDeviceOps emu_ops(EmuOrder order) {
  free(emu.arena);
  emu.arena = NULL;
  emu.order = order;
  emu.nstreams = 1;
  for (int s = 0; s < EMU_MAX_STREAMS; s++) emu.q[s].n = emu.q[s].head = 0; /* nothing of the last run */
  emu.launches = emu.gemms = emu.dtods = emu.records = emu.waits = emu.max_queued = 0;
  return (CxDeviceOps){.dev = &emu, .alloc = e_alloc, .load = e_load, .kernel = e_kernel, .launch = e_launch,
                       .gemm = e_gemm, .htod = e_htod, .dtoh = e_dtoh, .memset0 = e_memset0, .sync = e_sync,
                       .streams = e_streams, .event_create = e_event_create, .event_destroy = e_event_destroy,
                       .event_record = e_event_record, .stream_wait = e_stream_wait, .dtod = e_dtod};
}

/* ---- plans and data --------------------------------------------------------------------- */

static bool make_plan(const char *name, const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' tests/pipeline/tinygpt.model -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 -D bsz=8 "
           "--cluster tests/pipeline/cpu8.cluster --microbatch-size 2 %s -o '%s/%s'",
           pd2bwc, args, tmp, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  return rc == 0;
}

static void setup(void) {
  EXPECT(mkdtemp(tmp) != NULL);
  /* tests/pipeline/common.sh's token file: a sentence repeated, as uint16 bytes */
  static const char text[] = "PipeDream-2BW keeps two weight versions per stage and updates them without "
                             "flushing the pipeline. ";
  char path[256];
  snprintf(path, sizeof path, "%s/train.bin", tmp);
  FILE *f = fopen(path, "wb");
  EXPECT(f != NULL);
  for (int r = 0; f && r < 200; r++)
    for (size_t i = 0; i + 1 < sizeof text; i++) {
      uint16_t tok = (uint8_t)text[i];
      fwrite(&tok, 2, 1, f);
    }
  if (f) fclose(f);
}

/* ---- runs ----------------------------------------------------------------------------------- */

static const char *order_name(EmuOrder o) {
  return o == EMU_IN_ORDER ? "in order" : o == EMU_LOWEST_FIRST ? "lowest stream first" : "highest stream first";
}

/* Trains plan `name` on the emulated device; checks it against the sequential
 * reference. Returns the outcome (caller frees) in *out when out != NULL. */
static bool run_check(const char *name, EmuOrder order, PipePlan **pp, PipeOutcome *out) {
  char dir[256], data[256], err[RT_ERR_LEN];
  snprintf(dir, sizeof dir, "%s/%s", tmp, name);
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  if (!p) fprintf(stderr, "  %s\n", err);
  EXPECT(p != NULL);
  if (!p) return false;
  if (p->rt->train.steps == 0) p->rt->train.steps = STEPS;
  CxDeviceOps ops = emu_ops(order);
  CudaExecOptions o = {.data_path = data, .steps = STEPS, .quiet = true, .gemm = CX_GEMM_PLAN};
  PipeOutcome r;
  uint64_t extra = 0;
  double t0 = now_s();
  int rc = cx_pipe_train(p, &ops, &o, &r, &extra, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  printf("  %s: %d stages x %d replicas, %s, emulated device (%s): %d launches, %d GEMMs, %d device copies, %d "
         "event records, %d stream waits, up to %d operations queued; %.1f s\n", name, p->d, p->w,
         plan_schedule_name(p->schedule), order_name(order), emu.launches, emu.gemms, emu.dtods, emu.records,
         emu.waits, emu.max_queued, now_s() - t0);
  for (int s = 0; !rc && s < p->d; s++) {
    printf("    stage %d: planned part %llu bytes (plan %llu), executor extras <= %llu bytes\n", s,
           (unsigned long long)r.arena_bytes[s], (unsigned long long)r.planned_bytes[s], (unsigned long long)extra);
    EXPECT(r.arena_bytes[s] >= r.planned_bytes[s] && r.arena_bytes[s] < r.planned_bytes[s] + 256);
  }
  EXPECT(emu.gemms > 0 && emu.dtods > 0 && emu.records > 0 && emu.waits >= emu.records);
  if (order != EMU_IN_ORDER) EXPECT(emu.max_queued > 100); /* work really was deferred */
  PipeOptions po = {.data_path = data, .steps = STEPS};
  bool match = false;
  if (!rc) {
    match = pipeline_check_reference(p, &po, &r, TOL, stdout, err, sizeof err);
    if (!match) fprintf(stderr, "  %s\n", err);
    EXPECT(match);
    /* it trained: the loss moved */
    EXPECT(fabs(r.step_loss[STEPS - 1] - r.step_loss[0]) > 10 * TOL * r.step_loss[0]);
  }
  if (out && !rc) *out = r;
  else pipe_outcome_free(&r);
  if (pp && !rc) *pp = p;
  else pipe_plan_free(p);
  return match;
}

static void test_2bw(void) {
  EXPECT(make_plan("p2bw", "--precision fp32 -D clipv=1.0 --stages 4 --replicas 1 --microbatches 4 --schedule 2bw "
                           "--recompute off"));
  PipePlan *p = NULL;
  PipeOutcome r = {0};
  if (!run_check("p2bw", EMU_HIGHEST_FIRST, &p, &r)) return;
  /* the bound discriminates: the same run checked against the vanilla rule differs */
  char data[256], err[RT_ERR_LEN];
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  PipeOptions po = {.data_path = data, .steps = STEPS};
  p->schedule = PS_GPIPE;
  FILE *devnull = fopen("/dev/null", "w");
  bool vanilla = pipeline_check_reference(p, &po, &r, TOL, devnull ? devnull : stdout, err, sizeof err);
  if (devnull) fclose(devnull);
  printf("  2bw run against the vanilla (gpipe) rule: %s\n", vanilla ? "matches (BAD)" : err);
  EXPECT(!vanilla);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
}

static void test_gpipe(void) {
  EXPECT(make_plan("pgpipe", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule gpipe "
                             "--recompute off"));
  run_check("pgpipe", EMU_LOWEST_FIRST, NULL, NULL);
}

/* Through cuda_pipe_main, as pd2bwrun --backend cuda --reference --log-json runs it:
 * status 0 only when the reference check matches; a log line per step. */
static void test_1f1b(void) {
  EXPECT(make_plan("p1f1b", "--precision fp32 -D clipv=1.0 --stages 3 --replicas 1 --microbatches 4 --schedule 1f1b "
                            "--recompute on"));
  char dir[256], data[256], log[256];
  snprintf(dir, sizeof dir, "%s/p1f1b", tmp);
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  snprintf(log, sizeof log, "%s/p1f1b.jsonl", tmp);
  CxDeviceOps ops = emu_ops(EMU_HIGHEST_FIRST);
  CudaExecOptions o = {.data_path = data, .steps = STEPS, .quiet = false, .gemm = CX_GEMM_PLAN, .log_json = log,
                       .reference = true, .ref_tol = TOL};
  double t0 = now_s();
  int rc = cuda_pipe_main("test_cudapipe_emu", dir, &ops, "emulated", &o);
  printf("  p1f1b (recompute on), emulated device (%s): %d launches, %d device copies, %d stream waits; %.1f s\n",
         order_name(EMU_HIGHEST_FIRST), emu.launches, emu.dtods, emu.waits, now_s() - t0);
  EXPECT(rc == 0);
  EXPECT(emu.dtods > 0 && emu.waits > 0 && emu.max_queued > 100);
  FILE *f = fopen(log, "r");
  EXPECT(f != NULL);
  int lines = 0;
  for (int c; f && (c = fgetc(f)) != EOF;) lines += c == '\n';
  if (f) fclose(f);
  EXPECT(lines == STEPS);
}

/* pipedream: a weight version per stage lag, stashed; the reference is the plan's
 * own stage programs run sequentially with the per-stage delay rule. */
static void test_pipedream(void) {
  EXPECT(make_plan("ppd", "--precision fp32 -D clipv=1.0 --stages 3 --replicas 1 --microbatches 4 --schedule pipedream "
                          "--recompute off"));
  run_check("ppd", EMU_LOWEST_FIRST, NULL, NULL);
}

/* A device table without streams/events, a plan without launch lists: messages. */
static void test_errors(void) {
  EXPECT(make_plan("pcpu", "--stages 2 --replicas 1 --microbatches 4 --schedule gpipe --backend cpu"));
  char dir[256], data[256], err[RT_ERR_LEN] = "";
  snprintf(dir, sizeof dir, "%s/pcpu", tmp);
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  if (!p) return;
  CudaExecOptions o = {.data_path = data, .steps = 1, .quiet = true};
  PipeOutcome r;
  CxDeviceOps ops = emu_ops(EMU_IN_ORDER);
  EXPECT(cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err) == 1);
  printf("  %s\n", err);
  EXPECT(strstr(err, "stage0.launch.json") != NULL || strstr(err, "kernels") != NULL);
  ops.streams = NULL;
  EXPECT(cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err) == 1);
  printf("  %s\n", err);
  EXPECT(strstr(err, "streams") != NULL);
  pipe_plan_free(p);
}

/* Stage 1 told (by an edited plan.json) that nothing comes in from stage 0: stage 0's
 * first send never matches and everything else ends up waiting on it. The run stops
 * with every stage's blocked instruction, not a hang. */
static void test_stall(void) {
  EXPECT(make_plan("pstall", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule gpipe"));
  char dir[256], path[300], data[256], err[RT_ERR_LEN] = "", ierr[IO_ERR_LEN];
  snprintf(dir, sizeof dir, "%s/pstall", tmp);
  snprintf(path, sizeof path, "%s/plan.json", dir);
  snprintf(data, sizeof data, "%s/train.bin", tmp);
  size_t len = 0;
  char *text = io_read_all(path, &len, ierr, sizeof ierr);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  cJSON *st1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "stages"), 1);
  cJSON *pipe = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st1, "program"), "pipeline");
  cJSON *bnd = cJSON_GetObjectItemCaseSensitive(pipe, "boundary");
  int removed = 0;
  for (int i = cJSON_GetArraySize(bnd) - 1; i >= 0; i--) {
    cJSON *role = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bnd, i), "role");
    if (cJSON_IsString(role) && strcmp(role->valuestring, "act_in") == 0) cJSON_DeleteItemFromArray(bnd, i), removed++;
  }
  EXPECT(removed > 0);
  char *out = cJSON_Print(root);
  FILE *f = out ? fopen(path, "w") : NULL;
  EXPECT(f != NULL);
  if (f) {
    fputs(out, f);
    fclose(f);
  }
  free(out);
  cJSON_Delete(root);
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  if (!p) fprintf(stderr, "  %s\n", err);
  EXPECT(p != NULL);
  if (!p) return;
  CudaExecOptions o = {.data_path = data, .steps = 1, .quiet = true};
  PipeOutcome r;
  CxDeviceOps ops = emu_ops(EMU_LOWEST_FIRST);
  EXPECT(cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err) == 1);
  printf("  %s\n", err);
  EXPECT(strstr(err, "no stage can proceed") != NULL && strstr(err, "stage 0 replica 0 at SEND_ACT mb=1") != NULL);
  pipe_plan_free(p);
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: test_cudapipe_emu PD2BWC [all|2bw|gpipe|1f1b|pipedream|errors]\n");
    return 2;
  }
  pd2bwc = argv[1];
  char cache[128];
  snprintf(cache, sizeof cache, "/tmp/pd2bw-test-cache-%ld", (long)getuid());
  setenv("PD2BW_CACHE", cache, 0);
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  setup();
  const char *part = argc > 2 ? argv[2] : "all";
  bool all = strcmp(part, "all") == 0;
  if (all || strcmp(part, "2bw") == 0) RUN(test_2bw);
  if (all || strcmp(part, "gpipe") == 0) RUN(test_gpipe);
  if (all || strcmp(part, "1f1b") == 0) RUN(test_1f1b);
  if (all || strcmp(part, "pipedream") == 0) RUN(test_pipedream);
  if (all || strcmp(part, "errors") == 0) {
    RUN(test_errors);
    RUN(test_stall);
  }
  for (int s = 0; s < EMU_MAX_STREAMS; s++) free(emu.q[s].op);
  free(emu.arena);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return TEST_REPORT();
}
