/* runtime/cuda/exec/cuda_exec_device.c — a stage on a GPU as the plan interpreter's
 * device (runtime/exec/exec.h ExecDeviceOps) over a CudaDeviceOps table (a real GPU, or
 * the tests' emulator): the stage's launch lists (cx_program_run: passes as CUDA
 * graphs), device copies, the deterministic two-phase sum of squares and the optimizer
 * (AdamW as one multi-tensor launch that also writes the bf16 weight copy of the
 * version it writes, 2bw's weight prediction fused in), the norm and the update as CUDA
 * graphs of their own with their per-step values in device memory. Everything runs on
 * stream 0 in issue order, a step's passes without a host wait (losses and out-of-range
 * ids are read at the next one); memory is ONE ops->alloc, the interpreter's arena at
 * the plan's offsets and this device's extras after it. docs/gpu.md ("The device")
 * has the step's waits, the extras and what single-GPU pipeline mode's ranks add. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec/cuda_adamw_multi.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/cuda/exec/cuda_exec_fold.h"
#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_rank.h"

#define CD_BLOCK 256
#define CD_MAX_GRID 4096 /* grid-stride kernels: enough blocks to fill a GPU */
#define CD_GRAPHS 8      /* norm and update graphs per device (pointer sets), past it eager */
#define CD_DATA_SLOTS 4  /* batches of input images on the device */
#define CD_LOSSES 1024   /* losses awaiting the next host wait; a full ring waits early */
#define CD_VERSIONS 2    /* versions with a bf16 copy: the one-stage trainer's (a rank's: set_versions) */

typedef struct CudaDevice {
  ExecDevice base;
  int stage; /* the plan's, for messages */
  const CudaDeviceOps *ops;
  const RtStage *st;
  CxProgram *prog;
  GpuPtr scratch, parts, norm, scalars, losses, data;
  int64_t nparts; /* partials the norm can take: Σ grids of every parameter */
  int T;
  int64_t batch_samples, images; /* samples a data slot holds; their images (of st->b each) */
  uint64_t image_bytes;          /* one image: the inputs block, 256-aligned */
  char *host_inputs;             /* a data slot's images, staged */
  const DataLoader *slot_dl[CD_DATA_SLOTS];
  int64_t slot_batch[CD_DATA_SLOTS];
  int next_slot;
  double *pending[CD_LOSSES]; /* where each loss in the ring goes */
  int npending;
  float *host_losses;
  int64_t late_bad;           /* read from the counter, not yet reported */
  uint64_t bytes;             /* the one allocation: the arena and the extras */
  /* bf16 lists: the GEMMs read a bf16 copy of the weights (block params_bf16), one per
   * weight version, cast again before a pass reads a version written since */
  uint64_t p16_bytes;
  GpuPtr p16;
  struct {
    const char *w; /* the version's params block; NULL: free */
    bool dirty;
  } ver[PIPE_MAX_SLOTS];
  int nver; /* versions with a bf16 copy */
  CxFold *fold; /* the versions hold the copies (cuda_exec_fold.h); NULL: beside them, or none */
  int32_t *tok_tmp, *tgt_tmp;
  /* AdamW as one multi-tensor launch (cuda_adamw_multi.h): the table of the
   * parameters the first update it serves lists, uploaded then; stepped[k] says how
   * parameter k is in it (one without a gradient is copied into the version written,
   * or left in place, its bf16 copy written either way) */
  GpuPtr adamw;
  uint64_t adamw_bytes;
  CxAdamwTable adamw_tab;
  bool adamw_ready;
  char *stepped; /* per parameter: 0 not in the table, 1 without a gradient, 2 stepped */
  CxStepGraph g_norm[CD_GRAPHS], g_upd[CD_GRAPHS]; /* keyed by the pointers and sizes issued */
  CxGraphStats upd_stats, norm_stats;
  void *origin, **marks; /* --trace: the run's origin event; two events per mark */
  int nmarks;
  void (*at_end)(void *ctx, ExecDevice *d), *end_ctx; /* cx_exec_device_at_end */
  /* what the graphs' issue functions read */
  const float *const *sq_x;
  const int64_t *sq_n;
  int sq_count;
  const ExecOptStep *os;
  int os_count;
  bool os_multi;      /* the update is one multi-tensor AdamW launch: os_launch */
  bool os_one;        /* fold: one multi-tensor launch per step (cx_fold_one_launches) */
  CxAdamwLaunch os_launch;
} CudaDevice;

