/* runtime/transport/transport_local.c — the local transport: every rank is a thread of
 * this process. Messages between a pair match in the order they were posted, as MPI's
 * non-overtaking rule says (find_match); the thread that completes a match copies the
 * bytes straight from the sender's buffer into the receiver's, the one copy the
 * message needs (deliver), so a send completes when its data is in the receiver's
 * buffer (a rendezvous) and queues hold requests, never data. One mutex and one
 * condition variable guard the world (ranks post a few messages per microbatch; the
 * copies, the expensive part, run unlocked). Every completion, exit and abort
 * broadcasts; waits also wake every 50 ms to see a signal flag, which a handler
 * cannot broadcast. */
#define _GNU_SOURCE /* program_invocation_short_name */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/ir.h"
#include "runtime/transport/transport_impl.h"

typedef enum LocalReqState {
  REQ_FREE,    /* on its rank's free list */
  REQ_POSTED,  /* in a queue (inbox of the destination, or posted of the owner) */
  REQ_COPYING, /* matched; some thread is copying the bytes, unlocked */
  REQ_DONE,    /* complete; freed by the owner's wait */
  REQ_FAILED,  /* matched with a message of another size; `mismatch` says how */
} LocalReqState;

typedef struct LocalReq LocalReq;
struct LocalReq {
  TransportRequest base; /* owner, is_send, peer, bytes, what */
  LocalReq *next;        /* in a queue */
  LocalReqState state;
  TransportChannel ch;
  int tag;
  void *buf; /* send: the data (only read); receive: where it goes */
  char mismatch[TRANSPORT_ERR_LEN];
};

typedef struct LocalQueue {
  LocalReq *head, *tail;
} LocalQueue;

typedef struct LocalRank {
  Transport base; /* first: a Transport * is a LocalRank * */
  TransportWorld *w;
  bool exited;
  char exit_note[TRANSPORT_ERR_LEN / 2]; /* appended to "rank N exited" */
  LocalQueue inbox, posted;
} LocalRank;

struct TransportWorld {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast on every completion, exit and abort */
  int n;
  LocalRank *ranks;
  bool aborted;
  char abort_cause[TRANSPORT_ERR_LEN]; /* "rank R aborted: why" */
};

static const TransportOps local_ops;

#define LOCK(w) PD_CHECK(pthread_mutex_lock(&(w)->mu) == 0, "(pthread_mutex_lock)")
#define UNLOCK(w) PD_CHECK(pthread_mutex_unlock(&(w)->mu) == 0, "(pthread_mutex_unlock)")

static LocalRank *as_local(Transport *t) { return (LocalRank *)t; }

static void broadcast(TransportWorld *w) {
  PD_CHECK(pthread_cond_broadcast(&w->cv) == 0, "(pthread_cond_broadcast)");
}

/* Waits on the world's condition until woken or `until` (transport_now
 * seconds), at most 50 ms so that the signal flag is seen. Lock held. */
static void wait_until(TransportWorld *w, double until) {
  double now = transport_now(), stop = now + 0.05;
  if (until < stop) stop = until;
  if (stop <= now) return;
  struct timespec ts;
  PD_CHECK(clock_gettime(CLOCK_REALTIME, &ts) == 0, "(clock_gettime)");
  double rel = stop - now;
  long sec = (long)rel;
  long nsec = ts.tv_nsec + (long)((rel - (double)sec) * 1e9);
  ts.tv_sec += sec + nsec / 1000000000L;
  ts.tv_nsec = nsec % 1000000000L;
  int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  PD_CHECK(rc == 0 || rc == ETIMEDOUT, "(pthread_cond_timedwait: %s)", strerror(rc));
}

/* ---- queues and the request pool (lock held) ----------------------------- */

static void enqueue(LocalQueue *q, LocalReq *r) {
  r->next = NULL;
  if (q->tail)
    q->tail->next = r;
  else
    q->head = r;
  q->tail = r;
}

static void unlink_req(LocalQueue *q, LocalReq *r) {
  LocalReq *prev = NULL;
  for (LocalReq *p = q->head; p; prev = p, p = p->next) {
    if (p != r) continue;
    if (prev)
      prev->next = p->next;
    else
      q->head = p->next;
    if (q->tail == p) q->tail = prev;
    p->next = NULL;
    return;
  }
  PD_CHECK(0, "(request not in its queue)");
}

