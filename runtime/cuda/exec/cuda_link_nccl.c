/* runtime/cuda/exec/cuda_link_nccl.c — the plan interpreter's link (runtime/exec/exec.h
 * ExecLinkOps) between the ranks of multi-GPU mode (--transport nccl: one MPI process
 * per stage replica, one GPU each, cuda_pipe.h): device memory moves by NCCL
 * (runtime/cuda/nccl_transport.c), host memory over the process's MPI Transport.
 * docs/gpu.md ("The NCCL link") says what goes where, in which order it sums, when the
 * communicators are made and how a failure ends the job.
 *
 * STATUS: NEVER RUN ON GPUs WITH THE REAL libnccl. CI runs it under mpirun on the
 * emulated device (tests/nccl) with tests/nccl/fake_nccl.c standing in for libnccl and
 * checks losses and weights against the sequential reference. Unchecked: NCCL's
 * device-side blocking, its summation order, and the real device table's stream
 * handle (the GPU table's native_stream, runtime/cuda/cuda_device.c) in NCCL's hands. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_eval.h"

#define TAG_NCCL_ID 32000 /* a communicator's unique id, from its first rank */

typedef struct NcclLink {
  ExecLink base; /* base.host: exec_transport_link (host messages, progress, errors, abort) */
  Transport *t;
  const PipePlan *p;
  const CudaDeviceOps *ops; /* the device's table: NCCL's work goes on its stream 0 */
  int self, stage, replica;
  bool made;                       /* the communicators exist (at the first NCCL call) */
  NcclComm *pipe;                  /* this replica's stages (rank = stage); NULL when d = 1 */
  NcclComm *rep;                   /* this stage's replicas (rank = replica); NULL when w = 1 */
  NcclComm *tied[PIPE_MAX_GROUPS]; /* tied group g of this replica; NULL: not a member */
  char err[TRANSPORT_ERR_LEN];     /* the link's own failure (NCCL), "" while all is well */
} NcclLink;

/* A posted message: on a communicator, or the Transport's request (host memory). */
struct ExecReq {
  ExecReq *host;
  NcclComm *comm;
  int peer; /* in comm */
  GpuPtr buf;
  size_t bytes;
  bool send;
};

/* The replica group (ALLREDUCE): the link's replica communicator. */
struct ExecGroup {
  NcclLink *l;
};

static NcclLink *nl(ExecLink *l) { return (NcclLink *)(void *)l; }
static const NcclLink *cnl(const ExecLink *l) { return (const NcclLink *)(const void *)l; }

/* ---- communicators ----------------------------------------------------------------- */

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

/* The communicator over world ranks `ranks` (in its rank order) when this process is
 * one of them and there are two or more; *out stays NULL otherwise. */
static bool make_comm(NcclLink *l, const int *ranks, int n, NcclComm **out, const char *what) {
  int me = -1;
  for (int i = 0; i < n; i++)
    if (ranks[i] == l->self) me = i;
  if (me < 0 || n < 2) return true;
  IdBcast b = {.t = l->t, .ranks = ranks, .n = n, .me = me};
  char nerr[TRANSPORT_ERR_LEN / 2];
  *out = nccl_comm_create(n, me, id_bcast, &b, nerr, sizeof nerr);
  if (b.failed) snprintf(l->err, sizeof l->err, "%s", transport_error(l->t));
  else if (!*out) snprintf(l->err, sizeof l->err, "rank %d: %s communicator: %s", l->self, what, nerr);
  return *out != NULL;
}

/* Every communicator this rank belongs to, in the one global order. */
static bool make_comms(NcclLink *l) {
  if (l->made) return !l->err[0];
  l->made = true;
  const PipePlan *p = l->p;
  int *ranks = pd_malloc((size_t)(p->d + PLAN_MAX_TIED_SEGS) * sizeof *ranks);
  bool ok = true;
  for (int r = 0; ok && r < p->w; r++) {
    for (int s = 0; s < p->d; s++) ranks[s] = p->st[s].rank_of_replica[r];
    ok = make_comm(l, ranks, p->d, &l->pipe, "pipeline");
  }
  for (int s = 0; ok && s < p->d; s++) ok = make_comm(l, p->st[s].rank_of_replica, p->w, &l->rep, "replica");
  for (int g = 0; ok && g < p->ngroups; g++)
    for (int r = 0; ok && r < p->w; r++) {
      const PlanTiedGroup *G = &p->groups[g];
      for (int q = 0; q < G->nstages; q++) ranks[q] = p->st[G->stages[q]].rank_of_replica[r];
      ok = make_comm(l, ranks, G->nstages, &l->tied[g], "tied group");
    }
  free(ranks);
  return ok;
}

