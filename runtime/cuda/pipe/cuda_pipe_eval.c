/* runtime/cuda/pipe/cuda_pipe_eval.c — the validation loss in single-GPU pipeline mode
 * (cuda_pipe.h), with runtime/pipeline/pipeline_eval.h's contract: the first
 * N' = min(N, batches per epoch) batches of B = b·w·m samples of the file, in order,
 * every one of their w·m microbatches forward-only (training off, microbatch key 0:
 * trainer_eval's context), on the NEWEST weights, and the plain mean of the losses in
 * the reference's order (batch, then replica, then microbatch).
 *
 * Where: between two stretches of training (cx_pipe_train), when nothing is in flight.
 * Everything runs on the communication stream after a full device sync, in the
 * planned blocks that are idle there, as the CPU pipeline's evaluation uses them:
 * weights slot `newest`, stash slot 0 (with recomputation the full activation block,
 * where an incoming activation is copied straight to its place), the boundary, inputs
 * and workspace blocks. Training refills all of them before reading them, so an
 * evaluation changes no bit of training. A microbatch runs through the stages of its
 * replica in order: stage i's outgoing activations (ACT_OUT, plan order) are copied
 * to stage i+1's incoming ones (ACT_IN, same order: the training messages' pairing). */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool cp_eval_open(CpRun *x, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  char ierr[IO_ERR_LEN];
  /* the one-stage trainer's loader for the reference plan: B = b·w·m, never shuffled */
  x->vdf = data_open(x->o->val_path, DATA_AUTO, pipe_vocab(p->rt), ierr, sizeof ierr);
  if (!x->vdf || !(x->vdl = data_loader_create(x->vdf, (int)(p->b * x->mref), x->T, false, 0, ierr, sizeof ierr))) {
    snprintf(err, errlen, "%s", ierr);
    return false;
  }
  int64_t want = x->o->eval_batches > 0 ? x->o->eval_batches : 8;
  x->val_batches = data_batches_per_epoch(x->vdl);
  if (x->val_batches > want) x->val_batches = want;
  return true;
}

void cp_eval_close(CpRun *x) {
  data_loader_destroy(x->vdl);
  if (x->vdf) data_close(x->vdf);
  x->vdl = NULL;
  x->vdf = NULL;
}

/* The stash base an evaluation forward uses (pipeline_eval.h: Memory). */
static CxPtr eval_stash(const CpRun *x, const CpSr *s) { return x->p->recompute ? s->full : s->stash[0]; }

bool cp_eval_bnd(CpRun *x, const CpSr *s, int k, CxPtr *at) {
  const PipeBoundary *b = &s->ps->bnd[k];
  if (b->cls == BUF_BOUNDARY) *at = s->bnd;
  else if (b->cls == BUF_STASH) *at = eval_stash(x, s);
  else if (b->cls == BUF_WORK) *at = s->work;
  else {
    snprintf(x->err, sizeof x->err, "stage %d: a boundary tensor in the %s block", s->stage,
             buf_class_name((BufClass)b->cls));
    return false;
  }
  *at += (CxPtr)b->offset;
  return true;
}

/* Stage `from`'s outgoing activations into stage from + 1's incoming ones (one replica). */
static bool pass_on(CpRun *x, CpSr *from, CpSr *to) {
  int ko = 0;
  for (int ki = 0; ki < to->ps->nbnd; ki++) {
    if (to->ps->bnd[ki].role != PIPE_ACT_IN) continue;
    while (ko < from->ps->nbnd && from->ps->bnd[ko].role != PIPE_ACT_OUT) ko++;
    if (ko == from->ps->nbnd || from->ps->bnd[ko].bytes != to->ps->bnd[ki].bytes) {
      snprintf(x->err, sizeof x->err, "stage %d's outgoing activations do not match stage %d's incoming ones (recompile "
               "the plan)", from->stage, to->stage);
      return false;
    }
    CxPtr src, dst;
    if (!cp_eval_bnd(x, from, ko, &src) || !cp_eval_bnd(x, to, ki, &dst)) return false;
    x->ops->dtod(x->ops->dev, CP_COMM_STREAM, dst, src, (size_t)to->ps->bnd[ki].bytes);
    ko++;
  }
  return true;
}

double cp_eval_forward(CpRun *x, CpSr *s, int64_t k, int64_t j) {
  const PipePlan *p = x->p;
  const CxDeviceOps *ops = x->ops;
  if (s->st->ninputs && s->st->blocks[BUF_INPUTS]) {
    /* htod waits for the device: the previous microbatch no longer reads the block */
    pipe_fill_samples(s->st, x->host_image, x->vdl, k * p->b * x->mref + ((int64_t)s->replica * p->m + j) * p->b,
                      p->b, x->T, x->tok_tmp, x->tgt_tmp);
    ops->htod(ops->dev, s->inputs, x->host_image, (size_t)s->st->blocks[BUF_INPUTS]);
  }
  CxReplay rp = {.seed = x->tc.seed, .microbatch = 0, .training = false, .stream = CP_COMM_STREAM};
  rp.base[BUF_PARAMS] = s->w[s->newest];
  rp.base[CX_PARAMS16] = s->w16[s->newest];
  rp.base[BUF_GRADS] = s->grads;
  rp.base[BUF_STASH] = eval_stash(x, s);
  rp.base[BUF_WORK] = s->work;
  rp.base[BUF_INPUTS] = s->inputs;
  rp.base[BUF_BOUNDARY] = s->bnd;
  rp.base[CX_SCRATCH] = s->scratch;
  cx_program_run(s->prog, CX_FORWARD, &rp);
  float loss = 0;
  if (s->st->has_loss) ops->dtoh(ops->dev, &loss, s->scratch + (CxPtr)cx_program_loss_offset(s->prog), 4);
  return loss;
}

bool cp_eval_run(CpRun *x, double *mean) {
  const PipePlan *p = x->p;
  const CxDeviceOps *ops = x->ops;
  int64_t m = p->m;
  double sum = 0;
  ops->sync(ops->dev); /* the training streams' work is done: their blocks are idle */
  for (int64_t k = 0; k < x->val_batches; k++)
    for (int r = 0; r < p->w; r++)
      for (int64_t j = 0; j < m; j++)
        for (int st = 0; st < p->d; st++) {
          CpSr *s = cp_sr(x, st, r);
          double loss = cp_eval_forward(x, s, k, j);
          if (st + 1 < p->d && !pass_on(x, s, cp_sr(x, st + 1, r))) return false;
          sum += loss;
        }
  ops->sync(ops->dev); /* training's next work on the SR streams must not overtake it */
  *mean = x->val_batches ? sum / (double)(x->val_batches * p->w * m) : 0;
  return true;
}