/* The first request in q from/to `peer` with this channel and tag. Each rank has two
 * FIFO queues: `inbox`, the sends addressed to it that no receive has matched yet, and
 * `posted`, its own receives that no send has matched yet. A new send looks in the
 * destination's `posted`, a new receive in its own `inbox`; only one of the two can
 * hold a match at any time, so per (sender, receiver, channel, tag) messages match in
 * the order they were posted. */
static LocalReq *find_match(LocalQueue *q, int peer_rank_of_entry, TransportChannel ch, int tag,
                            bool entries_are_sends) {
  for (LocalReq *p = q->head; p; p = p->next) {
    int from = entries_are_sends ? p->base.owner->rank : p->base.peer;
    if (from == peer_rank_of_entry && p->ch == ch && p->tag == tag) return p;
  }
  return NULL;
}

static void req_free(LocalRank *me, LocalReq *r) {
  r->state = REQ_FREE;
  transport_req_free(&me->base, &r->base);
}

/* Completes a matched pair: copies unlocked, or fails both on a size mismatch.
 * Lock held on entry and on return. Both requests are marked COPYING meanwhile; a
 * COPYING request is always waited out, even by a failing rank, so a buffer is never
 * freed under a copy. */
static void deliver(TransportWorld *w, LocalReq *send, LocalReq *recv) {
  int src = send->base.owner->rank, dst = recv->base.owner->rank;
  if (send->base.bytes != recv->base.bytes) {
    snprintf(recv->mismatch, sizeof recv->mismatch,
             "rank %d: received %zu bytes of %s from rank %d, expected %zu", dst, send->base.bytes,
             recv->base.what, src, recv->base.bytes);
    snprintf(send->mismatch, sizeof send->mismatch,
             "rank %d: sent %zu bytes of %s to rank %d, which expected %zu", src, send->base.bytes,
             send->base.what, dst, recv->base.bytes);
    send->state = recv->state = REQ_FAILED;
    broadcast(w);
    return;
  }
  send->state = recv->state = REQ_COPYING;
  UNLOCK(w);
  if (send->base.bytes) memcpy(recv->buf, send->buf, send->base.bytes);
  LOCK(w);
  send->state = recv->state = REQ_DONE;
  broadcast(w);
}

/* Cancels everything this rank still has outstanding: a copy in progress is
 * waited out (it never blocks), posted requests leave their queues, and all
 * return to the free list. Afterwards no buffer of this rank is referenced.
 * Lock held. */
static void quiesce(LocalRank *me) {
  TransportWorld *w = me->w;
  for (TransportRequest *q = me->base.all_reqs; q; q = q->all_next) {
    LocalReq *r = (LocalReq *)q;
    while (r->state == REQ_COPYING) wait_until(w, transport_now() + 1.0);
    if (r->state == REQ_POSTED)
      unlink_req(r->base.is_send ? &w->ranks[r->base.peer].inbox : &me->posted, r);
    if (r->state != REQ_FREE) req_free(me, r);
  }
}

/* ---- operations ---------------------------------------------------------- */

/* A send or a receive of t's: delivered now when its match waits (a
 * receive posted at the peer, a send in t's inbox), else queued where the match looks. */
static TransportStatus local_post(Transport *t, TransportChannel ch, bool is_send, int peer, int tag, void *buf,
                                  size_t bytes, const char *what, TransportRequest **out) {
  LocalRank *me = as_local(t);
  TransportWorld *w = me->w;
  LOCK(w);
  LocalReq *r = (LocalReq *)transport_req_alloc(t, sizeof *r, is_send, peer, bytes, what);
  r->next = NULL;
  r->ch = ch;
  r->tag = tag;
  r->buf = buf;
  *out = &r->base;
  LocalQueue *matches = is_send ? &w->ranks[peer].posted : &me->inbox;
  LocalReq *m = find_match(matches, is_send ? t->rank : peer, ch, tag, !is_send);
  if (m) {
    unlink_req(matches, m);
    deliver(w, is_send ? r : m, is_send ? m : r);
  } else {
    r->state = REQ_POSTED;
    enqueue(is_send ? &w->ranks[peer].inbox : &me->posted, r);
  }
  UNLOCK(w);
  return TRANSPORT_OK;
}

