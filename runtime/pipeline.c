/* runtime/pipeline.c — one rank of a pipeline: its arena, its stage program and the
 * interpreter of its instruction stream (see runtime/pipeline.h for the contract).
 *
 * The stage program (codegen/codegen.h) is called with its block bases pointed into
 * this rank's arena: params at the instruction's weight slot, stash at the
 * instruction's stash slot (with recomputation: at one full activation block, after
 * the slot's stashed input was copied in), the boundary block where the outgoing
 * activation and the gradients sit. Messages go straight from and into those places
 * (one copy, by the transport). The data inputs are refilled from the token file
 * before a FWD and again before its BWD (embedding_bwd and cross_entropy_bwd read
 * them), so one inputs block serves any number of microbatches in flight.
 *
 * Invariants the schedule gives us (the planner's verifier checks them): a group of
 * sends/receives completes before the next instruction, so the single boundary block
 * is never overwritten under a message; the m backwards of batch t come before
 * OPT_STEP(t) and those of batch t+1 after it, so the gradient block holds exactly
 * batch t at OPT_STEP(t).
 */
#include "runtime/pipeline_rank.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu_kernels.h"

enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_NORM = 3, TAG_GATHER = 4, TAG_LOSS = 12, TAG_TIED = 16 };

double pipe_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t up256(uint64_t n) { return (n + 255) / 256 * 256; }

/* The first transport failure: keep its message, make every other rank stop. */
bool pipe_transport_ok(PipeRank *R, TransportStatus s) {
  if (s == TRANSPORT_OK) return true;
  if (!R->failed) {
    R->failed = true;
    snprintf(R->err, sizeof R->err, "%s", transport_error(R->t));
    transport_abort(R->t, R->err);
  }
  return false;
}

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

/* The streams for batches [0, steps), with the plan's tied groups; --steps 0 (save
 * the initial weights) builds one batch's streams that never run, as the scheduler
 * wants at least one batch. */
