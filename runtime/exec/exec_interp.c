/* runtime/exec/exec_interp.c — the interpreter of one rank's instruction stream over
 * its device and its link (runtime/exec/exec.h; what a run computes:
 * docs/pipelines.md, "How a rank runs a plan").
 *
 * The program's block bases point into this rank's arena: params at the instruction's
 * weight slot, stash at its stash slot (recomputing: one full activation block, the
 * slot's stashed input copied in), the boundary block where outgoing activations and
 * gradients sit; messages go straight from and into those places. Inputs are refilled
 * before a FWD and again before its BWD, so one inputs block serves any number of
 * microbatches in flight. Invariants the schedule gives (the planner's verifier checks
 * them): a group of sends/receives completes before the next instruction, so the one
 * boundary block is never overwritten under a message; batch t's backwards come before
 * OPT_STEP(t) and batch t+1's after it, so the gradient block holds exactly batch t
 * there (and --log-json's hand-off can run at each OPT_STEP's end: pipe_log_step). */
#include "runtime/exec/exec.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/exec/exec_rank.h"


/* ---- one microbatch ------------------------------------------------------------------ */

/* Replica r's j-th microbatch of batch t is the reference's microbatch r·m + j. */
static void mb_index(const PipeRank *R, int64_t k, int64_t *t, int64_t *jref) {
  int64_t m = R->pp->m;
  *t = (k - 1) / m;
  *jref = (int64_t)R->replica * m + (k - 1) % m;
}

static void fill_inputs(PipeRank *R, int64_t k) {
  if (!R->T) return;
  int64_t t, jref;
  mb_index(R, k, &t, &jref);
  int64_t first = t * R->pp->b * R->mref + jref * R->pp->b;
  R->dev->ops->load_samples(R->dev, R->inputs, R->dl, first, R->pp->b);
}

static ExecPass make_pass(PipeRank *R, int64_t k, int vslot, int sslot, double *loss) {
  int64_t t, jref;
  mb_index(R, k, &t, &jref);
  ExecPass p = {.mb = t * R->mref + jref, .seed = R->tc.seed, .training = true, .loss = loss}; /* the reference's index */
  for (int c = 0; c < BUF_CLASS_COUNT; c++)
    if (c != BUF_NONE) p.block[c] = pipe_block_base(R, c, vslot, sslot);
  return p;
}

/* With recomputation the slot keeps only the received input; put it back where the
 * program reads it. */
static void restore_input(PipeRank *R, int sslot) {
  const PipeStage *ps = &R->pp->st[R->stage];
  for (int k = 0; k < ps->nbnd; k++)
    if (ps->bnd[k].role == PIPE_ACT_IN)
      R->dev->ops->copy(R->dev, R->full + ps->bnd[k].offset, R->stash[sslot] + R->act_in_packed[k],
                        (uint64_t)ps->bnd[k].bytes);
}

/* ---- the per-step checks of every mode ---------------------------------------------- */

/* Stops the run with msg as its root cause: every other rank is aborted and ends
 * with it (the driver prints R->err once, exit status 1). */
static bool stop_run(PipeRank *R, const char *msg) {
  if (!R->failed) {
    R->failed = R->stopped = true;
    snprintf(R->err, sizeof R->err, "%s", msg);
    R->link->ops->abort(R->link, R->err);
  }
  return false;
}

/* A SIGINT/SIGTERM caught (transport_sys.c's flag): the run stops here, after batch t's
 * step, a safe point in every mode (a rank with no transport wait to notice it, as a
 * one-stage run, would otherwise train on to the end). The tool exits 128 + the signal;
 * no --save checkpoint is written (the other ranks may stop mid-step). */
static bool interrupted(PipeRank *R, int64_t t) {
  char msg[160];
  int sig = transport_interrupted();
  snprintf(msg, sizeof msg, "interrupted by %s after step %lld of %lld; %s", sig == SIGINT ? "SIGINT" : "SIGTERM",
           (long long)t + 1, (long long)R->steps, R->o->save_path ? "no checkpoint written" : "stopped");
  return stop_run(R, msg);
}

/* Token ids or targets outside the vocabulary, checked after every pass that reads
 * them (stage 0's tokens, the last stage's targets), so the message names the step. */
