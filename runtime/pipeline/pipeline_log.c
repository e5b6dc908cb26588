/* runtime/pipeline/pipeline_log.c — the --log-json of every plan shape, streamed by
 * rank 0 as it trains (docs/output-files.md): one rank, threads, MPI, and the CUDA
 * pipeline modes, which all run pipeline_run.c's rank under pipe_drive.
 *
 * Invariants: the hand-off is asynchronous, inside the stretch, so it drains nothing;
 * a streamed line carries the very bits the summary and --reference report (the
 * file is byte for byte what writing it from the outcome at the end gave:
 * tests/runtime/log_stream.sh); rank 0 never waits on a rank that waits on it (the
 * argument is at pipe_log_step); a failed write is agreed on by every rank at a
 * stretch end (pipe_log_every says how often). Grad norm and step time are rank 0's. */
#include "runtime/pipeline/pipeline_rank.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct PipeLogStream {
  RtLog *log;             /* rank 0's file; NULL on the other ranks */
  bool sender;            /* a last stage other than rank 0 */
  int64_t lo, hi;         /* the current stretch */
  int64_t next;           /* rank 0: the first batch of the stretch whose line is not written */
  double *mb;             /* rank 0: [2][w·m] batch parity's losses, (replica, microbatch) */
  TransportRequest **rx;  /* rank 0: [2][w] posted receives (NULL: none, or rank 0's own) */
  bool posted[2];
  TransportRequest **tx;  /* a sender: its sends of the stretch, waited at its end */
  int64_t ntx, captx;
};

/* Stretches are what they are without the log (validations, the end), except that a
 * failed write is agreed on by every rank (transport_agree) at a stretch end: gpipe,
 * 1f1b and one rank end a stretch after every step (they flush at every batch anyway:
 * the cost is the agreement), 2bw and pipedream every ceil(256·(d - 1)/m) steps — a
 * drain of about d - 1 microbatch slots every 256·(d-1) slots, under 0.4% idle — which
 * bounds how long a failed write goes unnoticed. */
int64_t pipe_log_every(const PipePlan *p) {
  if (p->nranks == 1 || p->schedule == PS_GPIPE || p->schedule == PS_1F1B) return 1;
  int64_t L = (256 * (int64_t)(p->d - 1) + p->m - 1) / p->m;
  return L > 1 ? L : 1;
}

RtLog *pipe_log_open(const PipeRank *R, char *err, size_t errlen) {
  RtLog *l = rt_log_open(R->o->log_json, stdout, true, err, errlen); /* JSON only: the last stage prints */
  if (l) rt_log_set_peak(l, pipe_peak_flops(R->pp, R->o->one_device)); /* the console's (pipeline.c) */
  return l;
}

PipeLogStream *pipe_log_create(const PipeRank *R, RtLog *log) {
  const PipePlan *p = R->pp;
  PipeLogStream *L = pd_calloc(1, sizeof *L);
  L->log = log;
  L->sender = R->rank != 0 && R->st->has_loss;
  if (R->rank == 0) {
    L->mb = pd_calloc((size_t)(2 * p->w * p->m) + 1, sizeof(double));
    L->rx = pd_calloc((size_t)(2 * p->w) + 1, sizeof *L->rx);
  }
  return L;
}

static bool pending(const PipeLogStream *L) {
  bool any = L->ntx > 0;
  for (int par = 0; par < 2; par++) any = any || L->posted[par];
  return any;
}

void pipe_log_destroy(PipeRank *R, PipeLogStream *L) {
  if (!L) return;
  /* only after a failure: cancel what peers could still copy (the local transport's
   * quiesce; an MPI rank is on its way to MPI_Abort) */
  if (pending(L)) transport_abort(R->t, R->err[0] ? R->err : "the run stopped");
  free(L->mb);
  free(L->rx);
  free(L->tx);
  free(L);
}

/* Rank 0: the receives of batch u's losses from every replica's last stage. */
static bool post(PipeRank *R, PipeLogStream *L, int64_t u) {
  const PipePlan *p = R->pp;
  int par = (int)(u % 2);
  char what[64];
  snprintf(what, sizeof what, "losses of step %lld", (long long)u + 1);
  for (int rep = 0; rep < p->w; rep++) {
    int src = p->st[p->d - 1].rank_of_replica[rep];
    L->rx[par * p->w + rep] = NULL;
    if (src == 0) continue; /* rank 0's own, read from R->loss */
    if (!pipe_transport_ok(R, transport_irecv(R->t, src, PIPE_TAG_LOG, L->mb + ((int64_t)par * p->w + rep) * p->m,
                                              (size_t)p->m * sizeof(double), what, &L->rx[par * p->w + rep])))
      return false;
  }
  L->posted[par] = true;
  return true;
}

