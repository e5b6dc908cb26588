/* runtime/cuda_pipe_run.c — single-GPU pipeline mode's interpreter (cuda_pipe.h): every
 * stage replica's instruction stream issued from one host thread onto the device.
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
 * posting order, a send/receive group completes when all its messages matched.
 *
 * With --trace every instruction is bracketed by a pair of event records
 * (cuda_pipe_trace.c): FWD/BWD/OPT_STEP on the SR's stream, a message's copy and the
 * all-reduce on the communication stream, inside the fences above. */
#include "runtime/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_ACT = 0, TAG_GRAD = 1 };

/* What one attempt at an SR's next instruction did. */
typedef enum CpStep {
  CP_BLOCKED, /* nothing: it waits for another SR */
  CP_POSTED,  /* posted messages but waits for their partners */
  CP_DONE,    /* advanced */
  CP_FAILED   /* x->err says why */
} CpStep;

static const PlanInstr *cur(const CpSr *s) { return s->pc < s->S->n ? &s->S->ins[s->pc] : NULL; }

static void launch(CpRun *x, int stream, void *k, int64_t n, void **args) {
  x->ops->launch(x->ops->dev, stream, k, cp_grid(n), CP_BLOCK, args);
}

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

/* ---- FWD / BWD ---------------------------------------------------------------------- */

static CxReplay replay(CpRun *x, CpSr *s, const PlanInstr *in) {
  int64_t m = x->p->m, t = (in->mb - 1) / m, jref = (int64_t)s->replica * m + (in->mb - 1) % m;
  CxReplay r = {.seed = x->tc.seed, .microbatch = (uint32_t)(t * x->mref + jref), .training = true,
                .stream = s->stream};
  r.base[BUF_PARAMS] = s->w[in->vslot];
  r.base[BUF_GRADS] = s->grads;
  r.base[BUF_STASH] = x->p->recompute ? s->full : s->stash[in->sslot < 0 ? 0 : in->sslot];
  r.base[BUF_WORK] = s->work;
  r.base[BUF_INPUTS] = s->inputs;
  r.base[BUF_BOUNDARY] = s->bnd;
  r.base[CX_SCRATCH] = s->scratch;
  return r;
}

/* With recomputation the slot keeps only the received input; put it back where the
 * program reads it. */
static void restore_input(CpRun *x, CpSr *s, int sslot) {
  for (int k = 0; k < s->ps->nbnd; k++)
    if (s->ps->bnd[k].role == PIPE_ACT_IN)
      x->ops->dtod(x->ops->dev, s->stream, s->full + (CxPtr)s->ps->bnd[k].offset,
                   s->stash[sslot] + (CxPtr)s->act_in_packed[k], (size_t)s->ps->bnd[k].bytes);
}

bool cp_run_fwd(CpRun *x, CpSr *s, const PlanInstr *in) {
  if (!cp_fill_inputs(x, s, in->mb)) return false;
  if (x->p->recompute && s->stage > 0) restore_input(x, s, in->sslot);
  CxReplay r = replay(x, s, in);
  cx_program_run(s->prog, CX_FORWARD, &r);
  if (s->st->has_loss) {
    CxPtr dst = s->loss + (CxPtr)(in->mb - 1) * 4, src = s->scratch + (CxPtr)cx_program_loss_offset(s->prog);
    int64_t one = 1;
    void *args[] = {&dst, &src, &one};
    launch(x, s->stream, cx_program_kernel(s->prog, "pkc_copy_f32"), 1, args);
  }
  return true;
}

bool cp_run_bwd(CpRun *x, CpSr *s, const PlanInstr *in) {
  if (!cp_fill_inputs(x, s, in->mb)) return false;
  CxReplay r = replay(x, s, in);
  if (x->p->recompute) { /* the forward again, same version and dropout key */
    if (s->stage > 0) restore_input(x, s, in->sslot);
    cx_program_run(s->prog, CX_FORWARD, &r);
  }
  cx_program_run(s->prog, CX_BACKWARD, &r);
  return true;
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
  if (x->nmsg == x->cap_msg) {
    x->cap_msg = x->cap_msg ? 2 * x->cap_msg : 64;
    x->msg = pd_realloc(x->msg, (size_t)x->cap_msg * sizeof *x->msg);
  }
  x->msg[x->nmsg++] = m;
  return true;
}

