/* runtime/cuda/exec/cuda_adamw_multi.c — the multi-tensor AdamW's table, launch and
 * the match of an opt_step call's steps to one launch (cuda_adamw_multi.h). */
#include "runtime/cuda/exec/cuda_adamw_multi.h"

#include <stdlib.h>
#include <string.h>

#define CX_ADAMW_BLOCK 256

static int64_t chunks_of(const CxAdamwTensor *t) { return (t->n + CX_ADAMW_CHUNK - 1) / CX_ADAMW_CHUNK; }


static int64_t total_chunks(const CxAdamwTensor *t, int n) {
  int64_t c = 0;
  for (int k = 0; k < n; k++) c += chunks_of(&t[k]);
  return c;
}

uint64_t cx_adamw_table_bytes(const CxAdamwTensor *t, int n) {
  return rt_align256((uint64_t)n * sizeof *t) + rt_align256((uint64_t)total_chunks(t, n) * sizeof(CxAdamwChunk));
}

CxAdamwTable cx_adamw_table_upload(const CudaDeviceOps *ops, GpuPtr at, const CxAdamwTensor *t, int n) {
  uint64_t tb = rt_align256((uint64_t)n * sizeof *t), bytes = cx_adamw_table_bytes(t, n);
  CxAdamwTable out = {.tensors = at, .chunks = at + tb, .nchunks = total_chunks(t, n)};
  PD_CHECK(out.nchunks <= 0x7fffffff, "(%lld AdamW chunks: more than a grid)", (long long)out.nchunks);
  unsigned char *host = pd_calloc((size_t)bytes + 1, 1);
  memcpy(host, t, (size_t)n * sizeof *t);
  CxAdamwChunk *map = (CxAdamwChunk *)(host + tb);
  int64_t c = 0;
  for (int k = 0; k < n; k++)
    for (int64_t j = 0; j < chunks_of(&t[k]); j++) map[c++] = (CxAdamwChunk){(uint32_t)k, (uint32_t)j};
  if (bytes) ops->htod(ops->dev, at, host, (size_t)bytes);
  free(host);
  return out;
}

void cx_adamw_multi_launch(const CudaDeviceOps *ops, void *kernel, int stream, const CxAdamwTable *tb,
                           const CxAdamwLaunch *a) {
  if (tb->nchunks == 0) return;
  GpuPtr wo = a->w_out, wi = a->w_in, g = a->grad, m = a->m, v = a->v, ma = a->master, w16 = a->w16,
        ts = tb->tensors, cs = tb->chunks, sc = a->scalars;
  int64_t nchunks = tb->nchunks, chunk = CX_ADAMW_CHUNK;
  double b1 = a->beta1, b2 = a->beta2, eps = a->eps, wd = a->weight_decay;
  void *args[] = {&wo, &wi, &g, &m, &v, &ma, &w16, &ts, &cs, &nchunks, &chunk, &b1, &b2, &eps, &wd, &sc};
  ops->launch(ops->dev, stream, kernel, (unsigned)nchunks, CX_ADAMW_BLOCK, args);
}

static GpuPtr dp(const void *p) { return (GpuPtr)(uintptr_t)p; }

bool cx_adamw_multi_match(const RtStage *st, const ExecOptStep *s, int n, char *in, CxAdamwLaunch *a) {
  int f = 0;
  while (f < n && !s[f].g) f++;
  if (n < 1 || s[0].tc->optimizer == OPT_SGD || f == n) return false;
  GpuPtr off0 = (GpuPtr)s[0].param->offset, offf = (GpuPtr)s[f].param->offset;
  GpuPtr wo = dp(s[0].wout) - off0, wi = dp(s[0].win) - off0, ma = s[0].master ? dp(s[0].master) - off0 : 0;
  GpuPtr g = dp(s[f].g) - offf, m = dp(s[f].m) - offf, v = dp(s[f].v) - offf;
  bool ok = true;
  for (int i = 0; ok && i < n; i++) {
    int64_t k = s[i].param - st->params;
    GpuPtr off = (GpuPtr)s[i].param->offset;
    ok = k >= 0 && k < st->nparams && (i == 0 || k > s[i - 1].param - st->params) && dp(s[i].wout) == wo + off &&
         dp(s[i].win) == wi + off && (ma ? dp(s[i].master) == ma + off : !s[i].master) &&
         (!s[i].g || (dp(s[i].g) == g + off && dp(s[i].m) == m + off && dp(s[i].v) == v + off));
    if (ok) in[k] = s[i].g ? 2 : 1;
  }
  *a = (CxAdamwLaunch){.w_out = wo, .w_in = wi, .grad = g, .m = m, .v = v, .master = ma};
  return ok;
}

uint64_t cx_adamw_stage_table_bytes(const RtStage *st) {
  CxAdamwTensor *t = pd_calloc((size_t)st->nparams + 1, sizeof *t);
  for (int k = 0; k < st->nparams; k++) t[k] = (CxAdamwTensor){.off = st->params[k].offset / 4, .n = st->params[k].numel};
  uint64_t bytes = cx_adamw_table_bytes(t, st->nparams);
  free(t);
  return bytes;
}

CxAdamwTable cx_adamw_stage_table(const CudaDeviceOps *ops, GpuPtr at, const RtStage *st, const char *in,
                                  const char *fold) {
  CxAdamwTensor *t = pd_malloc(((size_t)st->nparams + 1) * sizeof *t);
  int nt = 0;
  for (int k = 0; k < st->nparams; k++)
    if (in[k])
      t[nt++] = (CxAdamwTensor){.off = st->params[k].offset / 4, .n = st->params[k].numel,
                                .decay = st->params[k].decay, .has_grad = in[k] == 2, .fold = fold && fold[k]};
  CxAdamwTable tab = cx_adamw_table_upload(ops, at, t, nt);
  free(t);
  return tab;
}
