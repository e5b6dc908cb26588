/* runtime/pipeline/pipeline.c — one rank of a pipeline as the interpreter (runtime/exec/)
 * finds it: its device and link, its streams, its arena with every buffer at the
 * plan's offset, its tied groups, its data; and, at the end, what rank 0 gathers.
 * (The pieces the interpreter and the sequential reference share with it: samples,
 * stage context, the optimizer step, are runtime/exec/exec_rank.c's.) See
 * runtime/pipeline/pipeline.h for the contract.
 */
#include "runtime/pipeline/pipeline_rank.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu_kernels.h"


/* ---- setup ------------------------------------------------------------------------ */

static int group_index_of_stage(const PlanTiedGroup *g, int stage) {
  for (int q = 0; q < g->nstages; q++)
    if (g->stages[q] == stage) return q;
  return -1;
}

static int param_by_name(const RtStage *s, const char *name) {
  for (int k = 0; k < s->nparams; k++)
    if (strcmp(s->params[k].name, name) == 0) return k;
  return -1;
}

PlanStreamSpec pipe_stream_spec(const PipePlan *p, int nbatches) {
  bool twobw = p->schedule == PS_2BW;
  int64_t K = p->rt->train.flush_steps < INT32_MAX ? p->rt->train.flush_steps : INT32_MAX;
  return (PlanStreamSpec){.stages = p->d, .microbatches = p->m, .schedule = p->schedule, .nbatches = nbatches,
                          .replicas = p->w, .groups = p->groups, .ngroups = p->ngroups,
                          .flush_batches = twobw ? (int)K : 0, .predict = twobw && p->rt->train.predict > 0};
}

/* The streams for batches [0, R->steps), with the plan's tied groups; --steps 0 (save
 * the initial weights) builds one batch's streams that never run, as the scheduler
 * wants at least one batch. Then what the interpreter looks up in them: the stash
 * slot of each microbatch's forward (receives of its input land there) and, per
 * batch b, the span of the stream holding batch b's instructions (so a run of a few
 * batches does not scan the whole stream). */
static bool rank_streams(PipeRank *R, char *err, size_t errlen) {
  const PipePlan *p = R->pp;
  PlanStreams old = R->streams;
  memset(&R->streams, 0, sizeof R->streams);
  R->spec = pipe_stream_spec(p, R->steps > 0 ? (int)R->steps : 1);
  bool built = plan_streams_build(&R->spec, &R->streams, err, errlen);
  /* a longer run's streams must begin with what already ran (pipe_rank_extend) */
  if (built && old.st) {
    const PlanStream *a = &old.st[R->stage], *b = &R->streams.st[R->stage];
    int n = R->ins_to[old.spec.nbatches - 1];
    bool same = n <= b->n;
    for (int i = 0; same && i < n; i++) {
      const PlanInstr *x = &a->ins[i], *y = &b->ins[i];
      same = x->op == y->op && x->mb == y->mb && x->batch == y->batch && x->vslot == y->vslot &&
             x->src_vslot == y->src_vslot && x->sslot == y->sslot && x->group == y->group &&
             x->with_next == y->with_next;
    }
    PD_CHECK(same, "(the streams of %d batches do not begin with those of %d)", R->spec.nbatches, old.spec.nbatches);
  }
  plan_streams_free(&old);
  if (!built) return false;
  R->stream = &R->streams.st[R->stage];
  if (R->streams.nversions[R->stage] > R->nversions || R->streams.nstash[R->stage] > R->nstash) {
    snprintf(err, errlen, "stage %d: %lld batches need %d weight versions and %d stash slots; the plan has %d and %d",
             R->stage, (long long)R->steps, R->streams.nversions[R->stage], R->streams.nstash[R->stage],
             R->nversions, R->nstash);
    return false;
  }
  const PlanStream *S = R->stream;
  int nb = R->spec.nbatches;
  int64_t nmb = p->m * nb + 2;
  for (int i = 0; i < S->n; i++)
    if (S->ins[i].op == PI_FWD && S->ins[i].mb >= nmb) nmb = S->ins[i].mb + 1;
  free(R->mb_sslot);
  R->mb_sslot = pd_calloc((size_t)nmb, sizeof(int));
  free(R->ins_from);
  free(R->ins_to);
  R->ins_from = pd_malloc((size_t)(nb + 1) * sizeof(int));
  R->ins_to = pd_calloc((size_t)(nb + 1), sizeof(int));
  for (int b = 0; b <= nb; b++) R->ins_from[b] = S->n;
  for (int i = 0; i < S->n; i++) {
    const PlanInstr *in = &S->ins[i];
    if (in->op == PI_FWD) R->mb_sslot[in->mb] = in->sslot;
    if (in->batch < 0 || in->batch >= nb) continue;
    if (i < R->ins_from[in->batch]) R->ins_from[in->batch] = i;
    R->ins_to[in->batch] = i + 1;
  }
  for (int b = nb - 1; b >= 0; b--) /* the first instruction of any batch >= b */
    if (R->ins_from[b + 1] < R->ins_from[b]) R->ins_from[b] = R->ins_from[b + 1];
  for (int b = 1; b < nb; b++) /* past the last instruction of any batch <= b */
    if (R->ins_to[b - 1] > R->ins_to[b]) R->ins_to[b] = R->ins_to[b - 1];
  return true;
}

