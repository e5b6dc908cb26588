/* runtime/cuda/pipe/cuda_pipe_nccl_gather.c — multi-GPU mode's results (cuda_pipe_nccl.c): at
 * the end every rank sends rank 0 its payload over the Transport (its out-of-range id
 * count, a last stage's losses, a replica-0 rank's parameters, with --save also the
 * older 2bw version and AdamW m and v), and rank 0 assembles the outcome as
 * single-GPU mode fills it and writes --save with the CPU pipeline's writer. */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/transport/transport.h"

#define TAG_RESULTS 32001 /* a rank's results, to rank 0 (cuda_pipe_nccl.c's tags) */

/* Batches this run trained: [first, steps). */
static int64_t trained(const CpRun *x) { return x->steps > x->first ? x->steps - x->first : 0; }

/* Blocks of a replica-0 rank's payload: its newest weights; with --save also the older
 * 2bw version (the newest otherwise), AdamW m and v (cuda_pipe_drive.c cp_save's four). */
static int payload_blocks(const CpRun *x) { return x->o->save_path ? 4 : 1; }

/* What rank `sr` sends rank 0: its out-of-range id count, its losses of the trained
 * batches when it is a last stage, payload_blocks params blocks when it is replica 0.
 * Sizes known from the plan. */
static size_t payload_bytes(const CpRun *x, int sr) {
  const PipePlan *p = x->p;
  int stage = sr / p->w, replica = sr % p->w;
  size_t n = 8;
  if (stage == p->d - 1) n += (size_t)(trained(x) * p->m) * 4;
  if (replica == 0) n += (size_t)payload_blocks(x) * (size_t)p->rt->stages[stage].blocks[BUF_PARAMS];
  return n;
}

static char *payload(CpRun *x, CpSr *s) {
  const CxDeviceOps *ops = x->ops;
  char *b = pd_calloc(payload_bytes(x, s->idx) + 1, 1), *at = b + 8;
  uint64_t bad = 0;
  ops->dtoh(ops->dev, &bad, s->scratch + (CxPtr)cx_program_bad_ids_offset(s->prog), 8);
  memcpy(b, &bad, 8);
  if (s->stage == x->p->d - 1) {
    size_t n = (size_t)(trained(x) * x->p->m) * 4;
    if (n) ops->dtoh(ops->dev, at, s->loss + (CxPtr)(x->first * x->p->m) * 4, n);
    at += n;
  }
  if (s->replica == 0) {
    size_t pb = (size_t)s->st->blocks[BUF_PARAMS];
    int prev = s->nversions >= 2 && x->p->schedule == PS_2BW ? 1 - s->newest : s->newest;
    CxPtr src[4] = {s->w[s->newest], s->w[prev], s->adam_m, s->adam_v};
    for (int q = 0; q < payload_blocks(x) && pb; q++) ops->dtoh(ops->dev, at + (size_t)q * pb, src[q], pb);
  }
  return b;
}

/* Rank `sr`'s params blocks in its payload pl (replica 0 only). */
static const char *payload_params(const CpRun *x, const char *pl, int sr) {
  return pl + 8 + (sr / x->p->w == x->p->d - 1 ? (size_t)(trained(x) * x->p->m) * 4 : 0);
}

/* Rank 0, --save: the replica-0 blocks of every stage, written by the CPU pipeline's
 * writer (pipe_save: the one-stage trainer's format, atomic; cuda_pipe_drive.c's cp_save). */
static bool save_from(CpRun *x, char **pl, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  PipeGathered G = {.d = p->d};
  char **blk[4] = {G.stage_w = pd_calloc((size_t)p->d, sizeof(char *)),
                   G.stage_prev = pd_calloc((size_t)p->d, sizeof(char *)),
                   G.stage_m = pd_calloc((size_t)p->d, sizeof(char *)),
                   G.stage_v = pd_calloc((size_t)p->d, sizeof(char *))};
  for (int st = 0; st < p->d; st++)
    for (int q = 0; q < 4; q++) /* pointers into the payloads, not copies */
      blk[q][st] = (char *)payload_params(x, pl[st * p->w], st * p->w) +
                   (size_t)q * (size_t)p->rt->stages[st].blocks[BUF_PARAMS];
  bool ok = pipe_save(p, &G, x->steps, x->tc.seed, x->o->save_path, err, errlen);
  for (int q = 0; q < 4; q++) free(blk[q]);
  return ok;
}

/* Rank 0: the outcome from every rank's payload (cp_fill_outcome's layout). */
static void assemble(CpRun *x, char **pl, PipeOutcome *out, uint64_t *bad) {
  const PipePlan *p = x->p;
  memset(out, 0, sizeof *out);
  out->first_step = x->first;
  out->steps = x->steps;
  out->mb_per_step = x->mref;
  int64_t nb = trained(x);
  out->mb_loss = pd_calloc((size_t)(nb * x->mref) + 1, sizeof(double));
  *bad = 0;
  for (int i = 0; i < x->nsr; i++) {
    uint64_t b;
    memcpy(&b, pl[i], 8);
    *bad += b;
  }
  for (int r = 0; r < p->w; r++) {
    const float *l = (const float *)(const void *)(pl[(p->d - 1) * p->w + r] + 8);
    for (int64_t b = 0; b < nb; b++)
      for (int64_t j = 0; j < p->m; j++) out->mb_loss[b * x->mref + r * p->m + j] = l[b * p->m + j];
  }
  int cap = 0;
  for (int st = 0; st < p->d; st++) {
    const RtStage *rs = &p->rt->stages[st];
    const char *w = payload_params(x, pl[st * p->w], st * p->w);
    for (int k = 0; k < rs->nparams; k++) {
      const RtParam *q = &rs->params[k];
      float *dst = cp_outcome_param(out, &cap, q);
      if (dst) memcpy(dst, w + q->offset, (size_t)q->bytes);
    }
  }
  cp_outcome_finish(x, out);
}

bool cp_nccl_gather(CpRun *x, Transport *t, PipeOutcome *out, char *err, size_t errlen) {
  char *mine = payload(x, &x->sr[x->self]);
  if (x->self != 0) {
    bool ok = transport_send(t, 0, TAG_RESULTS, mine, payload_bytes(x, x->self), "results") == TRANSPORT_OK;
    free(mine);
    if (!ok) snprintf(err, errlen, "%s", transport_error(t));
    return ok;
  }
  char **pl = pd_calloc((size_t)x->nsr, sizeof(char *));
  pl[0] = mine;
  bool ok = true;
  for (int i = 1; ok && i < x->nsr; i++) {
    pl[i] = pd_malloc(payload_bytes(x, i) + 1);
    ok = transport_recv(t, i, TAG_RESULTS, pl[i], payload_bytes(x, i), "results") == TRANSPORT_OK;
  }
  uint64_t bad = 0;
  if (!ok) snprintf(err, errlen, "%s", transport_error(t));
  else assemble(x, pl, out, &bad);
  if (ok && bad) {
    snprintf(err, errlen, "%s: %llu token ids or targets outside the model's vocabulary", x->o->data_path,
             (unsigned long long)bad);
    ok = false;
  }
  if (ok && x->o->save_path) ok = save_from(x, pl, err, errlen);
  if (!ok) {
    pipe_outcome_free(out);
    memset(out, 0, sizeof *out);
  }
  for (int i = 0; i < x->nsr; i++) free(pl[i]);
  free(pl);
  return ok;
}