static bool check_ids(PipeRank *R, const PlanInstr *in, int64_t bad) {
  R->bad_ids += bad;
  if (!bad) return true;
  char msg[sizeof R->err];
  snprintf(msg, sizeof msg, "%s: %lld token ids or targets outside the model's vocabulary in step %lld",
           R->o->data_path ? R->o->data_path : "the training data", (long long)bad, (long long)in->batch + 1);
  return stop_run(R, msg);
}

static bool run_fwd(PipeRank *R, const PlanInstr *in) {
  fill_inputs(R, in->mb);
  if (R->pp->recompute && R->stage > 0) restore_input(R, in->sslot);
  /* the loss lands in R->loss by the step's norm (a GPU's: exec.h, late) */
  int64_t t = (in->mb - 1) / R->pp->m, j = (in->mb - 1) % R->pp->m;
  ExecPass c = make_pass(R, in->mb, in->vslot, in->sslot, R->st->has_loss ? &R->loss[(t - R->first) * R->pp->m + j] : NULL);
  R->dev->ops->forward(R->dev, &c);
  return check_ids(R, in, c.bad_ids);
}

static bool run_bwd(PipeRank *R, const PlanInstr *in) {
  fill_inputs(R, in->mb);
  if (R->pp->recompute) {
    /* the forward again, same version and dropout key: the activations it stashes
     * are bit-identical to the first run's */
    if (R->stage > 0) restore_input(R, in->sslot);
    ExecPass f = make_pass(R, in->mb, in->vslot, in->sslot, NULL);
    R->dev->ops->forward(R->dev, &f);
  }
  ExecPass c = make_pass(R, in->mb, in->vslot, in->sslot, NULL);
  R->dev->ops->backward(R->dev, &c);
  /* a tied parameter's share is already in R->grads (the program accumulates it) */
  return check_ids(R, in, c.bad_ids);
}

/* ---- communication ------------------------------------------------------------------- */

/* Posts a send (is_send) or a receive of the message with stage `stage` of this
 * replica on the link; false on a failure (R->err). */
static bool post(PipeRank *R, bool is_send, int stage, int tag, void *buf, size_t bytes, const char *what,
                 ExecReq **req) {
  int peer = R->pp->st[stage].rank_of_replica[R->replica];
  return pipe_transport_ok(R, R->link->ops->post(R->link, is_send, peer, tag, buf, bytes, what, req));
}

/* Posts one send/receive instruction's messages; returns false on failure. */
static bool post_p2p(PipeRank *R, const PlanInstr *in, int *nreq) {
  const PipeStage *ps = &R->pp->st[R->stage];
  PipeRole role = in->op == PI_RECV_ACT ? PIPE_ACT_IN : in->op == PI_SEND_ACT ? PIPE_ACT_OUT
                  : in->op == PI_RECV_GRAD ? PIPE_GRAD_IN : PIPE_GRAD_OUT;
  bool send = in->op == PI_SEND_ACT || in->op == PI_SEND_GRAD;
  int tag = in->op == PI_RECV_ACT || in->op == PI_SEND_ACT ? PIPE_TAG_ACT : PIPE_TAG_GRAD;
  /* the stash slot of the microbatch's forward (receives land in it directly) */
  int sslot = R->mb_sslot ? R->mb_sslot[in->mb] : 0;
  for (int k = 0; k < ps->nbnd; k++) {
    const PipeBoundary *b = &ps->bnd[k];
    if (b->role != role) continue;
    char *base;
    if (role == PIPE_ACT_IN)
      base = R->pp->recompute ? R->stash[sslot] + R->act_in_packed[k] : R->stash[sslot] + b->offset;
    else
      base = pipe_block_base(R, b->cls, -1, sslot) + b->offset;
    char what[96];
    snprintf(what, sizeof what, "%s of microbatch %lld %s stage %d", tag == PIPE_TAG_ACT ? "activation" : "gradient",
             (long long)in->mb, send ? "for" : "from", in->peer);
    ExecReq *rq = NULL;
    if (!post(R, send, in->peer, tag, base, (size_t)b->bytes, what, &rq)) return false;
    R->reqs[(*nreq)++] = rq;
  }
  return true;
}

/* Sum of tied group g's gradient over the stages holding it: every member sends its
 * part to every other and adds them all in ascending stage order, so all members get
 * the same bits. Posted by TIED_SYNC, finished by the OPT_STEP that needs it. */
