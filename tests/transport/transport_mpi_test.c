/* tests/transport/transport_mpi_test.c — the MPI transport, run under mpirun with
 * 4 ranks by run_mpi_case.sh. One mode per invocation:
 *
 *   basic    ping-pong, ordering, a pipeline-style exchange, all-reduce over
 *            groups of 1..4 ranks (bits equal to the documented order AND to the
 *            local transport's result computed in this process before MPI was
 *            initialised), barrier. Every rank prints "N passed, N failed" and
 *            exits 0 only if all its checks passed.
 *   abort    rank 3 calls transport_abort("injected failure") while the others
 *            block in a receive, a barrier and an all-reduce; they print their
 *            error (naming rank 3 and the reason) and the job exits non-zero.
 *   exit     rank 3 calls exit(3) mid-run; the others print "... rank 3 exited".
 *   crash    rank 3 dies by SIGKILL; Open MPI ends the job (non-zero).
 *   timeout  rank 1 waits for a message rank 0 never sends; it times out naming
 *            rank 0 and what it waited for.
 *   mismatch a receive longer and one shorter than the message sent.
 *
 * The failure modes are checked by run_mpi_case.sh: exit status and message.
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/transport/transport.h"
#include "runtime/transport/transport_impl.h" /* transport_sleep */
#include "test.h"

static int me, nranks;
static Transport *T; /* this process's MPI transport, for the RUN() tests */