static CudaDevice *cud(ExecDevice *d) { return (CudaDevice *)(void *)d; }
static GpuPtr dp(const void *p) { return (GpuPtr)(uintptr_t)p; }

static unsigned grid_for(int64_t n) {
  int64_t g = (n + CD_BLOCK - 1) / CD_BLOCK;
  if (g < 1) g = 1;
  return (unsigned)(g > CD_MAX_GRID ? CD_MAX_GRID : g);
}

/* Library kernel k (resolved once by cx_program_load). */
static void launch(CudaDevice *c, CxLibKernel k, unsigned grid, unsigned block, void **args) {
  c->ops->launch(c->ops->dev, 0, cx_program_lib_kernel(c->prog, k), grid, block, args);
}

/* The one allocation's layout for an arena of `bytes`: the extras' offsets into off
 * (scratch, parts, norm, scalars, losses, data, p16, adamw); returns the total. */
static uint64_t layout(const CudaDevice *c, uint64_t bytes, uint64_t off[8]) {
  uint64_t at = rt_align256(bytes);
  off[0] = at;
  off[1] = (at += rt_align256((uint64_t)cx_program_block(c->prog, CX_SCRATCH)));
  off[2] = (at += rt_align256((uint64_t)(c->nparts * 8)));
  off[3] = (at += 256);
  off[4] = (at += rt_align256(sizeof(CxStepScalars)));
  off[5] = (at += rt_align256(CD_LOSSES * 4));
  off[6] = (at += CD_DATA_SLOTS * (uint64_t)c->images * c->image_bytes);
  off[7] = (at += (uint64_t)c->nver * rt_align256(c->p16_bytes));
  return at + c->adamw_bytes;
}

static char *cd_arena_alloc(ExecDevice *d, uint64_t bytes, const char *what) {
  CudaDevice *c = cud(d);
  uint64_t off[8], at = layout(c, bytes, off);
  c->bytes = at;
  GpuPtr base;
  char err[RT_ERR_LEN];
  if (!c->ops->alloc(c->ops->dev, (size_t)at, &base, err, sizeof err)) {
    fprintf(stderr, "pd2bwrun: %s: %s\n", what, err);
    return NULL;
  }
  c->ops->memset0(c->ops->dev, 0, base, (size_t)at);
  c->scratch = base + off[0];
  c->parts = base + off[1];
  c->norm = base + off[2];
  c->scalars = base + off[3];
  c->losses = base + off[4];
  c->data = base + off[5];
  c->p16 = base + off[6];
  c->adamw = base + off[7];
  if (c->fold) cx_fold_set_tables(c->fold, c->adamw + cx_adamw_stage_table_bytes(c->st));
  return (char *)(uintptr_t)base;
}

static void cd_arena_free(ExecDevice *d, char *arena) { (void)d, (void)arena; /* the table's: as long as it */ }

/* After a host wait (the device idle): the ring's losses to where they were asked
 * for, the id counter's count kept for late_bad_ids and the counter cleared. */
static void land(CudaDevice *c) {
  const CudaDeviceOps *ops = c->ops;
  if (c->npending) {
    ops->dtoh(ops->dev, c->host_losses, c->losses, (size_t)c->npending * 4);
    for (int i = 0; i < c->npending; i++) *c->pending[i] = c->host_losses[i];
    c->npending = 0;
  }
  GpuPtr bad = c->scratch + (GpuPtr)cx_program_bad_ids_offset(c->prog);
  uint64_t n = 0;
  ops->dtoh(ops->dev, &n, bad, 8);
  if (n) ops->memset0(ops->dev, 0, bad, 8);
  c->late_bad += (int64_t)n;
}

static void cd_flush(ExecDevice *d) {
  CudaDevice *c = cud(d);
  c->ops->sync(c->ops->dev);
  land(c);
}

static int64_t cd_late_bad_ids(ExecDevice *d) {
  int64_t n = cud(d)->late_bad;
  cud(d)->late_bad = 0;
  return n;
}

