/* runtime/cuda/pipe/cuda_pipe_nccl.c — multi-GPU pipeline mode (cuda_pipe.h): one MPI process
 * per stage replica ("SR"), one GPU each, NCCL between them.
 *
 * STATUS: NEVER RUN ON GPUs WITH THE REAL libnccl. CI runs it under mpirun on the
 * emulated device (tests/nccl) with tests/nccl/fake_nccl.c standing in for libnccl
 * (NCCL's calls over MPI on host memory, each finished before it returns) and checks
 * losses and weights against the sequential reference. What that leaves unchecked:
 * NCCL's device-side blocking (whether an issue order that completes with the fake's
 * host-blocking calls also completes on GPUs: the norm's read-back and the
 * per-step timing wait for the whole device, tied streams included; nccl_may_wait says
 * why that should be safe), NCCL's summation order, and the real device table's stream
 * handles (cuda_exec_dev.c: native_stream) in NCCL's hands.
 *
 * Each process runs the SAME interpreter as single-GPU mode (cuda_pipe.c's setup,
 * cuda_pipe_run.c's cp_run) for its own SR only, through this file's link (nccl_link,
 * cuda_pipe_internal.h's CpLink); what crosses SRs as device copies on one GPU is
 * NCCL here, issued in the SR's instruction order (a group's messages go into the SR's
 * message array, sized at setup: nothing is allocated per group):
 *  - a send/receive group (instructions chained with with_next) is ncclGroupStart,
 *    one ncclSend/ncclRecv of bytes per boundary tensor (runtime/pipeline/pipeline.c's tensors
 *    and order), ncclGroupEnd, on the communication stream on the SR's pipeline
 *    communicator (rank = stage), fenced like the local copies: the comm stream waits
 *    for the SR's event, the SR's stream for the comm stream's;
 *  - ALLREDUCE is ncclAllReduce (sum, in place) of the gradient block on the stage's
 *    replica communicator (rank = replica), on the comm stream;
 *  - the tied sum is ncclAllReduce on the group's communicator (rank = position among
 *    its stages, ascending) on the group's own stream (ops stream 2 + g), POSTED where
 *    runtime/pipeline/pipeline.c posts its exchange (TIED_SYNC, or the OPT_STEP that needs it
 *    first) and WAITED for (an event of that post) by the step that uses it, so it
 *    does not hold up the pipeline traffic behind it on the comm stream;
 *  - the global norm (every step: clipping, the console and the log need it): each
 *    SR's Σg² (a double) summed over its pipeline with ncclAllReduce on the pipeline
 *    communicator, then read back;
 *  - the step line (not quiet): the last stage of replica 0 prints the global loss,
 *    the other replicas' last stages sending it their step's losses (Transport).
 * Summation order. The CPU executor adds the replicas', the tied members' and the
 * norm parts in ascending order (transport.h); the fake does too, so the test's runs
 * match the reference bit for bit up to the kernels'. Real NCCL sums in its ring or
 * tree order, which differs per element; float addition is not associative, so each
 * summed element can differ from the ascending sum by about (n-1)·2^-24 relative to
 * the sum of the magnitudes of its n terms (n = w for gradients, the tied group's
 * size for tied gradients; the norm in double is exact enough to change the clip
 * scale only in the last bits). That is the bound against the CPU reference after one
 * step; over training such differences grow as any rounding does.
 * Communicators are created in one global order (every pipeline, every stage's
 * replicas, every tied group of every replica), each by its members only:
 * ncclGetUniqueId on the group's first rank, sent to the others over MPI (the
 * Transport), ncclCommInitRank. Rank 0 gathers the losses, the replica-0 weights and
 * the out-of-range id counts over the Transport for the report and --reference.
 * Checkpoints and validation (cuda_pipe.h; single-GPU mode's code per rank): --init
 * (cp_setup) and --resume (cp_resume) read this rank's stage's tensors of the file
 * (any executor's), then every rank's outcome is agreed on (agree: each rank's message
 * to rank 0, the lowest failing rank's back to all), so a file one rank cannot read
 * stops every rank with status 1 and ONE message (rank 0 prints it) and no abort.
 * --save: the replica-0 ranks add the older 2bw version and AdamW m and v to what they
 * send rank 0, which writes the CPU pipeline's format with its writer (pipe_save,
 * atomic: no partial file); that outcome (and the out-of-range id count) is agreed on
 * the same way. Validation: training runs in stretches (cp_select) that end where one
 * is due; between them every rank runs its stage's forwards of its replica's
 * validation microbatches (cp_eval_forward, on the communication stream), the
 * activations going to the next stage by NCCL on the pipeline communicator, and the
 * last stages send their losses to rank 0 over the Transport, which takes the mean in
 * runtime/pipeline/pipeline_eval.h's order.
 * Failures: a failing rank aborts the Transport (the others, blocked in MPI, stop;
 * transport_destroy then ends the job through MPI_Abort); one blocked inside NCCL is
 * ended by that MPI_Abort too. */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/transport/transport.h"

