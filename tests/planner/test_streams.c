/* Stream generation: every schedule, many (d, m, batches, replicas, tied groups),
 * verifies; slot counts follow DESIGN.md §3's table; 2bw with m < d is refused. */
#include "passes/planner.h"
#include "test.h"

static PlanTiedGroup first_last(int d) {
  PlanTiedGroup g = {0, 2, {0, d - 1}};
  return g;
}

static bool build(PlanSchedule s, int d, int64_t m, int nb, int w, bool tied, PlanStreams *out) {
  static PlanTiedGroup g;
  g = first_last(d);
  PlanStreamSpec sp = {d, m, s, nb, w, tied && d > 1 ? &g : NULL, tied && d > 1 ? 1 : 0, 0, false};
  char err[256];
  bool ok = plan_streams_build(&sp, out, err, sizeof err);
  if (!ok) fprintf(stderr, "build: %s\n", err);
  return ok;
}

static void test_all_schedules_verify(void) {
  for (int s = 0; s < PS_COUNT; s++)
    for (int d = 1; d <= 6; d++)
      for (int64_t m = 1; m <= 9; m++)
        for (int tied = 0; tied < 2; tied++) {
          if (s == PS_2BW && m < d) continue;
          PlanStreams st;
          EXPECT(build((PlanSchedule)s, d, m, 4, 1 + tied, tied, &st));
          char err[512];
          bool ok = plan_verify(&st, NULL, NULL, err, sizeof err);
          if (!ok)
            fprintf(stderr, "%s d=%d m=%lld tied=%d: %s\n", plan_schedule_name((PlanSchedule)s), d,
                    (long long)m, tied, err);
          EXPECT(ok);
          plan_streams_free(&st);
        }
}

static void test_slot_counts(void) {
  for (int d = 1; d <= 8; d++)
    for (int64_t m = d; m <= 12; m++) {
      PlanStreams g, f, b, p;
      EXPECT(build(PS_GPIPE, d, m, 3, 1, false, &g));
      EXPECT(build(PS_1F1B, d, m, 3, 1, false, &f));
      EXPECT(build(PS_2BW, d, m, 3, 1, false, &b));
      EXPECT(build(PS_PIPEDREAM, d, 1, 3 * (int)m, 1, false, &p));
      for (int i = 0; i < d; i++) {
        EXPECT_EQ_INT(g.nversions[i], 1);
        EXPECT_EQ_INT(g.nstash[i], m);
        EXPECT_EQ_INT(f.nversions[i], 1);
        EXPECT(f.nstash[i] <= d - i);
        EXPECT_EQ_INT(f.nstash[i], d - i < m ? d - i : m);
        EXPECT_EQ_INT(b.nversions[i], 2);
        EXPECT(b.nstash[i] <= d - i);
        EXPECT(p.nversions[i] <= d - i);
        EXPECT(p.nversions[i] <= plan_versions_bound(PS_PIPEDREAM, d, i, 1, false));
        EXPECT(p.nstash[i] <= d - i);
        EXPECT(b.nstash[i] <= plan_stash_bound(PS_2BW, d, i, m));
        EXPECT(f.nstash[i] <= plan_stash_bound(PS_1F1B, d, i, m));
      }
      /* PipeDream with per-microbatch updates needs all d-i versions at stage i */
      if (3 * m > d) EXPECT_EQ_INT(p.nversions[0], d);
      plan_streams_free(&g), plan_streams_free(&f), plan_streams_free(&b), plan_streams_free(&p);
    }
}

/* 2bw: v(k) = max(floor((k-1)/m) - 1, 0), forward and backward, every stage. */
static void test_2bw_versions(void) {
  PlanStreams st;
  int64_t m = 5;
  EXPECT(build(PS_2BW, 4, m, 5, 1, true, &st));
  for (int i = 0; i < 4; i++)
    for (int q = 0; q < st.st[i].n; q++) {
      const PlanInstr *in = &st.st[i].ins[q];
      if (in->op == PI_FWD || in->op == PI_BWD) {
        int64_t v = (in->mb - 1) / m - 1;
        EXPECT_EQ_INT(in->version, v > 0 ? v : 0);
        EXPECT_EQ_INT(in->vslot, in->version % 2);
      }
      if (in->op == PI_OPT_STEP) {
        EXPECT_EQ_INT(in->version, in->batch + 1);
        EXPECT_EQ_INT(in->vslot, (in->batch + 1) % 2);
        EXPECT_EQ_INT(in->src_vslot, in->batch % 2);
      }
    }
  plan_streams_free(&st);
}

static void test_2bw_needs_m_ge_d(void) {
  PlanStreamSpec sp = {4, 3, PS_2BW, 2, 1, NULL, 0, 0, false};
  PlanStreams st;
  char err[512];
  EXPECT(!plan_streams_build(&sp, &st, err, sizeof err));
  EXPECT(strstr(err, "m = 3 < d = 4") != NULL);
}

/* 1f1b's warm-up: stage i runs d-i-1 forwards before its first backward. */
static void test_1f1b_warmup(void) {
  PlanStreams st;
  EXPECT(build(PS_1F1B, 4, 8, 1, 1, false, &st));
  for (int i = 0; i < 4; i++) {
    int fw = 0;
    for (int q = 0; q < st.st[i].n && st.st[i].ins[q].op != PI_BWD; q++)
      fw += st.st[i].ins[q].op == PI_FWD;
    EXPECT_EQ_INT(fw, 4 - i);
  }
  plan_streams_free(&st);
}

/* 2bw with a tied group: each member posts batch t's TIED_SYNC right after its own
 * step of batch t and steps the tied parameter before batch t+2's first forward. */
static void test_2bw_tied_placement(void) {
  PlanStreams st;
  int64_t m = 4;
  int nb = 5;
  EXPECT(build(PS_2BW, 4, m, nb, 1, true, &st));
  for (int i = 0; i < 4; i += 3) {
    const PlanStream *s = &st.st[i];
    for (int t = 0; t < nb; t++) {
      int step = -1, sync = -1, tstep = -1, f = -1;
      for (int q = 0; q < s->n; q++) {
        const PlanInstr *in = &s->ins[q];
        if (in->op == PI_OPT_STEP && in->batch == t && in->group < 0) step = q;
        if (in->op == PI_TIED_SYNC && in->batch == t) sync = q;
        if (in->op == PI_OPT_STEP && in->batch == t && in->group == 0) tstep = q;
        if (in->op == PI_FWD && in->mb == (t + 2) * m + 1) f = q;
      }
      EXPECT(step >= 0 && sync == step + 1 && tstep > sync);
      if (t + 2 < nb) EXPECT(f > tstep);
      else EXPECT(tstep >= s->n - 2);
    }
  }
  /* middle stages hold no tied parameter */
  for (int q = 0; q < st.st[1].n; q++) EXPECT(st.st[1].ins[q].op != PI_TIED_SYNC);
  plan_streams_free(&st);
}

int main(void) {
  RUN(test_2bw_tied_placement);
  RUN(test_all_schedules_verify);
  RUN(test_slot_counts);
  RUN(test_2bw_versions);
  RUN(test_2bw_needs_m_ge_d);
  RUN(test_1f1b_warmup);
  return TEST_REPORT();
}