/* Marks the weight version holding [at, at + bytes) as written: its bf16 copy is stale. */
static void written(CudaDevice *c, const void *at, uint64_t bytes) {
  const char *x = at;
  for (int v = 0; v < c->nver; v++)
    if (c->ver[v].w && x < c->ver[v].w + c->st->blocks[BUF_PARAMS] && x + bytes > c->ver[v].w) c->ver[v].dirty = true;
}

/* The slot of the weight version at w, registered at first sight (its copy stale). */
static int version_of(CudaDevice *c, const char *w) {
  int v = 0;
  while (v < c->nver && c->ver[v].w && c->ver[v].w != w) v++;
  PD_CHECK(v < c->nver, "(more than %d weight versions with a bf16 copy)", c->nver);
  if (!c->ver[v].w) c->ver[v].w = w, c->ver[v].dirty = true;
  return v;
}

/* The bf16 copy of the weight version at w, cast again first when it was written
 * since (stream-ordered, before the pass that reads it). The multi-tensor AdamW
 * writes the copy of the version it writes: no cast inside a step then, only after a
 * load or another write. */
static GpuPtr bf16_copy(CudaDevice *c, const char *w) {
  int v = version_of(c, w);
  GpuPtr w16 = c->p16 + (GpuPtr)v * rt_align256(c->p16_bytes), src = dp(w);
  if (c->ver[v].dirty) {
    int64_t n = c->st->blocks[BUF_PARAMS] / 4;
    void *args[] = {&w16, &src, &n};
    launch(c, CX_K_CAST_BF16, grid_for((n + 7) / 8), CD_BLOCK, args);
    c->ver[v].dirty = false;
  }
  return w16;
}

static void pass(ExecDevice *d, ExecPass *p, CxPass which) {
  CudaDevice *c = cud(d);
  CxReplay r = {.seed = p->seed, .microbatch = (uint32_t)p->mb, .training = p->training, .stream = 0};
  for (int k = BUF_PARAMS; k < BUF_CLASS_COUNT; k++) r.base[k] = dp(p->block[k]);
  r.base[CX_SCRATCH] = c->scratch;
  if (c->fold) r.base[CX_PARAMS16] = cx_fold_pass_base(c->fold, p->block[BUF_PARAMS]);
  else if (c->p16_bytes) r.base[CX_PARAMS16] = bf16_copy(c, p->block[BUF_PARAMS]);
  cx_program_run(c->prog, which, &r);
  p->bad_ids = 0; /* counted on the device: late_bad_ids */
  if (p->loss && which == CX_FORWARD) { /* into the ring, stream-ordered */
    if (c->npending == CD_LOSSES) cd_flush(d);
    GpuPtr dst = c->losses + (GpuPtr)c->npending * 4, src = c->scratch + (GpuPtr)cx_program_loss_offset(c->prog);
    int64_t one = 1;
    void *args[] = {&dst, &src, &one};
    launch(c, CX_K_COPY, 1, 32, args);
    c->pending[c->npending++] = p->loss;
  }
}

static void cd_forward(ExecDevice *d, ExecPass *p) { pass(d, p, CX_FORWARD); }
static void cd_backward(ExecDevice *d, ExecPass *p) { pass(d, p, CX_BACKWARD); }

/* The data slot holding batch `batch` of dl, uploading it first (one copy: it waits
 * for the device, so the slot it replaces is no longer read). */
static int data_slot(CudaDevice *c, DataLoader *dl, int64_t batch) {
  for (int s = 0; s < CD_DATA_SLOTS; s++)
    if (c->slot_dl[s] == dl && c->slot_batch[s] == batch) return s;
  int s = c->next_slot;
  c->next_slot = (s + 1) % CD_DATA_SLOTS;
  int64_t b = c->st->b;
  for (int64_t i = 0; i < c->images; i++)
    pipe_fill_samples(c->st, c->host_inputs + (uint64_t)i * c->image_bytes, dl, batch * c->batch_samples + i * b, b,
                      c->T, c->tok_tmp, c->tgt_tmp);
  GpuPtr at = c->data + (GpuPtr)s * (GpuPtr)c->images * c->image_bytes;
  c->ops->htod(c->ops->dev, at, c->host_inputs, (size_t)((uint64_t)c->images * c->image_bytes));
  land(c); /* the device was waited for: what the ring holds is there */
  c->slot_dl[s] = dl;
  c->slot_batch[s] = batch;
  return s;
}