bool pipe_rank_extend(PipeRank *R, int64_t steps, char *err, size_t errlen) {
  if (steps <= R->steps) return true;
  /* entries [0, had) are this run's so far (none when a resume moved first past them) */
  int64_t had = R->steps > R->first ? R->steps - R->first : 0, nb = steps - R->first, m = R->pp->m;
  R->steps = steps;
  if (!rank_streams(R, err, errlen)) return false;
  R->loss = pd_realloc(R->loss, (size_t)(nb * m + 1) * sizeof(double));
  R->grad_norm = pd_realloc(R->grad_norm, (size_t)(nb + 1) * sizeof(double));
  R->step_ms = pd_realloc(R->step_ms, (size_t)(nb + 1) * sizeof(double));
  for (int64_t k = had; k <= nb; k++) {
    R->grad_norm[k] = R->step_ms[k] = 0;
    for (int64_t j = 0; j < m && k < nb; j++) R->loss[k * m + j] = 0;
  }
  return true;
}

/* The planned buffer (kind, index) of this rank's stage, or NULL. */
static const PipeBuf *planned(const PipeRank *R, PlanBufKind kind, int index) {
  const PipeStage *ps = &R->pp->st[R->stage];
  for (int k = 0; k < ps->nbufs; k++)
    if (ps->bufs[k].kind == kind && ps->bufs[k].index == index) return &ps->bufs[k];
  return NULL;
}

/* Points *at into the arena at the planned buffer (kind, index), which must hold
 * `need` bytes; a buffer the plan leaves out is fine when nothing is needed. */
static bool place(PipeRank *R, char **at, PlanBufKind kind, int index, uint64_t need, char *err, size_t errlen) {
  const PipeBuf *b = planned(R, kind, index);
  if (!b && need == 0) {
    *at = R->arena;
    return true;
  }
  if (!b || b->size < need) {
    snprintf(err, errlen, "stage %d: the plan's memory has %s buffer %s %d (%llu bytes) where the stage program "
             "needs %llu bytes: the plan and its programs disagree (recompile the plan)", R->stage,
             b ? "a" : "no", plan_buf_kind_name(kind), index, b ? (unsigned long long)b->size : 0ULL,
             (unsigned long long)need);
    return false;
  }
  *at = R->arena + b->offset;
  return true;
}