/* The link's own failure: the message kept (error() says it), the caller aborts. */
static TransportStatus failed(NcclLink *l) { return l->err[0] ? TRANSPORT_ERROR : transport_status(l->t); }

/* ---- point to point ------------------------------------------------------------------ */

/* Where a message of `tag` to or from world rank `peer` goes: a communicator and the
 * peer's rank in it (*comm NULL: host memory, the Transport's). */
static void route(NcclLink *l, int peer, int tag, NcclComm **comm, int *at) {
  const PipePlan *p = l->p;
  *comm = NULL;
  *at = -1;
  if (tag == PIPE_TAG_NORM) return;
  PD_CHECK(peer >= 0 && peer < p->nranks && p->rank_replica[peer] == l->replica, "(peer %d of replica %d)", peer,
           l->replica);
  int g = tag - PIPE_TAG_TIED, ps = p->rank_stage[peer];
  if (tag == PIPE_TAG_ACT || tag == PIPE_TAG_GRAD || tag == PIPE_TAG_EVAL) {
    *comm = l->pipe;
    *at = ps;
  } else {
    PD_CHECK(g >= 0 && g < p->ngroups, "(tag %d: no device messages)", tag);
    *comm = l->tied[g];
    for (int q = 0; q < p->groups[g].nstages; q++)
      if (p->groups[g].stages[q] == ps) *at = q;
  }
  PD_CHECK(*comm && *at >= 0, "(tag %d to rank %d: no communicator)", tag, peer);
}

static TransportStatus n_post(ExecLink *L, bool is_send, int peer, int tag, void *buf, size_t bytes, const char *what,
                              ExecReq **req) {
  NcclLink *l = nl(L);
  *req = NULL;
  ExecReq *q = pd_calloc(1, sizeof *q);
  TransportStatus s = TRANSPORT_OK;
  if (tag == PIPE_TAG_NORM) {
    ExecLink *h = l->base.host;
    s = h->ops->post(h, is_send, peer, tag, buf, bytes, what, &q->host);
  } else if (!make_comms(l)) {
    s = failed(l);
  } else {
    route(l, peer, tag, &q->comm, &q->peer);
    q->buf = (GpuPtr)(uintptr_t)buf;
    q->bytes = bytes;
    q->send = is_send;
  }
  if (s != TRANSPORT_OK) {
    free(q);
    return s;
  }
  *req = q;
  return s;
}

/* NCCL's health after issuing: an asynchronous error on any communicator is this
 * rank's failure. */
static TransportStatus comms_ok(NcclLink *l) {
  NcclComm *all[2 + PIPE_MAX_GROUPS] = {l->pipe, l->rep};
  memcpy(all + 2, l->tied, sizeof l->tied);
  char e[TRANSPORT_ERR_LEN / 2];
  for (int i = 0; i < 2 + PIPE_MAX_GROUPS; i++)
    if (all[i] && !nccl_comm_ok(all[i], e, sizeof e)) {
      snprintf(l->err, sizeof l->err, "rank %d: %s", l->self, e);
      return TRANSPORT_ERROR;
    }
  return TRANSPORT_OK;
}

/* The device messages of reqs as one NCCL group on the device's stream, then the
 * host ones through the Transport; every request freed. */
