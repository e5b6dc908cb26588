/* passes/plan_exec_comm.c — the stream engine's sends, receives and collectives.
 *
 * The half of plan_exec.c's engine (see its top comment for the model) that makes
 * stages meet: a group of consecutive sends and receives (with_next) is posted at
 * once and completes when each met its partner at the head of the peer's channel;
 * TIED_SYNC posts a part of a tied parameter's gradient sum; an OPT_STEP waits for
 * the gradient norm's exchange and for the tied sums it reads. Apart from the
 * compute half because it is the part about time and order between stages, not
 * about one stage's versions and stash. */
#include "passes/plan_exec_state.h"

/* The operation a peer must post to match `op` from the other side. */
static PlanOp partner(PlanOp op) {
  switch (op) {
  case PI_SEND_ACT: return PI_RECV_ACT;
  case PI_RECV_ACT: return PI_SEND_ACT;
  case PI_SEND_GRAD: return PI_RECV_GRAD;
  case PI_RECV_GRAD: return PI_SEND_GRAD;
  case PI_FWD:
  case PI_BWD:
  case PI_ALLREDUCE:
  case PI_TIED_SYNC:
  case PI_OPT_STEP:
  case PI_COUNT: break;
  }
  PD_CHECK(0, "not a send/receive");
  return PI_COUNT;
}

static bool post(Exec *x, int s) {
  SState *S = &x->st[s];
  const PlanStream *st = &x->s->st[s];
  int d = x->d, e = S->pc;
  while (e < st->n && st->ins[e].with_next) e++;
  if (e >= st->n) return exec_fail(x, s, e - 1, "with_next on the last instruction");
  e++;
  if (e - S->pc > MAX_GROUP) return exec_fail(x, s, S->pc, "group of more than %d", MAX_GROUP);
  for (int q = S->pc; q < e; q++) {
    const PlanInstr *in = &st->ins[q];
    if (!is_comm(in->op)) return exec_fail(x, s, q, "grouped with a send/receive but is not one");
    if (!mb_ok(x, s, q, in->mb)) return false;
    int want = in->op == PI_RECV_ACT || in->op == PI_SEND_GRAD ? s - 1 : s + 1;
    if (in->peer != want || want < 0 || want >= d)
      return exec_fail(x, s, q, "peer stage %d, expected %d of %d stages", in->peer, want, d);
    if (in->op == PI_SEND_ACT && !S->fwd[in->mb])
      return exec_fail(x, s, q, "sends an activation before computing it");
    if (in->op == PI_SEND_GRAD && !S->bwd[in->mb])
      return exec_fail(x, s, q, "sends a gradient before computing it");
    S->matched[q - S->pc] = false;
  }
  S->posted = true;
  S->post_time = S->clock;
  S->gend = e;
  return true;
}

/* Tries to match stage s's posted operations; returns 1 progress, 0 none, -1 error. */
static int match(Exec *x, int s) {
  SState *S = &x->st[s];
  const PlanStream *st = &x->s->st[s];
  int progress = 0;
  for (int q = S->pc; q < S->gend; q++) {
    if (S->matched[q - S->pc]) continue;
    const PlanInstr *in = &st->ins[q];
    int p = in->peer;
    SState *P = &x->st[p];
    if (!P->posted) continue;
    const PlanStream *pst = &x->s->st[p];
    PlanOp want = partner(in->op);
    for (int r = P->pc; r < P->gend; r++) {
      const PlanInstr *pin = &pst->ins[r];
      if (P->matched[r - P->pc] || pin->op != want || pin->peer != s) continue;
      bool sending = in->op == PI_SEND_ACT || in->op == PI_SEND_GRAD;
      if (pin->mb != in->mb) {
        int ss = sending ? s : p, sq = sending ? q : r;
        int rs = sending ? p : s, rq = sending ? r : q;
        const PlanInstr *rin = sending ? pin : in;
        exec_fail(x, ss, sq, "stage %d instruction %d (%s) expects microbatch %" PRId64
                  " first: sends and receives out of order", rs, rq, plan_op_name(rin->op), rin->mb);
        return -1;
      }
      int sender = sending ? s : p;
      double xfer = in->op == PI_SEND_ACT || in->op == PI_RECV_ACT
                        ? cost_of(x->c ? x->c->act_xfer : NULL, sender)
                        : cost_of(x->c ? x->c->grad_xfer : NULL, sender);
      double t = (S->post_time > P->post_time ? S->post_time : P->post_time) + xfer;
      S->matched[q - S->pc] = true, S->done[q - S->pc] = t, S->began[q - S->pc] = t - xfer;
      P->matched[r - P->pc] = true, P->done[r - P->pc] = t, P->began[r - P->pc] = t - xfer;
      SState *R = sending ? P : S;
      if (in->op == PI_SEND_ACT || in->op == PI_RECV_ACT) R->act_in[in->mb] = 1;
      else R->grad_in[in->mb] = 1;
      progress = 1;
      break;
    }
  }
  return progress;
}