static bool build_streams(PipeRank *R, char *err, size_t errlen) {
  const PipePlan *p = R->pp;
  R->spec = (PlanStreamSpec){.stages = p->d, .microbatches = p->m, .schedule = p->schedule,
                             .nbatches = R->steps > 0 ? (int)R->steps : 1, .replicas = p->w, .groups = p->groups,
                             .ngroups = p->ngroups};
  return plan_streams_build(&R->spec, &R->streams, err, errlen);
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
  void *mem = NULL;
  if (posix_memalign(&mem, 256, (size_t)(R->arena_bytes ? R->arena_bytes : 256)) != 0) {
    char what[96];
    snprintf(what, sizeof what, "rank %d's arena (stage %d, memory.total_bytes)", R->rank, R->stage);
    pd_out_of_memory((size_t)R->arena_bytes, what, __FILE__, __LINE__);
  }
  memset(mem, 0, (size_t)R->arena_bytes);
  R->arena = mem;
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
      dbytes += up256(T->bytes);
    }
    T->rx_off = rxbytes;
    rxbytes += (uint64_t)(p->groups[g].nstages - 1) * up256(T->bytes);
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
  if (!build_streams(R, err, errlen)) goto fail;
  R->stream = &R->streams.st[R->stage];
  /* the plan's slots; the streams of this run's length must fit in them */
  R->nversions = p->st[R->stage].nversions;
  R->nstash = p->st[R->stage].nstash;
  if (R->streams.nversions[R->stage] > R->nversions || R->streams.nstash[R->stage] > R->nstash) {
    snprintf(err, errlen, "stage %d: %lld batches need %d weight versions and %d stash slots; the plan has %d and %d",
             R->stage, (long long)R->steps, R->streams.nversions[R->stage], R->streams.nstash[R->stage],
             R->nversions, R->nstash);
    goto fail;
  }
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
      R->act_in_bytes += up256((uint64_t)ps->bnd[k].bytes);
    }
  if (!setup_tied(R, err, errlen)) goto fail;
  if (!stage_program_load(R->st->source, 4, &R->prog, err, errlen)) goto fail;
  R->prog_loaded = true;
  if (!layout_arena(R, err, errlen)) goto fail;
  for (int k = 0; k < R->st->nparams; k++)
    rt_init_param((float *)(void *)(R->w[0] + R->st->params[k].offset), &R->st->params[k], R->tc.seed);
  for (int v = 1; v < R->nversions; v++) memcpy(R->w[v], R->w[0], (size_t)R->st->blocks[BUF_PARAMS]);
  R->newest = 0;
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
  if (R->T) {
    if (!pipe_data_open(o, pipe_vocab(p->rt), p->b * R->mref, R->T, R->tc.seed, &R->df, &R->dl, err, errlen))
      goto fail;
    R->tok_tmp = pd_malloc((size_t)(R->T + 1) * sizeof(int32_t));
    R->tgt_tmp = pd_malloc((size_t)(R->T + 1) * sizeof(int32_t));
  }
  int64_t nb = R->steps - R->first;
  R->loss = pd_calloc((size_t)(nb * p->m + 1), sizeof(double));
  R->grad_norm = pd_calloc((size_t)nb + 1, sizeof(double));
  R->step_ms = pd_calloc((size_t)nb + 1, sizeof(double));
  if (R->st->has_loss && R->replica == 0 && !o->quiet) {
    char lerr[IO_ERR_LEN];
    R->console = rt_log_open(NULL, stdout, false, lerr, sizeof lerr); /* no file: cannot fail */
    rt_log_set_peak(R->console, pipe_peak_flops(p));
    if (transport_kind(t) == TRANSPORT_MPI) rt_log_set_plain(R->console);
  }
  R->cap_ev = R->stream->n + 8;
  R->ev = pd_calloc((size_t)R->cap_ev, sizeof *R->ev);
  R->reqs = pd_calloc((size_t)(4 * ps->nbnd + 16), sizeof *R->reqs);
  R->norm_part = pd_calloc((size_t)p->d, sizeof(double));
  R->norm_req = pd_calloc((size_t)(2 * p->d), sizeof *R->norm_req);
  /* the stage's replica group (ALLREDUCE) */
  if (p->w > 1 && !pipe_transport_ok(R, transport_group_create(t, ps->rank_of_replica, p->w, &R->rep_group))) {
    snprintf(err, errlen, "%s", R->err);
    goto fail;
  }
  return R;
fail:
  pipe_rank_destroy(R);
  return NULL;
}

int64_t pipe_vocab(const RtPlan *rt) {
  int64_t vocab = 0;
  for (int s = 0; s < rt->nstages; s++)
    for (int k = 0; k < rt->stages[s].nparams; k++)
      if (strcmp(rt->stages[s].params[k].name, "wte") == 0) vocab = rt->stages[s].params[k].shape[0];
  return vocab;
}

