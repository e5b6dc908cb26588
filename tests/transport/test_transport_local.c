/* tests/transport/test_transport_local.c — the local transport (ranks as threads):
 * messages arrive whole and in order, the all-reduce gives the documented bits on
 * every member, agreement gives one message (the lowest failing rank's) on rank 0 and
 * aborts nobody, and every failure (a peer that returned, a peer that never sends,
 * an abort, a signal, a size mismatch) ends every wait promptly with a message
 * naming the rank and what it waited for. Each failure case runs with a short
 * timeout, so a hang shows up as a failed time bound, not a stuck test.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/transport/transport.h"
#include "runtime/transport/transport_impl.h" /* transport_now, transport_sleep */
#include "test.h"

#define CONTAINS(hay, needle) (strstr((hay), (needle)) != NULL)

/* Runs fn on a fresh world; returns transport_local_run's status. */
static int run_world(int n, double timeout_s, TransportRankFn fn, void *arg, char *err,
                     size_t errlen, double *elapsed) {
  TransportWorld *w = transport_local_create_world(n, timeout_s);
  double t0 = transport_now();
  int rc = transport_local_run(w, fn, arg, err, errlen);
  if (elapsed) *elapsed = transport_now() - t0;
  transport_local_destroy_world(w);
  return rc;
}

/* Per-rank results that the rank functions fill and the tests check. */
typedef struct Outcome {
  TransportStatus status[8];
  char err[8][TRANSPORT_ERR_LEN];
  double took[8];
  int bad[8]; /* data errors found by the rank itself */
} Outcome;

static void record(Outcome *o, Transport *t, double t0) {
  int r = transport_rank(t);
  o->status[r] = transport_status(t);
  snprintf(o->err[r], sizeof o->err[r], "%s", transport_error(t));
  o->took[r] = transport_now() - t0;
}

/* ---- ping-pong: data checked on both sides ------------------------------- */

enum { PP_ROUNDS = 200, PP_N = 1000 };

static int pingpong_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t);
  int32_t *buf = malloc(PP_N * sizeof *buf);
  for (int round = 0; round < PP_ROUNDS; round++) {
    if (me == 0) {
      for (int i = 0; i < PP_N; i++) buf[i] = round * PP_N + i;
      if (transport_send(t, 1, 5, buf, PP_N * sizeof *buf, "ping") != TRANSPORT_OK) break;
      if (transport_recv(t, 1, 6, buf, PP_N * sizeof *buf, "pong") != TRANSPORT_OK) break;
      for (int i = 0; i < PP_N; i++) o->bad[0] += buf[i] != -(round * PP_N + i);
    } else {
      if (transport_recv(t, 0, 5, buf, PP_N * sizeof *buf, "ping") != TRANSPORT_OK) break;
      for (int i = 0; i < PP_N; i++) {
        o->bad[1] += buf[i] != round * PP_N + i;
        buf[i] = -buf[i];
      }
      if (transport_send(t, 0, 6, buf, PP_N * sizeof *buf, "pong") != TRANSPORT_OK) break;
    }
  }
  free(buf);
  o->status[me] = transport_status(t);
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static void test_pingpong(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  EXPECT_EQ_INT(run_world(2, 10, pingpong_rank, &o, err, sizeof err, NULL), 0);
  EXPECT_STREQ(err, "");
  EXPECT_EQ_INT(o.bad[0], 0);
  EXPECT_EQ_INT(o.bad[1], 0);
  EXPECT_EQ_INT(o.status[0], TRANSPORT_OK);
  EXPECT_EQ_INT(o.status[1], TRANSPORT_OK);
}

/* ---- order: many messages per (src, dst, tag), tags independent ---------- */

enum { ORD_MSGS = 300 };