static char *tied_buf(PipeRank *R, int g, int64_t t) {
  PipeTied *T = &R->tied[g];
  return T->deferred ? R->tg[t % 2] + T->tg_off : R->grads + R->st->params[T->param].offset;
}

static bool tied_post(PipeRank *R, int g, int64_t t) {
  PipeTied *T = &R->tied[g];
  int par = (int)(t % 2);
  if (T->state[par] != 0) return true;
  const PlanTiedGroup *G = &R->pp->groups[g];
  char *buf = tied_buf(R, g, t);
  int n = 0;
  for (int q = 0; q < G->nstages; q++) {
    if (q == T->member) continue;
    char what[96];
    snprintf(what, sizeof what, "tied gradient '%s' of batch %lld from stage %d", R->pp->group_names[g],
             (long long)t, G->stages[q]);
    char *rx = R->tied_rx[par] + T->rx_off + (uint64_t)n / 2 * rt_align256(T->bytes);
    if (!post(R, true, G->stages[q], PIPE_TAG_TIED + g, buf, T->bytes, what, &T->req[par][n++])) return false;
    if (!post(R, false, G->stages[q], PIPE_TAG_TIED + g, rx, T->bytes, what, &T->req[par][n++])) return false;
  }
  T->nreq[par] = n;
  T->state[par] = 1;
  return true;
}

static bool tied_finish(PipeRank *R, int g, int64_t t) {
  PipeTied *T = &R->tied[g];
  int par = (int)(t % 2);
  if (T->state[par] == 0 && !tied_post(R, g, t)) return false;
  if (T->state[par] == 2) return true;
  if (!pipe_transport_ok(R, R->link->ops->waitall(R->link, T->req[par], T->nreq[par]))) return false;
  const PlanTiedGroup *G = &R->pp->groups[g];
  float *mine = (float *)(void *)tied_buf(R, g, t);
  const float *src[PLAN_MAX_TIED_SEGS];
  int n = 0;
  for (int q = 0; q < G->nstages; q++)
    src[q] = q == T->member ? mine : (const float *)(const void *)(R->tied_rx[par] + T->rx_off + (uint64_t)n++ * rt_align256(T->bytes));
  R->dev->ops->sum_ordered(R->dev, mine, src, G->nstages, (int64_t)(T->bytes / 4));
  T->state[par] = 2;
  return true;
}

/* ---- the update ------------------------------------------------------------------------ */

/* Whether parameter k is stepped apart (a deferred tied group's). */
static int deferred_group_of(const PipeRank *R, int k) {
  for (int g = 0; g < R->pp->ngroups; g++)
    if (R->tied[g].param == k && R->tied[g].deferred) return g;
  return -1;
}

static int tied_group_of(const PipeRank *R, int k) {
  for (int g = 0; g < R->pp->ngroups; g++)
    if (R->tied[g].param == k) return g;
  return -1;
}

/* A tied parameter has a gradient on every stage holding it (its program accumulates
 * its share there), whatever the program's has_grad says. */
static bool has_grad(const PipeRank *R, int k) { return R->st->params[k].has_grad || tied_group_of(R, k) >= 0; }

/* Parameter k's step of batch t (gradient g, weight version src -> vslot) appended to
 * R->opt[*n] for one opt_step call; one without a gradient keeps its value (g NULL:
 * the device copies it into the other version). */
static void step_param(PipeRank *R, int k, const float *g, int vslot, int src, int64_t t, double scale, int *n) {
  const RtParam *pp = &R->st->params[k];
  float *wout = (float *)(void *)(R->w[vslot] + pp->offset);
  const float *win = (const float *)(const void *)(R->w[src] + pp->offset);
  /* 2bw: batch t's gradient was taken at W(t) in a flushed start; weight prediction
   * steps from the master (src), which the device then updates */
  bool fresh = plan_batch_fresh(&R->spec, t);
  float *master = R->spec.predict ? (float *)(void *)(R->w[PLAN_MASTER_VSLOT] + pp->offset) : NULL;
  /* the slot written is next read by batch t+1 in a flushed start (it runs on W(t+1)
   * itself), else by batch t+2 (predicted) */
  bool reader_fresh = plan_batch_fresh(&R->spec, t + 1);
  R->opt[(*n)++] = (ExecOptStep){.tc = &R->tc, .param = pp, .wout = wout, .win = win, .g = has_grad(R, k) ? g : NULL,
                                 .m = (float *)(void *)(R->adam_m + pp->offset),
                                 .v = (float *)(void *)(R->adam_v + pp->offset), .t = t, .scale = scale,
                                 .fresh = fresh, .master = master, .predict = reader_fresh ? 0 : R->tc.predict};
}

