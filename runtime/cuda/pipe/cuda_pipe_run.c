/* runtime/cuda/pipe/cuda_pipe_run.c — the CUDA pipeline interpreter of single-GPU mode
 * (cuda_pipe.h): every stage replica's instruction stream issued from one host thread
 * onto the device, the SRs walked round-robin over the same-GPU link (cuda_pipe_link.c).
 * The interpreter owns the per-instruction dispatch and the order of a step; the
 * device ops (cuda_pipe_dev.c) do the work and the link (x->link) moves what crosses
 * SRs, as cuda_pipe_internal.h describes.
 *
 * A step (OPT_STEP of batch t, on the SRs the link steps together: a whole pipeline on
 * one GPU, one SR over NCCL): deferred tied gradients move out of the gradient block
 * (batch t+1's backwards accumulate there next); every tied sum is posted and
 * finished (deferred ones too: the global norm needs them); Σg² per SR, summed over
 * the pipeline by the link, gives the global norm (always taken: the console and the
 * log report it; clipping scales by it); the update; the gradient block cleared. The
 * norm and the update run as CUDA graphs per SR (cuda_pipe_graph.c). Then, where the
 * link lets the host wait, the step's time and line.
 *
 * With --trace every instruction is bracketed by a pair of event records
 * (cuda_pipe_trace.c): FWD/BWD/OPT_STEP on the SR's stream; the link brackets its
 * copies and sums on the communication stream. */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sends and receives -------------------------------------------------------------- */

/* The group's messages into s->grp: per instruction, one per boundary tensor of its
 * role (runtime/pipeline/pipeline.c's post_p2p: the same tensors, the same order). */
static int group_messages(CpRun *x, CpSr *s, int *end) {
  int n = 0, j = s->pc;
  for (;; j++) {
    const PlanInstr *in = &s->S->ins[j];
    if (in->peer < 0 || in->peer >= x->p->d || in->peer == s->stage) {
      snprintf(x->err, sizeof x->err, "stage %d: a send/receive with stage %d", s->stage, in->peer);
      return -1;
    }
    PipeRole role = cp_p2p_role(in->op);
    for (int k = 0; k < s->ps->nbnd; k++) {
      const PipeBoundary *b = &s->ps->bnd[k];
      if (b->role != role) continue;
      PD_CHECK(n < s->grp_cap, "(send/receive group of %d messages)", n + 1);
      CpMsg *m = &s->grp[n++];
      *m = (CpMsg){.send = in->op == PI_SEND_ACT || in->op == PI_SEND_GRAD, .sr = s->idx, .bytes = b->bytes,
                   .in = in};
      if (!cp_bnd_ptr(x, s, in, k, &m->ptr)) return -1;
    }
    if (!in->with_next || j + 1 >= s->S->n) break;
  }
  *end = j;
  return n;
}

static CpStep run_p2p(CpRun *x, CpSr *s) {
  if (!s->grp_posted) {
    int n = group_messages(x, s, &s->grp_end);
    if (n < 0 || !x->link->p2p(x, s, n)) return CP_FAILED;
    s->grp_posted = true;
    if (s->grp_pending) return CP_POSTED;
  }
  if (s->grp_pending) return CP_BLOCKED;
  cp_trace_p2p_done(x, s, s->pc, s->grp_end);
  s->grp_posted = false;
  s->pc = s->grp_end + 1;
  return CP_DONE;
}

/* ---- the update ------------------------------------------------------------------------- */

/* After a step of replica 0: the step's time (one wait for the device; per batch of
 * the span since the last timed step) and its line. */
static bool step_end(CpRun *x, CpSr *s, int64_t t) {
  if (!x->link->may_wait(x, s)) return true;
  x->ops->sync(x->ops->dev);
  cp_trace_harvest(x); /* the device is idle: read the pairs (no wait of their own) */
  double now = pipe_now();
  x->step_ms[t] = (now - x->t_prev_step) * 1e3 / (double)(t > x->batch_prev ? t - x->batch_prev : 1);
  x->t_prev_step = now;
  x->batch_prev = t;
  return x->o->quiet || x->link->progress(x, s, t);
}

/* OPT_STEP(t) of the SRs the link steps together (all wait for it: the global norm
 * needs every stage's gradients, as the CPU executor's norm exchange does). */