static int order_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t);
  if (me == 0) { /* every message posted at once, tags interleaved */
    static int vals[2][ORD_MSGS];
    static TransportRequest *reqs[2 * ORD_MSGS];
    for (int i = 0; i < ORD_MSGS; i++)
      for (int tag = 0; tag < 2; tag++) {
        vals[tag][i] = 1000 * tag + i;
        transport_isend(t, 1, tag, &vals[tag][i], sizeof(int), "numbered message",
                        &reqs[2 * i + tag]);
      }
    transport_waitall(t, reqs, 2 * ORD_MSGS);
  } else { /* all of tag 1 first: tag 0's queue must not block it */
    for (int tag = 1; tag >= 0; tag--)
      for (int i = 0; i < ORD_MSGS; i++) {
        int v = -1;
        if (transport_recv(t, 0, tag, &v, sizeof v, "numbered message") != TRANSPORT_OK) break;
        o->bad[1] += v != 1000 * tag + i;
      }
  }
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static void test_order_per_tag(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  EXPECT_EQ_INT(run_world(2, 10, order_rank, &o, err, sizeof err, NULL), 0);
  EXPECT_STREQ(err, "");
  EXPECT_EQ_INT(o.bad[1], 0);
}

/* ---- pipeline exchange: both sides send before they receive ------------- */

static int exchange_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t), peer = 1 - me;
  float out[64], in[64];
  for (int mb = 0; mb < 50; mb++) {
    for (int i = 0; i < 64; i++) out[i] = (float)(me * 10000 + mb * 64 + i);
    TransportRequest *rq[2];
    /* stage 0 sends an activation while stage 1 sends a gradient back */
    if (transport_isend(t, peer, me, out, sizeof out, "exchange", &rq[0]) != TRANSPORT_OK) break;
    if (transport_irecv(t, peer, peer, in, sizeof in, "exchange", &rq[1]) != TRANSPORT_OK) break;
    if (transport_waitall(t, rq, 2) != TRANSPORT_OK) break;
    for (int i = 0; i < 64; i++) o->bad[me] += in[i] != (float)(peer * 10000 + mb * 64 + i);
  }
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static void test_exchange_no_deadlock(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  EXPECT_EQ_INT(run_world(2, 5, exchange_rank, &o, err, sizeof err, NULL), 0);
  EXPECT_STREQ(err, "");
  EXPECT_EQ_INT(o.bad[0] + o.bad[1], 0);
}

/* ---- all-reduce ---------------------------------------------------------- */

/* Member k's input: order-sensitive values (sums differ by association), and
 * some -0.0 to catch a sum that starts from +0.0. */