/* 1/(w·m), times the clip factor of the global norm over every stage (the
 * reference's rule). Tied gradients are complete here and counted once. The norm
 * is taken with clipping off too: the console and the log report it. */
static bool batch_scale(PipeRank *R, int64_t t, double *scale) {
  double inv = 1.0 / (double)R->mref;
  *scale = inv;
  int nx = 0;
  for (int k = 0; k < R->st->nparams; k++) {
    const RtParam *pp = &R->st->params[k];
    if (!has_grad(R, k)) continue;
    int g = tied_group_of(R, k);
    if (g >= 0 && R->tied[g].member != 0) continue; /* the group's first stage counts it */
    R->norm_x[nx] = g >= 0 ? (const float *)(const void *)tied_buf(R, g, t)
                           : (const float *)(const void *)(R->grads + pp->offset);
    R->norm_n[nx++] = pp->numel;
  }
  double ss = R->dev->ops->sumsq(R->dev, R->norm_x, R->norm_n, nx);
  int d = R->pp->d;
  double *part = R->norm_part;
  part[R->stage] = ss;
  ExecReq **rq = R->norm_req;
  int n = 0;
  for (int s = 0; s < d; s++) {
    if (s == R->stage) continue;
    char what[64];
    snprintf(what, sizeof what, "gradient norm of batch %lld from stage %d", (long long)t, s);
    if (!post(R, true, s, PIPE_TAG_NORM, &part[R->stage], sizeof(double), what, &rq[n++])) return false;
    if (!post(R, false, s, PIPE_TAG_NORM, &part[s], sizeof(double), what, &rq[n++])) return false;
  }
  if (n && !pipe_transport_ok(R, R->link->ops->waitall(R->link, rq, n))) return false;
  double tot = 0;
  for (int s = 0; s < d; s++) tot += part[s];
  double norm = sqrt(tot) * inv;
  R->grad_norm[t - R->first] = norm;
  if (R->tc.clip > 0 && norm > R->tc.clip) *scale = inv * R->tc.clip / norm;
  return true;
}

/* The end of batch t on a last stage: the global loss, its divergence check and the
 * step line. The last stage of every other replica sends its share to replica 0's,
 * which checks the mean (one rank stops the run, with one message in every mode and
 * with -q too) and prints (runtime/core/console.c). The replicas' last stages all reach
 * OPT_STEP(t) after batch t's all-reduce, so the small message waits for nothing else. */
