/* runtime/transport/transport.c — the transport-independent half of transport.h: argument
 * checks, the sticky error and its wording, blocking calls built from posted
 * ones, accessors. Groups and collectives are in transport_coll.c; signals,
 * clocks and thread sizing in transport_sys.c.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/transport/transport_impl.h"

const char *transport_status_name(TransportStatus s) {
  switch (s) {
  case TRANSPORT_OK: return "ok";
  case TRANSPORT_TIMEOUT: return "timeout";
  case TRANSPORT_PEER_EXITED: return "peer exited";
  case TRANSPORT_ABORTED: return "aborted";
  case TRANSPORT_INTERRUPTED: return "interrupted";
  case TRANSPORT_MISMATCH: return "size mismatch";
  case TRANSPORT_BAD_ARG: return "bad argument";
  case TRANSPORT_ERROR: return "error";
  }
  return "unknown";
}

void transport_init_base(Transport *t, const TransportOps *ops, TransportKind kind, int rank,
                         int size, double timeout_s) {
  t->ops = ops;
  t->kind = kind;
  t->rank = rank;
  t->size = size;
  t->ranks_on_host = size;
  t->timeout_s = timeout_s > 0 ? timeout_s : TRANSPORT_DEFAULT_TIMEOUT_S;
  t->status = TRANSPORT_OK;
  t->err[0] = '\0';
  atomic_init(&t->beat_us, 0);
  atomic_init(&t->waiting_on, -1);
  atomic_init(&t->doing, NULL);
  atomic_init(&t->doing_index, -1);
}

TransportStatus transport_fail(Transport *t, TransportStatus s, const char *fmt, ...) {
  if (t->status != TRANSPORT_OK) return t->status; /* the first cause wins */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->err, sizeof t->err, fmt, ap);
  va_end(ap);
  t->status = s;
  t->fail_seq = transport_next_fail_seq();
  return s;
}

static const char *signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "a signal";
}

TransportStatus transport_fail_wait(Transport *t, TransportStatus s, bool is_send, int peer,
                                    const char *what, const char *cause_detail) {
  char ctx[TRANSPORT_WHAT_LEN + 64];
  if (is_send)
    snprintf(ctx, sizeof ctx, "waiting for rank %d to take %s", peer, what);
  else
    snprintf(ctx, sizeof ctx, "waiting for %s from rank %d", what, peer);
  const char *d = cause_detail ? cause_detail : "";
  switch (s) {
  case TRANSPORT_TIMEOUT:
    return transport_fail(t, s, "rank %d: timed out after %g s %s", t->rank, t->timeout_s, ctx);
  case TRANSPORT_PEER_EXITED:
    return transport_fail(t, s, "rank %d: %s: rank %d exited%s", t->rank, ctx, peer, d);
  case TRANSPORT_ABORTED:
    return transport_fail(t, s, "rank %d: %s: stopped because %s", t->rank, ctx, d);
  case TRANSPORT_INTERRUPTED:
    return transport_fail(t, s, "rank %d: %s: interrupted by %s", t->rank, ctx,
                          signal_name(transport_interrupted()));
  case TRANSPORT_OK:
  case TRANSPORT_MISMATCH:
  case TRANSPORT_BAD_ARG:
  case TRANSPORT_ERROR:
    break;
  }
  return transport_fail(t, s, "rank %d: %s: %s%s", t->rank, ctx, transport_status_name(s), d);
}

void transport_progress(Transport *t, const char *doing, long long index) {
  atomic_store_explicit(&t->doing, doing, memory_order_relaxed);
  atomic_store_explicit(&t->doing_index, index, memory_order_relaxed);
  atomic_store_explicit(&t->beat_us, (long long)(transport_now() * 1e6), memory_order_relaxed);
}

/* A wait on `peer` begins (peer >= 0) or ends (-1). */
static void mark_wait(Transport *t, int peer) {
  atomic_store_explicit(&t->waiting_on, peer, memory_order_relaxed);
  atomic_store_explicit(&t->beat_us, (long long)(transport_now() * 1e6), memory_order_relaxed);
}

void transport_describe_progress(const Transport *t, double now, char *buf, size_t n) {
  long long beat = atomic_load_explicit(&t->beat_us, memory_order_relaxed);
  const char *doing = atomic_load_explicit(&t->doing, memory_order_relaxed);
  long long idx = atomic_load_explicit(&t->doing_index, memory_order_relaxed);
  char in[96] = "";
  if (doing && idx >= 0)
    snprintf(in, sizeof in, ", in %s %lld", doing, idx);
  else if (doing)
    snprintf(in, sizeof in, ", in %s", doing);
  if (beat)
    snprintf(buf, n, "no progress for %.1f s%s", now - (double)beat / 1e6, in);
  else
    snprintf(buf, n, "no progress since it started%s", in);
}

TransportStatus transport_fail_blame(Transport *t, bool is_send, const char *what, const int *chain, int n,
                                     const char *why) {
  char ctx[TRANSPORT_WHAT_LEN + 64], via[256] = "";
  if (is_send)
    snprintf(ctx, sizeof ctx, "waiting for rank %d to take %s", chain[0], what);
  else
    snprintf(ctx, sizeof ctx, "waiting for %s from rank %d", what, chain[0]);
  size_t k = 0;
  for (int i = 1; i < n && k < sizeof via; i++)
    k += (size_t)snprintf(via + k, sizeof via - k, ", which waits for rank %d", chain[i]);
  return transport_fail(t, TRANSPORT_TIMEOUT, "rank %d stopped answering (%s); rank %d timed out after %g s %s%s",
                        chain[n - 1], why, t->rank, t->timeout_s, ctx, via);
}