/* One arena of exactly the planned size; every buffer at its planned offset. */
static bool layout_arena(PipeRank *R, char *err, size_t errlen) {
  const RtStage *st = R->st;
  uint64_t pb = (uint64_t)st->blocks[BUF_PARAMS];
  R->arena_bytes = R->pp->st[R->stage].planned_bytes;
  char what[96];
  snprintf(what, sizeof what, "rank %d's arena (stage %d, memory.total_bytes)", R->rank, R->stage);
  R->arena = R->dev->ops->arena_alloc(R->dev, R->arena_bytes, what);
  if (!R->arena) { /* a GPU's (the CPU's ends the process: pd_out_of_memory) */
    snprintf(err, errlen, "%s: the device cannot hold %llu bytes", what, (unsigned long long)R->arena_bytes);
    return false;
  }
  bool ok = true;
  for (int v = 0; ok && v < R->nversions; v++) ok = place(R, &R->w[v], PB_WEIGHTS, v, pb, err, errlen);
  ok = ok && place(R, &R->grads, PB_GRADS, 0, (uint64_t)st->blocks[BUF_GRADS], err, errlen);
  for (int q = 0; ok && q < 2; q++) ok = place(R, &R->tg[q], PB_TIED_GRADS, q, R->tied_deferred_bytes, err, errlen);
  ok = ok && place(R, &R->adam_m, PB_OPT_M, 0, pb, err, errlen);
  ok = ok && place(R, &R->adam_v, PB_OPT_V, 0, pb, err, errlen);
  uint64_t slot = R->pp->recompute ? R->act_in_bytes : (uint64_t)st->blocks[BUF_STASH];
  for (int s = 0; ok && s < R->nstash; s++) ok = place(R, &R->stash[s], PB_STASH, s, slot, err, errlen);
  R->full = NULL;
  if (ok && R->pp->recompute)
    ok = place(R, &R->full, PB_ACTIVATIONS, 0, (uint64_t)st->blocks[BUF_STASH], err, errlen);
  ok = ok && place(R, &R->inputs, PB_INPUTS, 0, (uint64_t)st->blocks[BUF_INPUTS], err, errlen);
  ok = ok && place(R, &R->bnd, PB_BOUNDARY, 0, (uint64_t)st->blocks[BUF_BOUNDARY], err, errlen);
  ok = ok && place(R, &R->work, PB_WORKSPACE, 0, (uint64_t)st->blocks[BUF_WORK], err, errlen);
  for (int q = 0; ok && q < 2; q++) ok = place(R, &R->tied_rx[q], PB_TIED_RECV, q, R->tied_rx_bytes, err, errlen);
  if (ok && R->dev->ops->versions) /* before the first upload into them */
    R->dev->ops->versions(R->dev, R->w, R->nversions, R->spec.predict ? PLAN_MASTER_VSLOT : -1);
  return ok;
}

/* Tied groups this stage holds: its parameter, where its gradient goes. */
static bool setup_tied(PipeRank *R, char *err, size_t errlen) {
  const PipePlan *p = R->pp;
  uint64_t dbytes = 0, rxbytes = 0;
  for (int g = 0; g < p->ngroups && g < PIPE_MAX_GROUPS; g++) {
    PipeTied *T = &R->tied[g];
    T->member = group_index_of_stage(&p->groups[g], R->stage);
    T->param = -1;
    if (T->member < 0 || p->groups[g].nstages < 2) continue;
    T->param = param_by_name(R->st, p->group_names[g]);
    if (T->param < 0) {
      snprintf(err, errlen, "stage %d should hold tied parameter '%s' but its program has no such "
               "parameter", R->stage, p->group_names[g]);
      return false;
    }
    T->deferred = plan_tied_deferred(&R->spec, g);
    T->bytes = (uint64_t)R->st->params[T->param].bytes;
    if (T->deferred) {
      T->tg_off = dbytes;
      dbytes += rt_align256(T->bytes);
    }
    T->rx_off = rxbytes;
    rxbytes += (uint64_t)(p->groups[g].nstages - 1) * rt_align256(T->bytes);
  }
  R->tied_deferred_bytes = dbytes;
  R->tied_rx_bytes = rxbytes;
  return true;
}

