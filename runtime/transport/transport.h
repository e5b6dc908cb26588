/* runtime/transport/transport.h — how ranks talk: point to point, the replica group's
 * all-reduce, agreement, and failure handling, over two transports (DESIGN.md §5):
 * local (ranks are threads of one process: a message is copied once, sender's buffer
 * to receiver's, by whichever side arrives second) and mpi (ranks are MPI processes;
 * every wait polls, so timeouts, aborts and signals are noticed while blocked).
 *
 * This folder owns both (transport_local.c, transport_mpi.c), their common half
 * (transport.c), the collectives written once over both (transport_coll.c), signals
 * and clocks (transport_sys.c) and what a transport implements (transport_impl.h: a new
 * one implements post, wait, abort and destroy, and gets the collectives). Invariants:
 * nothing hangs (every call returns a status and a message naming the rank and the
 * wait), failure is sticky, and the all-reduce is the same bits on both transports.
 * A Transport is used by one thread at a time (its rank's); the local world is
 * shared by its rank threads and internally locked.
 */
#ifndef PD2BW_RUNTIME_TRANSPORT_H
#define PD2BW_RUNTIME_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct Transport Transport;               /* one per rank */
typedef struct TransportWorld TransportWorld;     /* local: the ranks of one process */
typedef struct TransportGroup TransportGroup;     /* a subset of ranks, for collectives */
typedef struct TransportRequest TransportRequest; /* a posted isend/irecv */

/* Default for every blocking wait; configurable per world or per rank. */
#define TRANSPORT_DEFAULT_TIMEOUT_S 60.0
/* Tags of point-to-point messages are 0..TRANSPORT_TAG_MAX (MPI guarantees
 * tags up to 32767; collectives use their own channel, so all of these are the
 * caller's). */
#define TRANSPORT_TAG_MAX 32767
/* A `what` longer than this is cut in error messages. */
#define TRANSPORT_WHAT_LEN 128
/* transport_error() strings never exceed this (including the NUL). */
#define TRANSPORT_ERR_LEN 1024

typedef enum TransportStatus {
  TRANSPORT_OK = 0,      /* the call did what it says */
  TRANSPORT_TIMEOUT,     /* a peer did not answer within the timeout */
  TRANSPORT_PEER_EXITED, /* the peer this call waited on has exited */
  TRANSPORT_ABORTED,     /* some rank called transport_abort(); the message says
                            which and why */
  TRANSPORT_INTERRUPTED, /* SIGINT or SIGTERM arrived while blocked */
  TRANSPORT_MISMATCH,    /* sender and receiver disagree on a message's size, or
                            group members on an all-reduce's length: a plan bug */
  TRANSPORT_BAD_ARG,     /* the caller passed a bad rank, tag, group or size */
  TRANSPORT_ERROR,       /* a library call failed (the message names it), or the
                            transport is not available in this build */
} TransportStatus;

typedef enum TransportKind {
  TRANSPORT_LOCAL, /* threads of one process (transport_local.c) */
  TRANSPORT_MPI,   /* MPI processes (transport_mpi.c) */
} TransportKind;

const char *transport_status_name(TransportStatus s); /* "timeout", ... */

/* ---- local: all ranks as threads of one process -------------------------- */

/* A world of nranks ranks; timeout_s <= 0 means TRANSPORT_DEFAULT_TIMEOUT_S. */
TransportWorld *transport_local_create_world(int nranks, double timeout_s);
/* Rank `rank`'s Transport (owned by the world; valid until the world is
 * destroyed). Hand it to that rank's thread. */
Transport *transport_local_rank(TransportWorld *w, int rank);
/* Convenience, once per world: runs fn(transport_local_rank(w, r), arg) on one
 * thread per rank, marks each rank exited as its fn returns (so peers waiting on
 * it fail at once instead of timing out), joins them all. Returns 0 when every
 * fn returned 0; otherwise the failing rank's return code (1 if it returned 0)
 * and, in err, the first failure in time — the root cause: the earliest
 * transport error, or "rank N returned S". Without it, each rank thread must
 * call transport_destroy() on every way out. */