static float input(int world_rank, size_t i) {
  uint32_t h = (uint32_t)(world_rank * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  if (h % 7 == 0) return -0.0f;
  float mag = (h % 3 == 0) ? 1e8f : 1.0f;
  return ((float)(h % 20001) - 10000.0f) * 1e-4f * mag;
}

typedef struct ArCase {
  int members[4], n; /* a group, in any order */
  size_t len;
  Outcome o;
} ArCase;

static int allreduce_rank(Transport *t, void *arg) {
  ArCase *c = arg;
  int me = transport_rank(t);
  bool in = false;
  for (int k = 0; k < c->n; k++) in |= c->members[k] == me;
  if (!in) return 0;
  TransportGroup *g = NULL;
  if (transport_group_create(t, c->members, c->n, &g) != TRANSPORT_OK) return 1;
  float *buf = malloc((c->len + 1) * sizeof *buf);
  int sorted[4];
  for (int k = 0; k < c->n; k++) sorted[k] = transport_group_ranks(g)[k];
  for (int rep = 0; rep < 3; rep++) { /* the same group again: calls stay apart */
    for (size_t i = 0; i < c->len; i++) buf[i] = input(me, i + (size_t)rep);
    if (transport_allreduce_sum_f32(g, buf, c->len, "gradients") != TRANSPORT_OK) break;
    for (size_t i = 0; i < c->len; i++) {
      /* the documented order: s = b_0; s += b_1; ... members in ascending rank */
      float want = input(sorted[0], i + (size_t)rep);
      for (int k = 1; k < c->n; k++) want += input(sorted[k], i + (size_t)rep);
      c->o.bad[me] += memcmp(&buf[i], &want, sizeof want) != 0;
    }
  }
  free(buf);
  transport_group_destroy(g);
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static void test_allreduce_bits(void) {
  const int groups[][4] = {{2}, {1, 3}, {3, 0, 1}, {3, 2, 1, 0}};
  const size_t lens[] = {0, 1, 3, 1000, 10007};
  for (int gi = 0; gi < 4; gi++)
    for (int li = 0; li < 5; li++) {
      ArCase c = {.n = gi + 1, .len = lens[li]};
      memcpy(c.members, groups[gi], sizeof c.members);
      char err[TRANSPORT_ERR_LEN];
      int rc = run_world(4, 10, allreduce_rank, &c, err, sizeof err, NULL);
      EXPECT_EQ_INT(rc, 0);
      for (int r = 0; r < 4; r++) EXPECT_EQ_INT(c.o.bad[r], 0);
      if (rc) fprintf(stderr, "  group %d len %zu: %s\n", gi + 1, lens[li], err);
    }
}

/* Exact integers: the sum is known without any rounding question. */
static int exact_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t);
  int all[4] = {0, 1, 2, 3}, even[2] = {0, 2}, odd[2] = {3, 1};
  TransportGroup *gall, *gpair;
  if (transport_group_create(t, all, 4, &gall) != TRANSPORT_OK) return 1;
  if (transport_group_create(t, me % 2 ? odd : even, 2, &gpair) != TRANSPORT_OK) return 1;
  float v[5];
  for (int i = 0; i < 5; i++) v[i] = (float)((me + 1) * (i + 1));
  transport_allreduce_sum_f32(gpair, v, 5, "pair sum"); /* two groups at once */
  for (int i = 0; i < 5; i++) o->bad[me] += v[i] != (float)((me % 2 ? 6 : 4) * (i + 1));
  for (int i = 0; i < 5; i++) v[i] = (float)(me + 1);
  transport_allreduce_sum_f32(gall, v, 5, "world sum");
  for (int i = 0; i < 5; i++) o->bad[me] += v[i] != 10.0f;
  transport_group_destroy(gall);
  transport_group_destroy(gpair);
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static void test_allreduce_exact_and_groups(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  EXPECT_EQ_INT(run_world(4, 10, exact_rank, &o, err, sizeof err, NULL), 0);
  EXPECT_STREQ(err, "");
  for (int r = 0; r < 4; r++) EXPECT_EQ_INT(o.bad[r], 0);
}

/* Barrier: no member leaves before all have arrived. */
static atomic_int arrived;

static int barrier_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t), all[4] = {0, 1, 2, 3};
  TransportGroup *g;
  if (transport_group_create(t, all, 4, &g) != TRANSPORT_OK) return 1;
  for (int round = 1; round <= 20; round++) {
    if (me == round % 4) transport_sleep(0.002); /* a late member each round */
    atomic_fetch_add(&arrived, 1);
    if (transport_barrier(g, "round") != TRANSPORT_OK) break;
    o->bad[me] += atomic_load(&arrived) < 4 * round;
    if (transport_barrier(g, "round end") != TRANSPORT_OK) break;
  }
  transport_group_destroy(g);
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

static void test_barrier(void) {
  Outcome o = {0};
  atomic_store(&arrived, 0);
  char err[TRANSPORT_ERR_LEN];
  EXPECT_EQ_INT(run_world(4, 10, barrier_rank, &o, err, sizeof err, NULL), 0);
  for (int r = 0; r < 4; r++) EXPECT_EQ_INT(o.bad[r], 0);
}

/* Agreement: all ok agrees; ranks 1 and 2 failing (in that order of rank, 2 first
 * in time) gives rank 0 rank 1's message and the others none, nobody aborted; then a
 * second round on the same world still works. */
static int agree_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t);
  char err[TRANSPORT_ERR_LEN] = "";
  bool together = false;
  o->bad[me] += !transport_agree(t, true, err, sizeof err, &together) || !together || err[0];
  if (me == 2) transport_sleep(0.01);
  if (me == 1 || me == 2) snprintf(err, sizeof err, "rank %d cannot read it", me);
  bool yes = transport_agree(t, me == 0 || me == 3, err, sizeof err, &together);
  o->bad[me] += yes || !together || (me == 0 ? strcmp(err, "rank 1 cannot read it") != 0 : err[0] != 0);
  err[0] = 0;
  o->bad[me] += !transport_agree(t, true, err, sizeof err, &together) || !together;
  record(o, t, 0);
  return 0;
}

static void test_agree(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  EXPECT_EQ_INT(run_world(4, 10, agree_rank, &o, err, sizeof err, NULL), 0);
  for (int r = 0; r < 4; r++) {
    EXPECT_EQ_INT(o.bad[r], 0);
    EXPECT(o.status[r] == TRANSPORT_OK);
  }
}

/* ---- failures ------------------------------------------------------------ */