PipeRole cp_p2p_role(PlanOp op) {
  return op == PI_RECV_ACT ? PIPE_ACT_IN : op == PI_SEND_ACT ? PIPE_ACT_OUT : op == PI_RECV_GRAD ? PIPE_GRAD_IN
                                                                                         : PIPE_GRAD_OUT;
}

bool cp_bnd_ptr(CpRun *x, CpSr *s, const PlanInstr *in, int k, CxPtr *ptr) {
  const PipeBoundary *b = &s->ps->bnd[k];
  int sslot = s->mb_sslot[in->mb];
  if (b->role == PIPE_ACT_IN)
    *ptr = s->stash[sslot] + (CxPtr)(x->p->recompute ? s->act_in_packed[k] : b->offset);
  else if (b->cls == BUF_BOUNDARY)
    *ptr = s->bnd + (CxPtr)b->offset;
  else if (b->cls == BUF_STASH)
    *ptr = (x->p->recompute ? s->full : s->stash[sslot]) + (CxPtr)b->offset;
  else if (b->cls == BUF_WORK)
    *ptr = s->work + (CxPtr)b->offset;
  else {
    snprintf(x->err, sizeof x->err, "stage %d: a boundary tensor in the %s block", s->stage,
             buf_class_name((BufClass)b->cls));
    return false;
  }
  return true;
}

/* The messages of one send/receive instruction: one per boundary tensor of its role
 * (runtime/pipeline.c's post_p2p: the same tensors, the same order). */
static bool post_p2p(CpRun *x, CpSr *s, const PlanInstr *in) {
  PipeRole role = cp_p2p_role(in->op);
  bool send = in->op == PI_SEND_ACT || in->op == PI_SEND_GRAD;
  int tag = in->op == PI_RECV_ACT || in->op == PI_SEND_ACT ? TAG_ACT : TAG_GRAD;
  if (in->peer < 0 || in->peer >= x->p->d) {
    snprintf(x->err, sizeof x->err, "stage %d: a send/receive with stage %d", s->stage, in->peer);
    return false;
  }
  int peer = cp_sr(x, in->peer, s->replica)->idx;
  for (int k = 0; k < s->ps->nbnd; k++) {
    const PipeBoundary *b = &s->ps->bnd[k];
    if (b->role != role) continue;
    CxPtr ptr;
    if (!cp_bnd_ptr(x, s, in, k, &ptr)) return false;
    s->grp_pending++;
    CpMsg msg = {.from = send ? s->idx : peer, .to = send ? peer : s->idx, .tag = tag, .send = send, .sr = s->idx,
                 .ptr = ptr, .bytes = b->bytes, .in = in};
    if (!post(x, msg)) return false;
  }
  return true;
}

static CpStep run_p2p(CpRun *x, CpSr *s) {
  if (!s->grp_posted) {
    int j = s->pc;
    for (;;) {
      if (!post_p2p(x, s, &s->S->ins[j])) return CP_FAILED;
      if (!s->S->ins[j].with_next || j + 1 >= s->S->n) break;
      j++;
    }
    s->grp_posted = true;
    s->grp_end = j;
    if (s->grp_pending) return CP_POSTED;
  }
  if (s->grp_pending) return CP_BLOCKED;
  cp_trace_p2p_done(x, s, s->pc, s->grp_end);
  s->grp_posted = false;
  s->pc = s->grp_end + 1;
  return CP_DONE;
}

/* ---- collectives --------------------------------------------------------------------- */

static bool at_instr(const CpSr *s, PlanOp op, int batch, int group) {
  const PlanInstr *in = cur(s);
  return in && in->op == op && in->batch == batch && in->group == group;
}