/* Rank 0: batch u's losses in, its line out (val: the validation after it, NAN if none). */
static bool collect(PipeRank *R, PipeLogStream *L, int64_t u, double val) {
  const PipePlan *p = R->pp;
  int par = (int)(u % 2);
  int64_t per = (int64_t)p->w * p->m;
  if (!L->posted[par] && !post(R, L, u)) return false;
  L->posted[par] = false;
  if (!pipe_transport_ok(R, transport_waitall(R->t, L->rx + par * p->w, p->w))) return false;
  double *mb = L->mb + par * per;
  for (int rep = 0; rep < p->w; rep++)
    if (p->st[p->d - 1].rank_of_replica[rep] == 0)
      memcpy(mb + (int64_t)rep * p->m, R->loss + (u - R->first) * p->m, (size_t)p->m * sizeof(double));
  double s = 0;
  for (int64_t j = 0; j < per; j++) s += mb[j];
  StepStats ss = {.loss = s / (double)per, .lr = rt_lr_at(&p->rt->train, u), .grad_norm = R->grad_norm[u - R->first],
                  .ms = R->step_ms[u - R->first]};
  /* after a failed write (rt_log_error, set by the first and kept) no more lines: the
   * file ends with whole ones */
  if (!rt_log_error(L->log)[0])
    (void)rt_log_step(L->log, u + 1, R->steps, &ss, pipe_tokens_per_step(p), pipe_flops_per_step(p), val);
  L->next = u + 1;
  return true;
}

bool pipe_log_begin(PipeRank *R, int64_t lo, int64_t hi) {
  PipeLogStream *L = R->logs;
  L->lo = L->next = lo;
  L->hi = hi;
  L->ntx = 0;
  return R->rank != 0 || lo >= hi || post(R, L, lo);
}

/* The last stage of every replica sends batch t's m microbatch losses to rank 0 (tag
 * PIPE_TAG_LOG, transport_isend from R->loss, which nothing writes again) at the end
 * of its OPT_STEP(t) (called by the interpreter, exec_interp.c run_step) — not at the
 * FWD of (t, m-1) that computes the last one: a GPU delivers losses to the host only
 * by the step's norm (exec.h: forward's late loss). Rank 0 receives batch t's at the
 * end of its own OPT_STEP(t + 1), puts them in the reference order and sums them as
 * the run's outcome does (pipeline_run.c fill_outcome: batch, then replica, then
 * microbatch, from 0). The line of a stretch's last batch is written at the stretch
 * end (pipe_log_stretch), after the validation that may follow it, whose loss goes on
 * it.
 *
 * Why rank 0 never waits on a rank that waits on it. Replica r's last stage sends
 * batch t's losses in its OPT_STEP(t), which in its program comes before its BWDs of
 * batch t + 1 (the invariant of every schedule, exec_interp.c). Rank 0's OPT_STEP(t+1)
 * needs stage 0's gradient of batch t + 1 on every replica (its own BWDs, then the
 * all-reduce for w > 1), hence every replica's last stage past its BWD(t+1, m-1),
 * hence past the send. On the CPU links that chain is of host waits; on the NCCL
 * link the all-reduce and the sends are device-side, asynchronous to the host, but
 * OPT_STEP(t+1)'s norm (sumsq) waits for rank 0's device, whose all-reduce or
 * receive completes only once each peer's host has enqueued its part, which it does
 * after its own OPT_STEP(t): the same chain, through the devices. So the receive
 * finds the message sent (receiving at OPT_STEP(t) itself could wait: rank 0's step
 * implies the last stages past their BWD(t, m-1) only, not past their own step).
 * The sends never block a last stage: rank 0 posts batch u's receives before any
 * last stage can reach OPT_STEP(u) (at the stretch start for its first batch, at the
 * end of its OPT_STEP(u-1) for the others: a last stage's OPT_STEP(u) needs rank 0's
 * norm part or its all-reduce of batch u, both after rank 0's OPT_STEP(u-1)), so the
 * local transport copies at the post (were it not so, the message would wait in
 * rank 0's queue, its buffer untouched); the senders wait their requests only at the
 * stretch end, when rank 0 has received every batch of the stretch. Rank 0's line
 * writes fall inside its OPT_STEP (the trace's step event, the next step's time).
 * Between stretches nothing is outstanding; a rank that fails with requests outstanding
 * aborts the transport before its buffers go (pipe_log_destroy), so no peer copies
 * into or out of freed memory. */
bool pipe_log_step(PipeRank *R, int64_t t) {
  PipeLogStream *L = R->logs;
  if (t < L->lo || t >= L->hi) return true;
  if (L->sender) {
    if (L->ntx == L->captx) L->tx = pd_realloc(L->tx, (size_t)(L->captx = 2 * L->captx + 8) * sizeof *L->tx);
    char what[64];
    snprintf(what, sizeof what, "losses of step %lld", (long long)t + 1);
    L->tx[L->ntx] = NULL;
    return pipe_transport_ok(R, transport_isend(R->t, 0, PIPE_TAG_LOG, R->loss + (t - R->first) * R->pp->m,
                                                (size_t)R->pp->m * sizeof(double), what, &L->tx[L->ntx++]));
  }
  if (R->rank != 0) return true;
  if (t - 1 >= L->lo && !collect(R, L, t - 1, NAN)) return false;
  return t + 1 >= L->hi || post(R, L, t + 1);
}

bool pipe_log_stretch(PipeRank *R, double val) {
  PipeLogStream *L = R->logs;
  if (L->sender) {
    TransportStatus s = transport_waitall(R->t, L->tx, (int)L->ntx);
    L->ntx = 0;
    return pipe_transport_ok(R, s);
  }
  if (R->rank != 0) return true;
  for (int64_t u = L->next; u < L->hi; u++)
    if (!collect(R, L, u, u + 1 == L->hi ? val : NAN)) return false;
  return true;
}