TransportRequest *transport_req_alloc(Transport *t, size_t size, bool is_send, int peer, size_t bytes,
                                      const char *what) {
  TransportRequest *r = t->free_reqs;
  if (r) {
    t->free_reqs = r->next_free;
  } else {
    r = pd_calloc(1, size);
    r->owner = t;
    r->all_next = t->all_reqs;
    t->all_reqs = r;
  }
  r->is_send = is_send;
  r->peer = peer;
  r->bytes = bytes;
  snprintf(r->what, sizeof r->what, "%s", what ? what : "a message");
  return r;
}

void transport_req_free(Transport *t, TransportRequest *r) {
  r->next_free = t->free_reqs;
  t->free_reqs = r;
}

void transport_req_pool_free(Transport *t) {
  for (TransportRequest *r = t->all_reqs, *next; r; r = next) {
    next = r->all_next;
    free(r);
  }
}

/* ---- accessors ----------------------------------------------------------- */

TransportKind transport_kind(const Transport *t) { return t->kind; }
int transport_rank(const Transport *t) { return t->rank; }
int transport_size(const Transport *t) { return t->size; }
int transport_ranks_on_host(const Transport *t) { return t->ranks_on_host; }
double transport_timeout(const Transport *t) { return t->timeout_s; }
void transport_set_timeout(Transport *t, double timeout_s) {
  t->timeout_s = timeout_s > 0 ? timeout_s : TRANSPORT_DEFAULT_TIMEOUT_S;
}
TransportStatus transport_status(const Transport *t) { return t->status; }
const char *transport_error(const Transport *t) { return t->err; }

/* ---- point-to-point ------------------------------------------------------ */

TransportStatus transport_post(Transport *t, bool is_send, int peer, int tag, void *buf, size_t bytes,
                               const char *what, TransportRequest **req) {
  if (t->status != TRANSPORT_OK) return t->status;
  const char *op = is_send ? "send" : "receive", *w = what ? what : "a message";
  if (peer < 0 || peer >= t->size)
    return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: %s of %s: no rank %d (world of %d)",
                          t->rank, op, w, peer, t->size);
  if (tag < 0 || tag > TRANSPORT_TAG_MAX)
    return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: %s of %s: tag %d outside 0..%d",
                          t->rank, op, w, tag, TRANSPORT_TAG_MAX);
  if (!buf && bytes > 0)
    return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: %s of %s: NULL buffer of %zu bytes",
                          t->rank, op, w, bytes);
  return t->ops->post(t, TRANSPORT_CH_P2P, is_send, peer, tag, buf, bytes, what, req);
}

TransportStatus transport_isend(Transport *t, int dst, int tag, const void *buf, size_t bytes,
                                const char *what, TransportRequest **req) {
  return transport_post(t, true, dst, tag, (void *)buf, bytes, what, req); /* a send only reads buf */
}

TransportStatus transport_irecv(Transport *t, int src, int tag, void *buf, size_t bytes,
                                const char *what, TransportRequest **req) {
  return transport_post(t, false, src, tag, buf, bytes, what, req);
}

TransportStatus transport_wait(Transport *t, TransportRequest *req) {
  return transport_waitall(t, &req, 1);
}

TransportStatus transport_waitall(Transport *t, TransportRequest **reqs, int n) {
  if (t->status != TRANSPORT_OK) return t->status;
  double deadline = transport_now() + t->timeout_s;
  TransportStatus s = TRANSPORT_OK;
  for (int i = 0; i < n && s == TRANSPORT_OK; i++) {
    if (!reqs[i]) continue;
    if (reqs[i]->owner != t)
      return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: waiting on a request of another rank",
                            t->rank);
    mark_wait(t, reqs[i]->peer);
    s = t->ops->wait(t, reqs[i], deadline);
    reqs[i] = NULL;
    mark_wait(t, -1);
  }
  return s;
}

TransportStatus transport_send(Transport *t, int dst, int tag, const void *buf, size_t bytes,
                               const char *what) {
  TransportRequest *r = NULL;
  TransportStatus s = transport_isend(t, dst, tag, buf, bytes, what, &r);
  return s == TRANSPORT_OK ? transport_wait(t, r) : s;
}

TransportStatus transport_recv(Transport *t, int src, int tag, void *buf, size_t bytes,
                               const char *what) {
  TransportRequest *r = NULL;
  TransportStatus s = transport_irecv(t, src, tag, buf, bytes, what, &r);
  return s == TRANSPORT_OK ? transport_wait(t, r) : s;
}

/* ---- lifecycle ----------------------------------------------------------- */

void transport_abort(Transport *t, const char *why) {
  t->ops->abort(t, why ? why : "(no reason given)");
}

void transport_destroy(Transport *t) {
  if (!t) return;
  free(t->scratch);
  t->scratch = NULL;
  t->scratch_cap = 0;
  t->ops->destroy(t); /* may free t; mpi after a failure does not return */
}