static bool step_loss(PipeRank *R, int64_t t) {
  const PipePlan *p = R->pp;
  double sum = 0;
  for (int64_t j = 0; j < p->m; j++) sum += R->loss[(t - R->first) * p->m + j];
  const int *last = p->st[p->d - 1].rank_of_replica;
  char what[64];
  snprintf(what, sizeof what, "loss of batch %lld", (long long)t);
  if (R->replica != 0)
    return pipe_transport_ok(R, R->link->ops->send(R->link, last[0], PIPE_TAG_LOSS, &sum, sizeof sum, what));
  for (int rep = 1; rep < p->w; rep++) {
    double part = 0;
    if (!pipe_transport_ok(R, R->link->ops->recv(R->link, last[rep], PIPE_TAG_LOSS, &part, sizeof part, what))) return false;
    sum += part;
  }
  double loss = sum / (double)R->mref;
  char msg[128];
  if (!rt_loss_ok(loss, t, msg, sizeof msg)) return stop_run(R, msg);
  if (R->o->quiet) return true;
  StepStats ss = {.loss = loss, .lr = rt_lr_at(&R->tc, t), .grad_norm = R->grad_norm[t - R->first],
                  .ms = R->step_ms[t - R->first]};
  if (!rt_log_step(R->console, t + 1, R->steps, &ss, pipe_tokens_per_step(p), pipe_flops_per_step(p), NAN))
    return false; /* no file: not reached */
  return true;
}
static bool run_step(PipeRank *R, const PlanInstr *in) {
  int64_t t = in->batch;
  int par = (int)(t % 2);
  if (in->group >= 0) { /* a deferred tied parameter, W(t+1) for batch t+2 */
    int g = in->group;
    if (R->tied[g].param < 0) return true;
    if (!tied_finish(R, g, t)) return false;
    float *gr = (float *)(void *)tied_buf(R, g, t);
    int n = 0;
    step_param(R, R->tied[g].param, gr, in->vslot, in->src_vslot, t, R->scale[par], &n);
    if (n) R->dev->ops->opt_step(R->dev, R->opt, n);
    R->dev->ops->zero(R->dev, gr, R->tied[g].bytes);
    R->tied[g].state[par] = 0;
    return true;
  }
  for (int g = 0; g < R->pp->ngroups; g++) {
    PipeTied *T = &R->tied[g];
    if (T->param < 0) continue;
    if (T->deferred) { /* batch t+1's backwards accumulate here next: move it out */
      char *src = R->grads + R->st->params[T->param].offset;
      R->dev->ops->copy(R->dev, R->tg[par] + T->tg_off, src, T->bytes);
      R->dev->ops->zero(R->dev, src, T->bytes);
      /* the group's sum now, for the global norm (clipping, the console, the log);
       * its step still comes later */
      if (!tied_finish(R, g, t)) return false;
    } else if (!tied_finish(R, g, t)) {
      return false;
    }
  }
  double scale;
  if (!batch_scale(R, t, &scale)) return false;
  /* ids a device counted without reporting them per pass (a GPU's, read with the norm) */
  if (!check_ids(R, in, R->dev->ops->late_bad_ids(R->dev))) return false;
  R->scale[par] = scale;
  int n = 0; /* every parameter's step in one call (a GPU: one graph or launch) */
  for (int k = 0; k < R->st->nparams; k++) {
    if (deferred_group_of(R, k) >= 0) continue;
    step_param(R, k, (const float *)(const void *)(R->grads + R->st->params[k].offset), in->vslot, in->src_vslot, t,
               scale, &n);
  }
  if (n) R->dev->ops->opt_step(R->dev, R->opt, n);
  for (int g = 0; g < R->pp->ngroups; g++)
    if (R->tied[g].param >= 0 && !R->tied[g].deferred) R->tied[g].state[par] = 0;
  if (R->grads_out) R->dev->ops->download(R->dev, R->grads_out, R->grads, (uint64_t)R->st->blocks[BUF_GRADS]);
  R->dev->ops->zero(R->dev, R->grads, (uint64_t)R->st->blocks[BUF_GRADS]);
  R->newest = R->spec.predict ? PLAN_MASTER_VSLOT : in->vslot; /* the weights W(t+1) themselves */
  R->steps_done = t + 1;
  double now = transport_now();
  R->step_ms[t - R->first] = (now - R->last_step_time) * 1e3;
  R->last_step_time = now;
  if (R->st->has_loss && !step_loss(R, t)) return false;
  /* --log-json: batch t's losses on their way to rank 0, which writes batch t-1's line */
  if (R->logs && !R->log_step(R, t)) return false;
  return !transport_interrupted() || interrupted(R, t);
}

/* ---- the interpreter ------------------------------------------------------------------- */

/* Records instruction in with host times t0..t1 and the device's clock marks mk. */
static void record(PipeRank *R, const PlanInstr *in, double t0, double t1, int mk) {
  if (R->nev >= R->cap_ev) return;
  R->ev[R->nev++] = (PipeEvent){.op = (int)in->op, .stage = R->stage, .replica = R->replica, .mb = in->mb,
                                .batch = in->batch, .version = in->version, .group = in->group, .mark = mk,
                                .start = t0, .end = t1};
}

/* --trace on a device with a clock of its own: marks around each instruction's work. */
static void mark(PipeRank *R, int mk, bool end) {
  if (R->o->trace_path && R->dev->ops->mark) R->dev->ops->mark(R->dev, mk, end);
}

void exec_trace_times(PipeRank *R) {
  if (!R->o->trace_path || !R->dev->ops->mark_time) return;
  R->dev->ops->flush(R->dev);
  for (int i = 0; i < R->nev; i++) {
    R->ev[i].start = R->dev->ops->mark_time(R->dev, R->ev[i].mark, false);
    R->ev[i].end = R->dev->ops->mark_time(R->dev, R->ev[i].mark, true);
  }
}

