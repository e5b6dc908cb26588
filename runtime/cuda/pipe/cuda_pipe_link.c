/* runtime/cuda/pipe/cuda_pipe_link.c — the same-GPU link of the CUDA pipeline interpreter
 * (cuda_pipe_internal.h's CpLink): single-GPU pipeline mode, every stage replica in
 * this process on one device.
 *
 * Ordering on the device. Each SR's work goes to its own stream in its stream's
 * order, which is all FWD/BWD/OPT_STEP of one SR need. Whatever crosses SRs runs on
 * the communication stream, fenced on both sides:
 *     record ev(SR) on each SR involved; comm waits for them;
 *     the copies/adds on comm; record comm_ev; each SR involved waits for comm_ev
 * so the copy sees everything the SRs issued before it (the sender's FWD that wrote
 * the boundary, the receiver's BWD that last read the stash slot) and nothing either
 * SR issues afterwards (the sender's next FWD overwriting its boundary) can start
 * before it. One event per SR is enough: a wait captures the event's latest record.
 *
 * Ordering on the host. An instruction that depends on another SR (a receive, a
 * collective) blocks its SR until the other side was issued; then the device order
 * above carries the dependency. Matching is MPI's: per (sender, receiver, kind) in
 * posting order, a send/receive group completes when all its messages matched. The
 * replica all-reduce and the tied sums are ordered sums (cp_dev_sum_into: replica
 * order, ascending stage order: runtime/pipeline/pipeline.c's order); OPT_STEP waits until
 * every stage of its pipeline is there (the global norm needs them all).
 *
 * With --trace every message's copy and the all-reduce are bracketed by event pairs
 * on the communication stream, inside the fences above (cuda_pipe_trace.c). */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <stdlib.h>
#include <string.h>

enum { TAG_ACT = 0, TAG_GRAD = 1 };

/* ---- fences between SR streams and the communication stream ------------------------- */

static void comm_after(CpRun *x, CpSr **srs, int n) {
  const CxDeviceOps *ops = x->ops;
  for (int i = 0; i < n; i++) {
    ops->event_record(ops->dev, srs[i]->ev, srs[i]->stream);
    ops->stream_wait(ops->dev, CP_COMM_STREAM, srs[i]->ev);
  }
}

static void srs_after_comm(CpRun *x, CpSr **srs, int n) {
  const CxDeviceOps *ops = x->ops;
  ops->event_record(ops->dev, x->comm_ev, CP_COMM_STREAM);
  for (int i = 0; i < n; i++) ops->stream_wait(ops->dev, srs[i]->stream, x->comm_ev);
}

/* ---- sends and receives -------------------------------------------------------------- */

static void copy_message(CpRun *x, const CpMsg *snd, const CpMsg *rcv) {
  CpSr *both[2] = {&x->sr[snd->sr], &x->sr[rcv->sr]};
  comm_after(x, both, 2);
  cp_trace_p2p(x, both[0], snd->in, false);
  cp_trace_p2p(x, both[1], rcv->in, false);
  x->ops->dtod(x->ops->dev, CP_COMM_STREAM, rcv->ptr, snd->ptr, (size_t)snd->bytes);
  cp_trace_p2p(x, both[0], snd->in, true);
  cp_trace_p2p(x, both[1], rcv->in, true);
  srs_after_comm(x, both, 2);
  both[0]->grp_pending--;
  both[1]->grp_pending--;
}

/* Posts one message; matches it with the oldest pending partner. */
static bool post(CpRun *x, CpMsg m) {
  for (int i = 0; i < x->nmsg; i++) {
    CpMsg *o = &x->msg[i];
    if (o->from != m.from || o->to != m.to || o->tag != m.tag || o->send == m.send) continue;
    const CpMsg *snd = m.send ? &m : o, *rcv = m.send ? o : &m;
    if (snd->bytes != rcv->bytes) {
      snprintf(x->err, sizeof x->err, "stage %d sends %lld bytes where stage %d receives %lld (%s): the stages' "
               "boundaries disagree (recompile the plan)", x->sr[snd->sr].stage, (long long)snd->bytes,
               x->sr[rcv->sr].stage, (long long)rcv->bytes, m.tag == TAG_ACT ? "activation" : "gradient");
      return false;
    }
    copy_message(x, snd, rcv);
    memmove(o, o + 1, (size_t)(x->nmsg - i - 1) * sizeof *o);
    x->nmsg--;
    return true;
  }
  if (x->nmsg == x->cap_msg) { /* grows to the most ever pending, then stays */
    x->cap_msg = x->cap_msg ? 2 * x->cap_msg : 64;
    x->msg = pd_realloc(x->msg, (size_t)x->cap_msg * sizeof *x->msg);
  }
  x->msg[x->nmsg++] = m;
  return true;
}

