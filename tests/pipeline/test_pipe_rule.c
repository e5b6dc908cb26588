/* tests/pipeline/test_pipe_rule.c — the sequential references' version rules
 * (runtime/pipeline/pipeline_rank.h, pipe_rule_version) against the versions the planner's
 * instruction streams give every FWD and BWD (contract/plan_streams.c), for all four
 * schedules over d 1..6, m 1..8 (m < d too where the schedule allows it), one and two
 * replicas, with and without a tied group on the first and last stage. The streams
 * are what the executor runs, the rules what the references run: they must agree
 * instruction by instruction. */
#include "runtime/reference/reference.h"
#include "test.h"

/* Every FWD/BWD of the streams reads the rule's version; returns how many it checked. */
static int check_streams(PlanSchedule s, int d, int64_t m, int w, bool tied) {
  PlanTiedGroup g = {.tied = 0, .nstages = d > 1 ? 2 : 1, .stages = {0, d - 1}};
  PlanStreamSpec spec = {.stages = d, .microbatches = m, .schedule = s, .nbatches = 5, .replicas = w,
                         .groups = tied ? &g : NULL, .ngroups = tied ? 1 : 0};
  PlanStreams ps;
  char err[512];
  bool built = plan_streams_build(&spec, &ps, err, sizeof err);
  if (s == PS_2BW && m < d) { /* refused: W(t-1) would not exist yet at stage 0 */
    EXPECT(!built);
    return 0;
  }
  EXPECT(built);
  if (!built) return 0;
  PipeRule r = pipe_rule_of(s);
  int n = 0;
  for (int i = 0; i < d; i++) {
    int fwd = 0, bwd = 0;
    for (int q = 0; q < ps.st[i].n; q++) {
      const PlanInstr *in = &ps.st[i].ins[q];
      if (in->op != PI_FWD && in->op != PI_BWD) continue;
      int64_t want = pipe_rule_version(r, d, i, m, in->mb);
      if (in->version != want) {
        fprintf(stderr, "%s d=%d m=%lld w=%d stage %d: %s of microbatch %lld reads version %d, the rule %s says %lld\n",
                plan_schedule_name(s), d, (long long)m, w, i, in->op == PI_FWD ? "FWD" : "BWD", (long long)in->mb,
                in->version, pipe_rule_name(r), (long long)want);
        EXPECT_EQ_INT(in->version, want);
      }
      *(in->op == PI_FWD ? &fwd : &bwd) += 1;
      n++;
    }
    EXPECT_EQ_INT(fwd, 5 * m); /* every microbatch once each way */
    EXPECT_EQ_INT(bwd, 5 * m);
  }
  plan_streams_free(&ps);
  return n;
}

static void test_streams_follow_the_rules(void) {
  for (int s = 0; s < PS_COUNT; s++) {
    int n = 0;
    for (int d = 1; d <= 6; d++)
      for (int64_t m = 1; m <= 8; m++)
        for (int w = 1; w <= 2; w++)
          for (int tied = 0; tied < 2; tied++) n += check_streams((PlanSchedule)s, d, m, w, tied);
    printf("  %s: %d FWD/BWD versions follow the %s rule\n", plan_schedule_name((PlanSchedule)s), n,
           pipe_rule_name(pipe_rule_of((PlanSchedule)s)));
    EXPECT(n > 0);
  }
}

/* The formula's corners, by hand (k 1-indexed). */
static void test_rule_values(void) {
  /* pipedream, d = 4, m = 2: stage 0 lags 3 microbatches, the last stage none */
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_STAGE_DELAY, 4, 0, 2, 4), 0);
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_STAGE_DELAY, 4, 0, 2, 6), 1);
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_STAGE_DELAY, 4, 3, 2, 3), 1);
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_STAGE_DELAY, 4, 2, 2, 3), 0);
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_STAGE_DELAY, 4, 2, 2, 4), 1);
  /* 2bw: batches 0 and 1 on W(0), batch 2 on W(1), every stage alike */
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_DELAYED, 4, 0, 4, 8), 0);
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_DELAYED, 4, 3, 4, 9), 1);
  EXPECT_EQ_INT(pipe_rule_version(PIPE_RULE_VANILLA, 4, 0, 4, 5), 1);
  EXPECT_STREQ(pipe_rule_name(pipe_rule_of(PS_PIPEDREAM)), "pipedream (per-stage delay)");
}

int main(void) {
  RUN(test_rule_values);
  RUN(test_streams_follow_the_rules);
  return TEST_REPORT();
}