/* Same generator as the local test: order-sensitive values and some -0.0. */
static float input(int world_rank, size_t i) {
  uint32_t h = (uint32_t)(world_rank * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  if (h % 7 == 0) return -0.0f;
  float mag = (h % 3 == 0) ? 1e8f : 1.0f;
  return ((float)(h % 20001) - 10000.0f) * 1e-4f * mag;
}

static void stop_on_error(Transport *t) {
  if (transport_status(t) == TRANSPORT_OK) return;
  fprintf(stderr, "transport_mpi_test: %s\n", transport_error(t));
  transport_abort(t, transport_error(t));
  transport_destroy(t); /* MPI_Abort: does not return */
}

/* ---- the all-reduce cases, shared by the local reference and MPI ---------- */

enum { NGROUPS = 5, NLENS = 5 };
static const int group_members[NGROUPS][4] = {{2}, {0, 2}, {3, 1}, {3, 0, 1}, {1, 3, 2, 0}};
static const int group_sizes[NGROUPS] = {1, 2, 2, 3, 4};
static const size_t lens[NLENS] = {0, 1, 3, 1000, 10007};

static bool in_group(int gi, int rank) {
  for (int k = 0; k < group_sizes[gi]; k++)
    if (group_members[gi][k] == rank) return true;
  return false;
}

/* Runs every case this rank is in; results[gi][li] holds rank `rank`'s output. */
static int run_cases(Transport *t, float *results[NGROUPS][NLENS]) {
  int rank = transport_rank(t);
  for (int gi = 0; gi < NGROUPS; gi++) {
    if (!in_group(gi, rank)) continue;
    TransportGroup *g;
    if (transport_group_create(t, group_members[gi], group_sizes[gi], &g) != TRANSPORT_OK)
      return 1;
    for (int li = 0; li < NLENS; li++) {
      float *buf = results[gi][li];
      for (size_t i = 0; i < lens[li]; i++) buf[i] = input(rank, i);
      if (transport_allreduce_sum_f32(g, buf, lens[li], "test vector") != TRANSPORT_OK) break;
    }
    transport_group_destroy(g);
  }
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static float *local_results[4][NGROUPS][NLENS]; /* [rank] */

static int local_rank_fn(Transport *t, void *arg) {
  (void)arg;
  return run_cases(t, local_results[transport_rank(t)]);
}

static float *alloc_results(float *r[NGROUPS][NLENS]) {
  for (int gi = 0; gi < NGROUPS; gi++)
    for (int li = 0; li < NLENS; li++) r[gi][li] = calloc(lens[li] + 1, sizeof(float));
  return r[0][0];
}

static void free_results(float *r[NGROUPS][NLENS]) {
  for (int gi = 0; gi < NGROUPS; gi++)
    for (int li = 0; li < NLENS; li++) free(r[gi][li]);
}

static void test_allreduce_matches_local(void) {
  Transport *t = T;
  float *mine[NGROUPS][NLENS];
  alloc_results(mine);
  EXPECT_EQ_INT(run_cases(t, mine), 0);
  for (int gi = 0; gi < NGROUPS; gi++) {
    if (!in_group(gi, me)) continue;
    int sorted[4], n = group_sizes[gi];
    memcpy(sorted, group_members[gi], sizeof sorted);
    for (int a = 0; a < n; a++) /* tiny insertion sort: ascending ranks */
      for (int b = a; b > 0 && sorted[b - 1] > sorted[b]; b--) {
        int x = sorted[b];
        sorted[b] = sorted[b - 1];
        sorted[b - 1] = x;
      }
    for (int li = 0; li < NLENS; li++) {
      int bad_ref = 0;
      for (size_t i = 0; i < lens[li]; i++) {
        float want = input(sorted[0], i);
        for (int k = 1; k < n; k++) want += input(sorted[k], i);
        bad_ref += memcmp(&want, &mine[gi][li][i], sizeof want) != 0;
      }
      EXPECT_EQ_INT(bad_ref, 0);
      EXPECT(memcmp(mine[gi][li], local_results[me][gi][li], lens[li] * sizeof(float)) == 0);
    }
  }
  free_results(mine);
}

static void test_pingpong(void) {
  Transport *t = T;
  enum { N = 5000 }; /* 20 KB: past Open MPI's eager limit */
  int32_t *buf = malloc(N * sizeof *buf);
  int peer = me ^ 1, bad = 0;
  for (int round = 0; round < 50 && peer < nranks; round++) {
    if (me % 2 == 0) {
      for (int i = 0; i < N; i++) buf[i] = round * N + i + me;
      transport_send(t, peer, 5, buf, N * sizeof *buf, "ping");
      transport_recv(t, peer, 6, buf, N * sizeof *buf, "pong");
      for (int i = 0; i < N; i++) bad += buf[i] != -(round * N + i + me);
    } else {
      transport_recv(t, peer, 5, buf, N * sizeof *buf, "ping");
      for (int i = 0; i < N; i++) {
        bad += buf[i] != round * N + i + peer;
        buf[i] = -buf[i];
      }
      transport_send(t, peer, 6, buf, N * sizeof *buf, "pong");
    }
  }
  free(buf);
  EXPECT_EQ_INT(transport_status(t), TRANSPORT_OK);
  EXPECT_EQ_INT(bad, 0);
}

static void test_order(void) {
  Transport *t = T;
  enum { M = 200 };
  static int vals[2][M];
  static TransportRequest *reqs[2 * M];
  int bad = 0;
  if (me == 0) {
    for (int i = 0; i < M; i++)
      for (int tag = 0; tag < 2; tag++) {
        vals[tag][i] = 1000 * tag + i;
        transport_isend(t, 1, tag, &vals[tag][i], sizeof(int), "numbered message",
                        &reqs[2 * i + tag]);
      }
    transport_waitall(t, reqs, 2 * M);
  } else if (me == 1) {
    for (int tag = 1; tag >= 0; tag--)
      for (int i = 0; i < M; i++) {
        int v = -1;
        transport_recv(t, 0, tag, &v, sizeof v, "numbered message");
        bad += v != 1000 * tag + i;
      }
  }
  EXPECT_EQ_INT(transport_status(t), TRANSPORT_OK);
  EXPECT_EQ_INT(bad, 0);
}

/* Every rank sends to its right neighbour while receiving from its left. */
static void test_ring_exchange(void) {
  Transport *t = T;
  float out[256], in[256];
  int right = (me + 1) % nranks, left = (me + nranks - 1) % nranks, bad = 0;
  for (int mb = 0; mb < 20; mb++) {
    for (int i = 0; i < 256; i++) out[i] = (float)(me * 100000 + mb * 256 + i);
    TransportRequest *rq[2];
    transport_isend(t, right, 7, out, sizeof out, "activation", &rq[0]);
    transport_irecv(t, left, 7, in, sizeof in, "activation", &rq[1]);
    transport_waitall(t, rq, 2);
    for (int i = 0; i < 256; i++) bad += in[i] != (float)(left * 100000 + mb * 256 + i);
  }
  EXPECT_EQ_INT(transport_status(t), TRANSPORT_OK);
  EXPECT_EQ_INT(bad, 0);
}

static void test_barrier_and_info(void) {
  Transport *t = T;
  int all[4] = {0, 1, 2, 3};
  TransportGroup *g;
  EXPECT_EQ_INT(transport_group_create(t, all, nranks, &g), TRANSPORT_OK);
  for (int i = 0; i < 10; i++) EXPECT_EQ_INT(transport_barrier(g, "round"), TRANSPORT_OK);
  transport_group_destroy(g);
  EXPECT_EQ_INT(transport_kind(t), TRANSPORT_MPI);
  EXPECT_EQ_INT(transport_ranks_on_host(t), nranks); /* one host in the test */
  EXPECT(transport_threads_per_rank(transport_ranks_on_host(t)) >= 1);
}

static int mode_basic(int *argc, char ***argv) {
  /* The local reference first: a local world must not initialise MPI. */
  TransportWorld *w = transport_local_create_world(4, 10);
  for (int r = 0; r < 4; r++) alloc_results(local_results[r]);
  char err[TRANSPORT_ERR_LEN];
  int lrc = transport_local_run(w, local_rank_fn, NULL, err, sizeof err);
  transport_local_destroy_world(w);
  int inited = 1;
  MPI_Initialized(&inited);

  Transport *t = transport_mpi_create(argc, argv, 20, err, sizeof err);
  if (!t) {
    fprintf(stderr, "transport_mpi_test: %s\n", err);
    return 1;
  }
  me = transport_rank(t);
  nranks = transport_size(t);
  EXPECT_EQ_INT(lrc, 0);
  EXPECT_EQ_INT(inited, 0);
  EXPECT_EQ_INT(nranks, 4);
  EXPECT(transport_mpi_available());
  if (nranks == 4) {
    T = t;
    RUN(test_pingpong);
    RUN(test_order);
    RUN(test_ring_exchange);
    RUN(test_allreduce_matches_local);
    RUN(test_barrier_and_info);
  }
  stop_on_error(t);
  for (int r = 0; r < 4; r++) free_results(local_results[r]);
  printf("rank %d: ", me);
  int rc = TEST_REPORT();
  transport_destroy(t);
  return rc;
}

/* ---- failure modes ------------------------------------------------------- */

/* Ranks 0..2 block in a receive from rank 3, a barrier, an all-reduce; rank 3
 * does `fail` after a few good exchanges. */
typedef enum Failure {
  FAIL_ABORT, /* transport_abort("injected failure") */
  FAIL_EXIT,  /* exit(3) with the transport open */
  FAIL_CRASH, /* SIGKILL: no chance to say anything */
} Failure;

static int mode_failure(int *argc, char ***argv, Failure fail) {
  char err[TRANSPORT_ERR_LEN];
  Transport *t = transport_mpi_create(argc, argv, 20, err, sizeof err);
  if (!t) {
    fprintf(stderr, "transport_mpi_test: %s\n", err);
    return 1;
  }
  me = transport_rank(t);
  int all[4] = {0, 1, 2, 3}, trio[3] = {0, 1, 2};
  TransportGroup *gall, *gtrio = NULL;
  transport_group_create(t, all, 4, &gall);
  if (me != 3) transport_group_create(t, trio, 3, &gtrio);
  float v[1000] = {0};
  for (int step = 0; step < 3; step++) transport_allreduce_sum_f32(gall, v, 1000, "warm-up");
  stop_on_error(t);
  if (me == 3) {
    transport_sleep(0.3);
    switch (fail) {
    case FAIL_ABORT:
      transport_abort(t, "injected failure");
      transport_destroy(t);
      break;
    case FAIL_EXIT: exit(3);
    case FAIL_CRASH: raise(SIGKILL); break;
    }
    return 2; /* not reached */
  }
  switch (me) {
  case 0: transport_recv(t, 3, 0, v, sizeof v, "activation of microbatch 1"); break;
  case 1: transport_barrier(gtrio, "step end"); break;
  default: transport_allreduce_sum_f32(gtrio, v, 1000, "gradients of stage 2"); break;
  }
  stop_on_error(t);
  fprintf(stderr, "transport_mpi_test: rank %d: no error?\n", me);
  transport_destroy(t);
  return 1;
}

/* Rank 1 waits for a message rank 0 never sends; everyone else waits at a
 * barrier with a longer timeout, so rank 1's timeout is the first failure. */
static int mode_timeout(int *argc, char ***argv) {
  char err[TRANSPORT_ERR_LEN];
  Transport *t = transport_mpi_create(argc, argv, 20, err, sizeof err);
  if (!t) {
    fprintf(stderr, "transport_mpi_test: %s\n", err);
    return 1;
  }
  me = transport_rank(t);
  int all[4] = {0, 1, 2, 3};
  TransportGroup *g;
  transport_group_create(t, all, 4, &g);
  if (me == 1) {
    transport_set_timeout(t, 1.0);
    float x;
    transport_recv(t, 0, 0, &x, sizeof x, "a message that never comes");
  } else {
    transport_barrier(g, "the end");
  }
  stop_on_error(t);
  transport_destroy(t);
  return 1;
}

/* Sizes that disagree: rank 1 expects more than rank 0 sends, rank 3 less than
 * rank 2 sends (MPI truncation). Both name the peer and what. */
static int mode_mismatch(int *argc, char ***argv) {
  char err[TRANSPORT_ERR_LEN];
  Transport *t = transport_mpi_create(argc, argv, 20, err, sizeof err);
  if (!t) {
    fprintf(stderr, "transport_mpi_test: %s\n", err);
    return 1;
  }
  me = transport_rank(t);
  char buf[16] = {0};
  switch (me) {
  case 0: transport_send(t, 1, 0, buf, 8, "activation of microbatch 3"); break;
  case 1: transport_recv(t, 0, 0, buf, 16, "activation of microbatch 3"); break;
  case 2: transport_send(t, 3, 0, buf, 16, "gradient of microbatch 4"); break;
  default: transport_recv(t, 2, 0, buf, 8, "gradient of microbatch 4"); break;
  }
  if (me == 0 || me == 2) { /* wait for the receivers' verdict */
    float x;
    transport_recv(t, me + 1, 1, &x, sizeof x, "nothing");
  } else if (transport_status(t) != TRANSPORT_OK) {
    /* let the other receiver reach its own verdict before anyone aborts */
    fprintf(stderr, "transport_mpi_test: %s\n", transport_error(t));
    transport_sleep(0.5);
  }
  stop_on_error(t);
  transport_destroy(t);
  return 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "basic";
  if (strcmp(mode, "basic") == 0) return mode_basic(&argc, &argv);
  if (strcmp(mode, "abort") == 0) return mode_failure(&argc, &argv, FAIL_ABORT);
  if (strcmp(mode, "exit") == 0) return mode_failure(&argc, &argv, FAIL_EXIT);
  if (strcmp(mode, "crash") == 0) return mode_failure(&argc, &argv, FAIL_CRASH);
  if (strcmp(mode, "timeout") == 0) return mode_timeout(&argc, &argv);
  if (strcmp(mode, "mismatch") == 0) return mode_mismatch(&argc, &argv);
  fprintf(stderr, "usage: transport_mpi_test basic|abort|exit|crash|timeout|mismatch\n");
  return 2;
}