PipeRank *pipe_rank_create(const PipePlan *p, const PipeOptions *o, Transport *t, int64_t first_step,
                           char *err, size_t errlen) {
  PipeRank *R = pd_calloc(1, sizeof *R);
  R->pp = p;
  R->o = o;
  R->t = t;
  R->rank = transport_rank(t);
  R->stage = p->rank_stage[R->rank];
  R->replica = p->rank_replica[R->rank];
  R->st = &p->rt->stages[R->stage];
  R->tc = p->rt->train;
  if (o->seed_set) R->tc.seed = o->seed;
  R->first = first_step;
  /* resumed at or past --steps: an empty range [first, first), nothing to train */
  R->steps = o->steps > first_step ? o->steps : first_step;
  R->mref = p->m * p->w;
  R->fault_step = -1;
  const char *fi = getenv("PD2BW_FAULT_INJECT");
  if (fi && *fi) {
    int fr = -1;
    long long fs = -1;
    char mode[16] = "exit";
    if (sscanf(fi, "%d:%lld:%15s", &fr, &fs, mode) >= 2 && fr == R->rank) {
      R->fault_step = fs;
      R->fault_mode = strcmp(mode, "kill") == 0    ? 2
                      : strcmp(mode, "hang") == 0  ? 1
                      : strcmp(mode, "stop") == 0  ? 3
                      : strcmp(mode, "stuck") == 0 ? 4
                                                   : 0;
    }
  }
  /* the plan's slots; the streams of this run's length must fit in them */
  R->nversions = p->st[R->stage].nversions;
  R->nstash = p->st[R->stage].nstash;
  if (!rank_streams(R, err, errlen)) goto fail;
  if (R->nversions > PIPE_MAX_SLOTS || R->nstash > PIPE_MAX_SLOTS) {
    snprintf(err, errlen, "stage %d needs %d weight versions and %d stash slots; this runtime keeps at most %d",
             R->stage, R->nversions, R->nstash, PIPE_MAX_SLOTS);
    goto fail;
  }
  if (p->ngroups > PIPE_MAX_GROUPS) {
    snprintf(err, errlen, "the plan has %d tied groups; this runtime handles %d", p->ngroups, PIPE_MAX_GROUPS);
    goto fail;
  }
  const PipeStage *ps = &p->st[R->stage];
  for (int k = 0; k < ps->nbnd; k++)
    if (ps->bnd[k].role == PIPE_ACT_IN) {
      if (ps->bnd[k].cls != BUF_STASH) {
        snprintf(err, errlen, "stage %d: its input activation is not in the stash block", R->stage);
        goto fail;
      }
      R->act_in_packed[k] = (int64_t)R->act_in_bytes;
      R->act_in_bytes += rt_align256((uint64_t)ps->bnd[k].bytes);
    }
  if (!setup_tied(R, err, errlen)) goto fail;
  R->dev = o->rank_device ? o->rank_device(o->rank_ctx, R->rank, R->stage, err, errlen)
          : o->exec_device ? o->exec_device
                           : exec_cpu_device(R->st, err, errlen);
  if (!R->dev || !(R->link = o->rank_link ? o->rank_link(o->rank_ctx, t, R->dev, err, errlen) : exec_transport_link(t)))
    goto fail;
  if (o->profile_out && !o->exec_device && !o->rank_device) { /* each segment's time, the first step's passes left out unless it is the only one */
    seg_times_init(&R->segt, exec_cpu_program(R->dev)->nsegs, R->steps - R->first > 1 ? (R->first + 1) * R->mref : 0);
    exec_cpu_profile(R->dev, &R->segt);
  }
  if (!layout_arena(R, err, errlen)) goto fail;
  pipe_rank_init_weights(R);
  /* data */
  for (int k = 0; k < R->st->ninputs; k++) {
    const RtInput *in = &R->st->inputs[k];
    if (in->stream == STREAM_OTHER) {
      snprintf(err, errlen, "%s: input '%s' is not fed by the token file (only 'tokens' and 'targets' are)",
               R->st->source, in->name);
      goto fail;
    }
    if (in->dtype != DT_I32 || in->rank != 2 || in->shape[0] != p->b) {
      snprintf(err, errlen, "%s: data input '%s' must be i32 [b, T]", R->st->source, in->name);
      goto fail;
    }
    R->T = (int)in->shape[1];
  }
  if (R->T && o->data_path && !o->caller_batches) {
    if (!pipe_data_open(o, pipe_vocab(p->rt), p->b * R->mref, R->T, R->tc.seed, &R->df, &R->dl, err, errlen))
      goto fail;
  }
  int64_t nb = R->steps - R->first;
  R->loss = pd_calloc((size_t)(nb * p->m + 1), sizeof(double));
  R->grad_norm = pd_calloc((size_t)nb + 1, sizeof(double));
  R->step_ms = pd_calloc((size_t)nb + 1, sizeof(double));
  if (R->st->has_loss && R->replica == 0 && !o->quiet) {
    char lerr[IO_ERR_LEN];
    R->console = rt_log_open(NULL, stdout, false, lerr, sizeof lerr); /* no file: cannot fail */
    rt_log_set_peak(R->console, pipe_peak_flops(p, o->one_device));
    if (transport_kind(t) == TRANSPORT_MPI) rt_log_set_plain(R->console);
  }
  R->cap_ev = R->stream->n + 8;
  R->ev = pd_calloc((size_t)R->cap_ev, sizeof *R->ev);
  R->reqs = pd_calloc((size_t)(4 * ps->nbnd + 16), sizeof *R->reqs);
  R->norm_part = pd_calloc((size_t)p->d, sizeof(double));
  R->norm_x = pd_calloc((size_t)R->st->nparams + 1, sizeof *R->norm_x);
  R->norm_n = pd_calloc((size_t)R->st->nparams + 1, sizeof *R->norm_n);
  R->opt = pd_calloc((size_t)R->st->nparams + 1, sizeof *R->opt);
  R->norm_req = pd_calloc((size_t)(2 * p->d), sizeof *R->norm_req);
  /* the stage's replica group (ALLREDUCE) */
  if (p->w > 1 && !pipe_transport_ok(R, R->link->ops->group_create(R->link, ps->rank_of_replica, p->w, &R->rep_group))) {
    snprintf(err, errlen, "%s", R->err);
    goto fail;
  }
  return R;
fail:
  pipe_rank_destroy(R);
  return NULL;
}