/* Rank 1 returns at once; rank 0 waits for it (timeout 10 s) and must fail now. */
static int early_exit_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  double t0 = transport_now();
  if (transport_rank(t) == 1) return 0;
  float x;
  transport_recv(t, 1, 0, &x, sizeof x, "activation of microbatch 7");
  record(o, t, t0);
  return 0;
}

static void test_peer_exit_fails_fast(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  double took = 0;
  int rc = run_world(2, 10, early_exit_rank, &o, err, sizeof err, &took);
  EXPECT(rc != 0);
  EXPECT_EQ_INT(o.status[0], TRANSPORT_PEER_EXITED);
  EXPECT_STREQ(o.err[0], "rank 0: waiting for activation of microbatch 7 from rank 1: "
                         "rank 1 exited");
  EXPECT(o.took[0] < 2.0); /* the timeout was 10 s */
  EXPECT(took < 2.0);
}

/* A rank whose function fails: its peer hears the return code. */
static int failing_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  double t0 = transport_now();
  if (transport_rank(t) == 2) return 3;
  float x;
  int all[3] = {0, 1, 2};
  TransportGroup *g;
  transport_group_create(t, all, 3, &g);
  transport_allreduce_sum_f32(g, &x, 1, "loss");
  transport_group_destroy(g);
  record(o, t, t0);
  return 0;
}

static void test_failed_rank_named(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  double took = 0;
  int rc = run_world(3, 10, failing_rank, &o, err, sizeof err, &took);
  EXPECT_EQ_INT(rc, 3);
  EXPECT(took < 2.0);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ_INT(o.status[r], TRANSPORT_PEER_EXITED);
    EXPECT(CONTAINS(o.err[r], "rank 2 exited (its rank function returned 3)"));
    EXPECT(CONTAINS(o.err[r], "loss (all-reduce over ranks 0,1,2)"));
  }
  EXPECT(CONTAINS(err, "rank 2 exited (its rank function returned 3)"));
}

/* Rank 1 never sends what rank 0 waits for (it waits for something else, with a
 * longer timeout): rank 0 times out, names rank 1 and what (a cycle of waits, so
 * nobody is blamed for stopping); then rank 1 learns that rank 0 exited after that
 * error. */
static int silent_peer_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  double t0 = transport_now();
  float x;
  if (transport_rank(t) == 0) {
    transport_set_timeout(t, 0.3);
    transport_recv(t, 1, 3, &x, sizeof x, "activation of microbatch 7");
  } else {
    transport_recv(t, 0, 4, &x, sizeof x, "gradient of microbatch 2");
  }
  record(o, t, t0);
  return 1;
}

static void test_timeout_names_rank_and_what(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  double took = 0;
  int rc = run_world(2, 5, silent_peer_rank, &o, err, sizeof err, &took);
  EXPECT(rc != 0);
  EXPECT_EQ_INT(o.status[0], TRANSPORT_TIMEOUT);
  EXPECT_STREQ(o.err[0], "rank 0: timed out after 0.3 s waiting for activation of microbatch 7 "
                         "from rank 1");
  EXPECT(o.took[0] >= 0.29 && o.took[0] < 2.0);
  EXPECT_EQ_INT(o.status[1], TRANSPORT_PEER_EXITED);
  EXPECT(CONTAINS(o.err[1], "rank 1: waiting for gradient of microbatch 2 from rank 0: "
                            "rank 0 exited after an error (rank 0: timed out"));
  EXPECT(o.took[1] < 2.0);
  EXPECT_STREQ(err, o.err[0]); /* the root cause is the first failure */
}

/* A send nobody receives times out too, and says so from the sender's side. */
static int unreceived_send_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  double t0 = transport_now();
  float x = 1;
  if (transport_rank(t) == 0) {
    transport_set_timeout(t, 0.2);
    transport_send(t, 1, 0, &x, sizeof x, "weights");
    record(o, t, t0);
  } else {
    transport_sleep(0.5);
  }
  return 0;
}

static void test_send_timeout(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  run_world(2, 5, unreceived_send_rank, &o, err, sizeof err, NULL);
  EXPECT_EQ_INT(o.status[0], TRANSPORT_TIMEOUT);
  /* rank 1 is busy elsewhere, in no wait: it is the one named first */
  EXPECT(CONTAINS(o.err[0], "rank 1 stopped answering (no progress since it started); "
                            "rank 0 timed out after 0.2 s waiting for rank 1 to take weights"));
}