/* A timeout waiting on `peer`: follows the waits from there (every rank's
 * waiting_on is visible here) to the rank that is not waiting on anyone, the one
 * that stopped answering, and names it. Lock held. */
static TransportStatus fail_timeout(LocalRank *me, const LocalReq *r) {
  TransportWorld *w = me->w;
  int chain[64], n = 0, c = r->base.peer;
  for (;;) {
    bool seen = c == me->base.rank;
    for (int i = 0; i < n && !seen; i++) seen = chain[i] == c;
    /* the waits lead back to a waiting rank: a deadlock, nobody stopped */
    if (seen || n == 64) return transport_fail_wait(&me->base, TRANSPORT_TIMEOUT, r->base.is_send, r->base.peer, r->base.what, NULL);
    chain[n++] = c;
    int next = atomic_load_explicit(&w->ranks[c].base.waiting_on, memory_order_relaxed);
    if (w->ranks[c].exited || next < 0) break;
    c = next;
  }
  const LocalRank *culprit = &w->ranks[chain[n - 1]];
  char why[160];
  if (culprit->exited)
    snprintf(why, sizeof why, "it exited");
  else
    transport_describe_progress(&culprit->base, transport_now(), why, sizeof why);
  return transport_fail_blame(&me->base, r->base.is_send, r->base.what, chain, n, why);
}

static TransportStatus local_wait(Transport *t, TransportRequest *req, double deadline) {
  LocalRank *me = as_local(t);
  TransportWorld *w = me->w;
  LocalReq *r = (LocalReq *)req;
  LOCK(w);
  TransportStatus s = TRANSPORT_OK;
  for (;;) {
    if (r->state == REQ_DONE) {
      req_free(me, r);
      break;
    }
    if (r->state == REQ_FAILED) {
      s = transport_fail(t, TRANSPORT_MISMATCH, "%s", r->mismatch);
      quiesce(me);
      break;
    }
    if (r->state == REQ_POSTED) {
      LocalRank *peer = &w->ranks[r->base.peer];
      if (w->aborted)
        s = transport_fail_wait(t, TRANSPORT_ABORTED, r->base.is_send, r->base.peer, r->base.what,
                                w->abort_cause);
      else if (peer->exited)
        s = transport_fail_wait(t, TRANSPORT_PEER_EXITED, r->base.is_send, r->base.peer, r->base.what,
                                peer->exit_note);
      else if (transport_interrupted())
        s = transport_fail_wait(t, TRANSPORT_INTERRUPTED, r->base.is_send, r->base.peer, r->base.what, NULL);
      else if (transport_now() >= deadline)
        s = fail_timeout(me, r);
      if (s != TRANSPORT_OK) {
        quiesce(me);
        break;
      }
    }
    PD_CHECK(r->state != REQ_FREE, "(waiting on a finished request)");
    wait_until(w, r->state == REQ_COPYING ? transport_now() + 1.0 : deadline);
  }
  UNLOCK(w);
  return s;
}

static void local_abort(Transport *t, const char *why) {
  LocalRank *me = as_local(t);
  TransportWorld *w = me->w;
  LOCK(w);
  if (!w->aborted) {
    w->aborted = true;
    snprintf(w->abort_cause, sizeof w->abort_cause, "rank %d aborted: %s", t->rank, why);
    broadcast(w);
  }
  transport_fail(t, TRANSPORT_ABORTED, "rank %d: aborted: %s", t->rank, why);
  quiesce(me);
  UNLOCK(w);
}

/* Marks the rank exited; note (may be NULL) is appended to "rank N exited". A rank
 * that calls transport_destroy (transport_local_run does it when the rank function
 * returns) cancels its outstanding requests and comes here; a peer waiting on it
 * fails at once. */
static void local_exit(LocalRank *me, const char *note) {
  TransportWorld *w = me->w;
  LOCK(w);
  if (!me->exited) {
    quiesce(me);
    if (note)
      snprintf(me->exit_note, sizeof me->exit_note, "%s", note);
    else if (me->base.status != TRANSPORT_OK)
      snprintf(me->exit_note, sizeof me->exit_note, " after an error (%.480s)", me->base.err);
    me->exited = true;
    broadcast(w);
  }
  UNLOCK(w);
}

static void local_destroy(Transport *t) { local_exit(as_local(t), NULL); }