static void inject_fault(PipeRank *R) {
  fprintf(stderr, "pd2bwrun: rank %d: PD2BW_FAULT_INJECT: failing at batch %lld (%s)\n", R->rank,
          (long long)R->fault_step, (const char *[]){"exit", "hang", "kill", "stop", "stuck"}[R->fault_mode]);
  if (R->fault_mode == 2) raise(SIGKILL);
  if (R->fault_mode == 3) raise(SIGSTOP); /* until someone kills or continues us */
  if (R->fault_mode == 4)
    for (volatile unsigned long spin = 0;; spin++) { /* nothing ends this but the process */
    }
  if (R->fault_mode == 1) {
    /* stop answering; peers time out. Bounded, so the thread can be joined. */
    double until = transport_now() + 2 * R->link->ops->timeout(R->link) + 1;
    while (transport_now() < until && !transport_interrupted()) usleep(20000);
  }
  if (R->link->process_per_rank) exit(3);
  snprintf(R->err, sizeof R->err, "rank %d: injected fault", R->rank);
  R->failed = true;
}

static bool in_batches(const PlanInstr *in, int64_t lo, int64_t hi) { return in->batch >= lo && in->batch < hi; }

bool exec_run_batches(PipeRank *R, int64_t lo, int64_t hi) {
  const PlanStream *S = R->stream;
  int64_t top = hi < R->spec.nbatches ? hi : R->spec.nbatches;
  int from = lo < top ? R->ins_from[lo] : 0, to = lo < top ? R->ins_to[top - 1] : 0;
  bool ok = true;
  R->last_step_time = transport_now(); /* the first step's time starts here, not at 0 */
  for (int i = from; ok && i < to; i++) {
    const PlanInstr *in = &S->ins[i];
    if (!in_batches(in, lo, hi)) continue;
    R->link->ops->progress(R->link, plan_op_name(in->op), in->op == PI_FWD || in->op == PI_BWD ? in->mb : in->batch);
    if (in->batch == R->fault_step) {
      inject_fault(R);
      ok = false;
      break;
    }
    double t0 = transport_now();
    int mk = R->nmarks++; /* one pair of device marks per instruction or group */
    mark(R, mk, false);
    switch (in->op) {
    case PI_RECV_ACT:
    case PI_SEND_ACT:
    case PI_RECV_GRAD:
    case PI_SEND_GRAD: {
      int nreq = 0, j = i;
      for (;;) {
        const PlanInstr *x = &S->ins[j];
        if (in_batches(x, lo, hi) && !post_p2p(R, x, &nreq)) {
          ok = false;
          break;
        }
        if (!x->with_next || j + 1 >= S->n) break;
        j++;
      }
      if (ok && nreq && !pipe_transport_ok(R, R->link->ops->waitall(R->link, R->reqs, nreq))) ok = false;
      double t1 = transport_now();
      mark(R, mk, true);
      for (int q = i; ok && q <= j; q++)
        if (in_batches(&S->ins[q], lo, hi)) record(R, &S->ins[q], t0, t1, mk);
      i = j;
      continue;
    }
    case PI_FWD: ok = run_fwd(R, in); break;
    case PI_BWD: ok = run_bwd(R, in); break;
    case PI_ALLREDUCE: {
      char what[64];
      snprintf(what, sizeof what, "all-reduce of batch %d's gradients", in->batch);
      ok = pipe_transport_ok(R, R->link->ops->allreduce_sum_f32(R->rep_group, (float *)(void *)R->grads,
                                              (size_t)R->st->blocks[BUF_GRADS] / 4, what));
      break;
    }
    case PI_TIED_SYNC:
      if (in->group >= 0 && in->group < R->pp->ngroups && R->tied[in->group].param >= 0)
        ok = tied_post(R, in->group, in->batch);
      break;
    case PI_OPT_STEP: ok = run_step(R, in); break;
    case PI_COUNT: PD_CHECK(0, "instruction %d", (int)in->op); break;
    }
    mark(R, mk, true);
    record(R, in, t0, transport_now(), mk);
  }
  if (ok) R->steps_done = hi;
  return ok && !R->failed;
}