#define TAG_NCCL_ID 32000  /* a communicator's unique id, from its first rank */
/* 32001: cuda_pipe_nccl_gather.c's results, to rank 0 */
#define TAG_AGREE 32002    /* agree(): a rank's message to rank 0, and rank 0's answer */
#define TAG_EVAL 32003     /* a last stage's validation losses, to rank 0 */
#define TAG_LOSS 32004     /* a last stage's losses of one step, to replica 0's (the step line) */

struct CpNet {
  Transport *t;
  NcclComm *pipe;                       /* the SR's pipeline (rank = stage); NULL when d = 1 */
  NcclComm *rep;                        /* the stage's replicas (rank = replica); NULL when w = 1 */
  NcclComm *tied[PIPE_MAX_GROUPS];      /* tied group g of this replica; NULL: not a member */
  void *tied_ev[PIPE_MAX_GROUPS][2];    /* marks tied group g's sum of batch parity q */
};

/* ---- agreement ---------------------------------------------------------------------------- */

/* Collective over every rank: whether every rank is ok. Each sends rank 0 its message
 * ("" when ok); rank 0 answers every rank with the lowest failing rank's. So a failure
 * that may strike one rank or all (a checkpoint one rank cannot read, a --save that
 * fails on rank 0) ends every rank alike, with ONE message: on failure rank 0's err
 * holds it and the others' err is empty (*together true: nobody needs aborting).
 * A transport failure: false, *together false, its message in err. */
static bool agree(Transport *t, bool ok, char *err, size_t errlen, bool *together) {
  char *msg = pd_calloc(RT_ERR_LEN, 1), *got = pd_calloc(RT_ERR_LEN, 1);
  if (!ok) snprintf(msg, RT_ERR_LEN, "%s", err[0] ? err : "failed");
  TransportStatus st = TRANSPORT_OK;
  if (transport_rank(t) != 0) {
    st = transport_send(t, 0, TAG_AGREE, msg, RT_ERR_LEN, "the outcome of a step every rank takes");
    if (st == TRANSPORT_OK) st = transport_recv(t, 0, TAG_AGREE, msg, RT_ERR_LEN, "the job's outcome of that step");
  } else {
    for (int i = 1; i < transport_size(t) && st == TRANSPORT_OK; i++) {
      st = transport_recv(t, i, TAG_AGREE, got, RT_ERR_LEN, "the outcome of a step every rank takes");
      if (st == TRANSPORT_OK && !msg[0] && got[0]) memcpy(msg, got, RT_ERR_LEN);
    }
    for (int i = 1; i < transport_size(t) && st == TRANSPORT_OK; i++)
      st = transport_send(t, i, TAG_AGREE, msg, RT_ERR_LEN, "the job's outcome of that step");
  }
  msg[RT_ERR_LEN - 1] = 0;
  *together = st == TRANSPORT_OK;
  bool all = *together && !msg[0];
  if (!*together) snprintf(err, errlen, "%s", transport_error(t));
  else if (!all) snprintf(err, errlen, "%s", transport_rank(t) == 0 ? msg : "");
  free(msg);
  free(got);
  return all;
}

/* ---- bootstrap ---------------------------------------------------------------------------- */

typedef struct IdBcast {
  Transport *t;
  const int *ranks; /* world ranks of the group, [0] the root */
  int n, me;
  bool failed;
} IdBcast;

/* NcclBcastFn over the Transport: the root sends to every member. On a transport
 * failure the buffer is zeroed, so ncclCommInitRank fails instead of hanging. */