void pipe_rank_destroy(PipeRank *R) {
  if (!R) return;
  if (R->rep_group) R->link->ops->group_destroy(R->rep_group);
  plan_streams_free(&R->streams);
  data_loader_destroy(R->dl);
  if (R->df) data_close(R->df);
  exec_link_destroy(R->link); /* before the device: a GPU's link uses its streams */
  if (R->arena) R->dev->ops->arena_free(R->dev, R->arena);
  if (R->dev != R->o->exec_device) exec_device_destroy(R->dev);
  free(R->loss);
  free(R->ev);
  free(R->reqs);
  free(R->norm_part);
  free(R->norm_x);
  free(R->norm_n);
  free(R->opt);
  free(R->norm_req);
  free(R->mb_sslot);
  free(R->ins_from);
  free(R->ins_to);
  free(R->grad_norm);
  free(R->step_ms);
  seg_times_free(&R->segt);
  rt_log_close(R->console);
  free(R);
}


/* ---- gathering to rank 0 ------------------------------------------------------------- */

/* --profile-out: a rank's per-segment times as two messages: {nsegs, nfwd, nbwd}, then
 * the forward rows and the backward rows (runtime/exec/seg_times.h). */
static bool send_seg_times(PipeRank *R) {
  const SegTimes *t = &R->segt;
  int64_t hdr[3] = {t->nsegs, t->nfwd, t->nbwd};
  size_t nf = (size_t)(t->nfwd * t->nsegs), nb = (size_t)(t->nbwd * t->nsegs);
  double *rows = pd_malloc((nf + nb + 1) * sizeof(double));
  if (nf) memcpy(rows, t->fwd, nf * sizeof(double));
  if (nb) memcpy(rows + nf, t->bwd, nb * sizeof(double));
  bool ok = pipe_transport_ok(R, transport_send(R->t, 0, PIPE_TAG_GATHER + 3, hdr, sizeof hdr, "segment times")) &&
            (!(nf + nb) || pipe_transport_ok(R, transport_send(R->t, 0, PIPE_TAG_GATHER + 3, rows,
                                                               (nf + nb) * sizeof(double), "segment times")));
  free(rows);
  return ok;
}

/* Rank 0: every rank's rows, put together per stage over its replicas. A stage
 * program with another count of segments than the plan's comes through as that
 * count: the writer says so. */
