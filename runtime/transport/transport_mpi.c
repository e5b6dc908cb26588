/* runtime/transport/transport_mpi.c — the MPI transport: every rank is an MPI process.
 * Built only when CMake finds Open MPI (transport_mpi_none.c otherwise).
 *
 * Three duplicates of MPI_COMM_WORLD keep traffic apart: the caller's messages,
 * the collectives' messages (transport_coll.c), and a control channel on which a
 * rank that gives up tells every other rank why. Errors return (MPI_ERRORS_RETURN)
 * instead of killing the job, so a failed call becomes a message. A process that
 * dies takes the job down through Open MPI (mpirun's SIGTERM, which our handler turns
 * into TRANSPORT_INTERRUPTED); a peer that stops answering trips our timeout. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/transport/transport_impl.h"

/* Control channel tags: an abort's reason; a status query ("whom do you wait
 * on?") and its answer (an int: the peer, -1 none), so that a timed-out rank can
 * follow the waits to the rank that stopped answering. */
enum { CTRL_TAG = 1, ASK_TAG = 2, STATE_TAG = 3 };
#define GRACE_S 0.3 /* how long a failing rank lets the others report */

typedef struct MpiReq MpiReq;
struct MpiReq {
  TransportRequest base;
  MPI_Request r; /* MPI_REQUEST_NULL when not outstanding */
};

typedef struct MpiTransport {
  Transport base;
  MPI_Comm comm[TRANSPORT_NCHANNELS];
  MPI_Comm ctrl;
  bool remote_abort;             /* the failure came from another rank */
  MPI_Request *ctrl_sends;       /* one per rank, for our own abort message */
  char ctrl_msg[TRANSPORT_ERR_LEN];
  bool ctrl_sent;
  int blamed;      /* after a timeout: the rank blamed; answered to queries after */
  int one;         /* the payload of a query */
  int answer;      /* the payload of the last answer (MPI_Send copies it out) */
} MpiTransport;

static MpiTransport *live; /* the process's transport, for the atexit handler */

static MpiTransport *as_mpi(Transport *t) { return (MpiTransport *)t; }

static void mpi_errstr(int rc, char *buf, size_t len) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  snprintf(buf, len, "%s", s);
}

/* Frees every outstanding request: receives are cancelled; sends are left to
 * finish (their buffers stay valid until destroy, which ends the process). */
static void cancel_all(MpiTransport *m) {
  for (TransportRequest *b = m->base.all_reqs; b; b = b->all_next) {
    MpiReq *q = (MpiReq *)b;
    if (q->r == MPI_REQUEST_NULL) continue;
    if (!q->base.is_send) MPI_Cancel(&q->r);
    MPI_Request_free(&q->r);
    q->r = MPI_REQUEST_NULL;
  }
}

static TransportStatus fail_call(MpiTransport *m, const char *call, int rc, const char *what,
                                 int peer) {
  char e[MPI_MAX_ERROR_STRING + 32];
  mpi_errstr(rc, e, sizeof e);
  TransportStatus s =
      transport_fail(&m->base, TRANSPORT_ERROR, "rank %d: %s for %s (peer rank %d) failed: %s",
                     m->base.rank, call, what, peer, e);
  cancel_all(m);
  return s;
}

/* Back to the pool, not outstanding (cancel_all skips it). */
static void req_free(MpiTransport *m, MpiReq *q) {
  q->r = MPI_REQUEST_NULL;
  transport_req_free(&m->base, &q->base);
}

static TransportStatus mpi_post(Transport *t, TransportChannel ch, bool is_send, int peer, int tag,
                                void *buf, size_t bytes, const char *what, TransportRequest **out) {
  MpiTransport *m = as_mpi(t);
  *out = NULL;
  if (bytes > (size_t)INT_MAX)
    return transport_fail(t, TRANSPORT_BAD_ARG,
                          "rank %d: %s of %zu bytes exceeds MPI's limit of %d bytes a message",
                          t->rank, what ? what : "a message", bytes, INT_MAX);
  MpiReq *q = (MpiReq *)transport_req_alloc(t, sizeof *q, is_send, peer, bytes, what);
  q->r = MPI_REQUEST_NULL;
  int rc = is_send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm[ch], &q->r)
                   : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm[ch], &q->r);
  if (rc != MPI_SUCCESS) {
    TransportStatus s = fail_call(m, is_send ? "MPI_Isend" : "MPI_Irecv", rc, q->base.what, peer);
    req_free(m, q);
    return s;
  }
  *out = &q->base;
  return TRANSPORT_OK;
}

