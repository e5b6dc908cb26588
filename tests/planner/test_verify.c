/* The verifier catches broken streams: each test breaks a correct stream in one
 * way and checks the violation is reported with its stage and instruction. */
#include "passes/planner.h"
#include "test.h"

static PlanTiedGroup tied_group = {0, 2, {0, 3}};

static void build(PlanSchedule s, int64_t m, int nb, PlanStreams *st) {
  PlanStreamSpec sp = {4, m, s, nb, 2, &tied_group, 1, 0, false};
  char err[256];
  bool ok = plan_streams_build(&sp, st, err, sizeof err);
  EXPECT(ok);
  if (ok) {
    ok = plan_verify(st, NULL, NULL, err, sizeof err);
    if (!ok) fprintf(stderr, "unbroken stream fails: %s\n", err);
    EXPECT(ok); /* the unbroken stream passes */
  }
}

static int find(const PlanStream *s, PlanOp op, int64_t mb) {
  for (int i = 0; i < s->n; i++)
    if (s->ins[i].op == op && s->ins[i].mb == mb) return i;
  return -1;
}

static void drop(PlanStream *s, int at) {
  memmove(&s->ins[at], &s->ins[at + 1], (size_t)(s->n - at - 1) * sizeof *s->ins);
  s->n--;
}

/* Runs the verifier on a broken stream; expects failure mentioning `what` and the
 * "stage S instruction" prefix. */
static void expect_caught(PlanStreams *st, const int *nv, const int *ns, const char *what) {
  char err[1024];
  bool ok = plan_verify(st, nv, ns, err, sizeof err);
  EXPECT(!ok);
  if (ok) return;
  if (!strstr(err, what)) fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, what);
  EXPECT(strstr(err, what) != NULL);
  EXPECT(strncmp(err, "stage ", 6) == 0);
}

static void test_swapped_sends(void) {
  PlanStreams st;
  build(PS_GPIPE, 4, 1, &st);
  PlanStream *s1 = &st.st[1];
  int a = find(s1, PI_SEND_ACT, 2), b = find(s1, PI_SEND_ACT, 3);
  EXPECT(a >= 0 && b > a);
  /* send mb 3's activation where mb 2's was due, and the other way round */
  int64_t t = s1->ins[a].mb;
  s1->ins[a].mb = s1->ins[b].mb;
  s1->ins[b].mb = t;
  expect_caught(&st, NULL, NULL, "");
  char err[512];
  plan_verify(&st, NULL, NULL, err, sizeof err);
  EXPECT(strstr(err, "stage 1 instruction") != NULL);
  EXPECT(strstr(err, "before computing it") || strstr(err, "out of order"));
  plan_streams_free(&st);
}

static void test_out_of_order_sends(void) {
  /* swap two whole send instructions on the last-to-first gradient path: the
   * receiver expects the other microbatch first */
  PlanStreams st;
  build(PS_GPIPE, 4, 1, &st);
  PlanStream *s2 = &st.st[2];
  int a = find(s2, PI_SEND_GRAD, 1), b = find(s2, PI_SEND_GRAD, 2);
  int fa = find(s2, PI_BWD, 2);
  EXPECT(a >= 0 && b > a && fa > a);
  /* mb 2's gradient is sent after its backward, but labelled as mb 1's and vice versa */
  s2->ins[a].mb = 2;
  s2->ins[b].mb = 1;
  char err[512];
  EXPECT(!plan_verify(&st, NULL, NULL, err, sizeof err));
  EXPECT(strstr(err, "stage 2 instruction") != NULL);
  plan_streams_free(&st);
}

static void test_dropped_receive(void) {
  PlanStreams st;
  build(PS_1F1B, 6, 2, &st);
  PlanStream *s2 = &st.st[2];
  int r = find(s2, PI_RECV_ACT, 3);
  EXPECT(r >= 0);
  drop(s2, r);
  expect_caught(&st, NULL, NULL, "stage ");
  char err[1024];
  plan_verify(&st, NULL, NULL, err, sizeof err);
  EXPECT(strstr(err, "mb 3") || strstr(err, "microbatch 3"));
  plan_streams_free(&st);
}