static bool gather_seg_times(PipeRank *R, PipeGathered *G) {
  const PipePlan *p = R->pp;
  G->seg = pd_calloc((size_t)p->d, sizeof(SegTimes));
  for (int s = 0; s < p->d; s++) seg_times_init(&G->seg[s], s == R->stage ? R->segt.nsegs : p->st[s].nsegs, 0);
  seg_times_add(&G->seg[R->stage], &R->segt);
  for (int rk = 1; rk < p->nranks; rk++) {
    SegTimes *dst = &G->seg[p->rank_stage[rk]];
    int64_t h[3];
    if (!pipe_transport_ok(R, transport_recv(R->t, rk, PIPE_TAG_GATHER + 3, h, sizeof h, "segment times")))
      return false;
    size_t n = (size_t)((h[1] + h[2]) * h[0]);
    double *rows = pd_malloc((n + 1) * sizeof(double));
    bool ok = !n || pipe_transport_ok(R, transport_recv(R->t, rk, PIPE_TAG_GATHER + 3, rows, n * sizeof(double),
                                                        "segment times"));
    if (ok && h[0] != dst->nsegs) { /* the writer names the mismatch */
      seg_times_free(dst);
      seg_times_init(dst, (int)h[0], 0);
    } else if (ok) {
      SegTimes src = {.nsegs = (int)h[0], .fwd = rows, .bwd = rows + h[1] * h[0], .nfwd = h[1], .nbwd = h[2]};
      seg_times_add(dst, &src);
    }
    free(rows);
    if (!ok) return false;
  }
  return true;
}