/* Sum of the stage's gradients over its replicas, in replica order, into every replica. */
static CpStep run_allreduce(CpRun *x, CpSr *s, const PlanInstr *in) {
  const PipePlan *p = x->p;
  CpSr *rep[CP_MAX_SR];
  for (int r = 0; r < p->w; r++) {
    rep[r] = cp_sr(x, s->stage, r);
    if (!at_instr(rep[r], PI_ALLREDUCE, in->batch, in->group)) return CP_BLOCKED;
  }
  comm_after(x, rep, p->w);
  for (int r = 0; r < p->w; r++) cp_trace_begin(x, rep[r], cur(rep[r]), CP_COMM_STREAM);
  int64_t n = s->st->blocks[BUF_GRADS] / 4;
  void *axpy = cx_program_kernel(s->prog, "pkc_axpy_f32"), *copy = cx_program_kernel(s->prog, "pkc_copy_f32");
  float one = 1.0f;
  CxPtr y = rep[0]->grads;
  for (int r = 1; r < p->w; r++) {
    CxPtr xr = rep[r]->grads;
    void *args[] = {&y, &one, &xr, &n};
    launch(x, CP_COMM_STREAM, axpy, n, args);
  }
  for (int r = 1; r < p->w; r++) {
    CxPtr dst = rep[r]->grads;
    void *args[] = {&dst, &y, &n};
    launch(x, CP_COMM_STREAM, copy, n, args);
  }
  for (int r = 0; r < p->w; r++) cp_trace_end(x, rep[r], cur(rep[r]), CP_COMM_STREAM);
  srs_after_comm(x, rep, p->w);
  for (int r = 0; r < p->w; r++) rep[r]->pc++;
  return CP_DONE;
}

/* Where tied group g's gradient of batch t lies on SR s. */
CxPtr cp_tied_buf(const CpSr *s, int g, int64_t t) {
  const CpTied *T = &s->tied[g];
  return T->deferred ? s->tg[t % 2] + T->tg_off : s->grads + (CxPtr)s->st->params[T->param].offset;
}

/* The sum over the members of tied group g (of s's replica) for batch t, added in
 * ascending stage order into the first member's buffer and copied to the others, so
 * all members hold the same bits (runtime/pipeline.c's tied_finish adds in the same
 * order). Needs every member's part posted; false when one is not. */
static bool tied_sum(CpRun *x, const CpSr *s, int g, int64_t t) {
  const PlanTiedGroup *G = &x->p->groups[g];
  int par = (int)(t % 2);
  CpSr *mem[PLAN_MAX_TIED_SEGS];
  /* a sum sets every member to 2 and each member resets only its own state when it
   * used the sum, so 2 here means this batch's sum is in place */
  if (s->tied[g].state[par] == 2) return true;
  for (int q = 0; q < G->nstages; q++) {
    mem[q] = cp_sr(x, G->stages[q], s->replica);
    if (mem[q]->tied[g].state[par] != 1) return false;
  }
  comm_after(x, mem, G->nstages);
  int64_t n = (int64_t)(mem[0]->tied[g].bytes / 4);
  void *axpy = cx_program_kernel(s->prog, "pkc_axpy_f32"), *copy = cx_program_kernel(s->prog, "pkc_copy_f32");
  float one = 1.0f;
  CxPtr y = cp_tied_buf(mem[0], g, t);
  for (int q = 1; q < G->nstages; q++) {
    CxPtr xq = cp_tied_buf(mem[q], g, t);
    void *args[] = {&y, &one, &xq, &n};
    launch(x, CP_COMM_STREAM, axpy, n, args);
  }
  for (int q = 1; q < G->nstages; q++) {
    CxPtr dst = cp_tied_buf(mem[q], g, t);
    void *args[] = {&dst, &y, &n};
    launch(x, CP_COMM_STREAM, copy, n, args);
  }
  srs_after_comm(x, mem, G->nstages);
  for (int q = 0; q < G->nstages; q++) mem[q]->tied[g].state[par] = 2;
  return true;
}

/* ---- the update ------------------------------------------------------------------------- */

int cp_tied_group_of(const CpSr *s, int k, int ngroups) {
  for (int g = 0; g < ngroups; g++)
    if (s->tied[g].param == k) return g;
  return -1;
}

/* A tied parameter has a gradient on every stage holding it. */
static bool has_grad(const CpRun *x, const CpSr *s, int k) {
  return s->st->params[k].has_grad || cp_tied_group_of(s, k, x->p->ngroups) >= 0;
}

