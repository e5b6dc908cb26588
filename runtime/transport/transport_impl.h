/* runtime/transport/transport_impl.h — what a transport implements (private to the
 * transport_*.c files).
 *
 * A transport provides point-to-point messages on two channels and a few
 * lifecycle hooks; transport.c builds everything else on top (blocking calls,
 * groups, the deterministic all-reduce, barriers), so the collectives run the
 * same code, and give the same bits, on every transport.
 *
 * Failure handling is split the same way: the implementation notices the cause
 * inside its wait (peer exit, abort, signal, deadline) and reports it through
 * transport_fail_wait(), which words the message; after it the Transport is
 * failed (sticky) and the implementation has cancelled every request it still
 * had outstanding, so no buffer of the caller is touched again.
 */
#ifndef PD2BW_RUNTIME_TRANSPORT_IMPL_H
#define PD2BW_RUNTIME_TRANSPORT_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "runtime/transport/transport.h"

/* Point-to-point messages travel on one of two channels so that the
 * collectives' traffic never matches a caller's message. */
typedef enum TransportChannel {
  TRANSPORT_CH_P2P,  /* the caller's send/recv, tags 0..TRANSPORT_TAG_MAX */
  TRANSPORT_CH_COLL, /* transport.c's collectives, tags from coll_tag() */
  TRANSPORT_NCHANNELS,
} TransportChannel;

typedef struct TransportOps {
  /* Post a send (is_send: buf is only read) or a receive; return TRANSPORT_OK and
   * *req, or fail t. */
  TransportStatus (*post)(Transport *t, TransportChannel ch, bool is_send, int peer, int tag, void *buf,
                          size_t bytes, const char *what, TransportRequest **req);
  /* Block until req completes (then free it) or until `deadline` (a
   * transport_now() value) passes or another cause fails t. transport_waitall marks
   * the wait on req->peer around it (Transport.waiting_on). */
  TransportStatus (*wait)(Transport *t, TransportRequest *req, double deadline);
  void (*abort)(Transport *t, const char *why);
  void (*destroy)(Transport *t);
} TransportOps;

/* A posted request; implementations embed it first in theirs. */
struct TransportRequest {
  Transport *owner;
  TransportRequest *next_free, *all_next; /* the owner's pool (transport_req_alloc) */
  bool is_send;
  int peer;
  size_t bytes;
  char what[TRANSPORT_WHAT_LEN];
};

/* The part every transport shares; implementations embed it first. */
struct Transport {
  const TransportOps *ops;
  TransportKind kind;
  int rank, size, ranks_on_host;
  double timeout_s;
  TransportStatus status;       /* sticky: TRANSPORT_OK until the first failure */
  uint64_t fail_seq;            /* order of failures across ranks (local run) */
  char err[TRANSPORT_ERR_LEN];  /* the first failure's message */
  float *scratch;               /* all-reduce receive space, grown once */
  size_t scratch_cap;           /* in floats */
  TransportRequest *free_reqs, *all_reqs; /* the request pool: the free ones; all ever allocated */
  /* Progress, written by the rank's thread, read by others (the local world's
   * watchdog and timeout blame; an MPI rank's answer to a status query). */
  _Atomic long long beat_us;        /* transport_now() in µs at the last progress */
  _Atomic int waiting_on;           /* the peer of the wait in progress; -1: none */
  _Atomic(const char *) doing;      /* transport_progress's `doing`, or NULL */
  _Atomic long long doing_index;
};

/* "no progress for 5.1 s, in FWD 7" (or "... since it started") into buf. */
void transport_describe_progress(const Transport *t, double now, char *buf, size_t n);
/* A timeout whose cause lies down a chain of waits: this rank waited on chain[0],
 * which waits on chain[1], ..., and chain[n-1] stopped answering (`why`: how it was
 * seen). The message names chain[n-1] first: "rank 2 stopped answering (why); rank
 * 0 timed out after 5 s waiting for X from rank 1, which waits for rank 2". */
TransportStatus transport_fail_blame(Transport *t, bool is_send, const char *what, const int *chain, int n,
                                     const char *why);

/* A request of `size` bytes (an implementation's, its TransportRequest first) from t's
 * pool, which grows to the most requests ever outstanding, then stays: the shared
 * fields filled (what NULL: "a message"), the rest as its last use left them. */
TransportRequest *transport_req_alloc(Transport *t, size_t size, bool is_send, int peer, size_t bytes,
                                      const char *what);
void transport_req_free(Transport *t, TransportRequest *r);
/* Frees every request of t's pool (t is done with them). */
void transport_req_pool_free(Transport *t);

/* Fills the shared fields. */
void transport_init_base(Transport *t, const TransportOps *ops, TransportKind kind, int rank,
                         int size, double timeout_s);

/* Marks t failed with status and a printf-formatted message (only the first
 * failure is kept). Returns t->status. */
TransportStatus transport_fail(Transport *t, TransportStatus s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Words a failed wait: "rank R: <cause> waiting for WHAT from rank P" (receive) or
 * "... waiting for rank P to take WHAT" (send). cause_detail: for
 * TRANSPORT_ABORTED the abort reason ("rank 3 aborted: ..."), for
 * TRANSPORT_PEER_EXITED how the peer exited, else NULL. */
TransportStatus transport_fail_wait(Transport *t, TransportStatus s, bool is_send, int peer,
                                    const char *what, const char *cause_detail);

/* Sleeps for `seconds` (nanosleep; returns early on a signal). */
void transport_sleep(double seconds);
/* The next value of a process-wide failure counter. */
uint64_t transport_next_fail_seq(void);

#endif