static void cd_load_samples(ExecDevice *d, char *inputs, DataLoader *dl, int64_t first, int64_t b) {
  CudaDevice *c = cud(d);
  if (!c->T) return;
  bool image = b == c->st->b && first % b == 0; /* (no '%' in PD_CHECK's condition: it is a format) */
  PD_CHECK(image, "(samples %lld + %lld: not an image of the stage)", (long long)first, (long long)b);
  int s = data_slot(c, dl, first / c->batch_samples);
  int64_t i = first % c->batch_samples / b;
  GpuPtr src = c->data + ((GpuPtr)s * (GpuPtr)c->images + (GpuPtr)i) * c->image_bytes;
  c->ops->dtod(c->ops->dev, 0, dp(inputs), src, (size_t)c->st->blocks[BUF_INPUTS]);
}

static void cd_copy(ExecDevice *d, void *dst, const void *src, uint64_t bytes) {
  PD_CHECK(!cud(d)->fold || !(cx_fold_touches(cud(d)->fold, dst, bytes) || cx_fold_touches(cud(d)->fold, src, bytes)),
           "(a device copy of a weight version that holds its bf16 copies)");
  if (bytes) cud(d)->ops->dtod(cud(d)->ops->dev, 0, dp(dst), dp(src), (size_t)bytes);
  written(cud(d), dst, bytes);
}

static void cd_zero(ExecDevice *d, void *dst, uint64_t bytes) {
  if (bytes) cud(d)->ops->memset0(cud(d)->ops->dev, 0, dp(dst), (size_t)bytes);
}

static void cd_upload(ExecDevice *d, void *dst, const void *host, uint64_t bytes) {
  if (cud(d)->fold && cx_fold_upload(cud(d)->fold, dst, host, bytes)) return;
  if (bytes) cud(d)->ops->htod(cud(d)->ops->dev, dp(dst), host, (size_t)bytes);
  written(cud(d), dst, bytes);
}

static void cd_download(ExecDevice *d, void *host, const void *src, uint64_t bytes) {
  if (cud(d)->fold && cx_fold_download(cud(d)->fold, host, src, bytes)) return;
  if (bytes) cud(d)->ops->dtoh(cud(d)->ops->dev, host, dp(src), (size_t)bytes);
}

/* dst = ((src[0] + src[1]) + ...) + src[n-1] per element, in float, in that order:
 * pkc_sum_ordered_f32, which reads every source of an element before writing it, so
 * dst may be any source (a tied group's member sums into its own, the all-reduce into
 * src[0]). CD_SUM_SRCS sources a launch; more (a replica all-reduce of more ranks)
 * continue from dst in order, so dst may then only be one of the first launch's
 * sources (a tied group has at most PLAN_MAX_TIED_SEGS: one launch). */
#define CD_SUM_SRCS 8 /* the kernel's source parameters (PKC_SUM_SRCS) */
_Static_assert(PLAN_MAX_TIED_SEGS <= CD_SUM_SRCS, "a tied group's sum is one launch");
static void cd_sum_ordered(ExecDevice *d, float *dst, const float *const *src, int n, int64_t numel) {
  CudaDevice *c = cud(d);
  GpuPtr y = dp(dst), s[CD_SUM_SRCS];
  for (int q = CD_SUM_SRCS; q < n; q++)
    PD_CHECK(dst != src[q], "(an ordered sum into its source %d of %d, past the first launch's)", q, n);
  for (int q = 0; q < n;) {
    int k = 0;
    if (q > 0) s[k++] = y; /* the sum so far */
    while (k < CD_SUM_SRCS && q < n) s[k++] = dp(src[q++]);
    void *args[3 + CD_SUM_SRCS] = {&y, &k, &numel};
    for (int i = 0; i < CD_SUM_SRCS; i++) args[3 + i] = &s[i < k ? i : 0]; /* unused: not read */
    launch(c, CX_K_SUM_ORDERED, grid_for(numel), CD_BLOCK, args);
  }
}