/* Answers a pending status query from st.MPI_SOURCE: whom this rank waits on
 * (after its own timeout: the rank it blamed). */
static void answer_ask(MpiTransport *m, const MPI_Status *st) {
  int dummy;
  MPI_Recv(&dummy, 1, MPI_INT, st->MPI_SOURCE, ASK_TAG, m->ctrl, MPI_STATUS_IGNORE);
  m->answer = m->blamed >= 0 ? m->blamed : atomic_load_explicit(&m->base.waiting_on, memory_order_relaxed);
  MPI_Send(&m->answer, 1, MPI_INT, st->MPI_SOURCE, STATE_TAG, m->ctrl); /* small: sent eagerly */
}

/* Reads one pending control message into cause; true if it was an abort. Status
 * queries are answered and stale answers dropped on the way. */
static bool poll_ctrl(MpiTransport *m, char *cause, size_t len) {
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->ctrl, &flag, &st) != MPI_SUCCESS || !flag)
    return false;
  if (st.MPI_TAG == ASK_TAG) {
    answer_ask(m, &st);
    return false;
  }
  if (st.MPI_TAG == STATE_TAG) {
    int stale;
    MPI_Recv(&stale, 1, MPI_INT, st.MPI_SOURCE, STATE_TAG, m->ctrl, MPI_STATUS_IGNORE);
    return false;
  }
  int n = 0;
  MPI_Get_count(&st, MPI_CHAR, &n);
  char buf[TRANSPORT_ERR_LEN];
  if (n < 0 || n > (int)sizeof buf) n = (int)sizeof buf;
  if (MPI_Recv(buf, n, MPI_CHAR, st.MPI_SOURCE, CTRL_TAG, m->ctrl, MPI_STATUS_IGNORE) !=
      MPI_SUCCESS)
    snprintf(buf, sizeof buf, "rank %d aborted (its message was lost)", st.MPI_SOURCE);
  buf[sizeof buf - 1] = '\0';
  if (n > 0 && n < (int)sizeof buf) buf[n] = '\0';
  snprintf(cause, len, "%s", buf);
  return true;
}

/* A timeout waiting on q->base.peer. Every other rank is asked whom it waits on (a rank
 * answers from inside its own waits); the waits are followed from q->base.peer to the
 * first rank that does not answer, or waits on no one, and that rank is named:
 * a SIGSTOPped or stuck process answers nothing, so the neighbour waiting on it is
 * not blamed. An abort arriving meanwhile wins (another rank found the cause). */
static TransportStatus fail_timeout(MpiTransport *m, MpiReq *q) {
  Transport *t = &m->base;
  int n = t->size;
  int *state = pd_malloc((size_t)n * sizeof *state);
  MPI_Request *asks = pd_malloc((size_t)n * sizeof *asks);
  for (int r = 0; r < n; r++) {
    state[r] = -2; /* no answer */
    asks[r] = MPI_REQUEST_NULL;
    if (r != t->rank) MPI_Isend(&m->one, 1, MPI_INT, r, ASK_TAG, m->ctrl, &asks[r]);
  }
  double ask_s = t->timeout_s / 2 < 1.0 ? t->timeout_s / 2 : 1.0, stop = transport_now() + ask_s;
  int answered = 0;
  char cause[TRANSPORT_ERR_LEN];
  bool aborted = false;
  while (answered < n - 1 && transport_now() < stop && !aborted) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->ctrl, &flag, &st) != MPI_SUCCESS) break;
    if (!flag) {
      transport_sleep(1e-3);
    } else if (st.MPI_TAG == STATE_TAG) {
      int s;
      MPI_Recv(&s, 1, MPI_INT, st.MPI_SOURCE, STATE_TAG, m->ctrl, MPI_STATUS_IGNORE);
      if (state[st.MPI_SOURCE] == -2) answered++;
      state[st.MPI_SOURCE] = s;
    } else {
      aborted = poll_ctrl(m, cause, sizeof cause);
    }
  }
  for (int r = 0; r < n; r++)
    if (asks[r] != MPI_REQUEST_NULL) MPI_Request_free(&asks[r]);
  free(asks);
  if (aborted) {
    free(state);
    m->remote_abort = true;
    return transport_fail_wait(t, TRANSPORT_ABORTED, q->base.is_send, q->base.peer, q->base.what, cause);
  }
  int chain[64], len = 0, c = q->base.peer;
  for (;;) {
    bool seen = c == t->rank;
    for (int i = 0; i < len && !seen; i++) seen = chain[i] == c;
    if (seen || len == 64) { /* the waits lead back to a waiting rank: a deadlock, nobody stopped */
      free(state);
      return transport_fail_wait(t, TRANSPORT_TIMEOUT, q->base.is_send, q->base.peer, q->base.what, NULL);
    }
    chain[len++] = c;
    if (state[c] < 0 || state[c] >= n) break;
    c = state[c];
  }
  int culprit = chain[len - 1];
  char why[160];
  if (state[culprit] == -2)
    snprintf(why, sizeof why, "no answer to a status query within %g s: stopped, or stuck outside the transport",
             ask_s);
  else
    snprintf(why, sizeof why, "it waits on no one");
  free(state);
  m->blamed = culprit;
  return transport_fail_blame(t, q->base.is_send, q->base.what, chain, len, why);
}