typedef int (*TransportRankFn)(Transport *t, void *arg);
int transport_local_run(TransportWorld *w, TransportRankFn fn, void *arg, char *err,
                        size_t errlen);
/* Every rank must have stopped using its Transport. */
void transport_local_destroy_world(TransportWorld *w);

/* ---- mpi: ranks as MPI processes --------------------------------------- */

/* True when this build has the MPI transport (Open MPI was found). */
bool transport_mpi_available(void);
/* MPI_Init_thread (MPI_THREAD_SERIALIZED), then this process's Transport. NULL
 * with a message in err when MPI is unavailable or initialisation fails. Only
 * one per process. */
Transport *transport_mpi_create(int *argc, char ***argv, double timeout_s, char *err,
                                size_t errlen);

/* ---- every transport ---------------------------------------------------- */

/* The rank is done with its Transport. local: marks the rank exited (peers still
 * waiting on it fail with "rank N exited"). mpi: MPI_Finalize when all went
 * well; after a failure, MPI_Abort (exit status 1) after a short grace period so
 * that peers can print their messages — Open MPI cannot finalize beside a dead or
 * stuck peer. Buffers of outstanding requests must stay valid until this call. */
void transport_destroy(Transport *t);

TransportKind transport_kind(const Transport *t);
int transport_rank(const Transport *t);
int transport_size(const Transport *t);
/* How many ranks run on this host (local: all; mpi: those sharing memory with
 * this one) — the argument for transport_threads_per_rank(). */
int transport_ranks_on_host(const Transport *t);
double transport_timeout(const Transport *t);
void transport_set_timeout(Transport *t, double timeout_s); /* <= 0: default */
/* Failure is sticky: after the first error every call on t returns the same status
 * and message at once. The caller then stops: transport_abort(t, transport_error(t))
 * so every other rank stops too, print the message, transport_destroy(t). */
TransportStatus transport_status(const Transport *t);
/* "" while all is well; else one line naming this rank, what it waited for (the
 * caller's `what`), the peer and the cause ("rank 3: timed out after 60 s waiting for
 * activation of microbatch 7 from rank 2"). A timeout names first the rank that
 * stopped answering, found by following the waits from the peer (local: every rank's
 * state is visible; mpi: each rank is asked whom it waits on, from inside its own
 * waits, and one that does not answer is the culprit): "rank 2 stopped answering
 * (...); rank 0 timed out after 60 s waiting for ... from rank 1, which waits for rank
 * 2". Causes: the timeout (per wait); a peer that exited (local: at once; mpi: from an
 * atexit handler; one killed by a signal is Open MPI's to report, and our SIGTERM
 * handler turns that into TRANSPORT_INTERRUPTED); transport_abort() on any rank;
 * SIGINT/SIGTERM (noticed within ~50 ms). */
const char *transport_error(const Transport *t);

/* Point-to-point. `what` says what the message is ("activation of microbatch 7");
 * it appears in error messages only. bytes must match on both sides. Blocking from
 * the caller's view: send returns once the receiver has the data (local) or the
 * buffer may be reused (mpi); recv returns with the data in buf. Messages between one
 * pair of ranks with one tag arrive in the order they were sent (MPI's
 * non-overtaking rule); different tags are independent. */
TransportStatus transport_send(Transport *t, int dst, int tag, const void *buf,
                               size_t bytes, const char *what);
TransportStatus transport_recv(Transport *t, int src, int tag, void *buf, size_t bytes,
                               const char *what);
/* Non-blocking, for pipelines (stage i sends an activation forward while stage i+1
 * sends a gradient back): *req is set on TRANSPORT_OK and must be finished by exactly
 * one transport_wait/transport_waitall; a posted buffer stays untouched until then.
 * After a failure, outstanding requests are void (they were cancelled); do not wait on
 * them again. */
TransportStatus transport_isend(Transport *t, int dst, int tag, const void *buf,
                                size_t bytes, const char *what, TransportRequest **req);
/* Either of them by is_send (a send only reads buf): the links' one post (exec.h). */
TransportStatus transport_post(Transport *t, bool is_send, int peer, int tag, void *buf, size_t bytes,
                               const char *what, TransportRequest **req);