/* ---- the step's graphs ----------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

/* The graph of `set` keyed `key` (or a free one, first sighting), through
 * cx_step_graph_run; eager when all CD_GRAPHS are taken by other keys. */
static void run_graph(CudaDevice *c, CxStepGraph *set, uint64_t key, void (*issue)(void *), CxGraphStats *stats) {
  CxStepGraph *g = NULL;
  for (int i = 0; i < CD_GRAPHS && !g; i++)
    if (set[i].seen && set[i].key == key) g = &set[i];
  for (int i = 0; i < CD_GRAPHS && !g; i++)
    if (!set[i].seen) g = &set[i];
  if (g && !g->seen) g->key = key;
  cx_step_graph_run(c->ops, 0, g, issue, c, stats, c->stage, 0);
}

/* Σ x² of every tensor: per-block partials of each in turn, then one sum of them all
 * in order (the one-stage GPU trainer's norm, bit for bit). */
static void issue_norm(void *arg) { /* a CudaDevice */
  CudaDevice *c = arg;
  GpuPtr part = c->parts;
  int64_t np = 0;
  for (int i = 0; i < c->sq_count; i++) {
    GpuPtr x = dp(c->sq_x[i]);
    int64_t n = c->sq_n[i];
    unsigned g = grid_for(n);
    void *args[] = {&part, &x, &n};
    launch(c, CX_K_SUMSQ_PARTIAL, g, CD_BLOCK, args);
    part += (GpuPtr)g * 8;
    np += g;
  }
  GpuPtr out = c->norm, parts = c->parts;
  int npi = (int)np;
  void *args[] = {&out, &parts, &npi};
  launch(c, CX_K_SUMSQ_FINAL, 1, 32, args);
}

static double cd_sumsq(ExecDevice *d, const float *const *x, const int64_t *numel, int n) {
  CudaDevice *c = cud(d);
  int64_t np = 0;
  uint64_t key = 14695981039346656037ull;
  for (int i = 0; i < n; i++) {
    np += grid_for(numel[i]);
    key = mix(mix(key, dp(x[i])), (uint64_t)numel[i]);
  }
  PD_CHECK(np <= c->nparts, "(%lld norm partials, room for %lld)", (long long)np, (long long)c->nparts);
  c->sq_x = x;
  c->sq_n = numel;
  c->sq_count = n;
  run_graph(c, c->g_norm, key, issue_norm, &c->norm_stats);
  double ss = 0;
  c->ops->dtoh(c->ops->dev, &ss, c->norm, 8);
  land(c); /* the device was waited for: the step's losses and id count */
  return ss;
}

/* The optimizer kernels of every step in c->os (or the one multi-tensor AdamW launch
 * c->os_launch), their per-step values read from c->scalars. */
static void issue_update(void *arg) { /* a CudaDevice */
  CudaDevice *c = arg;
  GpuPtr sc = c->scalars;
  if (c->os_multi) {
    cx_adamw_multi_launch(c->ops, cx_program_lib_kernel(c->prog, CX_K_ADAMW_MULTI), 0, &c->adamw_tab, &c->os_launch);
    return;
  }
  if (c->os_one) cx_fold_issue(c->fold);
  for (int i = 0; !c->os_one && i < c->os_count; i++) {
    const ExecOptStep *s = &c->os[i];
    const TrainConfig *tc = s->tc;
    GpuPtr wout = dp(s->wout), w = dp(s->win), g = dp(s->g), m = dp(s->m), v = dp(s->v);
    int64_t n = s->param->numel;
    int decay = s->param->decay;
    double b1 = tc->beta1, b2 = tc->beta2, eps = tc->eps, wd = tc->weight_decay;
    if (!s->g) { /* no gradient: its value into the version written */
      if (wout != w) c->ops->dtod(c->ops->dev, 0, wout, w, (size_t)s->param->bytes);
    } else if (tc->optimizer == OPT_SGD) { /* momentum: beta1 */
      void *args[] = {&wout, &w, &g, &m, &n, &b1, &wd, &decay, &sc};
      launch(c, CX_K_SGD_DEV, grid_for(n), CD_BLOCK, args);
    } else {
      void *args[] = {&wout, &w, &g, &m, &v, &n, &b1, &b2, &eps, &wd, &decay, &sc};
      launch(c, CX_K_ADAMW_DEV, grid_for(n), CD_BLOCK, args);
    }
    if (s->master) { /* weight prediction: master = W(t+1), wout predicted */
      GpuPtr ma = dp(s->master);
      void *args[] = {&wout, &ma, &n, &sc};
      launch(c, CX_K_PREDICT_DEV, grid_for((n + 3) / 4), CD_BLOCK, args);
    }
  }
}