static const TransportOps local_ops = {
    .post = local_post,
    .wait = local_wait,
    .abort = local_abort,
    .destroy = local_destroy,
};

/* ---- the world ----------------------------------------------------------- */

TransportWorld *transport_local_create_world(int nranks, double timeout_s) {
  PD_CHECK(nranks >= 1, "(a world of %d ranks)", nranks);
  TransportWorld *w = pd_calloc(1, sizeof *w);
  PD_CHECK(pthread_mutex_init(&w->mu, NULL) == 0, "(pthread_mutex_init)");
  PD_CHECK(pthread_cond_init(&w->cv, NULL) == 0, "(pthread_cond_init)");
  w->n = nranks;
  w->ranks = pd_calloc((size_t)nranks, sizeof *w->ranks);
  for (int r = 0; r < nranks; r++) {
    transport_init_base(&w->ranks[r].base, &local_ops, TRANSPORT_LOCAL, r, nranks, timeout_s);
    w->ranks[r].w = w;
  }
  transport_install_signal_handlers();
  return w;
}

Transport *transport_local_rank(TransportWorld *w, int rank) {
  PD_CHECK(rank >= 0 && rank < w->n, "(rank %d of a world of %d)", rank, w->n);
  return &w->ranks[rank].base;
}

void transport_local_destroy_world(TransportWorld *w) {
  if (!w) return;
  for (int r = 0; r < w->n; r++) {
    free(w->ranks[r].base.scratch);
    transport_req_pool_free(&w->ranks[r].base);
  }
  free(w->ranks);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

typedef struct RankThread {
  Transport *t;
  TransportRankFn fn;
  void *arg;
  int rc;
  pthread_t tid;
} RankThread;

static void *rank_main(void *p) {
  RankThread *rt = p;
  rt->rc = rt->fn(rt->t, rt->arg);
  char note[64];
  snprintf(note, sizeof note, " (its rank function returned %d)", rt->rc);
  local_exit(as_local(rt->t), rt->rc != 0 && rt->t->status == TRANSPORT_OK ? note : NULL);
  return NULL;
}

/* The watchdog: a rank stuck inside a computation or a library call (OpenBLAS
 * retrying an allocation, a kernel that never returns) cannot notice a failure, and
 * the world's threads are joined, so the run would never end. Once any rank has
 * failed, a rank outside the transport (a rank inside a wait notices the failure
 * itself) that has made no progress for WATCHDOG_GRACE_S since then is stuck: the
 * watchdog, a thread of its own that waits on nothing the ranks hold for long,
 * prints the failure and that rank, and ends the process with _exit(1) (exit would
 * run library destructors that may wait on the stuck thread). A rank silent for
 * longer than the timeout is stuck too, whatever the others do (silent_rank). */
#define WATCHDOG_GRACE_S 2.0

typedef struct Watchdog {
  TransportWorld *w;
  pthread_t tid;
  _Atomic bool done;
} Watchdog;

/* A rank outside the transport that has made no progress for longer than the
 * timeout while another rank still runs (issue 24: without a failure elsewhere the
 * watchdog never acted, and a rank stuck in a library held the run forever): a wait
 * on it would have timed out by now. Not before its first step's progress (setup has
 * its own bounds), and not while it is the last rank running in a run that has not
 * failed (it may be writing a large checkpoint). -1 if none. Lock held. */
static int silent_rank(const TransportWorld *w, double now, bool failed) {
  int running = 0;
  for (int r = 0; r < w->n; r++) running += !w->ranks[r].exited;
  if (running < 2 && !failed) return -1;
  for (int r = 0; r < w->n; r++) {
    const LocalRank *lr = &w->ranks[r];
    long long beat = atomic_load_explicit(&lr->base.beat_us, memory_order_relaxed);
    if (!lr->exited && beat > 0 && lr->base.timeout_s > 0 &&
        atomic_load_explicit(&lr->base.waiting_on, memory_order_relaxed) < 0 &&
        (double)((long long)(now * 1e6) - beat) > lr->base.timeout_s * 1e6)
      return r;
  }
  return -1;
}

static void *watchdog_main(void *p) {
  Watchdog *wd = p;
  TransportWorld *w = wd->w;
  double failed_at = -1, grace = WATCHDOG_GRACE_S;
  long long grace_us = (long long)(grace * 1e6);
  while (!atomic_load(&wd->done)) {
    transport_sleep(0.05);
    LOCK(w);
    int first = -1, stuck = -1;
    double now = transport_now();
    for (int r = 0; r < w->n; r++) {
      const LocalRank *lr = &w->ranks[r];
      if (lr->base.status != TRANSPORT_OK && (first < 0 || lr->base.fail_seq < w->ranks[first].base.fail_seq))
        first = r;
      long long beat = atomic_load_explicit(&lr->base.beat_us, memory_order_relaxed);
      if (!lr->exited && stuck < 0 && atomic_load_explicit(&lr->base.waiting_on, memory_order_relaxed) < 0 &&
          (long long)(now * 1e6) - beat > grace_us)
        stuck = r;
    }
    if ((first >= 0 || w->aborted) && failed_at < 0) failed_at = now;
    int slow = w->n > 1 ? silent_rank(w, now, failed_at >= 0) : -1;
    bool late = slow < 0 && failed_at >= 0 && stuck >= 0 && now - failed_at > grace;
    if (slow >= 0 || late) { /* the failure first (late: there is one), then the rank */
      char how[160];
      transport_describe_progress(&w->ranks[late ? stuck : slow].base, now, how, sizeof how);
      fflush(stdout);
      if (first >= 0 || w->aborted)
        fprintf(stderr, "%s: error: %s\n", program_invocation_short_name,
                first >= 0 ? w->ranks[first].base.err : w->abort_cause);
      if (!late)
        fprintf(stderr, "%s: error: rank %d is stuck inside a computation or a library call (%s, more than --timeout "
                "%g s); ending the run\n", program_invocation_short_name, slow, how, w->ranks[slow].base.timeout_s);
      else
        fprintf(stderr, "%s: error: rank %d did not stop within %g s of that failure (%s): stuck inside a "
                "computation or a library call; ending the run\n", program_invocation_short_name, stuck, grace, how);
      _exit(1);
    }
    UNLOCK(w);
  }
  return NULL;
}

int transport_local_run(TransportWorld *w, TransportRankFn fn, void *arg, char *err,
                        size_t errlen) {
  Watchdog wd = {.w = w};
  int wrc = pthread_create(&wd.tid, NULL, watchdog_main, &wd);
  if (wrc != 0) pd_out_of_memory(0, "starting the watchdog thread", __FILE__, __LINE__);
  RankThread *th = pd_calloc((size_t)w->n, sizeof *th);
  for (int r = 0; r < w->n; r++) {
    th[r] = (RankThread){.t = &w->ranks[r].base, .fn = fn, .arg = arg};
    int rc = pthread_create(&th[r].tid, NULL, rank_main, &th[r]);
    if (rc != 0) { /* EAGAIN: no memory for its stack (ulimit -v), or the thread limit */
      char what[128];
      snprintf(what, sizeof what, "starting the thread of rank %d (pthread_create: %s)", r, strerror(rc));
      pd_out_of_memory(0, what, __FILE__, __LINE__);
    }
  }
  for (int r = 0; r < w->n; r++)
    PD_CHECK(pthread_join(th[r].tid, NULL) == 0, "(pthread_join)");
  atomic_store(&wd.done, true);
  PD_CHECK(pthread_join(wd.tid, NULL) == 0, "(pthread_join)");

  /* The root cause is the earliest transport failure; a rank that failed
   * without one (its own error) is reported by its return code. */
  int first = -1;
  for (int r = 0; r < w->n; r++) {
    const Transport *t = th[r].t;
    if (t->status != TRANSPORT_OK && (first < 0 || t->fail_seq < th[first].t->fail_seq))
      first = r;
  }
  int rc = 0;
  for (int r = 0; r < w->n && !rc; r++) rc = th[r].rc;
  if (err && errlen) err[0] = '\0';
  if (first >= 0) {
    if (err && errlen) snprintf(err, errlen, "%s", th[first].t->err);
    if (th[first].rc) rc = th[first].rc;
    if (!rc) rc = 1;
  } else if (rc && err && errlen) {
    for (int r = 0; r < w->n; r++)
      if (th[r].rc) {
        snprintf(err, errlen, "rank %d returned %d", r, th[r].rc);
        break;
      }
  }
  free(th);
  return rc;
}