static bool local_p2p(CpRun *x, CpSr *s, int n) {
  for (int i = 0; i < n; i++) {
    CpMsg m = s->grp[i];
    const PlanInstr *in = m.in;
    int peer = cp_sr(x, in->peer, s->replica)->idx;
    m.from = m.send ? s->idx : peer;
    m.to = m.send ? peer : s->idx;
    m.tag = in->op == PI_RECV_ACT || in->op == PI_SEND_ACT ? TAG_ACT : TAG_GRAD;
    s->grp_pending++;
    if (!post(x, m)) return false;
  }
  return true;
}

/* ---- collectives --------------------------------------------------------------------- */

/* Sum of the stage's gradients over its replicas, in replica order, into every replica. */
static CpStep local_allreduce(CpRun *x, CpSr *s, const PlanInstr *in) {
  const PipePlan *p = x->p;
  CpSr *rep[CP_MAX_SR];
  CxPtr buf[CP_MAX_SR];
  for (int r = 0; r < p->w; r++) {
    rep[r] = cp_sr(x, s->stage, r);
    if (!cp_at_instr(rep[r], PI_ALLREDUCE, in->batch, in->group)) return CP_BLOCKED;
    buf[r] = rep[r]->grads;
  }
  comm_after(x, rep, p->w);
  for (int r = 0; r < p->w; r++) cp_trace_begin(x, rep[r], cp_cur(rep[r]), CP_COMM_STREAM);
  cp_dev_sum_into(x, s->prog, CP_COMM_STREAM, buf, p->w, s->st->blocks[BUF_GRADS] / 4);
  for (int r = 0; r < p->w; r++) cp_trace_end(x, rep[r], cp_cur(rep[r]), CP_COMM_STREAM);
  srs_after_comm(x, rep, p->w);
  for (int r = 0; r < p->w; r++) rep[r]->pc++;
  return CP_DONE;
}

/* Its part is final: the sum happens once every member's is (local_tied_sum). */
static void local_tied_post(CpRun *x, CpSr *s, int g, int64_t t) {
  (void)x;
  if (s->tied[g].state[t % 2] == 0) s->tied[g].state[t % 2] = 1;
}

/* The sum over the members of tied group g (of s's replica) for batch t, added in
 * ascending stage order into the first member's buffer and copied to the others, so
 * all members hold the same bits (runtime/pipeline/pipeline.c's tied_finish adds in the same
 * order). Needs every member's part posted; false when one is not. */
static bool local_tied_sum(CpRun *x, CpSr *s, int g, int64_t t) {
  const PlanTiedGroup *G = &x->p->groups[g];
  int par = (int)(t % 2);
  CpSr *mem[PLAN_MAX_TIED_SEGS];
  CxPtr buf[PLAN_MAX_TIED_SEGS];
  /* a sum sets every member to 2 and each member resets only its own state when it
   * used the sum, so 2 here means this batch's sum is in place */
  if (s->tied[g].state[par] == 2) return true;
  for (int q = 0; q < G->nstages; q++) {
    mem[q] = cp_sr(x, G->stages[q], s->replica);
    if (mem[q]->tied[g].state[par] != 1) return false;
    buf[q] = cp_tied_buf(mem[q], g, t);
  }
  comm_after(x, mem, G->nstages);
  cp_dev_sum_into(x, s->prog, CP_COMM_STREAM, buf, G->nstages, (int64_t)(mem[0]->tied[g].bytes / 4));
  srs_after_comm(x, mem, G->nstages);
  for (int q = 0; q < G->nstages; q++) mem[q]->tied[g].state[par] = 2;
  return true;
}

/* OPT_STEP(t) of every stage of one pipeline at once (they all wait for it: the
 * global norm needs every stage's gradients, as the CPU executor's norm exchange does). */
static int local_step_group(CpRun *x, CpSr *s, const PlanInstr *in, CpSr **grp) {
  for (int st = 0; st < x->p->d; st++) {
    grp[st] = cp_sr(x, st, s->replica);
    if (!cp_at_instr(grp[st], PI_OPT_STEP, in->batch, -1)) return 0;
  }
  return x->p->d;
}

static double local_norm_total(CpRun *x, CpSr **grp, int n) {
  double tot = 0;
  for (int st = 0; st < n; st++) {
    double part = 0;
    x->ops->dtoh(x->ops->dev, &part, grp[st]->norm, 8); /* waits for the device */
    tot += part;
  }
  return tot;
}

/* Replica 0's step times the batch: one wait for the device per batch. */
static bool local_may_wait(CpRun *x, const CpSr *s) {
  (void)x;
  return s->replica == 0;
}

/* The global loss: every replica's last stage is on this GPU. */
static bool local_progress(CpRun *x, CpSr *s, int64_t t) {
  (void)s;
  double sum = 0;
  for (int r = 0; r < x->p->w; r++) cp_add_losses(x, cp_sr(x, x->p->d - 1, r), t, &sum);
  cp_progress_line(x, sum, x->p->w, t);
  return true;
}

const CpLink cp_link_local = {
    .p2p = local_p2p,
    .allreduce = local_allreduce,
    .tied_post = local_tied_post,
    .tied_sum = local_tied_sum,
    .step_group = local_step_group,
    .norm_total = local_norm_total,
    .may_wait = local_may_wait,
    .progress = local_progress,
};