/* Whether steps s[0..n) can be the multi-tensor AdamW launch, and its blocks in *a
 * (cx_adamw_multi_match). Its table is the parameters of the first such call (a
 * pipeline rank's leave out 2bw's deferred tied ones, stepped apart), each with a
 * gradient or not (g NULL: its value into the version written); a later call must
 * list the same. Otherwise (and for SGD) the per-tensor kernels run, and a bf16 copy
 * is cast again before a pass reads it. */
static bool multi_launch(CudaDevice *c, const ExecOptStep *s, int n, CxAdamwLaunch *a) {
  const RtStage *st = c->st;
  if (!c->stepped) return false;
  char *in = pd_calloc((size_t)st->nparams + 1, 1); /* 0: not listed, 1: no gradient, 2: stepped */
  bool ok = cx_adamw_multi_match(st, s, n, in, a);
  if (ok && !c->adamw_ready) {
    c->adamw_tab = cx_adamw_stage_table(c->ops, c->adamw, st, in, c->fold ? cx_fold_flags(c->fold) : NULL);
    memcpy(c->stepped, in, (size_t)st->nparams);
    c->adamw_ready = true;
  }
  ok = ok && memcmp(c->stepped, in, (size_t)st->nparams) == 0;
  free(in);
  if (!ok) return false;
  const TrainConfig *tc = s[0].tc;
  if (c->p16_bytes) a->w16 = c->p16 + (GpuPtr)version_of(c, (const char *)(uintptr_t)a->w_out) * rt_align256(c->p16_bytes);
  a->scalars = c->scalars;
  a->beta1 = tc->beta1, a->beta2 = tc->beta2, a->eps = tc->eps, a->weight_decay = tc->weight_decay;
  return true;
}

static void cd_opt_step(ExecDevice *d, const ExecOptStep *s, int n) {
  CudaDevice *c = cud(d);
  uint64_t key = 14695981039346656037ull;
  for (int i = 0; i < n; i++) {
    PD_CHECK(s[i].t == s[0].t && s[i].scale == s[0].scale && s[i].tc == s[0].tc && s[i].fresh == s[0].fresh &&
                 s[i].predict == s[0].predict,
             "(one step's values)");
    key = mix(mix(mix(mix(key, dp(s[i].wout)), dp(s[i].win)), dp(s[i].g)), dp(s[i].master));
  }
  const TrainConfig *tc = s[0].tc; /* a fresh gradient (2bw's flushed start) is not compensated */
  CxStepScalars sv = {.lr = rt_lr_at(tc, s[0].t), .grad_scale = s[0].scale, .t = s[0].t + 1,
                      .delay_comp = s[0].fresh ? 0 : tc->delay_comp, .predict = s[0].predict};
  c->ops->htod(c->ops->dev, c->scalars, &sv, sizeof sv); /* waits: no update reads the last ones still */
  c->os = s;
  c->os_count = n;
  if (c->fold) cx_fold_step_begin(c->fold);
  c->os_multi = multi_launch(c, s, n, &c->os_launch);
  if ((c->os_one = c->fold && !c->os_multi)) cx_fold_one_launches(c->fold, s, n, c->scalars);
  run_graph(c, c->g_upd, key, issue_update, &c->upd_stats);
  if (c->os_multi && c->p16_bytes) /* every parameter's bf16 copy was written with it */
    c->ver[version_of(c, (const char *)(uintptr_t)c->os_launch.w_out)].dirty = false;
  else
    for (int i = 0; i < n; i++)
      if (s[i].g || s[i].wout != s[i].win || s[i].master) written(c, s[i].wout, (uint64_t)s[i].param->bytes);
  for (int i = 0; i < n; i++) /* the master's copy (if it has one) is cast when a pass reads it */
    if (s[i].master) written(c, s[i].master, (uint64_t)s[i].param->bytes);
  for (int v = 0; c->p16_bytes && !c->os_multi && v < c->nver; v++) /* the step's casts with the step */
    if (c->ver[v].w && c->ver[v].dirty) bf16_copy(c, c->ver[v].w);
}

