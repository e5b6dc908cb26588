/* runtime/cuda/exec/cuda_exec_fold.c — weight versions that hold their bf16 copies
 * (cuda_exec_fold.h). */
#include "runtime/cuda/exec/cuda_exec_fold.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"
#include "runtime/pipeline/pipeline_rank.h"

struct CxFold {
  const CudaDeviceOps *ops;
  const CxProgram *prog;
  const RtStage *st;
  char *fold;                    /* per parameter: its copy is in the versions */
  char *fv[PIPE_MAX_SLOTS], *master; /* the versions (every slot but the master) */
  int nfv;
  int borrowed;                  /* the version a pass on the master borrows (-1: none) */
  bool borrow_fresh;             /* it holds the master's cast (no step since) */
  char *borrow_host;             /* its own bytes meanwhile */
  GpuPtr tables;                  /* the one-parameter AdamW tables, at off[k] from here */
  uint64_t *off, bytes;
  char *uploaded;                /* per parameter: its table is on the device */
  CxAdamwTable *tab;
  CxAdamwLaunch *launch;         /* the launches of the last cx_fold_one_launches */
  int *param, nlaunch;
};

static GpuPtr dp(const void *p) { return (GpuPtr)(uintptr_t)p; }

bool cx_fold_offsets(const cJSON *list, int64_t params, int64_t params_bf16, int64_t **off, int *n) {
  const cJSON *fold = cJSON_GetObjectItemCaseSensitive(list, "bf16_in_versions"), *x;
  *off = NULL, *n = 0;
  if (!fold) return true;
  if (!cJSON_IsArray(fold) || params_bf16 != params) return false;
  *off = pd_calloc((size_t)cJSON_GetArraySize(fold) + 1, sizeof **off);
  cJSON_ArrayForEach(x, fold) {
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= (double)params) return false;
    (*off)[(*n)++] = (int64_t)x->valuedouble;
  }
  return true;
}

CxFold *cx_fold_create(const CudaDeviceOps *ops, const CxProgram *prog, const RtStage *st, char *err, size_t errlen,
                       bool *bad) {
  int n;
  const int64_t *off = cx_program_folded(prog, &n);
  *bad = false;
  if (!off) return NULL;
  CxFold *f = pd_calloc(1, sizeof *f);
  size_t np = (size_t)st->nparams + 1;
  *f = (CxFold){.ops = ops, .prog = prog, .st = st, .fold = pd_calloc(np, 1), .borrowed = -1,
                .off = pd_calloc(np, sizeof *f->off), .uploaded = pd_calloc(np, 1), .tab = pd_calloc(np, sizeof *f->tab),
                .launch = pd_calloc(np, sizeof *f->launch), .param = pd_calloc(np, sizeof *f->param)};
  for (int q = 0; q < n; q++) {
    int k = 0;
    while (k < st->nparams && st->params[k].offset != off[q]) k++;
    if (k == st->nparams) {
      snprintf(err, errlen, "the launch list keeps a bf16 copy at offset %lld of the params block, where no "
               "parameter starts", (long long)off[q]);
      *bad = true;
      cx_fold_destroy(f);
      return NULL;
    }
    f->fold[k] = 1;
  }
  for (int k = 0; k < st->nparams; k++) {
    CxAdamwTensor t = {.n = st->params[k].numel};
    f->off[k] = f->bytes;
    f->bytes += cx_adamw_table_bytes(&t, 1);
  }
  return f;
}

void cx_fold_destroy(CxFold *f) {
  if (!f) return;
  free(f->fold), free(f->borrow_host), free(f->off), free(f->uploaded), free(f->tab), free(f->launch);
  free(f->param);
  free(f);
}

uint64_t cx_fold_table_bytes(const CxFold *f) { return f->bytes; }
void cx_fold_set_tables(CxFold *f, GpuPtr at) { f->tables = at; }
const char *cx_fold_flags(const CxFold *f) { return f->fold; }

void cx_fold_versions(CxFold *f, char *const *w, int n, int master) {
  PD_CHECK(master >= 0 && master < n && n - 1 <= PIPE_MAX_SLOTS,
           "(weight versions holding their bf16 copies need 2bw's master slot: weight prediction)");
  f->nfv = 0;
  for (int v = 0; v < n; v++)
    if (v == master) f->master = w[v];
    else f->fv[f->nfv++] = w[v];
}

/* The version whose block holds [at, at + bytes) (-1: none); a range across one's edge
 * is an internal error. */
static int version_of(const CxFold *f, const void *at, uint64_t bytes) {
  const char *x = at;
  uint64_t pb = (uint64_t)f->st->blocks[BUF_PARAMS];
  for (int v = 0; v < f->nfv; v++) {
    const char *w = f->fv[v];
    if (x + bytes <= w || x >= w + pb) continue;
    PD_CHECK(x >= w && x + bytes <= w + pb, "(a copy across weight version %d's block)", v);
    return v;
  }
  return -1;
}

bool cx_fold_touches(const CxFold *f, const void *at, uint64_t bytes) { return bytes && version_of(f, at, bytes) >= 0; }

/* The borrowed version put back (its bytes as they were, raw). */
static void give_back(CxFold *f) {
  if (f->borrowed < 0) return;
  f->ops->htod(f->ops->dev, dp(f->fv[f->borrowed]), f->borrow_host, (size_t)f->st->blocks[BUF_PARAMS]);
  f->borrowed = -1;
}

/* Host bytes [at, at + bytes), at offset rel of a version's block: each folded weight in
 * them converted in place, up (float32 -> its bf16 bits in the first half, ascending, so
 * each element is read before its bytes are written; the second half zero) or down (the
 * exact widening, descending for the same reason). */