/* Every request is MPI_Isend/MPI_Irecv; a wait polls MPI_Test, and between polls it
 * checks the control channel (MPI_Iprobe), the signal flag and the deadline, then
 * sleeps with a backoff from 10 µs to ~0.1 ms (ranks often share cores with each other
 * and with BLAS threads, so spinning would steal them). */
static TransportStatus mpi_wait(Transport *t, TransportRequest *req, double deadline) {
  MpiTransport *m = as_mpi(t);
  MpiReq *q = (MpiReq *)req;
  PD_CHECK(q->r != MPI_REQUEST_NULL, "(waiting on a finished request)");
  double nap = 10e-6;
  for (int polls = 0;; polls++) {
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Test(&q->r, &flag, &st);
    if (rc != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      if (cls == MPI_ERR_TRUNCATE) {
        TransportStatus s = transport_fail(t, TRANSPORT_MISMATCH,
                                           "rank %d: received more than the %zu bytes expected "
                                           "of %s from rank %d",
                                           t->rank, q->base.bytes, q->base.what, q->base.peer);
        cancel_all(m);
        return s;
      }
      return fail_call(m, "MPI_Test", rc, q->base.what, q->base.peer);
    }
    if (flag) {
      q->r = MPI_REQUEST_NULL;
      if (!q->base.is_send) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != q->base.bytes) {
          TransportStatus s = transport_fail(t, TRANSPORT_MISMATCH,
                                             "rank %d: received %d bytes of %s from rank %d, "
                                             "expected %zu",
                                             t->rank, got, q->base.what, q->base.peer, q->base.bytes);
          req_free(m, q);
          cancel_all(m);
          return s;
        }
      }
      req_free(m, q);
      return TRANSPORT_OK;
    }
    char cause[TRANSPORT_ERR_LEN];
    TransportStatus s = TRANSPORT_OK;
    if (poll_ctrl(m, cause, sizeof cause)) {
      m->remote_abort = true;
      s = transport_fail_wait(t, TRANSPORT_ABORTED, q->base.is_send, q->base.peer, q->base.what, cause);
    } else if (transport_interrupted()) {
      s = transport_fail_wait(t, TRANSPORT_INTERRUPTED, q->base.is_send, q->base.peer, q->base.what, NULL);
    } else if (transport_now() >= deadline) {
      s = fail_timeout(m, q);
    }
    if (s != TRANSPORT_OK) {
      cancel_all(m);
      return s;
    }
    if (polls >= 64) { /* a short spin first: MPI's shared-memory path is fast */
      transport_sleep(nap);
      if (nap < 100e-6) nap *= 2;
    }
  }
}

/* Tells every other rank `msg` on the control channel (once per process). */
static void send_ctrl(MpiTransport *m, const char *msg) {
  if (m->ctrl_sent) return;
  m->ctrl_sent = true;
  snprintf(m->ctrl_msg, sizeof m->ctrl_msg, "%s", msg);
  int len = (int)strlen(m->ctrl_msg) + 1;
  for (int r = 0; r < m->base.size; r++) {
    m->ctrl_sends[r] = MPI_REQUEST_NULL;
    if (r != m->base.rank)
      MPI_Isend(m->ctrl_msg, len, MPI_CHAR, r, CTRL_TAG, m->ctrl, &m->ctrl_sends[r]);
  }
}

/* Lets the control messages leave (bounded), then gives the peers a moment to
 * report them. */