void cp_step_param(CpRun *x, CpSr *s, int k, CxPtr g, int vslot, int src, int64_t t, double scale) {
  const RtParam *pp = &s->st->params[k];
  CxPtr wout = s->w[vslot] + (CxPtr)pp->offset, win = s->w[src] + (CxPtr)pp->offset;
  int64_t n = pp->numel;
  if (!has_grad(x, s, k)) {
    if (wout != win) x->ops->dtod(x->ops->dev, s->stream, wout, win, (size_t)pp->bytes);
    return;
  }
  CxPtr m = s->adam_m + (CxPtr)pp->offset, v = s->adam_v + (CxPtr)pp->offset;
  double lr = rt_lr_at(&x->tc, t), b1 = x->tc.beta1, b2 = x->tc.beta2, eps = x->tc.eps, wd = x->tc.weight_decay;
  int decay = pp->decay;
  if (x->tc.optimizer == OPT_SGD) {
    void *args[] = {&wout, &win, &g, &m, &n, &lr, &b1, &wd, &decay, &scale};
    launch(x, s->stream, cx_program_kernel(s->prog, "pkc_sgd_step_f32"), n, args);
  } else {
    int64_t step = t + 1;
    double dc = x->tc.delay_comp;
    void *args[] = {&wout, &win, &g, &m, &v, &n, &lr, &b1, &b2, &eps, &wd, &decay, &step, &scale, &dc};
    launch(x, s->stream, cx_program_kernel(s->prog, "pkc_adamw_step_f32"), n, args);
  }
}

/* Σ g² of the SR's gradients (each tied parameter counted by its group's first stage,
 * after the sum), into s->norm, on its stream. */
void cp_launch_norm(CpRun *x, CpSr *s, int64_t t) {
  CxPtr part = s->parts;
  void *k_part = cx_program_kernel(s->prog, "pkc_sumsq_partial_f32");
  int np = 0;
  for (int k = 0; k < s->st->nparams; k++) {
    const RtParam *pp = &s->st->params[k];
    int g = cp_tied_group_of(s, k, x->p->ngroups);
    if (g >= 0 ? s->tied[g].member != 0 : !pp->has_grad) continue;
    CxPtr gr = g >= 0 ? cp_tied_buf(s, g, t) : s->grads + (CxPtr)pp->offset;
    int64_t n = pp->numel;
    unsigned grid = cp_grid(n);
    void *args[] = {&part, &gr, &n};
    x->ops->launch(x->ops->dev, s->stream, k_part, grid, CP_BLOCK, args);
    part += (CxPtr)grid * 8;
    np += (int)grid;
  }
  CxPtr out = s->norm, parts = s->parts;
  void *args[] = {&out, &parts, &np};
  if (np) x->ops->launch(x->ops->dev, s->stream, cx_program_kernel(s->prog, "pkc_sumsq_final_f32"), 1, 32, args);
  else x->ops->memset0(x->ops->dev, s->stream, s->norm, 8);
}

void cp_progress_line(CpRun *x, CpSr *own, int64_t t) {
  const PipePlan *p = x->p;
  int nrep = own ? 1 : p->w;
  double sum = 0;
  for (int r = 0; r < nrep; r++) {
    CpSr *last = own ? own : cp_sr(x, p->d - 1, r);
    x->ops->dtoh(x->ops->dev, x->host_loss, last->loss + (CxPtr)(t * p->m) * 4, (size_t)p->m * 4);
    for (int64_t j = 0; j < p->m; j++) sum += x->host_loss[j];
  }
  StepStats ss = {.loss = sum / (double)(p->m * nrep), .lr = rt_lr_at(&x->tc, t), .grad_norm = x->grad_norm[t],
                  .ms = x->step_ms[t]};
  (void)rt_log_step(x->console, t + 1, x->steps, &ss, pipe_tokens_per_step(p), pipe_flops_per_step(p), NAN);
}

/* OPT_STEP(t) of every stage of one pipeline at once (they all wait for it: the
 * global norm needs every stage's gradients, as the CPU executor's norm exchange does). */