/* Rank 3 aborts while the others block in a receive, a barrier and an
 * all-reduce: all of them return at once with rank 3's reason. */
static int abort_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t);
  double t0 = transport_now();
  int trio[3] = {0, 1, 2};
  TransportGroup *g = NULL;
  if (me != 3) transport_group_create(t, trio, 3, &g);
  float v[4] = {0};
  switch (me) {
  case 0: transport_recv(t, 3, 0, v, sizeof v, "activation of microbatch 1"); break;
  case 1: transport_barrier(g, "step end"); break;
  case 2: transport_sleep(0.05); transport_allreduce_sum_f32(g, v, 4, "gradients"); break;
  default:
    transport_sleep(0.2);
    transport_abort(t, "injected failure");
    break;
  }
  if (g) transport_group_destroy(g);
  record(o, t, t0);
  return me == 3 ? 1 : 0;
}

static void test_abort_wakes_everyone(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  double took = 0;
  int rc = run_world(4, 10, abort_rank, &o, err, sizeof err, &took);
  EXPECT(rc != 0);
  EXPECT(took < 2.0);
  EXPECT_STREQ(err, "rank 3: aborted: injected failure");
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ_INT(o.status[r], TRANSPORT_ABORTED);
    EXPECT(CONTAINS(o.err[r], "stopped because rank 3 aborted: injected failure"));
    EXPECT(o.took[r] < 2.0);
  }
  EXPECT(CONTAINS(o.err[0], "rank 0: waiting for activation of microbatch 1 from rank 3"));
  EXPECT(CONTAINS(o.err[1], "step end (barrier over ranks 0,1,2)"));
  EXPECT(CONTAINS(o.err[2], "gradients (all-reduce over ranks 0,1,2)"));
}

/* SIGINT while blocked: every blocked rank returns "interrupted" promptly. */
static int signal_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  int me = transport_rank(t);
  double t0 = transport_now();
  float x;
  if (me == 1) {
    transport_sleep(0.1);
    raise(SIGINT);
  }
  transport_recv(t, 1 - me, 0, &x, sizeof x, "a message that never comes");
  record(o, t, t0);
  return 0;
}

static void test_signal_interrupts(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  double took = 0;
  run_world(2, 10, signal_rank, &o, err, sizeof err, &took);
  EXPECT_EQ_INT(transport_interrupted(), SIGINT);
  transport_clear_interrupt();
  EXPECT_EQ_INT(transport_interrupted(), 0);
  EXPECT(took < 2.0);
  for (int r = 0; r < 2; r++) {
    EXPECT(o.status[r] == TRANSPORT_INTERRUPTED || o.status[r] == TRANSPORT_PEER_EXITED);
    EXPECT(o.took[r] < 2.0);
  }
  EXPECT(o.status[0] == TRANSPORT_INTERRUPTED || o.status[1] == TRANSPORT_INTERRUPTED);
  int r = o.status[0] == TRANSPORT_INTERRUPTED ? 0 : 1;
  EXPECT(CONTAINS(o.err[r], "a message that never comes"));
  EXPECT(CONTAINS(o.err[r], "interrupted by SIGINT"));
}

/* Sizes that disagree are a plan bug, reported on both sides. */
static int mismatch_rank(Transport *t, void *arg) {
  Outcome *o = arg;
  double t0 = transport_now();
  char buf[16] = {0};
  if (transport_rank(t) == 0)
    transport_send(t, 1, 0, buf, 8, "activation of microbatch 3");
  else
    transport_recv(t, 0, 0, buf, 16, "activation of microbatch 3");
  record(o, t, t0);
  return 0;
}

static void test_size_mismatch(void) {
  Outcome o = {0};
  char err[TRANSPORT_ERR_LEN];
  run_world(2, 5, mismatch_rank, &o, err, sizeof err, NULL);
  EXPECT_EQ_INT(o.status[0], TRANSPORT_MISMATCH);
  EXPECT_EQ_INT(o.status[1], TRANSPORT_MISMATCH);
  EXPECT_STREQ(o.err[1],
               "rank 1: received 8 bytes of activation of microbatch 3 from rank 0, expected 16");
  EXPECT(CONTAINS(o.err[0], "rank 0: sent 8 bytes"));
}