static TransportStatus n_waitall(ExecLink *L, ExecReq **reqs, int n) {
  NcclLink *l = nl(L);
  ExecReq *small[64], **host = n <= 64 ? small : pd_malloc((size_t)n * sizeof *host);
  int nhost = 0, ndev = 0;
  for (int i = 0; i < n; i++) {
    if (reqs[i]->host) host[nhost++] = reqs[i]->host;
    else ndev++;
  }
  TransportStatus s = TRANSPORT_OK;
  if (ndev) {
    /* the handle of the stream the device runs everything on (the tests' emulator
     * finishes what was issued when asked: its fake NCCL works at once) */
    void *stream = l->ops->native_stream(l->ops->dev, 0);
    nccl_group_start(NULL);
    for (int i = 0; i < n; i++) {
      const ExecReq *q = reqs[i];
      if (q->host) continue;
      if (q->send) nccl_send(q->comm, stream, q->buf, q->bytes, NCCL_DT_U8, q->peer);
      else nccl_recv(q->comm, stream, q->buf, q->bytes, NCCL_DT_U8, q->peer);
    }
    nccl_group_end(NULL);
    s = comms_ok(l);
  }
  if (s == TRANSPORT_OK && nhost) s = l->base.host->ops->waitall(l->base.host, host, nhost);
  if (host != small) free(host);
  for (int i = 0; i < n; i++) free(reqs[i]);
  return s;
}

/* ---- the replica all-reduce ------------------------------------------------------------ */

static TransportStatus n_group_create(ExecLink *L, const int *ranks, int n, ExecGroup **g) {
  NcclLink *l = nl(L);
  const int *mine = l->p->st[l->stage].rank_of_replica;
  PD_CHECK(n == l->p->w && memcmp(ranks, mine, (size_t)n * sizeof *ranks) == 0, "(a group of %d: not the stage's replicas)",
           n);
  *g = pd_calloc(1, sizeof **g);
  (*g)->l = l;
  return TRANSPORT_OK;
}

static void n_group_destroy(ExecGroup *g) { free(g); }

static TransportStatus n_allreduce(ExecGroup *g, float *buf, size_t n, const char *what) {
  NcclLink *l = g->l;
  (void)what;
  if (!make_comms(l)) return failed(l);
  if (!l->rep) return TRANSPORT_OK; /* one replica */
  GpuPtr b = (GpuPtr)(uintptr_t)buf;
  nccl_allreduce_sum(l->rep, l->ops->native_stream(l->ops->dev, 0), b, b, n, NCCL_DT_F32);
  return comms_ok(l);
}

/* ---- host messages, progress, failures: the Transport's ----------------------------------- */

static const char *n_error(const ExecLink *L) {
  const NcclLink *l = cnl(L);
  return l->err[0] ? l->err : exec_host_error(L);
}

static void n_destroy(ExecLink *L) {
  NcclLink *l = nl(L);
  nccl_comm_destroy(l->pipe);
  nccl_comm_destroy(l->rep);
  for (int g = 0; g < PIPE_MAX_GROUPS; g++) nccl_comm_destroy(l->tied[g]);
  exec_link_destroy(l->base.host);
  free(l);
}

static const ExecLinkOps nccl_link_ops = {
    .name = "nccl", .post = n_post, .waitall = n_waitall, .send = exec_host_send,
    .recv = exec_host_recv, .group_create = n_group_create, .group_destroy = n_group_destroy,
    .allreduce_sum_f32 = n_allreduce, .progress = exec_host_progress, .error = n_error, .abort = exec_host_abort,
    .timeout = exec_host_timeout, .destroy = n_destroy,
};

ExecLink *cx_nccl_link(Transport *t, const PipePlan *p, ExecDevice *dev, char *err, size_t errlen) {
  const CudaDeviceOps *ops = cx_exec_device_ops(dev);
  if (!ops->native_stream) {
    snprintf(err, errlen, "this device gives no stream handles for NCCL (its CudaDeviceOps has no native_stream): "
             "it cannot run multi-GPU mode");
    return NULL;
  }
  if (!nccl_available(err, errlen)) return NULL;
  NcclLink *l = pd_calloc(1, sizeof *l);
  l->base.ops = &nccl_link_ops;
  l->base.process_per_rank = true;
  l->base.host = exec_transport_link(t);
  l->t = t;
  l->p = p;
  l->ops = ops;
  l->self = transport_rank(t);
  l->stage = p->rank_stage[l->self];
  l->replica = p->rank_replica[l->self];
  return &l->base;
}