/* --trace: events on the stream, read against the origin (cx_exec_device_set_origin). */
static void cd_mark(ExecDevice *d, int i, bool end) {
  CudaDevice *c = cud(d);
  if (!c->origin) return;
  if (i >= c->nmarks) {
    int n = c->nmarks;
    c->nmarks = i + 1 > 2 * n ? i + 1 : 2 * n;
    c->marks = pd_realloc(c->marks, (size_t)c->nmarks * 2 * sizeof *c->marks);
    memset(c->marks + 2 * n, 0, (size_t)(c->nmarks - n) * 2 * sizeof *c->marks);
  }
  void **e = &c->marks[2 * i + end];
  if (!*e) *e = c->ops->event_create(c->ops->dev);
  c->ops->event_record(c->ops->dev, *e, 0);
}

static double cd_mark_time(ExecDevice *d, int i, bool end) {
  CudaDevice *c = cud(d);
  void *e = c->origin && i < c->nmarks ? c->marks[2 * i + end] : NULL;
  return e ? c->ops->event_ms(c->ops->dev, c->origin, e) * 1e-3 : 0;
}

static void cd_destroy(ExecDevice *d) {
  CudaDevice *c = cud(d);
  if (c->at_end) c->at_end(c->end_ctx, d);
  for (int i = 0; i < 2 * c->nmarks; i++)
    if (c->marks[i]) c->ops->event_destroy(c->ops->dev, c->marks[i]);
  free(c->marks);
  for (int i = 0; i < CD_GRAPHS; i++) {
    if (c->g_norm[i].graph) c->ops->graph_destroy(c->ops->dev, c->g_norm[i].graph);
    if (c->g_upd[i].graph) c->ops->graph_destroy(c->ops->dev, c->g_upd[i].graph);
  }
  cx_program_free(c->prog);
  free(c->host_inputs);
  free(c->host_losses);
  free(c->tok_tmp);
  free(c->tgt_tmp);
  free(c->stepped);
  cx_fold_destroy(c->fold);
  free(c);
}

static void cd_versions(ExecDevice *d, char *const *w, int n, int master) {
  if (cud(d)->fold) cx_fold_versions(cud(d)->fold, w, n, master);
}

static const ExecDeviceOps cuda_ops = {
    .name = "cuda", .arena_alloc = cd_arena_alloc, .arena_free = cd_arena_free, .forward = cd_forward,
    .backward = cd_backward, .load_samples = cd_load_samples, .copy = cd_copy, .zero = cd_zero,
    .upload = cd_upload, .download = cd_download, .sum_ordered = cd_sum_ordered, .sumsq = cd_sumsq,
    .opt_step = cd_opt_step, .flush = cd_flush, .late_bad_ids = cd_late_bad_ids, .destroy = cd_destroy,
    .mark = cd_mark, .mark_time = cd_mark_time, .versions = cd_versions,
};

