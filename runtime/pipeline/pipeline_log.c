/* runtime/pipeline/pipeline_log.c — the --log-json of every plan shape, streamed by
 * rank 0 as it trains (docs/output-files.md): one rank, threads, MPI, and the CUDA
 * pipeline modes, which all run pipeline_run.c's rank under pipe_drive.
 *
 * After each stretch of batches (pipeline_drive.c) the last stage of every replica
 * sends the stretch's microbatch losses to rank 0 (tag PIPE_TAG_LOG), which puts them
 * in the reference order and sums each step's as the run's outcome does
 * (pipeline_run.c fill_outcome: batch, then replica, then microbatch, from 0), so a
 * streamed line carries the very bits the summary and --reference report, and the
 * file is byte for byte what writing it from the outcome at the end gave
 * (tests/runtime/log_stream.sh). Grad norm and step time are rank 0's (every rank has
 * the same norms; rank 0's step times are the pipeline's); the validation loss goes
 * on the line of the step it followed.
 *
 * Why stretches and not the step itself: a rank learns nothing from another between
 * two of its instructions, and a message waited for inside the instruction stream
 * could wait on a rank that waits on this one; between stretches no microbatch is in
 * flight. gpipe and 1f1b flush at every batch anyway and stop at each OPT_STEP for
 * the norm exchange, so they end a stretch after every step: the cost is one small
 * message per replica and the agreement. 2bw and pipedream keep the next batch's
 * forwards in flight across a step; each stretch end drains them (about d - 1
 * microbatch slots idle, timing only: consecutive stretches compute what one does),
 * so their stretches are long enough to keep that under ~1/16 of the time:
 * 16·(d - 1)/m steps. */
#include "runtime/pipeline/pipeline_rank.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t pipe_log_every(const PipePlan *p) {
  if (p->nranks == 1 || p->schedule == PS_GPIPE || p->schedule == PS_1F1B) return 1;
  int64_t L = (16 * (int64_t)(p->d - 1) + p->m - 1) / p->m;
  return L > 1 ? L : 1;
}

RtLog *pipe_log_open(const PipeRank *R, char *err, size_t errlen) {
  RtLog *l = rt_log_open(R->o->log_json, stdout, true, err, errlen); /* JSON only: the last stage prints */
  /* the console's peak (pipeline.c): one GPU's in single-GPU mode, the plan's devices' else */
  if (l) rt_log_set_peak(l, R->o->one_device ? R->pp->rt->peak_flops : pipe_peak_flops(R->pp));
  return l;
}

bool pipe_log_stretch(PipeRank *R, RtLog *log, int64_t lo, int64_t hi, double val, bool *written) {
  const PipePlan *p = R->pp;
  *written = true;
  int64_t m = p->m, n = (hi - lo) * m, off = (lo - R->first) * m;
  char what[64];
  snprintf(what, sizeof what, "losses of steps %lld..%lld", (long long)lo + 1, (long long)hi);
  if (R->rank != 0) {
    if (!R->st->has_loss) return true;
    return pipe_transport_ok(R, transport_send(R->t, 0, PIPE_TAG_LOG, R->loss + off, (size_t)n * sizeof(double), what));
  }
  /* rank 0: [step][replica][microbatch], the reference order */
  int64_t per = (int64_t)p->w * m;
  double *mb = pd_malloc((size_t)((hi - lo) * per + 1) * sizeof(double)), *part = pd_malloc((size_t)(n + 1) * sizeof(double));
  bool ok = true;
  for (int rep = 0; ok && rep < p->w; rep++) {
    int src = p->st[p->d - 1].rank_of_replica[rep];
    if (src == 0) memcpy(part, R->loss + off, (size_t)n * sizeof(double));
    else ok = pipe_transport_ok(R, transport_recv(R->t, src, PIPE_TAG_LOG, part, (size_t)n * sizeof(double), what));
    for (int64_t b = 0; ok && b < hi - lo; b++)
      for (int64_t j = 0; j < m; j++) mb[b * per + rep * m + j] = part[b * m + j];
  }
  for (int64_t t = lo; ok && *written && t < hi; t++) {
    double s = 0;
    for (int64_t j = 0; j < per; j++) s += mb[(t - lo) * per + j];
    StepStats ss = {.loss = s / (double)per, .lr = rt_lr_at(&p->rt->train, t), .grad_norm = R->grad_norm[t - R->first],
                    .ms = R->step_ms[t - R->first]};
    *written = rt_log_step(log, t + 1, R->steps, &ss, pipe_tokens_per_step(p), pipe_flops_per_step(p),
                           t + 1 == hi ? val : NAN);
  }
  free(mb);
  free(part);
  return ok;
}