bool pipe_gather(PipeRank *R, PipeGathered *G) {
  exec_trace_times(R); /* a GPU's events: its own clock */
  const PipePlan *p = R->pp;
  Transport *t = R->t;
  bool root = R->rank == 0;
  const RtStage *st = R->st;
  int64_t pbytes = st->blocks[BUF_PARAMS];
  bool two = R->nversions >= 2 && p->schedule == PS_2BW;
  int prev = two ? pipe_prev_slot(R->steps_done) : R->newest, next = two ? pipe_next_slot(R->steps_done) : R->newest;
  /* replica 0 of each stage: newest weights, 2bw's older version, AdamW moments, and
   * under weight prediction the next batch's weights (through host memory: the arena is
   * the device's) */
  const char *bufs[5] = {R->w[R->newest], R->w[prev], R->adam_m, R->adam_v, R->w[next]};
  int nbufs = R->spec.predict ? 5 : 4;
  if (R->replica == 0 && !root) {
    char *host = pd_malloc((size_t)pbytes + 1);
    bool ok = true;
    for (int q = 0; ok && q < nbufs; q++) {
      R->dev->ops->download(R->dev, host, bufs[q], (uint64_t)pbytes);
      ok = pipe_transport_ok(R, transport_send(t, 0, PIPE_TAG_GATHER, host, (size_t)pbytes, "final weights"));
    }
    free(host);
    if (!ok) return false;
  }
  /* last stages: their microbatch losses; everyone: the trace events */
  int64_t nb = R->steps - R->first;
  if (!root && !pipe_gather_losses(R, R->loss, nb, PIPE_TAG_GATHER + 1, "losses", NULL)) return false;
  int64_t hdr[3] = {R->nev, (int64_t)R->arena_bytes, R->bad_ids};
  if (!root) {
    if (!pipe_transport_ok(R, transport_send(t, 0, PIPE_TAG_GATHER + 2, hdr, sizeof hdr, "trace")) ||
        (hdr[0] && !pipe_transport_ok(R, transport_send(t, 0, PIPE_TAG_GATHER + 2, R->ev, (size_t)hdr[0] * sizeof(PipeEvent), "trace"))))
      return false;
    if (R->o->profile_out && !send_seg_times(R)) return false;
    R->steps_done = R->steps;
    return true;
  }
  /* rank 0 */
  memset(G, 0, sizeof *G);
  G->d = p->d;
  char ***stage[5] = {&G->stage_w, &G->stage_prev, &G->stage_m, &G->stage_v, &G->stage_next}; /* bufs' order */
  for (int q = 0; q < nbufs; q++) *stage[q] = pd_calloc((size_t)p->d, sizeof(char *));
  G->mb_loss = pd_calloc((size_t)(nb * p->m * p->w + 1), sizeof(double));
  for (int s = 0; s < p->d; s++) {
    int64_t b = p->rt->stages[s].blocks[BUF_PARAMS];
    for (int q = 0; q < nbufs; q++) (*stage[q])[s] = pd_malloc((size_t)(b ? b : 1));
    int src = p->st[s].rank_of_replica[0];
    if (src == 0) {
      for (int q = 0; q < nbufs; q++) R->dev->ops->download(R->dev, (*stage[q])[s], bufs[q], (uint64_t)b);
      continue;
    }
    for (int q = 0; q < nbufs; q++)
      if (!pipe_transport_ok(R, transport_recv(t, src, PIPE_TAG_GATHER, (*stage[q])[s], (size_t)b, "final weights"))) return false;
  }
  if (!pipe_gather_losses(R, R->loss, nb, PIPE_TAG_GATHER + 1, "losses", G->mb_loss)) return false;
  G->ev = pd_malloc((size_t)(R->nev + 1) * sizeof(PipeEvent));
  memcpy(G->ev, R->ev, (size_t)R->nev * sizeof(PipeEvent));
  G->nev = R->nev;
  G->arena = pd_calloc((size_t)p->d, sizeof(uint64_t));
  G->arena[R->stage] = R->arena_bytes;
  G->bad_ids = R->bad_ids;
  for (int rk = 1; rk < p->nranks; rk++) {
    int64_t h[3];
    if (!pipe_transport_ok(R, transport_recv(t, rk, PIPE_TAG_GATHER + 2, h, sizeof h, "trace"))) return false;
    int64_t n = h[0];
    if ((uint64_t)h[1] > G->arena[p->rank_stage[rk]]) G->arena[p->rank_stage[rk]] = (uint64_t)h[1];
    G->bad_ids += h[2];
    G->ev = pd_realloc(G->ev, (size_t)(G->nev + n + 1) * sizeof(PipeEvent));
    if (n && !pipe_transport_ok(R, transport_recv(t, rk, PIPE_TAG_GATHER + 2, G->ev + G->nev, (size_t)n * sizeof(PipeEvent), "trace")))
      return false;
    G->nev += n;
  }
  return !R->o->profile_out || gather_seg_times(R, G);
}

bool pipe_gather_losses(PipeRank *R, const double *mine, int64_t nb, int tag, const char *what, double *out) {
  const PipePlan *p = R->pp;
  size_t bytes = (size_t)(nb * p->m) * sizeof(double);
  if (R->rank != 0) return !R->st->has_loss || pipe_transport_ok(R, transport_send(R->t, 0, tag, mine, bytes, what));
  double *tmp = pd_malloc(bytes + sizeof(double));
  bool ok = true;
  for (int rep = 0; ok && rep < p->w; rep++) {
    int src = p->st[p->d - 1].rank_of_replica[rep];
    if (src == 0) memcpy(tmp, mine, bytes);
    else ok = pipe_transport_ok(R, transport_recv(R->t, src, tag, tmp, bytes, what));
    for (int64_t b = 0; ok && b < nb; b++)
      for (int64_t j = 0; j < p->m; j++) out[(b * p->w + rep) * p->m + j] = tmp[b * p->m + j];
  }
  free(tmp);
  return ok;
}

void pipe_gathered_free(PipeGathered *G) {
  char **stage[5] = {G->stage_w, G->stage_prev, G->stage_m, G->stage_v, G->stage_next};
  for (int q = 0; q < 5; q++) {
    for (int s = 0; stage[q] && s < G->d; s++) free(stage[q][s]);
    free(stage[q]);
  }
  free(G->mb_loss);
  free(G->ev);
  free(G->arena);
  for (int s = 0; G->seg && s < G->d; s++) seg_times_free(&G->seg[s]);
  free(G->seg);
  memset(G, 0, sizeof *G);
}