static void id_bcast(void *buf, size_t bytes, int root, void *user) {
  IdBcast *b = user;
  PD_CHECK(root == 0, "root %d", root);
  TransportStatus st = TRANSPORT_OK;
  if (b->me == 0)
    for (int i = 1; i < b->n && st == TRANSPORT_OK; i++)
      st = transport_send(b->t, b->ranks[i], TAG_NCCL_ID, buf, bytes, "an NCCL unique id");
  else
    st = transport_recv(b->t, b->ranks[0], TAG_NCCL_ID, buf, bytes, "an NCCL unique id");
  if (st != TRANSPORT_OK) {
    b->failed = true;
    memset(buf, 0, bytes);
  }
}

/* The communicator over world ranks `ranks` (ascending) when this process is one of
 * them and there are two or more; *out stays NULL otherwise. */
static bool make_comm(CpRun *x, const int *ranks, int n, NcclComm **out, const char *what, char *err,
                      size_t errlen) {
  int me = -1;
  for (int i = 0; i < n; i++)
    if (ranks[i] == x->self) me = i;
  if (me < 0 || n < 2) return true;
  IdBcast b = {.t = x->net->t, .ranks = ranks, .n = n, .me = me};
  char nerr[RT_ERR_LEN];
  *out = nccl_comm_create(n, me, id_bcast, &b, nerr, sizeof nerr);
  if (b.failed) {
    snprintf(err, errlen, "%s", transport_error(x->net->t));
    return false;
  }
  if (!*out) snprintf(err, errlen, "%s communicator: %s", what, nerr);
  return *out != NULL;
}

static bool net_setup(CpRun *x, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  CpNet *net = x->net;
  int ranks[CP_MAX_SR > PLAN_MAX_TIED_SEGS ? CP_MAX_SR : PLAN_MAX_TIED_SEGS];
  if (p->d > CP_MAX_SR || p->w > CP_MAX_SR) {
    snprintf(err, errlen, "%d stages x %d replicas: multi-GPU mode handles at most %d of each", p->d, p->w,
             CP_MAX_SR);
    return false;
  }
  for (int r = 0; r < p->w; r++) {
    for (int s = 0; s < p->d; s++) ranks[s] = s * p->w + r;
    if (!make_comm(x, ranks, p->d, &net->pipe, "pipeline", err, errlen)) return false;
  }
  for (int s = 0; s < p->d; s++) {
    for (int r = 0; r < p->w; r++) ranks[r] = s * p->w + r;
    if (!make_comm(x, ranks, p->w, &net->rep, "replica", err, errlen)) return false;
  }
  for (int g = 0; g < p->ngroups; g++)
    for (int r = 0; r < p->w; r++) {
      const PlanTiedGroup *G = &p->groups[g];
      for (int q = 0; q < G->nstages; q++) ranks[q] = G->stages[q] * p->w + r;
      if (!make_comm(x, ranks, G->nstages, &net->tied[g], "tied group", err, errlen)) return false;
    }
  for (int g = 0; g < p->ngroups; g++)
    for (int q = 0; q < 2; q++) net->tied_ev[g][q] = x->ops->event_create(x->ops->dev);
  return true;
}

static void net_teardown(CpRun *x) {
  CpNet *net = x->net;
  nccl_comm_destroy(net->pipe);
  nccl_comm_destroy(net->rep);
  for (int g = 0; g < PIPE_MAX_GROUPS; g++) {
    nccl_comm_destroy(net->tied[g]);
    for (int q = 0; q < 2; q++)
      if (net->tied_ev[g][q]) x->ops->event_destroy(x->ops->dev, net->tied_ev[g][q]);
  }
}

/* ---- ordering ------------------------------------------------------------------------------ */

/* Work issued on `to` from now on starts after what `from` has so far (ev marks it). */
static void fence(CpRun *x, void *ev, int from, int to) {
  x->ops->event_record(x->ops->dev, ev, from);
  x->ops->stream_wait(x->ops->dev, to, ev);
}

static void *native(CpRun *x, int stream) { return x->ops->native_stream(x->ops->dev, stream); }

/* ---- instructions ---------------------------------------------------------------------------- */

/* One send/receive group: every message in one NCCL group on the pipeline
 * communicator (rank = stage), on the communication stream, fenced like the local
 * copies. Each call has finished when it returns (as far as this process's order goes),
 * so nothing is left pending. */