static bool group_done(Exec *x, int s) {
  SState *S = &x->st[s];
  double end = S->post_time;
  for (int q = S->pc; q < S->gend; q++) {
    if (!S->matched[q - S->pc]) return false;
    if (S->done[q - S->pc] > end) end = S->done[q - S->pc];
  }
  /* The group's time as waits for a peer (no transfer moving) and transfers, in
   * order of start: a group of a send and a receive is mostly the receive's wait. */
  int n = S->gend - S->pc, order[MAX_GROUP];
  for (int k = 0; k < n; k++) {
    int j = k;
    for (; j > 0 && S->began[order[j - 1]] > S->began[k]; j--) order[j] = order[j - 1];
    order[j] = k;
  }
  double at = S->post_time;
  for (int k = 0; k < n; k++) {
    int q = order[k];
    if (S->began[q] > at) exec_event(x, s, 1, S->pc + q, at, S->began[q], true), at = S->began[q];
    if (S->done[q] > at) exec_event(x, s, 1, S->pc + q, at, S->done[q], false), at = S->done[q];
  }
  S->clock = end;
  S->pc = S->gend;
  S->posted = false;
  return true;
}

/* TIED_SYNC posts this stage's part of the sum of tied group g's gradient for a
 * batch and goes on; the collective completes when every member posted, and the
 * OPT_STEP that updates the parameter waits for that (a non-blocking collective:
 * NCCL on its own stream, MPI_Iallreduce). */
bool exec_tied_post(Exec *x, int s) {
  SState *S = &x->st[s];
  const PlanInstr *in = &x->s->st[s].ins[S->pc];
  const PlanStreamSpec *sp = &x->s->spec;
  int g = in->group, t = in->batch;
  if (g < 0 || g >= sp->ngroups) return exec_fail(x, s, S->pc, "tied group %d does not exist", g);
  if (!S->held[g]) return exec_fail(x, s, S->pc, "stage holds no part of tied group %d", g);
  if (t != S->tsync[g])
    return exec_fail(x, s, S->pc, "tied sync of batch %d, expected batch %d", t, S->tsync[g]);
  if (t >= sp->nbatches || S->bwd_count[t] != x->m ||
      (!plan_tied_deferred(sp, g) && t != S->steps))
    return exec_fail(x, s, S->pc, "tied sync of batch %d before its backwards", t);
  if (sp->replicas > 1 && S->allreduced < t + 1)
    return exec_fail(x, s, S->pc, "tied sync of batch %d before its all-reduce over the replicas", t);
  size_t at = (size_t)g * (size_t)sp->nbatches + (size_t)t;
  x->tposts[at]++;
  if (S->clock > x->tpost_max[at]) x->tpost_max[at] = S->clock;
  S->tsync[g]++;
  S->pc++;
  return true;
}

/* Whether the sum of group g for batch t is complete; *done = when. */
static bool tied_complete(const Exec *x, int g, int t, double *done) {
  const PlanStreamSpec *sp = &x->s->spec;
  size_t at = (size_t)g * (size_t)sp->nbatches + (size_t)t;
  if (x->tposts[at] < sp->groups[g].nstages) return false;
  *done = x->tpost_max[at] + cost_of(x->c ? x->c->tied : NULL, g);
  return true;
}

/* An OPT_STEP reading tied gradients must have posted their sync; it waits for the
 * sum. Returns 1 ready (clock advanced to the sum), 0 waiting, -1 error. */
int exec_tied_wait(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  const PlanStreamSpec *sp = &x->s->spec;
  int t = in->batch;
  if (t < 0 || t >= sp->nbatches) return exec_fail(x, s, S->pc, "step of batch %d", t), -1;
  double ready = S->clock;
  for (int g = 0; g < sp->ngroups; g++) {
    if (!S->held[g] || sp->groups[g].nstages < 2) continue;
    bool mine = in->group < 0 ? !plan_tied_deferred(sp, g) : g == in->group;
    if (!mine) continue;
    if (S->tsync[g] < t + 1)
      return exec_fail(x, s, S->pc, "step of batch %d before tied group %d's sync was posted", t, g), -1;
    double done;
    if (!tied_complete(x, g, t, &done)) return 0;
    if (done > ready) ready = done;
  }
  if (ready > S->clock) exec_event(x, s, 1, S->pc, S->clock, ready, true);
  S->clock = ready;
  return 1;
}

/* The runtime's OPT_STEP of batch t (not a deferred tied step) first exchanges the
 * squared gradient norm with every other stage of its pipeline (runtime/pipeline/pipeline.c,
 * batch_scale: for clipping, the console and the log), then updates: no stage
 * updates before every stage has reached its step, a barrier. Returns 1 when all
 * have (the clock advanced to the last arrival), 2 when this call arrived and the
 * others have not, 0 still waiting, -1 error. */
int exec_norm_wait(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  int t = in->batch, arrived = 0;
  if (t < 0 || t >= x->s->spec.nbatches || t > S->nposted)
    return exec_fail(x, s, S->pc, "step of batch %d, expected batch %d", t, S->nposted), -1;
  if (t == S->nposted) {
    x->nposts[t]++;
    if (S->clock > x->npost_max[t]) x->npost_max[t] = S->clock;
    S->nposted++;
    arrived = 2;
  }
  if (x->nposts[t] < x->d) return arrived;
  if (x->npost_max[t] > S->clock) exec_event(x, s, 1, S->pc, S->clock, x->npost_max[t], true);
  if (x->npost_max[t] > S->clock) S->clock = x->npost_max[t];
  return 1;
}

int exec_comm(Exec *x, int s) {
  int progress = 0;
  if (!x->st[s].posted) {
    if (!post(x, s)) return -1;
    progress = 1;
  }
  int r = match(x, s);
  if (r < 0) return -1;
  if (group_done(x, s)) return 1;
  return progress | r;
}
