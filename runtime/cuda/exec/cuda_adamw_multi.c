/* runtime/cuda/exec/cuda_adamw_multi.c — the multi-tensor AdamW's table and launch
 * (cuda_adamw_multi.h). */
#include "runtime/cuda/exec/cuda_adamw_multi.h"

#include <stdlib.h>
#include <string.h>

#define CX_ADAMW_BLOCK 256

static int64_t chunks_of(const CxAdamwTensor *t) { return (t->n + CX_ADAMW_CHUNK - 1) / CX_ADAMW_CHUNK; }

static uint64_t up256(uint64_t n) { return (n + 255) / 256 * 256; }

static int64_t total_chunks(const CxAdamwTensor *t, int n) {
  int64_t c = 0;
  for (int k = 0; k < n; k++) c += chunks_of(&t[k]);
  return c;
}

uint64_t cx_adamw_table_bytes(const CxAdamwTensor *t, int n) {
  return up256((uint64_t)n * sizeof *t) + up256((uint64_t)total_chunks(t, n) * sizeof(CxAdamwChunk));
}

CxAdamwTable cx_adamw_table_upload(const CxDeviceOps *ops, CxPtr at, const CxAdamwTensor *t, int n) {
  uint64_t tb = up256((uint64_t)n * sizeof *t), bytes = cx_adamw_table_bytes(t, n);
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

void cx_adamw_multi_launch(const CxDeviceOps *ops, void *kernel, int stream, const CxAdamwTable *tb,
                           const CxAdamwLaunch *a) {
  if (tb->nchunks == 0) return;
  CxPtr wo = a->w_out, wi = a->w_in, g = a->grad, m = a->m, v = a->v, w16 = a->w16, ts = tb->tensors,
        cs = tb->chunks, sc = a->scalars;
  int64_t nchunks = tb->nchunks, chunk = CX_ADAMW_CHUNK;
  double b1 = a->beta1, b2 = a->beta2, eps = a->eps, wd = a->weight_decay, dc = a->delay_comp;
  void *args[] = {&wo, &wi, &g, &m, &v, &w16, &ts, &cs, &nchunks, &chunk, &b1, &b2, &eps, &wd, &dc, &sc};
  ops->launch(ops->dev, stream, kernel, (unsigned)nchunks, CX_ADAMW_BLOCK, args);
}