static bool nccl_p2p(CpRun *x, CpSr *s, int n) {
  fence(x, s->ev, s->stream, CP_COMM_STREAM);
  void *cs = native(x, CP_COMM_STREAM);
  nccl_group_start(x->net->pipe);
  for (int i = 0; i < n; i++) {
    const CpMsg *m = &s->grp[i];
    if (m->send) nccl_send(x->net->pipe, cs, m->ptr, (size_t)m->bytes, NCCL_DT_U8, m->in->peer);
    else nccl_recv(x->net->pipe, cs, m->ptr, (size_t)m->bytes, NCCL_DT_U8, m->in->peer);
  }
  nccl_group_end(x->net->pipe);
  fence(x, x->comm_ev, CP_COMM_STREAM, s->stream);
  return true;
}

static CpStep nccl_allreduce(CpRun *x, CpSr *s, const PlanInstr *in) {
  (void)in;
  if (x->net->rep) {
    fence(x, s->ev, s->stream, CP_COMM_STREAM);
    size_t n = (size_t)s->st->blocks[BUF_GRADS] / 4;
    nccl_allreduce_sum(x->net->rep, native(x, CP_COMM_STREAM), s->grads, s->grads, n, NCCL_DT_F32);
    fence(x, x->comm_ev, CP_COMM_STREAM, s->stream);
  }
  s->pc++;
  return CP_DONE;
}

/* Posts tied group g's sum of batch t (state 0 -> 1) on the group's stream. */
static void tied_post(CpRun *x, CpSr *s, int g, int64_t t) {
  CpTied *T = &s->tied[g];
  int par = (int)(t % 2), ts = CP_TIED_STREAM + g;
  if (T->param < 0 || T->state[par] != 0) return;
  fence(x, s->ev, s->stream, ts);
  CxPtr b = cp_tied_buf(s, g, t);
  nccl_allreduce_sum(x->net->tied[g], native(x, ts), b, b, (size_t)(T->bytes / 4), NCCL_DT_F32);
  x->ops->event_record(x->ops->dev, x->net->tied_ev[g][par], ts);
  T->state[par] = 1;
}

/* The SR's stream waits for that sum (state -> 2). */
static bool tied_finish(CpRun *x, CpSr *s, int g, int64_t t) {
  CpTied *T = &s->tied[g];
  int par = (int)(t % 2);
  if (T->state[par] == 0) tied_post(x, s, g, t);
  if (T->state[par] == 2) return true;
  x->ops->stream_wait(x->ops->dev, s->stream, x->net->tied_ev[g][par]);
  T->state[par] = 2;
  return true;
}

/* OPT_STEP(t) of this process's SR alone: its partners' parts of the norm come by NCCL. */
static int nccl_step_group(CpRun *x, CpSr *s, const PlanInstr *in, CpSr **grp) {
  (void)x, (void)in;
  grp[0] = s;
  return 1;
}

/* The SR's Σg² summed over its pipeline (ncclAllReduce on the pipeline communicator),
 * then read back (waits for the device). */
static double nccl_norm_total(CpRun *x, CpSr **grp, int n) {
  CpSr *s = grp[0];
  (void)n;
  if (x->net->pipe) {
    fence(x, s->ev, s->stream, CP_COMM_STREAM);
    nccl_allreduce_sum(x->net->pipe, native(x, CP_COMM_STREAM), s->norm, s->norm, 1, NCCL_DT_F64);
    fence(x, x->comm_ev, CP_COMM_STREAM, s->stream);
  }
  double tot = 0;
  x->ops->dtoh(x->ops->dev, &tot, s->norm, 8);
  return tot;
}

/* Steady-state time per batch and the progress line wait for the whole device, tied
 * streams included. runtime/pipeline/pipeline.c never waits for a posted tied sum before the
 * step that needs it (one posted by a TIED_SYNC of the next batch before this step
 * is finished by that batch's step); waiting for it here could wait on work a partner
 * issues only after this process's next messages: so not while one is outstanding
 * (the times then span the batches between synced steps). The tied states follow the
 * stage's stream alone, so every replica of a stage decides alike. */
static bool nccl_may_wait(CpRun *x, const CpSr *s) {
  for (int g = 0; g < x->p->ngroups; g++)
    for (int q = 0; q < 2; q++)
      if (s->tied[g].param >= 0 && s->tied[g].state[q] == 1) return false;
  return true;
}

/* The global loss of batch t on the line: the last stage of every replica > 0 sends
 * its m losses to replica 0's (Transport), which adds them in replica order, as
 * single-GPU mode does, and prints. */