static CpStep run_step(CpRun *x, CpSr *s, const PlanInstr *in) {
  const PipePlan *p = x->p;
  int64_t t = in->batch;
  int par = (int)(t % 2);
  CpSr *pipe[CP_MAX_SR];
  for (int st = 0; st < p->d; st++) {
    pipe[st] = cp_sr(x, st, s->replica);
    if (!at_instr(pipe[st], PI_OPT_STEP, in->batch, -1)) return CP_BLOCKED;
  }
  for (int st = 0; st < p->d; st++) cp_trace_begin(x, pipe[st], cur(pipe[st]), pipe[st]->stream);
  /* deferred tied gradients move out of the gradient block (batch t+1's backwards
   * accumulate there next): the member's part is final, as its TIED_SYNC says */
  for (int st = 0; st < p->d; st++) {
    CpSr *q = pipe[st];
    for (int g = 0; g < p->ngroups; g++) {
      CpTied *T = &q->tied[g];
      if (T->param < 0) continue;
      if (T->deferred) {
        CxPtr src = q->grads + (CxPtr)q->st->params[T->param].offset;
        x->ops->dtod(x->ops->dev, q->stream, q->tg[par] + T->tg_off, src, T->bytes);
        x->ops->memset0(x->ops->dev, q->stream, src, T->bytes);
      }
      PD_CHECK(T->state[par] != 2, "(tied group %d of batch %lld summed before its step)", g, (long long)t);
      T->state[par] = 1;
    }
  }
  /* tied sums the step needs now: all undeferred ones, deferred ones for the norm */
  for (int g = 0; g < p->ngroups; g++) {
    const CpSr *holder = NULL;
    for (int st = 0; st < p->d && !holder; st++)
      if (pipe[st]->tied[g].param >= 0) holder = pipe[st];
    /* deferred ones too: the global norm (clipping, the console, the log) needs them */
    if (holder) PD_CHECK(tied_sum(x, holder, g, t));
  }
  double inv = 1.0 / (double)x->mref, scale = inv;
  { /* the norm with clipping off too: the console and the log report it */
    for (int st = 0; st < p->d; st++) cp_launch_norm(x, pipe[st], t);
    double tot = 0;
    for (int st = 0; st < p->d; st++) {
      double part = 0;
      x->ops->dtoh(x->ops->dev, &part, pipe[st]->norm, 8); /* waits for the device */
      tot += part;
    }
    double norm = sqrt(tot) * inv;
    if (s->replica == 0) x->grad_norm[t] = norm;
    if (x->tc.clip > 0 && norm > x->tc.clip) scale = inv * x->tc.clip / norm;
  }
  for (int st = 0; st < p->d; st++) {
    CpSr *q = pipe[st];
    const PlanInstr *qi = cur(q);
    q->scale[par] = scale;
    for (int k = 0; k < q->st->nparams; k++) {
      int g = cp_tied_group_of(q, k, p->ngroups);
      if (g >= 0 && q->tied[g].deferred) continue;
      cp_step_param(x, q, k, q->grads + (CxPtr)q->st->params[k].offset, qi->vslot, qi->src_vslot, t, scale);
    }
    for (int g = 0; g < p->ngroups; g++)
      if (q->tied[g].param >= 0 && !q->tied[g].deferred) q->tied[g].state[par] = 0;
    x->ops->memset0(x->ops->dev, q->stream, q->grads, (size_t)q->st->blocks[BUF_GRADS]);
    q->newest = qi->vslot;
    cp_trace_end(x, q, qi, q->stream);
    q->pc++;
  }
  if (s->replica == 0) { /* steady-state time per batch: one wait for the device per batch */
    x->ops->sync(x->ops->dev);
    cp_trace_harvest(x); /* the device is idle: read the pairs (no wait of their own) */
    double now = pipe_now();
    if (t == 0) x->t_first_step = now;
    else x->steps_timed++;
    x->t_last_step = now;
    x->step_ms[t] = (now - x->t_prev_step) * 1e3;
    x->t_prev_step = now;
    if (!x->o->quiet) cp_progress_line(x, NULL, t);
  }
  return CP_DONE;
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
  if (!tied_sum(x, s, g, t)) return CP_BLOCKED;
  cp_trace_begin(x, s, in, s->stream); /* after the sum (communication stream), which it waits for */
  CxPtr gr = cp_tied_buf(s, g, t);
  cp_step_param(x, s, T->param, gr, in->vslot, in->src_vslot, t, s->scale[par]);
  x->ops->memset0(x->ops->dev, s->stream, gr, T->bytes);
  cp_trace_end(x, s, in, s->stream);
  T->state[par] = 0;
  return CP_DONE;
}

/* ---- the interpreter ---------------------------------------------------------------------- */

static CpStep step_sr(CpRun *x, CpSr *s) {
  const PlanInstr *in = cur(s);
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
  case PI_ALLREDUCE: return run_allreduce(x, s, in);
  case PI_TIED_SYNC:
    /* no device work: an empty span where the SR's stream is */
    cp_trace_begin(x, s, in, s->stream);
    cp_trace_end(x, s, in, s->stream);
    /* its part is final once this stage's step of the batch moved it (run_step) */
    if (in->group >= 0 && in->group < x->p->ngroups && s->tied[in->group].param >= 0 &&
        s->tied[in->group].state[in->batch % 2] == 0)
      s->tied[in->group].state[in->batch % 2] = 1;
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
    const PlanInstr *in = cur(s);
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