/* ---- arguments, stickiness, sizing --------------------------------------- */

static void test_bad_arguments_and_sticky(void) {
  TransportWorld *w = transport_local_create_world(2, 1);
  Transport *t = transport_local_rank(w, 0);
  EXPECT_EQ_INT(transport_kind(t), TRANSPORT_LOCAL);
  EXPECT_EQ_INT(transport_size(t), 2);
  EXPECT_EQ_INT(transport_ranks_on_host(t), 2);
  EXPECT_NEAR(transport_timeout(t), 1.0, 0, 0);
  TransportGroup *g = NULL;
  int others[1] = {1};
  EXPECT_EQ_INT(transport_group_create(t, others, 1, &g), TRANSPORT_BAD_ARG);
  EXPECT(g == NULL);
  EXPECT_STREQ(transport_error(t), "rank 0: creating a group it is not in");
  /* failure is sticky: the next call returns the first error untouched */
  float x = 0;
  EXPECT_EQ_INT(transport_send(t, 1, 0, &x, 4, "x"), TRANSPORT_BAD_ARG);
  EXPECT_STREQ(transport_error(t), "rank 0: creating a group it is not in");

  Transport *t1 = transport_local_rank(w, 1);
  EXPECT_EQ_INT(transport_send(t1, 5, 0, &x, 4, "loss"), TRANSPORT_BAD_ARG);
  EXPECT_STREQ(transport_error(t1), "rank 1: send of loss: no rank 5 (world of 2)");
  transport_local_destroy_world(w);

  w = transport_local_create_world(1, 0);
  t = transport_local_rank(w, 0);
  EXPECT_NEAR(transport_timeout(t), TRANSPORT_DEFAULT_TIMEOUT_S, 0, 0);
  EXPECT_EQ_INT(transport_recv(t, 0, TRANSPORT_TAG_MAX + 1, &x, 4, "y"), TRANSPORT_BAD_ARG);
  transport_local_destroy_world(w);

  w = transport_local_create_world(1, 0);
  t = transport_local_rank(w, 0);
  int dup[2] = {0, 0};
  EXPECT_EQ_INT(transport_group_create(t, dup, 2, &g), TRANSPORT_BAD_ARG);
  transport_local_destroy_world(w);

  /* a rank may send to itself when both halves are posted */
  w = transport_local_create_world(1, 0);
  t = transport_local_rank(w, 0);
  TransportRequest *rq[2];
  float a = 42, b = 0;
  EXPECT_EQ_INT(transport_isend(t, 0, 9, &a, 4, "self", &rq[0]), TRANSPORT_OK);
  EXPECT_EQ_INT(transport_irecv(t, 0, 9, &b, 4, "self", &rq[1]), TRANSPORT_OK);
  EXPECT_EQ_INT(transport_waitall(t, rq, 2), TRANSPORT_OK);
  EXPECT(b == 42.0f);
  transport_local_destroy_world(w);
}

static void test_threads_per_rank(void) {
  int cores = transport_host_cores();
  EXPECT(cores >= 1);
  EXPECT_EQ_INT(transport_threads_per_rank(1), cores);
  EXPECT_EQ_INT(transport_threads_per_rank(0), cores);
  EXPECT_EQ_INT(transport_threads_per_rank(cores), 1);
  EXPECT_EQ_INT(transport_threads_per_rank(4 * cores), 1);
  EXPECT_EQ_INT(transport_threads_per_rank(2), cores / 2 > 0 ? cores / 2 : 1);
}

int main(void) {
  RUN(test_pingpong);
  RUN(test_order_per_tag);
  RUN(test_exchange_no_deadlock);
  RUN(test_allreduce_bits);
  RUN(test_allreduce_exact_and_groups);
  RUN(test_barrier);
  RUN(test_agree);
  RUN(test_peer_exit_fails_fast);
  RUN(test_failed_rank_named);
  RUN(test_timeout_names_rank_and_what);
  RUN(test_send_timeout);
  RUN(test_abort_wakes_everyone);
  RUN(test_signal_interrupts);
  RUN(test_size_mismatch);
  RUN(test_bad_arguments_and_sticky);
  RUN(test_threads_per_rank);
  return TEST_REPORT();
}