static CpStep run_step(CpRun *x, CpSr *s, const PlanInstr *in) {
  const PipePlan *p = x->p;
  int64_t t = in->batch;
  int par = (int)(t % 2);
  CpSr *grp[CP_MAX_SR];
  int n = x->link->step_group(x, s, in, grp);
  if (!n) return CP_BLOCKED;
  for (int i = 0; i < n; i++) cp_trace_begin(x, grp[i], cp_cur(grp[i]), grp[i]->stream);
  for (int i = 0; i < n; i++) {
    CpSr *q = grp[i];
    for (int g = 0; g < p->ngroups; g++) {
      CpTied *T = &q->tied[g];
      if (T->param < 0) continue;
      if (T->deferred) { /* the member's part is final, as its TIED_SYNC says */
        CxPtr src = q->grads + (CxPtr)q->st->params[T->param].offset;
        x->ops->dtod(x->ops->dev, q->stream, q->tg[par] + T->tg_off, src, T->bytes);
        x->ops->memset0(x->ops->dev, q->stream, src, T->bytes);
      }
      PD_CHECK(T->state[par] != 2, "(tied group %d of batch %lld summed before its step)", g, (long long)t);
      x->link->tied_post(x, q, g, t);
    }
  }
  for (int g = 0; g < p->ngroups; g++) /* in group order, each once the first holder summed it */
    for (int i = 0; i < n; i++)
      if (grp[i]->tied[g].param >= 0) PD_CHECK(x->link->tied_sum(x, grp[i], g, t));
  double inv = 1.0 / (double)x->mref, scale = inv;
  for (int i = 0; i < n; i++) cp_norm(x, grp[i], t);
  double norm = sqrt(x->link->norm_total(x, grp, n)) * inv;
  if (s->replica == 0) x->grad_norm[t] = norm;
  if (x->tc.clip > 0 && norm > x->tc.clip) scale = inv * x->tc.clip / norm;
  for (int i = 0; i < n; i++) cp_step_scalars(x, grp[i], t, scale);
  for (int i = 0; i < n; i++) {
    CpSr *q = grp[i];
    const PlanInstr *qi = cp_cur(q);
    q->scale[par] = scale;
    cp_update(x, q, qi->vslot, qi->src_vslot, t);
    for (int g = 0; g < p->ngroups; g++)
      if (q->tied[g].param >= 0 && !q->tied[g].deferred) q->tied[g].state[par] = 0;
    x->ops->memset0(x->ops->dev, q->stream, q->grads, (size_t)q->st->blocks[BUF_GRADS]);
    q->newest = qi->vslot;
    cp_trace_end(x, q, qi, q->stream);
    q->pc++;
  }
  return step_end(x, s, t) ? CP_DONE : CP_FAILED;
}

/* OPT_STEP of deferred tied group g: W(t+1) of the tied parameter, after its sum. */
static CpStep run_tied_step(CpRun *x, CpSr *s, const PlanInstr *in) {
  int g = in->group;
  CpTied *T = &s->tied[g];
  if (T->param < 0) { /* not held here: nothing to do, an empty span */
    cp_trace_begin(x, s, in, s->stream);
    cp_trace_end(x, s, in, s->stream);
    return CP_DONE;
  }
  int64_t t = in->batch;
  int par = (int)(t % 2);
  if (!x->link->tied_sum(x, s, g, t)) return CP_BLOCKED;
  cp_trace_begin(x, s, in, s->stream); /* after the sum, which it waits for */
  CxPtr gr = cp_tied_buf(s, g, t);
  cp_step_param(x, s, T->param, gr, in->vslot, in->src_vslot, t, s->scale[par]);
  x->ops->memset0(x->ops->dev, s->stream, gr, T->bytes);
  cp_trace_end(x, s, in, s->stream);
  T->state[par] = 0;
  return CP_DONE;
}

/* ---- the interpreter ---------------------------------------------------------------------- */

static CpStep step_sr(CpRun *x, CpSr *s) {
  const PlanInstr *in = cp_cur(s);
  switch (in->op) {
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD: return run_p2p(x, s);
  case PI_FWD:
  case PI_BWD: {
    cp_trace_begin(x, s, in, s->stream);
    if (!(in->op == PI_FWD ? cp_run_fwd : cp_run_bwd)(x, s, in)) return CP_FAILED;
    cp_trace_end(x, s, in, s->stream);
    break;
  }
  case PI_ALLREDUCE: return x->link->allreduce(x, s, in);
  case PI_TIED_SYNC:
    /* no device work here: an empty span where the SR's stream is */
    cp_trace_begin(x, s, in, s->stream);
    cp_trace_end(x, s, in, s->stream);
    /* its part is final once this stage's step of the batch moved it (run_step) */
    if (in->group >= 0 && in->group < x->p->ngroups && s->tied[in->group].param >= 0 &&
        s->tied[in->group].state[in->batch % 2] == 0)
      x->link->tied_post(x, s, in->group, in->batch);
    break;
  case PI_OPT_STEP: {
    if (in->group < 0) return run_step(x, s, in);
    CpStep r = run_tied_step(x, s, in);
    if (r != CP_DONE) return r;
    break;
  }
  case PI_COUNT: PD_CHECK(0, "instruction %d", (int)in->op); break;
  }
  s->pc++;
  return CP_DONE;
}

static void describe_stall(CpRun *x) {
  size_t n = (size_t)snprintf(x->err, sizeof x->err, "single-GPU pipeline: no stage can proceed (the streams "
                              "deadlock):");
  for (int i = 0; i < x->nsr && n < sizeof x->err; i++) {
    const CpSr *s = &x->sr[i];
    const PlanInstr *in = cp_cur(s);
    char b[160];
    n += (size_t)snprintf(x->err + n, sizeof x->err - n, " stage %d replica %d at %s;", s->stage, s->replica,
                          in ? plan_instr_str(in, b, sizeof b) : "its end");
  }
}

bool cp_run(CpRun *x) {
  for (;;) {
    bool moved = false, done = true;
    for (int i = 0; i < x->nsr; i++) {
      CpSr *s = &x->sr[i];
      while (s->pc < s->S->n) {
        CpStep r = step_sr(x, s);
        if (r == CP_FAILED) return false;
        if (r != CP_BLOCKED) moved = true;
        if (r != CP_DONE) break;
      }
      if (s->pc < s->S->n) done = false;
    }
    if (done) {
      if (x->trace) { /* a stretch ends: read its pairs before cp_select moves the streams */
        x->ops->sync(x->ops->dev);
        cp_trace_harvest(x);
      }
      return true;
    }
    if (!moved) {
      describe_stall(x);
      return false;
    }
  }
}