/* The next send arrives where the dropped one was expected. */
static void test_dropped_send(void) {
  PlanStreams st;
  build(PS_2BW, 4, 3, &st);
  PlanStream *s3 = &st.st[3];
  int r = find(s3, PI_SEND_GRAD, 5);
  EXPECT(r >= 0);
  if (r > 0 && s3->ins[r - 1].with_next && !s3->ins[r].with_next) s3->ins[r - 1].with_next = false;
  drop(s3, r);
  expect_caught(&st, NULL, NULL, "expects microbatch 5 first");
  plan_streams_free(&st);
}

/* The last send of all dropped: nobody ever sends what stage 0 waits for. */
static void test_dropped_last_send_deadlocks(void) {
  PlanStreams st;
  build(PS_1F1B, 4, 1, &st);
  PlanStream *s1 = &st.st[1];
  int r = find(s1, PI_SEND_GRAD, 4);
  EXPECT(r >= 0);
  if (r > 0 && s1->ins[r - 1].with_next && !s1->ins[r].with_next) s1->ins[r - 1].with_next = false;
  drop(s1, r);
  expect_caught(&st, NULL, NULL, "deadlock");
  char err[1024];
  plan_verify(&st, NULL, NULL, err, sizeof err);
  EXPECT(strstr(err, "stage 0 waits at") != NULL);
  plan_streams_free(&st);
}

static void test_ungrouped_exchange_deadlocks(void) {
  /* 1F1B's "send activation, receive gradient" posted one after the other */
  PlanStreams st;
  build(PS_1F1B, 8, 1, &st);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < st.st[i].n; k++) st.st[i].ins[k].with_next = false;
  expect_caught(&st, NULL, NULL, "deadlock");
  plan_streams_free(&st);
}

static void test_wrong_version(void) {
  PlanStreams st;
  build(PS_2BW, 4, 4, &st);
  PlanStream *s1 = &st.st[1];
  int f = find(s1, PI_FWD, 9); /* batch 2 uses W(1) */
  int b = find(s1, PI_BWD, 9);
  EXPECT(f >= 0 && b >= 0);
  EXPECT_EQ_INT(s1->ins[f].version, 1);
  s1->ins[f].version = 2, s1->ins[b].version = 2; /* consistent, but not v(k) */
  s1->ins[f].vslot = 0, s1->ins[b].vslot = 0;
  expect_caught(&st, NULL, NULL, "");
  plan_streams_free(&st);

  build(PS_2BW, 4, 4, &st);
  s1 = &st.st[1];
  b = find(s1, PI_BWD, 9);
  s1->ins[b].version = 0, s1->ins[b].vslot = 0; /* backward on another version */
  expect_caught(&st, NULL, NULL, "its forward used");
  plan_streams_free(&st);

  build(PS_1F1B, 4, 2, &st);
  f = find(&st.st[0], PI_FWD, 6); /* flush schedule: batch 1 must see W(1) */
  b = find(&st.st[0], PI_BWD, 6);
  st.st[0].ins[f].version = 0, st.st[0].ins[b].version = 0;
  expect_caught(&st, NULL, NULL, "");
  plan_streams_free(&st);
}

static void test_step_overwrites_live_version(void) {
  PlanStreams st;
  build(PS_2BW, 4, 4, &st);
  /* the step after batch 1 must write W(2) into W(0)'s slot; writing it into W(1)'s
   * slot clobbers the version batch 2's microbatches are using */
  PlanStream *s0 = &st.st[0];
  for (int k = 0; k < s0->n; k++)
    if (s0->ins[k].op == PI_OPT_STEP && s0->ins[k].batch == 1) s0->ins[k].vslot = 1;
  expect_caught(&st, NULL, NULL, "overwrites version");
  plan_streams_free(&st);
}

static void test_limits(void) {
  PlanStreams st;
  build(PS_1F1B, 8, 1, &st);
  int nv[4] = {1, 1, 1, 1}, ns[4] = {3, 3, 2, 1}; /* stage 0 needs 4 */
  expect_caught(&st, nv, ns, "stash slot 3 outside the plan's 3");
  plan_streams_free(&st);

  build(PS_2BW, 4, 2, &st);
  int nv1[4] = {1, 2, 2, 2}, ns1[4] = {4, 3, 2, 1};
  expect_caught(&st, nv1, ns1, "version slot 1 outside");
  plan_streams_free(&st);
}

