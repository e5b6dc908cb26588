/* runtime/pipeline/pipeline_eval.c — the validation loss through the pipeline (see
 * runtime/pipeline/pipeline_eval.h for what is evaluated, where, and in which memory). */
#include "runtime/pipeline/pipeline_eval.h"

#include <math.h>
#include <stdlib.h>

struct PipeEval {
  PipeRank *R;
  DataFile *df;
  DataLoader *dl;          /* NULL on a stage that reads neither tokens nor targets */
  int64_t nbatches;        /* reference batches per evaluation */
  int64_t nmb;             /* this replica's microbatches: nbatches · m */
  double *loss;            /* [nmb] the last stage's losses */
  double *all;             /* rank 0: [nbatches · w · m] in the reference's order */
  ExecReq **reqs;          /* one microbatch's activations */
};

PipeEval *pipe_eval_create(PipeRank *R, char *err, size_t errlen) {
  const PipePlan *p = R->pp;
  PipeEval *E = pd_calloc(1, sizeof *E);
  E->R = R;
  int T = pipe_window(p->rt);
  if (!T) {
    snprintf(err, errlen, "--val-data: the model has no 'tokens'/'targets' inputs");
    goto fail;
  }
  /* Every rank opens the file (a shared read-only mapping): all need the batch count,
   * and this way a file that does not suit the model fails on every rank alike. The
   * loader is the one-stage trainer's for the reference plan: B = b·w·m, in order. */
  char ierr[IO_ERR_LEN];
  E->df = data_open(R->o->val_path, DATA_AUTO, pipe_vocab(p->rt), ierr, sizeof ierr);
  if (!E->df || !(E->dl = data_loader_create(E->df, (int)(p->b * R->mref), T, false, 0, ierr, sizeof ierr))) {
    snprintf(err, errlen, "%s", ierr);
    goto fail;
  }
  int64_t want = R->o->eval_batches > 0 ? R->o->eval_batches : 8;
  E->nbatches = data_batches_per_epoch(E->dl);
  if (E->nbatches > want) E->nbatches = want;
  E->nmb = E->nbatches * p->m;
  E->loss = pd_calloc((size_t)E->nmb + 1, sizeof(double));
  if (R->rank == 0) E->all = pd_calloc((size_t)(E->nmb * p->w) + 1, sizeof(double));
  E->reqs = pd_calloc((size_t)p->st[R->stage].nbnd + 1, sizeof *E->reqs);
  return E;
fail:
  pipe_eval_destroy(E);
  return NULL;
}

void pipe_eval_destroy(PipeEval *E) {
  if (!E) return;
  data_loader_destroy(E->dl);
  if (E->df) data_close(E->df);
  free(E->loss);
  free(E->all);
  free(E->reqs);
  free(E);
}

/* Receives (ACT_IN) or sends (ACT_OUT) microbatch n's activations, every boundary
 * tensor of that role in the plan's order (the order the training messages use), at its
 * place for an evaluation forward: the newest weights, stash slot 0 (pipeline_eval.h:
 * Memory). */
static bool eval_xfer(PipeEval *E, PipeRole role, int64_t n) {
  PipeRank *R = E->R;
  const PipeStage *ps = &R->pp->st[R->stage];
  int peer = role == PIPE_ACT_IN ? R->stage - 1 : R->stage + 1;
  int pr = R->pp->st[peer].rank_of_replica[R->replica];
  int nreq = 0;
  for (int k = 0; k < ps->nbnd; k++) {
    const PipeBoundary *b = &ps->bnd[k];
    if (b->role != role) continue;
    char what[96];
    snprintf(what, sizeof what, "validation activation of microbatch %lld %s stage %d", (long long)n,
             role == PIPE_ACT_IN ? "from" : "for", peer);
    char *at = pipe_block_base(R, b->cls, -1, 0) + b->offset;
    ExecLink *L = R->link; /* device memory: the training messages' way (a GPU's: device copies or NCCL) */
    TransportStatus s = L->ops->post(L, role != PIPE_ACT_IN, pr, PIPE_TAG_EVAL, at, (size_t)b->bytes, what,
                                     &E->reqs[nreq]);
    if (!pipe_transport_ok(R, s)) return false;
    nreq++;
  }
  return nreq == 0 || pipe_transport_ok(R, R->link->ops->waitall(R->link, E->reqs, nreq));
}

/* Rank 0: the last stage's losses of every replica, the mean in the reference's
 * order (batch k, then replica, then j: trainer_eval's order). */
static bool eval_gather(PipeEval *E, double *mean) {
  PipeRank *R = E->R;
  if (!pipe_gather_losses(R, E->loss, E->nbatches, PIPE_TAG_EVAL + 1, "validation losses", E->all)) return false;
  if (R->rank != 0) return true;
  int64_t n = E->nmb * R->pp->w;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += E->all[i];
  *mean = n ? sum / (double)n : 0;
  return true;
}

bool pipe_eval_run(PipeEval *E, double *mean) {
  PipeRank *R = E->R;
  const PipePlan *p = R->pp;
  *mean = NAN;
  /* stash slot 0, or the full activation block the program reads with recomputation;
   * no microbatch is in flight here, so both are idle */
  char *stash = pipe_block_base(R, BUF_STASH, -1, 0);
  int64_t m = p->m, b = p->b, B = b * R->mref;
  for (int64_t k = 0; k < E->nbatches; k++)
    for (int64_t j = 0; j < m; j++) {
      int64_t n = k * m + j, first = k * B + ((int64_t)R->replica * m + j) * b;
      R->dev->ops->load_samples(R->dev, R->inputs, E->dl, first, b);
      if (R->stage > 0 && !eval_xfer(E, PIPE_ACT_IN, n)) return false;
      /* microbatch 0 and training 0, as trainer_eval: no dropout stream is drawn */
      ExecPass c = {.block = {[BUF_PARAMS] = R->w[R->newest], [BUF_GRADS] = R->grads, [BUF_STASH] = stash,
                              [BUF_WORK] = R->work, [BUF_INPUTS] = R->inputs, [BUF_BOUNDARY] = R->bnd},
                    .mb = 0, .seed = R->tc.seed, .training = false, .loss = R->st->has_loss ? &E->loss[n] : NULL};
      R->dev->ops->forward(R->dev, &c);
      if (R->stage < p->d - 1 && !eval_xfer(E, PIPE_ACT_OUT, n)) return false;
    }
  R->dev->ops->flush(R->dev); /* the losses land (a GPU's, late: runtime/exec/exec.h) */
  return eval_gather(E, mean);
}