ExecDevice *cx_exec_device(const CudaDeviceOps *ops, const RtPlan *plan, int stage, GemmType gemm,
                           int64_t batch_samples, char *err, size_t errlen) {
  const RtStage *st = &plan->stages[stage];
  CxProgram *prog = cx_program_load(ops, plan->dir, stage, gemm, err, errlen);
  if (!prog) return NULL;
  for (int k = BUF_PARAMS; k < BUF_CLASS_COUNT; k++)
    if (cx_program_block(prog, k) != st->blocks[k]) {
      snprintf(err, errlen, "%s: the launch list's %s block (%lld bytes) is not the C program's (%lld): a mixed plan",
               plan->dir, buf_class_name((BufClass)k), (long long)cx_program_block(prog, k), (long long)st->blocks[k]);
      cx_program_free(prog);
      return NULL;
    }
  if (st->has_loss && cx_program_loss_offset(prog) < 0) {
    snprintf(err, errlen, "%s: the launch list of stage %d has no loss", plan->dir, stage);
    cx_program_free(prog);
    return NULL;
  }
  CudaDevice *c = pd_calloc(1, sizeof *c);
  c->stage = stage;
  c->nver = CD_VERSIONS;
  c->base.ops = &cuda_ops;
  c->ops = ops;
  c->st = st;
  c->prog = prog;
  for (int k = 0; k < st->nparams; k++) c->nparts += grid_for(st->params[k].numel);
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER && st->inputs[k].rank == 2) c->T = (int)st->inputs[k].shape[1];
  c->batch_samples = batch_samples;
  c->images = batch_samples / st->b;
  c->image_bytes = rt_align256((uint64_t)st->blocks[BUF_INPUTS]);
  for (int s = 0; s < CD_DATA_SLOTS; s++) c->slot_batch[s] = -1;
  c->host_inputs = pd_calloc((size_t)((uint64_t)c->images * c->image_bytes) + 1, 1);
  c->host_losses = pd_calloc(CD_LOSSES, sizeof(float));
  c->tok_tmp = pd_malloc((size_t)(c->T + 1) * sizeof(int32_t));
  c->tgt_tmp = pd_malloc((size_t)(c->T + 1) * sizeof(int32_t));
  c->p16_bytes = (uint64_t)cx_program_block(prog, CX_PARAMS16);
  if (st->nparams) { /* room for the multi-tensor AdamW's table */
    c->adamw_bytes = cx_adamw_stage_table_bytes(st);
    c->stepped = pd_calloc((size_t)st->nparams, 1);
  }
  bool bad;
  if ((c->fold = cx_fold_create(ops, prog, st, err, errlen, &bad))) /* no copy beside the versions */
    c->p16_bytes = 0, c->adamw_bytes += cx_fold_table_bytes(c->fold);
  if (bad) return cd_destroy(&c->base), NULL;
  return &c->base;
}

/* ---- what the runners ask of it (cuda_exec.h) ---- */
static const CudaDevice *ccud(const ExecDevice *d) { return (const CudaDevice *)(const void *)d; }
CxGraphStats cx_exec_device_pass_stats(const ExecDevice *d) { return cx_program_graph_stats(ccud(d)->prog); }
CxGraphStats cx_exec_device_update_stats(const ExecDevice *d) { return ccud(d)->upd_stats; }
CxGraphStats cx_exec_device_norm_stats(const ExecDevice *d) { return ccud(d)->norm_stats; }
CxProgram *cx_exec_device_program(ExecDevice *d) { return cud(d)->prog; }
uint64_t cx_exec_device_bytes(const ExecDevice *d) { return ccud(d)->bytes; }
GemmType cx_exec_device_gemm_type(const ExecDevice *d) { return cx_program_gemm_type(ccud(d)->prog); }
const CudaDeviceOps *cx_exec_device_ops(const ExecDevice *d) { return ccud(d)->ops; }
void cx_exec_device_set_origin(ExecDevice *d, void *origin) { cud(d)->origin = origin; }
void cx_exec_device_at_end(ExecDevice *d, void (*fn)(void *ctx, ExecDevice *d), void *ctx) {
  cud(d)->at_end = fn, cud(d)->end_ctx = ctx;
}
uint64_t cx_exec_device_bf16_bytes(const ExecDevice *d) { return (uint64_t)ccud(d)->nver * rt_align256(ccud(d)->p16_bytes); }
void cx_exec_device_set_versions(ExecDevice *d, int n) {
  PD_CHECK(n >= 1 && n <= PIPE_MAX_SLOTS && !cud(d)->bytes, "(%d weight versions, before the arena)", n);
  cud(d)->nver = n;
}
GpuPtr cx_exec_device_bf16_copy(ExecDevice *d, const void *w, bool *stale) {
  CudaDevice *c = cud(d);
  if (!c->p16_bytes) return 0;
  int v = version_of(c, w);
  *stale = c->ver[v].dirty;
  return c->p16 + (GpuPtr)v * rt_align256(c->p16_bytes);
}
uint64_t cx_exec_device_need(const ExecDevice *d, uint64_t arena_bytes) {
  uint64_t off[8];
  return layout(ccud(d), arena_bytes, off);
}