TransportStatus transport_irecv(Transport *t, int src, int tag, void *buf, size_t bytes,
                                const char *what, TransportRequest **req);
TransportStatus transport_wait(Transport *t, TransportRequest *req);
/* Waits for all n requests (NULL entries are skipped) within one timeout. */
TransportStatus transport_waitall(Transport *t, TransportRequest **reqs, int n);

/* Groups. Every member calls transport_group_create with the same set of world
 * ranks (any order, no duplicates, the caller among them). Creating one needs
 * no communication; it is this rank's view of the group. */
TransportStatus transport_group_create(Transport *t, const int *ranks, int n,
                                       TransportGroup **out);
void transport_group_destroy(TransportGroup *g);
int transport_group_size(const TransportGroup *g);
int transport_group_rank(const TransportGroup *g);   /* the caller's index */
const int *transport_group_ranks(const TransportGroup *g); /* ascending */

/* Collectives: every member calls them in the same order with the same n.
 * Sums buf over the group in place, deterministically and the same bits on both
 * transports: element i is ((b_0[i] + b_1[i]) + b_2[i]) + ... + b_{w-1}[i] (float32
 * adds), b_k the buffer of the group's k-th member in ascending world-rank order, each
 * element summed once by the member owning its chunk (reduce-scatter) and copied to the
 * others (all-gather). A transport with an all-reduce of its own must keep this order. */
TransportStatus transport_allreduce_sum_f32(TransportGroup *g, float *buf, size_t n,
                                            const char *what);
TransportStatus transport_barrier(TransportGroup *g, const char *what);
/* Collective over every rank of the world: whether every rank's `ok` holds. Each rank
 * sends rank 0 its message ("" when ok; else err's), rank 0 answers every rank with
 * the lowest failing rank's. So a failure that may strike one rank or all (a
 * checkpoint one rank cannot read, a --save rank 0 cannot write) ends every rank
 * alike with ONE message: false, rank 0's err holding it and every other rank's err
 * "" (*together true: nobody needs aborting). A transport failure: false, *together
 * false, transport_error's message in err. */
bool transport_agree(Transport *t, bool ok, char *err, size_t errlen, bool *together);

/* This rank gives up: every rank blocked in (or later entering) any call fails
 * with TRANSPORT_ABORTED and a message "... because rank R aborted: why".
 * local: a shared flag and a wake-up of every waiter. mpi: a message to every
 * rank on a control channel that all waits poll (and the reason is printed to
 * stderr, since the process will end in MPI_Abort). Returns; this Transport is
 * failed afterwards. */
void transport_abort(Transport *t, const char *why);

/* ---- signals ------------------------------------------------------------- */

/* SIGINT/SIGTERM set a flag that every blocked call checks; the first signal is
 * caught, a second one has its default effect (so a second Ctrl-C still kills a
 * process busy computing). Installed by both create functions; idempotent. */
/* What this rank is about to do (`doing`: a string that outlives the run, such as a
 * literal; `index`: a microbatch or batch, or -1), for the messages that name a rank
 * that stopped progressing: the local world's watchdog and the culprit of a timeout
 * ("rank 2 stopped answering: no progress for 5.1 s, in FWD 7"). Cheap: two
 * relaxed atomic stores and a clock read. */
void transport_progress(Transport *t, const char *doing, long long index);

void transport_install_signal_handlers(void);
int transport_interrupted(void); /* the signal number caught, or 0 */
void transport_clear_interrupt(void); /* forget it and re-arm (tests, retries) */

/* CLOCK_MONOTONIC, in seconds: the waits' deadlines and every host time a rank records. */
double transport_now(void);

/* ---- threads per rank ---------------------------------------------------- */

/* The cores this process may run on (sched_getaffinity, else sysconf). */
int transport_host_cores(void);
/* max(1, cores / ranks_on_this_host): BLAS/OpenMP threads for one rank, so that
 * the ranks of a host never oversubscribe it. */
int transport_threads_per_rank(int ranks_on_this_host);

#endif
