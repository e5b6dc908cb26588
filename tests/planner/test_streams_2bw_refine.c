/* 2bw's flushed start and weight prediction in the streams (contract/plan_streams.c,
 * docs/update-rules.md): for many (d, m, K, batches, replicas, tied groups) the streams
 * verify; batch t's forwards read version t while t < max(K, 1) and t - 1 after; the
 * flushed batches drain (no forward of batch t + 1 before the step of batch t on any
 * stage) and the later ones do not; prediction adds the master slot, from which every
 * step (tied ones too) reads; the verifier refuses a flushed-start version rule broken
 * by hand. */
#include "passes/planner.h"
#include "test.h"

static bool build(int d, int64_t m, int nb, int w, bool tied, int K, bool predict, PlanStreams *out) {
  static PlanTiedGroup g;
  g = (PlanTiedGroup){0, 2, {0, d - 1}};
  PlanStreamSpec sp = {.stages = d, .microbatches = m, .schedule = PS_2BW, .nbatches = nb, .replicas = w,
                       .groups = tied && d > 1 ? &g : NULL, .ngroups = tied && d > 1 ? 1 : 0,
                       .flush_batches = K, .predict = predict};
  char err[256];
  bool ok = plan_streams_build(&sp, out, err, sizeof err);
  if (!ok) fprintf(stderr, "build: %s\n", err);
  return ok;
}

/* Checks one stage's stream against the definition; false with a message. */
static bool stage_follows_rule(const PlanStreams *st, int i, int K, bool predict) {
  const PlanStream *s = &st->st[i];
  int fresh = K > 1 ? K : 1, stepped = -1; /* the last batch whose (untied) step ran */
  for (int q = 0; q < s->n; q++) {
    const PlanInstr *in = &s->ins[q];
    if (in->op == PI_FWD) {
      int want = in->batch < fresh ? in->batch : in->batch - 1;
      if (in->version != want) {
        fprintf(stderr, "stage %d: batch %d's forward reads version %d, want %d\n", i, in->batch, in->version, want);
        return false;
      }
      /* a flushed batch t: batch t + 1 starts only after its step */
      if (in->batch >= 1 && in->batch - 1 < K - 1 && stepped < in->batch - 1) {
        fprintf(stderr, "stage %d: batch %d's forward before the step of flushed batch %d\n", i, in->batch,
                in->batch - 1);
        return false;
      }
    }
    if (in->op == PI_OPT_STEP) {
      if (in->group < 0) stepped = in->batch;
      if (predict && in->src_vslot != PLAN_MASTER_VSLOT) {
        fprintf(stderr, "stage %d: step of batch %d reads slot %d, not the master\n", i, in->batch, in->src_vslot);
        return false;
      }
    }
  }
  return true;
}

static void test_refined_streams_verify(void) {
  int n = 0;
  for (int d = 1; d <= 5; d++)
    for (int64_t m = d; m <= d + 3; m++)
      for (int K = 0; K <= 5; K++)
        for (int pr = 0; pr < 2; pr++)
          for (int tied = 0; tied < 2; tied++) {
            PlanStreams st;
            EXPECT(build(d, m, 6, 1 + tied, tied, K, pr, &st));
            char err[512];
            bool ok = plan_verify(&st, NULL, NULL, err, sizeof err);
            if (!ok) fprintf(stderr, "d=%d m=%lld K=%d predict=%d tied=%d: %s\n", d, (long long)m, K, pr, tied, err);
            EXPECT(ok);
            for (int i = 0; i < d; i++) {
              EXPECT(stage_follows_rule(&st, i, K, pr));
              EXPECT_EQ_INT(st.nversions[i], pr ? 3 : 2);
            }
            plan_streams_free(&st);
            n++;
          }
  EXPECT(n > 400);
}

/* K = 0 and K = 1 are plain 2bw: the same streams, instruction for instruction. */
static void test_k0_k1_plain(void) {
  for (int d = 1; d <= 4; d++) {
    PlanStreams a, b;
    EXPECT(build(d, d + 1, 5, 2, true, 0, false, &a));
    EXPECT(build(d, d + 1, 5, 2, true, 1, false, &b));
    for (int i = 0; i < d; i++) {
      EXPECT_EQ_INT(a.st[i].n, b.st[i].n);
      for (int q = 0; q < a.st[i].n && q < b.st[i].n; q++) {
        const PlanInstr *x = &a.st[i].ins[q], *y = &b.st[i].ins[q];
        EXPECT(x->op == y->op && x->mb == y->mb && x->batch == y->batch && x->version == y->version &&
               x->vslot == y->vslot && x->src_vslot == y->src_vslot && x->sslot == y->sslot && x->peer == y->peer &&
               x->group == y->group && x->with_next == y->with_next);
      }
    }
    plan_streams_free(&a);
    plan_streams_free(&b);
  }
}

/* A flushed batch's forward moved to the version 2bw alone would give is refused. */
static void test_verifier_catches_wrong_flushed_version(void) {
  PlanStreams st;
  EXPECT(build(2, 2, 4, 1, false, 3, false, &st));
  PlanStream *s = &st.st[0];
  int hit = 0;
  for (int q = 0; q < s->n && !hit; q++)
    if (s->ins[q].op == PI_FWD && s->ins[q].batch == 1) s->ins[q].version = 0, s->ins[q].vslot = 0, hit = 1;
  EXPECT(hit);
  char err[512];
  EXPECT(!plan_verify(&st, NULL, NULL, err, sizeof err));
  EXPECT(strstr(err, "the schedule prescribes 1") != NULL);
  plan_streams_free(&st);
}

int main(void) {
  RUN(test_refined_streams_verify);
  RUN(test_k0_k1_plain);
  RUN(test_verifier_catches_wrong_flushed_version);
  return TEST_REPORT();
}