bool pipe_data_open(const PipeOptions *o, int64_t vocab, int64_t B, int T, uint64_t seed, DataFile **df,
                    DataLoader **dl, char *err, size_t errlen) {
  char ierr[IO_ERR_LEN];
  *dl = NULL;
  *df = data_open(o->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  if (!*df || !(*dl = data_loader_create(*df, (int)B, T, o->shuffle, seed, ierr, sizeof ierr))) {
    snprintf(err, errlen, "%s", ierr);
    return false;
  }
  return true;
}

void pipe_rank_destroy(PipeRank *R) {
  if (!R) return;
  if (R->rep_group) transport_group_destroy(R->rep_group);
  if (R->prog_loaded) stage_program_unload(&R->prog);
  plan_streams_free(&R->streams);
  data_loader_destroy(R->dl);
  if (R->df) data_close(R->df);
  free(R->tok_tmp);
  free(R->tgt_tmp);
  free(R->arena);
  free(R->loss);
  free(R->ev);
  free(R->reqs);
  free(R->norm_part);
  free(R->norm_req);
  free(R->grad_norm);
  free(R->step_ms);
  rt_log_close(R->console);
  free(R);
}

/* ---- one microbatch ------------------------------------------------------------------ */

/* Replica r's j-th microbatch of batch t is the reference's microbatch r·m + j. */
static void mb_index(const PipeRank *R, int64_t k, int64_t *t, int64_t *jref) {
  int64_t m = R->pp->m;
  *t = (k - 1) / m;
  *jref = (int64_t)R->replica * m + (k - 1) % m;
}

void pipe_fill_samples(const RtStage *st, char *inputs, DataLoader *dl, int64_t first, int64_t b, int T,
                       int32_t *tok_tmp, int32_t *tgt_tmp) {
  int32_t *tok = NULL, *tgt = NULL;
  for (int q = 0; q < st->ninputs; q++) {
    const RtInput *in = &st->inputs[q];
    if (in->stream == STREAM_TOKENS) tok = (int32_t *)(void *)(inputs + in->offset);
    if (in->stream == STREAM_TARGETS) tgt = (int32_t *)(void *)(inputs + in->offset);
  }
  for (int64_t r = 0; r < b; r++)
    data_get_sample(dl, first + r, tok ? tok + r * T : tok_tmp, tgt ? tgt + r * T : tgt_tmp);
}

static void fill_inputs(PipeRank *R, int64_t k) {
  if (!R->T) return;
  int64_t t, jref;
  mb_index(R, k, &t, &jref);
  int64_t first = t * R->pp->b * R->mref + jref * R->pp->b;
  pipe_fill_samples(R->st, R->inputs, R->dl, first, R->pp->b, R->T, R->tok_tmp, R->tgt_tmp);
}

StageCtx pipe_stage_ctx(const RtStage *st, uint64_t seed, int64_t mb, char *params, char *grads, char *stash, char *work, char *inputs,
                        char *bnd, double *loss) {
  StageCtx c = {0};
  c.abi = PD2BW_STAGE_ABI;
  c.training = 1;
  c.microbatch = (uint32_t)mb;
  c.rng_base = st->rng_base;
  c.seed = seed;
  c.params = params;
  c.grads = grads;
  c.stash = stash;
  c.work = work;
  c.inputs = inputs;
  c.boundary = bnd;
  c.sgemm = (void (*)(void))pd_sgemm;
  c.loss = loss;
  return c;
}

/* Where a program block lives for an instruction using weight slot vslot and stash
 * slot sslot. */
char *pipe_block_base(PipeRank *R, int cls, int vslot, int sslot) {
  switch ((BufClass)cls) {
  case BUF_PARAMS: return R->w[vslot < 0 ? R->newest : vslot];
  case BUF_GRADS: return R->grads;
  case BUF_STASH: return R->pp->recompute ? R->full : R->stash[sslot < 0 ? 0 : sslot];
  case BUF_WORK: return R->work;
  case BUF_INPUTS: return R->inputs;
  case BUF_BOUNDARY: return R->bnd;
  case BUF_NONE:
  case BUF_CLASS_COUNT: break;
  }
  PD_CHECK(0, "block class %d", cls);
  return NULL;
}

static StageCtx make_ctx(PipeRank *R, int64_t k, int vslot, int sslot, double *loss) {
  int64_t t, jref;
  mb_index(R, k, &t, &jref);
  /* keyed by the reference's global microbatch index */
  return pipe_stage_ctx(R->st, R->tc.seed, t * R->mref + jref, R->w[vslot], R->grads, pipe_block_base(R, BUF_STASH, vslot, sslot),
                        R->work, R->inputs, R->bnd, loss);
}

/* With recomputation the slot keeps only the received input; put it back where the
 * program reads it. */
static void restore_input(PipeRank *R, int sslot) {
  const PipeStage *ps = &R->pp->st[R->stage];
  for (int k = 0; k < ps->nbnd; k++)
    if (ps->bnd[k].role == PIPE_ACT_IN)
      memcpy(R->full + ps->bnd[k].offset, R->stash[sslot] + R->act_in_packed[k], (size_t)ps->bnd[k].bytes);
}

static void run_fwd(PipeRank *R, const PlanInstr *in) {
  fill_inputs(R, in->mb);
  if (R->pp->recompute && R->stage > 0) restore_input(R, in->sslot);
  double loss = 0;
  StageCtx c = make_ctx(R, in->mb, in->vslot, in->sslot, R->st->has_loss ? &loss : NULL);
  R->prog.forward(&c);
  R->bad_ids += c.bad_ids;
  if (R->st->has_loss) {
    int64_t t = (in->mb - 1) / R->pp->m, j = (in->mb - 1) % R->pp->m;
    R->loss[(t - R->first) * R->pp->m + j] = loss;
  }
}

static void run_bwd(PipeRank *R, const PlanInstr *in) {
  fill_inputs(R, in->mb);
  if (R->pp->recompute) {
    /* the forward again, same version and dropout key: the activations it stashes
     * are bit-identical to the first run's */
    if (R->stage > 0) restore_input(R, in->sslot);
    StageCtx f = make_ctx(R, in->mb, in->vslot, in->sslot, NULL);
    R->prog.forward(&f);
  }
  StageCtx c = make_ctx(R, in->mb, in->vslot, in->sslot, NULL);
  R->prog.backward(&c);
  R->bad_ids += c.bad_ids;
  /* a tied parameter's share is already in R->grads (the program accumulates it) */
}

/* ---- communication ------------------------------------------------------------------- */

static int peer_rank(const PipeRank *R, int stage) { return R->pp->st[stage].rank_of_replica[R->replica]; }

/* Posts one send/receive instruction's messages; returns false on failure. */
static bool post_p2p(PipeRank *R, const PlanInstr *in, int *nreq) {
  const PipeStage *ps = &R->pp->st[R->stage];
  PipeRole role = in->op == PI_RECV_ACT ? PIPE_ACT_IN : in->op == PI_SEND_ACT ? PIPE_ACT_OUT
                  : in->op == PI_RECV_GRAD ? PIPE_GRAD_IN : PIPE_GRAD_OUT;
  bool send = in->op == PI_SEND_ACT || in->op == PI_SEND_GRAD;
  int tag = in->op == PI_RECV_ACT || in->op == PI_SEND_ACT ? TAG_ACT : TAG_GRAD;
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
    snprintf(what, sizeof what, "%s of microbatch %lld %s stage %d", tag == TAG_ACT ? "activation" : "gradient",
             (long long)in->mb, send ? "for" : "from", in->peer);
    TransportRequest *rq = NULL;
    TransportStatus s = send ? transport_isend(R->t, peer_rank(R, in->peer), tag, base, (size_t)b->bytes, what, &rq)
                             : transport_irecv(R->t, peer_rank(R, in->peer), tag, base, (size_t)b->bytes, what, &rq);
    if (!pipe_transport_ok(R, s)) return false;
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
    int pr = peer_rank(R, G->stages[q]);
    char *rx = R->tied_rx[par] + T->rx_off + (uint64_t)n / 2 * up256(T->bytes);
    if (!pipe_transport_ok(R, transport_isend(R->t, pr, TAG_TIED + g, buf, T->bytes, what, &T->req[par][n++]))) return false;
    if (!pipe_transport_ok(R, transport_irecv(R->t, pr, TAG_TIED + g, rx, T->bytes, what, &T->req[par][n++]))) return false;
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
  if (!pipe_transport_ok(R, transport_waitall(R->t, T->req[par], T->nreq[par]))) return false;
  const PlanTiedGroup *G = &R->pp->groups[g];
  float *mine = (float *)(void *)tied_buf(R, g, t);
  const float *src[PLAN_MAX_TIED_SEGS];
  int n = 0;
  for (int q = 0; q < G->nstages; q++)
    src[q] = q == T->member ? mine : (const float *)(const void *)(R->tied_rx[par] + T->rx_off + (uint64_t)n++ * up256(T->bytes));
  int64_t numel = (int64_t)(T->bytes / 4);
  for (int64_t i = 0; i < numel; i++) {
    float a = src[0][i];
    for (int q = 1; q < G->nstages; q++) a += src[q][i];
    mine[i] = a;
  }
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

static void step_param(PipeRank *R, int k, const float *g, int vslot, int src, int64_t t, double scale) {
  const RtParam *pp = &R->st->params[k];
  float *wout = (float *)(void *)(R->w[vslot] + pp->offset);
  const float *win = (const float *)(const void *)(R->w[src] + pp->offset);
  if (!has_grad(R, k)) {
    if (wout != win) memcpy(wout, win, (size_t)pp->bytes);
    return;
  }
  pipe_opt_step(&R->tc, pp, wout, win, g, (float *)(void *)(R->adam_m + pp->offset),
                (float *)(void *)(R->adam_v + pp->offset), t, scale);
}

void pipe_opt_step(const TrainConfig *tc, const RtParam *pp, float *wout, const float *win, const float *g, float *m,
                   float *v, int64_t t, double scale) {
  double lr = rt_lr_at(tc, t);
  if (tc->optimizer == OPT_SGD)
    pk_sgd_step_f32(wout, win, g, m, pp->numel, lr, tc->beta1, tc->weight_decay, pp->decay, scale);
  else
    pk_adamw_step_f32(wout, win, g, m, v, pp->numel, lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay, pp->decay,
                      t + 1, scale, tc->delay_comp);
}

/* 1/(w·m), times the clip factor of the global norm over every stage (the
 * reference's rule). Tied gradients are complete here and counted once. The norm
 * is taken with clipping off too: the console and the log report it. */
static bool batch_scale(PipeRank *R, int64_t t, double *scale) {
  double inv = 1.0 / (double)R->mref;
  *scale = inv;
  double ss = 0;
  for (int k = 0; k < R->st->nparams; k++) {
    const RtParam *pp = &R->st->params[k];
    if (!has_grad(R, k)) continue;
    int g = tied_group_of(R, k);
    if (g >= 0 && R->tied[g].member != 0) continue; /* the group's first stage counts it */
    const float *gr = g >= 0 ? (const float *)(const void *)tied_buf(R, g, t)
                             : (const float *)(const void *)(R->grads + pp->offset);
    ss += pk_sumsq_f32(gr, pp->numel);
  }
  int d = R->pp->d;
  double *part = R->norm_part;
  part[R->stage] = ss;
  TransportRequest **rq = R->norm_req;
  int n = 0;
  for (int s = 0; s < d; s++) {
    if (s == R->stage) continue;
    char what[64];
    snprintf(what, sizeof what, "gradient norm of batch %lld from stage %d", (long long)t, s);
    if (!pipe_transport_ok(R, transport_isend(R->t, peer_rank(R, s), TAG_NORM, &part[R->stage], sizeof(double), what, &rq[n++])))
      return false;
    if (!pipe_transport_ok(R, transport_irecv(R->t, peer_rank(R, s), TAG_NORM, &part[s], sizeof(double), what, &rq[n++])))
      return false;
  }
  if (n && !pipe_transport_ok(R, transport_waitall(R->t, rq, n))) return false;
  double tot = 0;
  for (int s = 0; s < d; s++) tot += part[s];
  double norm = sqrt(tot) * inv;
  R->grad_norm[t - R->first] = norm;
  if (R->tc.clip > 0 && norm > R->tc.clip) *scale = inv * R->tc.clip / norm;
  return true;
}

/* The step line of batch t, with the global loss: the last stage of every other
 * replica sends its share to replica 0's, which prints (runtime/console.c). The
 * replicas' last stages all reach OPT_STEP(t) after batch t's all-reduce, so the
 * small message waits for nothing else. Not quiet only (every rank knows). */
static bool console_line(PipeRank *R, int64_t t) {
  const PipePlan *p = R->pp;
  double sum = 0;
  for (int64_t j = 0; j < p->m; j++) sum += R->loss[(t - R->first) * p->m + j];
  const int *last = p->st[p->d - 1].rank_of_replica;
  char what[64];
  snprintf(what, sizeof what, "loss of batch %lld", (long long)t);
  if (R->replica != 0)
    return pipe_transport_ok(R, transport_send(R->t, last[0], TAG_LOSS, &sum, sizeof sum, what));
  for (int rep = 1; rep < p->w; rep++) {
    double part = 0;
    if (!pipe_transport_ok(R, transport_recv(R->t, last[rep], TAG_LOSS, &part, sizeof part, what))) return false;
    sum += part;
  }
  StepStats ss = {.loss = sum / (double)R->mref, .lr = rt_lr_at(&R->tc, t), .grad_norm = R->grad_norm[t - R->first],
                  .ms = R->step_ms[t - R->first]};
  if (!rt_log_step(R->console, t + 1, R->steps, &ss, pipe_tokens_per_step(p), pipe_flops_per_step(p), NAN))
    return false; /* no file: not reached */
  return true;
}

double pipe_tokens_per_step(const PipePlan *p) {
  for (int s = 0; s < p->d; s++)
    for (int k = 0; k < p->rt->stages[s].ninputs; k++)
      if (p->rt->stages[s].inputs[k].stream != STREAM_OTHER)
        return (double)(p->b * p->m * p->w) * (double)p->rt->stages[s].inputs[k].shape[1];
  return 0;
}

double pipe_flops_per_step(const PipePlan *p) {
  double f = 0;
  for (int s = 0; s < p->d; s++) f += p->rt->stages[s].flops_fwd + p->rt->stages[s].flops_bwd;
  return f * (double)(p->m * p->w);
}

double pipe_peak_flops(const PipePlan *p) { return p->rt->peak_flops * (double)p->nranks; }

static bool run_step(PipeRank *R, const PlanInstr *in) {
  int64_t t = in->batch;
  int par = (int)(t % 2);
  if (in->group >= 0) { /* a deferred tied parameter, W(t+1) for batch t+2 */
    int g = in->group;
    if (R->tied[g].param < 0) return true;
    if (!tied_finish(R, g, t)) return false;
    float *gr = (float *)(void *)tied_buf(R, g, t);
    step_param(R, R->tied[g].param, gr, in->vslot, in->src_vslot, t, R->scale[par]);
    memset(gr, 0, R->tied[g].bytes);
    R->tied[g].state[par] = 0;
    return true;
  }
  for (int g = 0; g < R->pp->ngroups; g++) {
    PipeTied *T = &R->tied[g];
    if (T->param < 0) continue;
    if (T->deferred) { /* batch t+1's backwards accumulate here next: move it out */
      char *src = R->grads + R->st->params[T->param].offset;
      memcpy(R->tg[par] + T->tg_off, src, T->bytes);
      memset(src, 0, T->bytes);
      /* the group's sum now, for the global norm (clipping, the console, the log);
       * its step still comes later */
      if (!tied_finish(R, g, t)) return false;
    } else if (!tied_finish(R, g, t)) {
      return false;
    }
  }
  double scale;
  if (!batch_scale(R, t, &scale)) return false;
  R->scale[par] = scale;
  for (int k = 0; k < R->st->nparams; k++) {
    if (deferred_group_of(R, k) >= 0) continue;
    step_param(R, k, (const float *)(const void *)(R->grads + R->st->params[k].offset), in->vslot, in->src_vslot, t,
               scale);
  }
  for (int g = 0; g < R->pp->ngroups; g++)
    if (R->tied[g].param >= 0 && !R->tied[g].deferred) R->tied[g].state[par] = 0;
  memset(R->grads, 0, (size_t)R->st->blocks[BUF_GRADS]);
  R->newest = in->vslot;
  R->steps_done = t + 1;
  double now = pipe_now();
  R->step_ms[t - R->first] = (now - R->last_step_time) * 1e3;
  R->last_step_time = now;
  return R->st->has_loss && !R->o->quiet ? console_line(R, t) : true;
}

/* ---- the interpreter ------------------------------------------------------------------- */

static void record(PipeRank *R, const PlanInstr *in, double t0, double t1) {
  if (R->nev >= R->cap_ev) return;
  R->ev[R->nev++] = (PipeEvent){.op = (int)in->op, .stage = R->stage, .replica = R->replica, .mb = in->mb,
                                .batch = in->batch, .version = in->version, .group = in->group,
                                .start = t0, .end = t1};
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
    double until = pipe_now() + 2 * transport_timeout(R->t) + 1;
    while (pipe_now() < until && !transport_interrupted()) usleep(20000);
  }
  if (transport_kind(R->t) == TRANSPORT_MPI) exit(3);
  snprintf(R->err, sizeof R->err, "rank %d: injected fault", R->rank);
  R->failed = true;
}

bool pipe_rank_run(PipeRank *R) { return pipe_rank_run_batches(R, R->first, R->steps); }

static bool in_batches(const PlanInstr *in, int64_t lo, int64_t hi) { return in->batch >= lo && in->batch < hi; }

bool pipe_rank_run_batches(PipeRank *R, int64_t lo, int64_t hi) {
  const PlanStream *S = R->stream;
  /* stash slot of each microbatch's forward: receives of its input land there */
  int64_t nmb = R->pp->m * R->steps + 2;
  for (int i = 0; i < S->n; i++) /* --steps 0 still builds one batch's stream */
    if (S->ins[i].op == PI_FWD && S->ins[i].mb >= nmb) nmb = S->ins[i].mb + 1;
  R->mb_sslot = pd_calloc((size_t)nmb, sizeof(int));
  for (int i = 0; i < S->n; i++)
    if (S->ins[i].op == PI_FWD) R->mb_sslot[S->ins[i].mb] = S->ins[i].sslot;
  bool ok = true;
  R->last_step_time = pipe_now(); /* the first step's time starts here, not at 0 */
  for (int i = 0; ok && i < S->n; i++) {
    const PlanInstr *in = &S->ins[i];
    if (!in_batches(in, lo, hi)) continue;
    transport_progress(R->t, plan_op_name(in->op), in->op == PI_FWD || in->op == PI_BWD ? in->mb : in->batch);
    if (in->batch == R->fault_step) {
      inject_fault(R);
      ok = false;
      break;
    }
    double t0 = pipe_now();
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
      if (ok && nreq && !pipe_transport_ok(R, transport_waitall(R->t, R->reqs, nreq))) ok = false;
      double t1 = pipe_now();
      for (int q = i; ok && q <= j; q++)
        if (in_batches(&S->ins[q], lo, hi)) record(R, &S->ins[q], t0, t1);
      i = j;
      continue;
    }
    case PI_FWD: run_fwd(R, in); break;
    case PI_BWD: run_bwd(R, in); break;
    case PI_ALLREDUCE: {
      char what[64];
      snprintf(what, sizeof what, "all-reduce of batch %d's gradients", in->batch);
      ok = pipe_transport_ok(R, transport_allreduce_sum_f32(R->rep_group, (float *)(void *)R->grads,
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
    record(R, in, t0, pipe_now());
  }
  free(R->mb_sslot);
  R->mb_sslot = NULL;
  if (ok) R->steps_done = hi;
  return ok && !R->failed;
}

/* ---- gathering to rank 0 ------------------------------------------------------------- */

bool pipe_gather(PipeRank *R, PipeGathered *G) {
  const PipePlan *p = R->pp;
  Transport *t = R->t;
  bool root = R->rank == 0;
  const RtStage *st = R->st;
  int64_t pbytes = st->blocks[BUF_PARAMS];
  int prev = R->nversions >= 2 && p->schedule == PS_2BW ? 1 - R->newest : -1;
  /* replica 0 of each stage: newest weights, 2bw's older version, AdamW moments */
  if (R->replica == 0 && !root) {
    const char *bufs[4] = {R->w[R->newest], prev >= 0 ? R->w[prev] : R->w[R->newest], R->adam_m, R->adam_v};
    for (int q = 0; q < 4; q++)
      if (!pipe_transport_ok(R, transport_send(t, 0, TAG_GATHER, bufs[q], (size_t)pbytes, "final weights"))) return false;
  }
  /* last stages: their microbatch losses; everyone: the trace events */
  int64_t nl = (R->steps - R->first) * p->m;
  if (st->has_loss && !root && !pipe_transport_ok(R, transport_send(t, 0, TAG_GATHER + 1, R->loss, (size_t)nl * sizeof(double), "losses")))
    return false;
  int64_t hdr[3] = {R->nev, (int64_t)R->arena_bytes, R->bad_ids};
  if (!root) {
    if (!pipe_transport_ok(R, transport_send(t, 0, TAG_GATHER + 2, hdr, sizeof hdr, "trace")) ||
        (hdr[0] && !pipe_transport_ok(R, transport_send(t, 0, TAG_GATHER + 2, R->ev, (size_t)hdr[0] * sizeof(PipeEvent), "trace"))))
      return false;
    R->steps_done = R->steps;
    return true;
  }
  /* rank 0 */
  memset(G, 0, sizeof *G);
  G->d = p->d;
  G->stage_w = pd_calloc((size_t)p->d, sizeof(char *));
  G->stage_prev = pd_calloc((size_t)p->d, sizeof(char *));
  G->stage_m = pd_calloc((size_t)p->d, sizeof(char *));
  G->stage_v = pd_calloc((size_t)p->d, sizeof(char *));
  G->mb_loss = pd_calloc((size_t)(nl * p->w + 1), sizeof(double));
  for (int s = 0; s < p->d; s++) {
    int64_t b = p->rt->stages[s].blocks[BUF_PARAMS];
    char **dst[4] = {&G->stage_w[s], &G->stage_prev[s], &G->stage_m[s], &G->stage_v[s]};
    for (int q = 0; q < 4; q++) *dst[q] = pd_malloc((size_t)(b ? b : 1));
    int src = p->st[s].rank_of_replica[0];
    if (src == 0) {
      memcpy(G->stage_w[s], R->w[R->newest], (size_t)b);
      memcpy(G->stage_prev[s], R->w[prev >= 0 ? prev : R->newest], (size_t)b);
      memcpy(G->stage_m[s], R->adam_m, (size_t)b);
      memcpy(G->stage_v[s], R->adam_v, (size_t)b);
      continue;
    }
    for (int q = 0; q < 4; q++)
      if (!pipe_transport_ok(R, transport_recv(t, src, TAG_GATHER, *dst[q], (size_t)b, "final weights"))) return false;
  }
  double *tmp = pd_malloc((size_t)(nl + 1) * sizeof(double));
  for (int rep = 0; rep < p->w; rep++) {
    int src = p->st[p->d - 1].rank_of_replica[rep];
    if (src == 0) memcpy(tmp, R->loss, (size_t)nl * sizeof(double));
    else if (!pipe_transport_ok(R, transport_recv(t, src, TAG_GATHER + 1, tmp, (size_t)nl * sizeof(double), "losses"))) {
      free(tmp);
      return false;
    }
    /* reference order: batch t, then replica, then j */
    for (int64_t b = 0; b < R->steps - R->first; b++)
      for (int64_t j = 0; j < p->m; j++) G->mb_loss[b * p->w * p->m + rep * p->m + j] = tmp[b * p->m + j];
  }
  free(tmp);
  G->ev = pd_malloc((size_t)(R->nev + 1) * sizeof(PipeEvent));
  memcpy(G->ev, R->ev, (size_t)R->nev * sizeof(PipeEvent));
  G->nev = R->nev;
  G->arena = pd_calloc((size_t)p->d, sizeof(uint64_t));
  G->arena[R->stage] = R->arena_bytes;
  G->bad_ids = R->bad_ids;
  for (int rk = 1; rk < p->nranks; rk++) {
    int64_t h[3];
    if (!pipe_transport_ok(R, transport_recv(t, rk, TAG_GATHER + 2, h, sizeof h, "trace"))) return false;
    int64_t n = h[0];
    if ((uint64_t)h[1] > G->arena[p->rank_stage[rk]]) G->arena[p->rank_stage[rk]] = (uint64_t)h[1];
    G->bad_ids += h[2];
    G->ev = pd_realloc(G->ev, (size_t)(G->nev + n + 1) * sizeof(PipeEvent));
    if (n && !pipe_transport_ok(R, transport_recv(t, rk, TAG_GATHER + 2, G->ev + G->nev, (size_t)n * sizeof(PipeEvent), "trace")))
      return false;
    G->nev += n;
  }
  return true;
}

void pipe_gathered_free(PipeGathered *G) {
  for (int s = 0; s < G->d; s++) {
    if (G->stage_w) free(G->stage_w[s]);
    if (G->stage_prev) free(G->stage_prev[s]);
    if (G->stage_m) free(G->stage_m[s]);
    if (G->stage_v) free(G->stage_v[s]);
  }
  free(G->stage_w);
  free(G->stage_prev);
  free(G->stage_m);
  free(G->stage_v);
  free(G->mb_loss);
  free(G->ev);
  free(G->arena);
  memset(G, 0, sizeof *G);
}
