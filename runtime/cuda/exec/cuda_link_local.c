/* runtime/cuda/exec/cuda_link_local.c — the same-GPU link (runtime/exec/exec.h ExecLink):
 * every stage replica of single-GPU pipeline mode is a host thread of this process
 * with its own stream on the one GPU (cx_share_view), and the ranks reach each other
 * through the local Transport, which keeps matching, rendezvous, the stall detector
 * and the timeouts that name a dead rank. What crosses that transport is small host
 * records; the data moves on the GPU, ordered by events (docs/gpu.md, "The same-GPU
 * link": a message's and the replica all-reduce's protocol). The host side (blocking
 * host messages, progress, errors, abort, the timeout) is exec_transport_link's, as the
 * NCCL link's (base.host, exec_host_*). */
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_rank.h"

#define CL_ACK_TAG 8192  /* the reply of tag t travels on t + CL_ACK_TAG (tags: 0..32767) */
#define CL_COLL_TAG 16384 /* the all-reduce's records (and + 1, + 2) */

typedef struct ClRecord {
  GpuPtr src;
  uint64_t bytes;
  void *ready, *done; /* Es, Ed */
} ClRecord;

struct ExecReq {
  ExecReq *next_free;
  bool send, host;
  int peer, tag;
  void *buf;
  size_t bytes;
  ClRecord rec;                   /* sent (send) or received (receive) */
  char ack;                       /* the reply's byte */
  void *ev_ready, *ev_done;       /* a send's own events */
  TransportRequest *tr, *tr_ack;  /* the record's and (send) the reply's transport requests */
  char what[96];
};

typedef struct ClLink {
  ExecLink base;
  Transport *t;
  ExecDevice *dev;
  const CudaDeviceOps *ops; /* the rank's view: stream 0 is its stream */
  ExecReq *free_reqs, *all;
  ExecReq **live; /* every request made, for destroy */
  int nlive, caplive;
} ClLink;

struct ExecGroup {
  ClLink *l;
  TransportGroup *tg;
  int n, me;
  const int *ranks;
  void *ev_ready, **ev_copied; /* mine; the first member's: one per member */
  void *ev_done;
};

static ClLink *cl(ExecLink *l) { return (ClLink *)(void *)l; }
static GpuPtr dp(const void *p) { return (GpuPtr)(uintptr_t)p; }

static ExecReq *req_get(ClLink *l) {
  ExecReq *r = l->free_reqs;
  if (r) {
    l->free_reqs = r->next_free;
    return r;
  }
  r = pd_calloc(1, sizeof *r);
  r->ev_ready = l->ops->event_create(l->ops->dev);
  r->ev_done = l->ops->event_create(l->ops->dev);
  if (l->nlive == l->caplive) {
    l->caplive = l->caplive ? 2 * l->caplive : 16;
    l->live = pd_realloc(l->live, (size_t)l->caplive * sizeof *l->live);
  }
  l->live[l->nlive++] = r;
  return r;
}

static void req_put(ClLink *l, ExecReq *r) {
  r->next_free = l->free_reqs;
  l->free_reqs = r;
}

static TransportStatus c_post(ExecLink *L, bool is_send, int peer, int tag, void *buf, size_t bytes,
                              const char *what, ExecReq **out) {
  ClLink *l = cl(L);
  ExecReq *r = req_get(l);
  *r = (ExecReq){.ev_ready = r->ev_ready, .ev_done = r->ev_done, .send = is_send, .host = tag == PIPE_TAG_NORM,
                 .peer = peer, .tag = tag, .buf = buf, .bytes = bytes};
  snprintf(r->what, sizeof r->what, "%s", what);
  *out = r;
  if (r->host) return transport_post(l->t, is_send, peer, tag, buf, bytes, what, &r->tr);
  if (!is_send) return transport_irecv(l->t, peer, tag, &r->rec, sizeof r->rec, what, &r->tr);
  l->ops->event_record(l->ops->dev, r->ev_ready, 0);
  r->rec = (ClRecord){.src = dp(buf), .bytes = bytes, .ready = r->ev_ready, .done = r->ev_done};
  TransportStatus s = transport_irecv(l->t, peer, tag + CL_ACK_TAG, &r->ack, 1, what, &r->tr_ack);
  return s != TRANSPORT_OK ? s : transport_isend(l->t, peer, tag, &r->rec, sizeof r->rec, what, &r->tr);
}

