/* runtime/exec/exec_link_transport.c — the link over runtime/transport/transport.h (local
 * threads or MPI; runtime/exec/exec.h). Requests and groups are the transport's own,
 * passed through; the failures, timeouts and the stall detector are the transport's.
 * Its host side (exec_host_*: blocking host messages, progress, error, abort, timeout)
 * is also every device link's, reached through that link's `host`, so a device
 * changes nothing of how a stalled or dead rank is found and named. */
#include "runtime/exec/exec.h"

#include <stdlib.h>

typedef struct TransportLink {
  ExecLink base;
  Transport *t;
} TransportLink;

/* the transport of l, or of the transport link a device link's host side goes through */
static Transport *tr(const ExecLink *l) { return ((const TransportLink *)(const void *)(l->host ? l->host : l))->t; }
static TransportGroup *tgroup(ExecGroup *g) { return (TransportGroup *)(void *)g; }

static TransportStatus l_post(ExecLink *l, bool is_send, int peer, int tag, void *buf, size_t bytes,
                              const char *what, ExecReq **req) {
  TransportRequest *r = NULL;
  TransportStatus s = transport_post(tr(l), is_send, peer, tag, buf, bytes, what, &r);
  *req = (ExecReq *)(void *)r;
  return s;
}

/* The transport's requests in an array of its own type (no access through the other
 * pointer type); a group of sends/receives is small, a larger one is allocated. */
static TransportStatus l_waitall(ExecLink *l, ExecReq **reqs, int n) {
  TransportRequest *small[64], **r = n <= 64 ? small : pd_malloc((size_t)n * sizeof *r);
  for (int i = 0; i < n; i++) r[i] = (TransportRequest *)(void *)reqs[i];
  TransportStatus s = transport_waitall(tr(l), r, n);
  if (r != small) free(r);
  return s;
}

TransportStatus exec_host_send(ExecLink *l, int peer, int tag, const void *buf, size_t bytes, const char *what) {
  return transport_send(tr(l), peer, tag, buf, bytes, what);
}

TransportStatus exec_host_recv(ExecLink *l, int peer, int tag, void *buf, size_t bytes, const char *what) {
  return transport_recv(tr(l), peer, tag, buf, bytes, what);
}

static TransportStatus l_group_create(ExecLink *l, const int *ranks, int n, ExecGroup **g) {
  TransportGroup *tg = NULL;
  TransportStatus s = transport_group_create(tr(l), ranks, n, &tg);
  *g = (ExecGroup *)(void *)tg;
  return s;
}

static void l_group_destroy(ExecGroup *g) { transport_group_destroy(tgroup(g)); }

static TransportStatus l_allreduce(ExecGroup *g, float *buf, size_t n, const char *what) {
  return transport_allreduce_sum_f32(tgroup(g), buf, n, what);
}

void exec_host_progress(ExecLink *l, const char *doing, long long index) { transport_progress(tr(l), doing, index); }
const char *exec_host_error(const ExecLink *l) { return transport_error(tr(l)); }
void exec_host_abort(ExecLink *l, const char *why) { transport_abort(tr(l), why); }
double exec_host_timeout(const ExecLink *l) { return transport_timeout(tr(l)); }
static void l_destroy(ExecLink *l) { free(l); }

static const ExecLinkOps transport_ops = {
    .name = "transport", .post = l_post, .waitall = l_waitall, .send = exec_host_send,
    .recv = exec_host_recv, .group_create = l_group_create, .group_destroy = l_group_destroy,
    .allreduce_sum_f32 = l_allreduce, .progress = exec_host_progress, .error = exec_host_error,
    .abort = exec_host_abort, .timeout = exec_host_timeout, .destroy = l_destroy,
};

ExecLink *exec_transport_link(Transport *t) {
  TransportLink *l = pd_calloc(1, sizeof *l);
  l->base.ops = &transport_ops;
  l->base.process_per_rank = transport_kind(t) == TRANSPORT_MPI;
  l->t = t;
  return &l->base;
}

void exec_link_destroy(ExecLink *l) {
  if (l) l->ops->destroy(l);
}
