/* runtime/exec/exec_rank.c — the pieces of a rank the interpreter needs below its setup
 * (runtime/exec/exec_rank.h): the clock, transport failures, block bases, samples, the
 * stage context, the optimizer step, segment times and the console's rates. The
 * sequential reference (runtime/reference/) shares them. */
#include "runtime/exec/exec_rank.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"

/* The first transport failure: keep its message, make every other rank stop. */
bool pipe_transport_ok(PipeRank *R, TransportStatus s) {
  if (s == TRANSPORT_OK) return true;
  if (!R->failed) {
    R->failed = true;
    snprintf(R->err, sizeof R->err, "%s", R->link->ops->error(R->link));
    R->link->ops->abort(R->link, R->err);
  }
  return false;
}

void pipe_fill_samples(const RtStage *st, char *inputs, DataLoader *dl, int64_t first, int64_t b, int T,
                       int32_t *tok_tmp, int32_t *tgt_tmp) {
  int32_t *tok = NULL, *tgt = NULL;
  for (int q = 0; q < st->ninputs; q++) {
    const RtInput *in = &st->inputs[q];
    if (in->stream == STREAM_TOKENS) tok = (int32_t *)(void *)(inputs + in->offset);
    if (in->stream == STREAM_TARGETS) tgt = (int32_t *)(void *)(inputs + in->offset);
  }
  for (int64_t r = 0; r < b; r++)
    data_get_sample(dl, first + r, tok ? tok + r * T : tok_tmp, tgt ? tgt + r * T : tgt_tmp);
}

StageCtx pipe_stage_ctx(const RtStage *st, uint64_t seed, int64_t mb, char *params, char *grads, char *stash, char *work, char *inputs,
                        char *bnd, double *loss) {
  StageCtx c = {0};
  c.abi = PD2BW_STAGE_ABI;
  c.training = 1;
  c.microbatch = (uint32_t)mb;
  c.rng_base = st->rng_base;
  c.seed = seed;
  c.params = params;
  c.grads = grads;
  c.stash = stash;
  c.work = work;
  c.inputs = inputs;
  c.boundary = bnd;
  c.sgemm = (void (*)(void))pd_sgemm;
  c.loss = loss;
  return c;
}

/* Where a program block lives for an instruction using weight slot vslot and stash
 * slot sslot. */
char *pipe_block_base(PipeRank *R, int cls, int vslot, int sslot) {
  switch ((BufClass)cls) {
  case BUF_PARAMS: return R->w[vslot < 0 ? R->newest : vslot];
  case BUF_GRADS: return R->grads;
  case BUF_STASH: return R->pp->recompute ? R->full : R->stash[sslot < 0 ? 0 : sslot];
  case BUF_WORK: return R->work;
  case BUF_INPUTS: return R->inputs;
  case BUF_BOUNDARY: return R->bnd;
  case BUF_NONE:
  case BUF_CLASS_COUNT: break;
  }
  PD_CHECK(0, "block class %d", cls);
  return NULL;
}

void pipe_opt_step(const TrainConfig *tc, const RtParam *pp, float *wout, const float *win, const float *g, float *m,
                   float *v, int64_t t, double scale, bool fresh) {
  double lr = rt_lr_at(tc, t);
  if (tc->optimizer == OPT_SGD)
    pk_sgd_step_f32(wout, win, g, m, pp->numel, lr, tc->beta1, tc->weight_decay, pp->decay, scale);
  else
    pk_adamw_step_f32(wout, win, g, m, v, pp->numel, lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay, pp->decay,
                      t + 1, scale, fresh ? 0 : tc->delay_comp);
}

void seg_times_init(SegTimes *t, int n, int64_t from_mb) { *t = (SegTimes){.nsegs = n, .from_mb = from_mb}; }

void seg_times_free(SegTimes *t) {
  free(t->fwd), free(t->bwd);
  *t = (SegTimes){0};
}

/* Room for row `at` of a direction (doubling). */
static double *seg_row_at(SegTimes *t, bool bwd, int64_t at) {
  double **rows = bwd ? &t->bwd : &t->fwd;
  int64_t *cap = &t->cap[bwd];
  if (at >= *cap) {
    *cap = at + 1 > 2 * *cap ? at + 1 : 2 * *cap;
    *rows = pd_realloc(*rows, (size_t)(*cap * (t->nsegs ? t->nsegs : 1)) * sizeof(double));
  }
  return *rows + at * t->nsegs;
}

double *seg_times_row(SegTimes *t, bool bwd) {
  int64_t *n = bwd ? &t->nbwd : &t->nfwd;
  if (*n >= SEG_TIMES_MAX_PASSES) return NULL;
  return seg_row_at(t, bwd, (*n)++);
}

void seg_times_add(SegTimes *dst, const SegTimes *src) {
  PD_CHECK(dst->nsegs == src->nsegs, "(segment times of %d and %d segments)", dst->nsegs, src->nsegs);
  for (int bwd = 0; bwd < 2; bwd++) {
    int64_t n = bwd ? src->nbwd : src->nfwd, *dn = bwd ? &dst->nbwd : &dst->nfwd;
    for (int64_t i = 0; i < n; i++)
      memcpy(seg_row_at(dst, bwd, (*dn)++), (bwd ? src->bwd : src->fwd) + i * src->nsegs,
             (size_t)src->nsegs * sizeof(double));
  }
}

/* The console's rates (exec_rank.h). */
int pipe_window(const RtPlan *rt) {
  for (int s = 0; s < rt->nstages; s++)
    for (int k = 0; k < rt->stages[s].ninputs; k++)
      if (rt->stages[s].inputs[k].stream != STREAM_OTHER) return (int)rt->stages[s].inputs[k].shape[1];
  return 0;
}

double pipe_tokens_per_step(const PipePlan *p) { return (double)(p->b * p->m * p->w) * (double)pipe_window(p->rt); }

double pipe_flops_per_step(const PipePlan *p) {
  double f = 0;
  for (int s = 0; s < p->d; s++) f += p->rt->stages[s].flops_fwd + p->rt->stages[s].flops_bwd;
  return f * (double)(p->m * p->w);
}

double pipe_peak_flops(const PipePlan *p, bool one_device) {
  return p->rt->peak_flops * (one_device ? 1.0 : (double)p->nranks);
}