/* Every record first (a group's messages may go both ways), then the copies and
 * replies, then the waits for the receivers' copies. */
static TransportStatus c_waitall(ExecLink *L, ExecReq **reqs, int n) {
  ClLink *l = cl(L);
  const CudaDeviceOps *o = l->ops;
  TransportStatus s = TRANSPORT_OK;
  for (int i = 0; s == TRANSPORT_OK && i < n; i++) s = transport_wait(l->t, reqs[i]->tr);
  for (int i = 0; s == TRANSPORT_OK && i < n; i++) {
    ExecReq *r = reqs[i];
    if (r->send || r->host) continue;
    if (r->rec.bytes != r->bytes) {
      s = TRANSPORT_MISMATCH;
      break;
    }
    o->stream_wait(o->dev, 0, r->rec.ready);
    if (r->bytes) o->dtod(o->dev, 0, dp(r->buf), r->rec.src, r->bytes);
    o->event_record(o->dev, r->rec.done, 0);
    s = transport_send(l->t, r->peer, r->tag + CL_ACK_TAG, &r->ack, 1, r->what);
  }
  for (int i = 0; s == TRANSPORT_OK && i < n; i++) {
    ExecReq *r = reqs[i];
    if (!r->send || r->host) continue;
    s = transport_wait(l->t, r->tr_ack);
    if (s == TRANSPORT_OK) o->stream_wait(o->dev, 0, r->ev_done);
  }
  if (s == TRANSPORT_OK)
    for (int i = 0; i < n; i++) req_put(l, reqs[i]);
  return s;
}

static TransportStatus c_group_create(ExecLink *L, const int *ranks, int n, ExecGroup **out) {
  ClLink *l = cl(L);
  ExecGroup *g = pd_calloc(1, sizeof *g);
  TransportStatus s = transport_group_create(l->t, ranks, n, &g->tg);
  if (s != TRANSPORT_OK) {
    free(g);
    return s;
  }
  g->l = l;
  g->n = transport_group_size(g->tg);
  g->me = transport_group_rank(g->tg);
  g->ranks = transport_group_ranks(g->tg);
  g->ev_ready = l->ops->event_create(l->ops->dev);
  g->ev_done = l->ops->event_create(l->ops->dev);
  g->ev_copied = pd_calloc((size_t)g->n, sizeof *g->ev_copied);
  for (int q = 0; q < g->n; q++) g->ev_copied[q] = l->ops->event_create(l->ops->dev);
  *out = g;
  return TRANSPORT_OK;
}

static void c_group_destroy(ExecGroup *g) {
  if (!g) return;
  const CudaDeviceOps *o = g->l->ops;
  o->event_destroy(o->dev, g->ev_ready);
  o->event_destroy(o->dev, g->ev_done);
  for (int q = 0; q < g->n; q++) o->event_destroy(o->dev, g->ev_copied[q]);
  free(g->ev_copied);
  transport_group_destroy(g->tg);
  free(g);
}