static void test_tied_sync_mismatch(void) {
  PlanStreams st;
  build(PS_2BW, 4, 3, &st);
  PlanStream *s3 = &st.st[3];
  for (int k = 0; k < s3->n; k++)
    if (s3->ins[k].op == PI_TIED_SYNC) {
      drop(s3, k);
      break;
    }
  char err[1024];
  EXPECT(!plan_verify(&st, NULL, NULL, err, sizeof err));
  EXPECT(strstr(err, "stage ") == err);
  plan_streams_free(&st);
}

static void test_step_before_backwards(void) {
  PlanStreams st;
  build(PS_GPIPE, 4, 2, &st);
  PlanStream *s2 = &st.st[2];
  int k = 0;
  while (s2->ins[k].op != PI_ALLREDUCE) k++;
  /* move the all-reduce and step of batch 0 before the last backward */
  int b = find(s2, PI_BWD, 4);
  PlanInstr ar = s2->ins[k];
  memmove(&s2->ins[b + 1], &s2->ins[b], (size_t)(k - b) * sizeof *s2->ins);
  s2->ins[b] = ar;
  expect_caught(&st, NULL, NULL, "before its 4 backwards");
  plan_streams_free(&st);
}

static void move(PlanStream *s, int from, int to) {
  PlanInstr x = s->ins[from];
  if (from < to) memmove(&s->ins[from], &s->ins[from + 1], (size_t)(to - from) * sizeof x);
  else memmove(&s->ins[to + 1], &s->ins[to], (size_t)(from - to) * sizeof x);
  s->ins[to] = x;
}

static int find_tied_step(const PlanStream *s, int batch) {
  for (int i = 0; i < s->n; i++)
    if (s->ins[i].op == PI_OPT_STEP && s->ins[i].group == 0 && s->ins[i].batch == batch) return i;
  return -1;
}

/* 2bw's tied step must come after its sync was posted, and before batch t+2's
 * first forward reads W(t+1). */
static void test_tied_step_misplaced(void) {
  PlanStreams st;
  build(PS_2BW, 4, 4, &st);
  PlanStream *s3 = &st.st[3];
  int k = find_tied_step(s3, 1), f = find(s3, PI_FWD, 13); /* batch 3's first forward */
  EXPECT(k >= 0 && f > k);
  move(s3, k, f); /* now after that forward */
  expect_caught(&st, NULL, NULL, "tied group 0 in slot 0 holds version 0, not 2");
  plan_streams_free(&st);

  build(PS_2BW, 4, 4, &st);
  PlanStream *s0 = &st.st[0];
  k = find_tied_step(s0, 1);
  int b = find(s0, PI_BWD, 5); /* before batch 1 has even finished */
  EXPECT(k > b && b >= 0);
  move(s0, k, b);
  expect_caught(&st, NULL, NULL, "sync was posted");
  plan_streams_free(&st);
}

static void test_step_before_allreduce(void) {
  PlanStreams st;
  build(PS_1F1B, 4, 1, &st); /* 2 replicas */
  PlanStream *s1 = &st.st[1];
  int k = 0;
  while (s1->ins[k].op != PI_ALLREDUCE) k++;
  EXPECT(s1->ins[k + 1].op == PI_OPT_STEP);
  PlanInstr t = s1->ins[k];
  s1->ins[k] = s1->ins[k + 1];
  s1->ins[k + 1] = t;
  expect_caught(&st, NULL, NULL, "before its all-reduce");
  plan_streams_free(&st);
}

int main(void) {
  RUN(test_step_before_allreduce);
  RUN(test_tied_step_misplaced);
  RUN(test_swapped_sends);
  RUN(test_out_of_order_sends);
  RUN(test_dropped_receive);
  RUN(test_dropped_send);
  RUN(test_dropped_last_send_deadlocks);
  RUN(test_ungrouped_exchange_deadlocks);
  RUN(test_wrong_version);
  RUN(test_step_overwrites_live_version);
  RUN(test_limits);
  RUN(test_tied_sync_mismatch);
  RUN(test_step_before_backwards);
  return TEST_REPORT();
}