static bool nccl_progress(CpRun *x, CpSr *s, int64_t t) {
  const PipePlan *p = x->p;
  if (s->stage != p->d - 1) return true;
  Transport *tr = x->net->t;
  TransportStatus st = TRANSPORT_OK;
  size_t bytes = (size_t)p->m * 4;
  if (s->replica != 0) {
    x->ops->dtoh(x->ops->dev, x->host_loss, s->loss + (CxPtr)(t * p->m) * 4, bytes);
    st = transport_send(tr, (p->d - 1) * p->w, TAG_LOSS, x->host_loss, bytes, "a step's losses");
  } else {
    double sum = 0;
    cp_add_losses(x, s, t, &sum);
    for (int r = 1; r < p->w && st == TRANSPORT_OK; r++) {
      st = transport_recv(tr, s->idx + r, TAG_LOSS, x->host_loss, bytes, "a step's losses");
      for (int64_t j = 0; st == TRANSPORT_OK && j < p->m; j++) sum += x->host_loss[j];
    }
    if (st == TRANSPORT_OK) cp_progress_line(x, sum, p->w, t);
  }
  if (st != TRANSPORT_OK) snprintf(x->err, sizeof x->err, "%s", transport_error(tr));
  return st == TRANSPORT_OK;
}

static const CpLink nccl_link = {
    .p2p = nccl_p2p,
    .allreduce = nccl_allreduce,
    .tied_post = tied_post,
    .tied_sum = tied_finish,
    .step_group = nccl_step_group,
    .norm_total = nccl_norm_total,
    .may_wait = nccl_may_wait,
    .progress = nccl_progress,
};

/* ---- validation ------------------------------------------------------------------------------ */

/* One validation microbatch's activations to (PIPE_ACT_OUT) or from (PIPE_ACT_IN) the
 * neighbouring stage of this replica: one NCCL group of every boundary tensor of that
 * role in plan order (cuda_pipe_eval.c pass_on's pairing) on the pipeline
 * communicator, on the communication stream, where the evaluation runs. */
static bool eval_xfer(CpRun *x, CpSr *s, PipeRole role) {
  int peer = role == PIPE_ACT_IN ? s->stage - 1 : s->stage + 1;
  void *cs = native(x, CP_COMM_STREAM);
  nccl_group_start(x->net->pipe);
  for (int k = 0; k < s->ps->nbnd; k++) {
    if (s->ps->bnd[k].role != role) continue;
    CxPtr at;
    if (!cp_eval_bnd(x, s, k, &at)) {
      nccl_group_end(x->net->pipe);
      return false;
    }
    if (role == PIPE_ACT_IN) nccl_recv(x->net->pipe, cs, at, (size_t)s->ps->bnd[k].bytes, NCCL_DT_U8, peer);
    else nccl_send(x->net->pipe, cs, at, (size_t)s->ps->bnd[k].bytes, NCCL_DT_U8, peer);
  }
  nccl_group_end(x->net->pipe);
  return true;
}

/* Collective: cuda_pipe_eval.c's validation (runtime/pipeline/pipeline_eval.h's loss) with one
 * SR per rank, between two stretches: each rank runs its stage's forward of its
 * replica's microbatches in order, receiving its input activations from the previous
 * stage and sending its outputs on (NCCL, eval_xfer); the last stages send their
 * losses to rank 0 (Transport), which sums them in the reference's order (batch,
 * replica, microbatch) into *mean (NAN on the other ranks). false with x->err. */