static void convert(const CxFold *f, char *at, uint64_t rel, uint64_t bytes, bool up) {
  for (int k = 0; k < f->st->nparams; k++) {
    const RtParam *pp = &f->st->params[k];
    uint64_t o = (uint64_t)pp->offset, nb = (uint64_t)pp->numel * 4;
    if (!f->fold[k] || o + nb <= rel || o >= rel + bytes) continue;
    PD_CHECK(o >= rel && o + nb <= rel + bytes, "(a copy across weight '%s')", pp->name);
    char *w = at + (o - rel);
    uint16_t h;
    float x;
    for (int64_t i = 0; up && i < pp->numel; i++) {
      memcpy(&x, w + 4 * i, 4);
      h = pk_f32_to_bf16_(x);
      memcpy(w + 2 * i, &h, 2);
    }
    if (up) memset(w + 2 * pp->numel, 0, (size_t)pp->numel * 2);
    for (int64_t i = pp->numel - 1; !up && i >= 0; i--) {
      memcpy(&h, w + 2 * i, 2);
      x = pk_bf16_to_f32_(h);
      memcpy(w + 4 * i, &x, 4);
    }
  }
}

bool cx_fold_upload(CxFold *f, void *dst, const void *host, uint64_t bytes) {
  if (!bytes) return false;
  if ((const char *)dst == f->master) f->borrow_fresh = false;
  int v = version_of(f, dst, bytes);
  if (v < 0) return false;
  give_back(f);
  char *x = pd_malloc((size_t)bytes + 1);
  memcpy(x, host, (size_t)bytes);
  convert(f, x, (uint64_t)((const char *)dst - f->fv[v]), bytes, true);
  f->ops->htod(f->ops->dev, dp(dst), x, (size_t)bytes);
  free(x);
  return true;
}

bool cx_fold_download(CxFold *f, void *host, const void *src, uint64_t bytes) {
  int v = bytes ? version_of(f, src, bytes) : -1;
  if (v < 0) return false;
  give_back(f);
  f->ops->dtoh(f->ops->dev, host, dp(src), (size_t)bytes);
  convert(f, host, (uint64_t)((const char *)src - f->fv[v]), bytes, false);
  return true;
}

GpuPtr cx_fold_pass_base(CxFold *f, const char *w) {
  int v = version_of(f, w, 1);
  if (v >= 0) {
    if (v == f->borrowed) give_back(f);
    return dp(w);
  }
  PD_CHECK(w == f->master, "(a pass on a block that is no weight version)");
  uint64_t pb = (uint64_t)f->st->blocks[BUF_PARAMS];
  if (f->borrowed < 0) {
    if (!f->borrow_host) f->borrow_host = pd_malloc((size_t)pb + 1);
    f->ops->dtoh(f->ops->dev, f->borrow_host, dp(f->fv[0]), (size_t)pb);
    f->borrowed = 0, f->borrow_fresh = false;
  }
  char *b = f->fv[f->borrowed];
  for (int k = 0; !f->borrow_fresh && k < f->st->nparams; k++) {
    if (!f->fold[k]) continue;
    GpuPtr dst = dp(b + f->st->params[k].offset), src = dp(w + f->st->params[k].offset);
    int64_t n = f->st->params[k].numel, g = (n + 7) / 8 / 256 + 1;
    void *args[] = {&dst, &src, &n};
    f->ops->launch(f->ops->dev, 0, cx_program_lib_kernel(f->prog, CX_K_CAST_BF16), (unsigned)(g > 4096 ? 4096 : g),
                   256, args);
  }
  f->borrow_fresh = true;
  return dp(b);
}

void cx_fold_step_begin(CxFold *f) {
  give_back(f);
  f->borrow_fresh = false;
}

void cx_fold_one_launches(CxFold *f, const ExecOptStep *s, int n, GpuPtr scalars) {
  const RtStage *st = f->st;
  char *in = pd_calloc((size_t)st->nparams + 1, 1);
  for (int i = 0; i < n; i++) {
    memset(in, 0, (size_t)st->nparams);
    bool ok = cx_adamw_multi_match(st, &s[i], 1, in, &f->launch[i]);
    PD_CHECK(ok && s[i].g, "(a step of '%s' that no AdamW launch makes: weight versions holding their bf16 copies "
             "need AdamW with a gradient)", s[i].param->name);
    int k = (int)(s[i].param - st->params);
    f->param[i] = k;
    if (!f->uploaded[k]) {
      CxAdamwTensor t = {.off = st->params[k].offset / 4, .n = st->params[k].numel, .decay = st->params[k].decay,
                         .has_grad = 1, .fold = f->fold[k]};
      f->tab[k] = cx_adamw_table_upload(f->ops, f->tables + f->off[k], &t, 1);
      f->uploaded[k] = 1;
    }
    const TrainConfig *tc = s[i].tc;
    CxAdamwLaunch *a = &f->launch[i];
    a->scalars = scalars, a->beta1 = tc->beta1, a->beta2 = tc->beta2, a->eps = tc->eps;
    a->weight_decay = tc->weight_decay;
  }
  f->nlaunch = n;
  free(in);
}

void cx_fold_issue(const CxFold *f) {
  for (int i = 0; i < f->nlaunch; i++)
    cx_adamw_multi_launch(f->ops, cx_program_lib_kernel(f->prog, CX_K_ADAMW_MULTI), 0, &f->tab[f->param[i]],
                          &f->launch[i]);
}