/* The first member's side of the all-reduce. */
static TransportStatus reduce_first(ExecGroup *g, float *buf, size_t n, const char *what) {
  ClLink *l = g->l;
  const CudaDeviceOps *o = l->ops;
  const float **src = pd_malloc((size_t)g->n * sizeof *src);
  ClRecord rec;
  src[0] = buf;
  for (int q = 1; q < g->n; q++) {
    TransportStatus s = transport_recv(l->t, g->ranks[q], CL_COLL_TAG, &rec, sizeof rec, what);
    if (s == TRANSPORT_OK && rec.bytes != n * sizeof(float)) s = TRANSPORT_MISMATCH;
    if (s != TRANSPORT_OK) {
      free(src);
      return s;
    }
    o->stream_wait(o->dev, 0, rec.ready);
    src[q] = (const float *)(uintptr_t)rec.src;
  }
  l->dev->ops->sum_ordered(l->dev, buf, src, g->n, (int64_t)n);
  free(src);
  o->event_record(o->dev, g->ev_done, 0);
  for (int q = 1; q < g->n; q++) {
    rec = (ClRecord){.src = dp(buf), .bytes = n * sizeof(float), .ready = g->ev_done, .done = g->ev_copied[q]};
    TransportStatus s = transport_send(l->t, g->ranks[q], CL_COLL_TAG + 1, &rec, sizeof rec, what);
    if (s != TRANSPORT_OK) return s;
  }
  for (int q = 1; q < g->n; q++) {
    char ack;
    TransportStatus s = transport_recv(l->t, g->ranks[q], CL_COLL_TAG + 2, &ack, 1, what);
    if (s != TRANSPORT_OK) return s;
    o->stream_wait(o->dev, 0, g->ev_copied[q]);
  }
  return TRANSPORT_OK;
}

static TransportStatus c_allreduce(ExecGroup *g, float *buf, size_t n, const char *what) {
  if (g->n < 2) return TRANSPORT_OK;
  if (g->me == 0) return reduce_first(g, buf, n, what);
  ClLink *l = g->l;
  const CudaDeviceOps *o = l->ops;
  o->event_record(o->dev, g->ev_ready, 0);
  ClRecord rec = {.src = dp(buf), .bytes = n * sizeof(float), .ready = g->ev_ready};
  TransportStatus s = transport_send(l->t, g->ranks[0], CL_COLL_TAG, &rec, sizeof rec, what);
  if (s == TRANSPORT_OK) s = transport_recv(l->t, g->ranks[0], CL_COLL_TAG + 1, &rec, sizeof rec, what);
  if (s != TRANSPORT_OK) return s;
  o->stream_wait(o->dev, 0, rec.ready);
  if (n) o->dtod(o->dev, 0, dp(buf), rec.src, n * sizeof(float));
  o->event_record(o->dev, rec.done, 0);
  char ack = 1;
  return transport_send(l->t, g->ranks[0], CL_COLL_TAG + 2, &ack, 1, what);
}

static void c_destroy(ExecLink *L) {
  ClLink *l = cl(L);
  l->ops->sync(l->ops->dev); /* no wait of a peer's still refers to an event of ours */
  for (int i = 0; i < l->nlive; i++) {
    l->ops->event_destroy(l->ops->dev, l->live[i]->ev_ready);
    l->ops->event_destroy(l->ops->dev, l->live[i]->ev_done);
    free(l->live[i]);
  }
  free(l->live);
  exec_link_destroy(l->base.host);
  free(l);
}

static const ExecLinkOps local_ops = {
    .name = "cuda-local", .post = c_post, .waitall = c_waitall, .send = exec_host_send,
    .recv = exec_host_recv, .group_create = c_group_create, .group_destroy = c_group_destroy,
    .allreduce_sum_f32 = c_allreduce, .progress = exec_host_progress, .error = exec_host_error,
    .abort = exec_host_abort, .timeout = exec_host_timeout, .destroy = c_destroy,
};

ExecLink *cx_local_link(Transport *t, ExecDevice *dev, const CudaDeviceOps *ops) {
  ClLink *l = pd_calloc(1, sizeof *l);
  l->base.ops = &local_ops;
  l->base.host = exec_transport_link(t);
  l->t = t;
  l->dev = dev;
  l->ops = ops;
  return &l->base;
}