static void flush_ctrl(MpiTransport *m) {
  if (m->ctrl_sent) {
    double stop = transport_now() + 1.0;
    int done = 0;
    while (!done && transport_now() < stop) {
      if (MPI_Testall(m->base.size, m->ctrl_sends, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        break;
      if (!done) transport_sleep(1e-4);
    }
  }
  fflush(stdout);
  fflush(stderr);
  /* the grace period answers status queries: a rank still asking learns whom we blamed */
  double until = transport_now() + GRACE_S;
  char cause[TRANSPORT_ERR_LEN];
  while (transport_now() < until) {
    poll_ctrl(m, cause, sizeof cause);
    transport_sleep(1e-3);
  }
}

/* Sends why on the control channel; a process that calls exit() with its transport
 * still open does the same from mpi_atexit ("rank N exited ..."), so the other ranks
 * name it before Open MPI ends the job. After a failure, destroy waits a moment (so
 * peers can print) and calls MPI_Abort: MPI_Finalize could block forever beside a
 * dead peer. */
static void mpi_abort(Transport *t, const char *why) {
  MpiTransport *m = as_mpi(t);
  if (m->remote_abort) return; /* another rank already told everyone */
  char msg[TRANSPORT_ERR_LEN];
  snprintf(msg, sizeof msg, "rank %d aborted: %s", t->rank, why);
  fprintf(stderr, "pd2bw: %s\n", msg);
  send_ctrl(m, msg);
  transport_fail(t, TRANSPORT_ABORTED, "rank %d: aborted: %s", t->rank, why);
  cancel_all(m);
}

static void free_all(MpiTransport *m) {
  transport_req_pool_free(&m->base);
  free(m->ctrl_sends);
  free(m);
}

static void mpi_destroy(Transport *t) {
  MpiTransport *m = as_mpi(t);
  live = NULL;
  if (t->status == TRANSPORT_OK && !m->ctrl_sent) {
    for (int c = 0; c < TRANSPORT_NCHANNELS; c++) MPI_Comm_free(&m->comm[c]);
    MPI_Comm_free(&m->ctrl);
    free_all(m);
    MPI_Finalize();
    return;
  }
  flush_ctrl(m);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1); /* not reached */
}

/* exit() with the transport still open: say so to everyone before Open MPI
 * notices the missing process and ends the job. */
static void mpi_atexit(void) {
  MpiTransport *m = live;
  if (!m) return;
  live = NULL;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (m->base.status == TRANSPORT_OK) {
    char msg[128];
    snprintf(msg, sizeof msg, "rank %d exited (the process ended without closing its transport)",
             m->base.rank);
    send_ctrl(m, msg);
  }
  flush_ctrl(m);
}

static const TransportOps mpi_ops = {
    .post = mpi_post,
    .wait = mpi_wait,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

bool transport_mpi_available(void) { return true; }

Transport *transport_mpi_create(int *argc, char ***argv, double timeout_s, char *err,
                                size_t errlen) {
  static bool created;
  if (created) {
    snprintf(err, errlen, "mpi transport: created twice in one process");
    return NULL;
  }
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING];
    mpi_errstr(rc, e, sizeof e);
    snprintf(err, errlen, "mpi transport: MPI_Init_thread failed: %s", e);
    return NULL;
  }
  created = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    snprintf(err, errlen, "mpi transport: MPI provides thread level %d, pd2bw needs "
             "MPI_THREAD_SERIALIZED (%d)", provided, MPI_THREAD_SERIALIZED);
    return NULL;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MpiTransport *m = pd_calloc(1, sizeof *m);
  transport_init_base(&m->base, &mpi_ops, TRANSPORT_MPI, rank, size, timeout_s);
  m->blamed = -1;
  m->one = 1;
  const char *what = NULL;
  for (int c = 0; c < TRANSPORT_NCHANNELS && !what; c++)
    if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm[c]) != MPI_SUCCESS) what = "MPI_Comm_dup";
  if (!what && MPI_Comm_dup(MPI_COMM_WORLD, &m->ctrl) != MPI_SUCCESS) what = "MPI_Comm_dup";
  MPI_Comm node;
  if (!what && MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                                   &node) != MPI_SUCCESS)
    what = "MPI_Comm_split_type";
  if (what) {
    snprintf(err, errlen, "mpi transport: rank %d: %s failed", rank, what);
    free(m);
    return NULL;
  }
  MPI_Comm_size(node, &m->base.ranks_on_host);
  MPI_Comm_free(&node);
  m->ctrl_sends = pd_calloc((size_t)size, sizeof *m->ctrl_sends);
  for (int r = 0; r < size; r++) m->ctrl_sends[r] = MPI_REQUEST_NULL;
  transport_install_signal_handlers();
  live = m;
  atexit(mpi_atexit);
  return &m->base;
}