static bool net_eval(CpRun *x, double *mean) {
  const PipePlan *p = x->p;
  CpSr *s = &x->sr[x->self];
  Transport *t = x->net->t;
  int64_t m = p->m, nmb = x->val_batches * m;
  size_t bytes = (size_t)nmb * sizeof(double);
  double *loss = pd_calloc((size_t)nmb + 1, sizeof(double));
  bool ok = true;
  *mean = NAN;
  x->ops->sync(x->ops->dev); /* the training streams' work is done: their blocks are idle */
  for (int64_t k = 0; ok && k < x->val_batches; k++)
    for (int64_t j = 0; ok && j < m; j++) {
      if (s->stage > 0) ok = eval_xfer(x, s, PIPE_ACT_IN);
      if (ok) loss[k * m + j] = cp_eval_forward(x, s, k, j);
      if (ok && s->stage < p->d - 1) ok = eval_xfer(x, s, PIPE_ACT_OUT);
    }
  x->ops->sync(x->ops->dev); /* training's next work on the SR's stream must not overtake it */
  TransportStatus st = TRANSPORT_OK;
  if (ok && x->self != 0 && s->stage == p->d - 1) {
    st = transport_send(t, 0, TAG_EVAL, loss, bytes, "validation losses");
  } else if (ok && x->self == 0) {
    double *all = pd_calloc((size_t)(nmb * p->w) + 1, sizeof(double)), sum = 0;
    for (int r = 0; r < p->w && st == TRANSPORT_OK; r++) {
      int src = (p->d - 1) * p->w + r;
      if (src == 0) memcpy(all, loss, bytes);
      else st = transport_recv(t, src, TAG_EVAL, all + r * nmb, bytes, "validation losses");
    }
    for (int64_t k = 0; k < x->val_batches; k++)
      for (int r = 0; r < p->w; r++)
        for (int64_t j = 0; j < m; j++) sum += all[r * nmb + k * m + j];
    if (st == TRANSPORT_OK) *mean = x->val_batches ? sum / (double)(x->val_batches * p->w * m) : 0;
    free(all);
  }
  if (st != TRANSPORT_OK) {
    snprintf(x->err, sizeof x->err, "%s", transport_error(t));
    ok = false;
  }
  free(loss);
  return ok;
}

/* ---- entry points ----------------------------------------------------------------------------- */

int cx_pipe_train_nccl(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, Transport *t,
                       PipeOutcome *out, uint64_t *extra_bytes, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (transport_size(t) != p->d * p->w) {
    snprintf(err, errlen, "the plan has %d stage replicas (%d stages x %d replicas) but %d processes were started: "
             "run it as mpirun -np %d", p->d * p->w, p->d, p->w, transport_size(t), p->d * p->w);
    return 1;
  }
  if (!ops->native_stream) {
    snprintf(err, errlen, "this device gives no stream handles for NCCL (its CxDeviceOps has no native_stream): "
             "it cannot run multi-GPU mode");
    return 1;
  }
  if (!nccl_available(err, errlen)) return 1;
  CpNet net = {.t = t};
  CpRun x = {.p = p, .ops = ops, .o = o, .link = &nccl_link, .multi = true, .self = transport_rank(t), .net = &net};
  int rc = 1;
  /* --init (in cp_setup), then --resume, then the validation file, as single-GPU mode;
   * every rank reads its own stage's part of a checkpoint, and all go on or all stop;
   * before all that, rank 0 checks the paths of the outputs it writes (runtime/io/io.h) */
  OutputFlag outs[] = {{"--save", o->save_path}, {"--log-json", o->log_json}};
  bool ok = x.self != 0 || output_paths_check(outs, 2, err, errlen);
  if (ok) ok = cp_setup(&x, err, errlen);
  if (ok && o->resume_path) ok = cp_resume(&x, o->resume_path, err, errlen);
  if (ok && o->val_path) ok = cp_eval_open(&x, err, errlen);
  bool together = false;
  ok = agree(t, ok, err, errlen, &together);
  if (ok) together = false; /* from here a failure aborts, unless agreed on again */
  if (ok && net_setup(&x, err, errlen)) {
    int64_t nb = x.steps > x.first ? x.steps - x.first : 0;
    double *val = pd_malloc((size_t)(nb + 1) * sizeof(double)), val_final = NAN;
    ok = cp_train(&x, net_eval, val, &val_final);
    if (ok) {
      ops->sync(ops->dev);
      ok = cp_nccl_gather(&x, t, out, err, errlen);
      if (ok && x.self == 0) {
        memcpy(out->val_loss, val, (size_t)nb * sizeof(double));
        out->val_final = val_final;
      }
      if (extra_bytes) *extra_bytes = x.extra_bytes;
      /* rank 0's own failures (out-of-range ids, --save) end every rank, as one message */
      if (transport_status(t) == TRANSPORT_OK) ok = agree(t, ok, err, errlen, &together);
      if (ok) rc = 0;
      else if (x.self == 0) pipe_outcome_free(out);
    } else {
      snprintf(err, errlen, "%s", x.err);
      ops->sync(ops->dev);
    }
    free(val);
  }
  net_teardown(&x);
  cp_teardown(&x);
  /* the others stop too: those blocked in MPI at once, those inside NCCL when
   * transport_destroy ends the job; not after a failure every rank agreed on */
  if (rc && !together && transport_status(t) == TRANSPORT_OK) transport_abort(t, err);
  return rc;
}
