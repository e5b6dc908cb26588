/* pipe_measure: the summary's "measured, steady state" step time is the median of the
 * run's per-step times (stage 0's update to update), not the mean over steps 2-5, and
 * the bubble window spans the run after the first step (issue 14). */
#include "runtime/pipeline/pipeline_rank.h"
#include "test.h"

/* Stage 0's updates end at the given times; each step idles its first 0.25 s. */
static int64_t events(PipeEvent *ev, const double *ends, int nsteps) {
  int64_t n = 0;
  double t = 0;
  for (int b = 0; b < nsteps; b++) {
    ev[n++] = (PipeEvent){.op = PI_FWD, .stage = 0, .mb = b + 1, .batch = b, .group = -1,
                          .start = t + 0.25, .end = ends[b] - 0.5};
    ev[n++] = (PipeEvent){.op = PI_OPT_STEP, .stage = 0, .batch = b, .group = -1,
                          .start = ends[b] - 0.5, .end = ends[b]};
    t = ends[b];
  }
  return n;
}

static void test_median_over_the_run(void) {
  PipePlan p;
  memset(&p, 0, sizeof p);
  p.d = 1, p.w = 1;
  /* step 1 is warm-up (10 s); steps 2-5 take 1 s; the rest of the run takes 5 s */
  double dur[12] = {10, 1, 1, 1, 1, 5, 5, 5, 5, 5, 5, 5}, ends[12], t = 0;
  for (int b = 0; b < 12; b++) ends[b] = t += dur[b];
  PipeEvent ev[24];
  int64_t n = events(ev, ends, 12);
  double step = 0, bubble[1] = {-1};
  pipe_measure(&p, ev, n, 0, 12, &step, bubble);
  EXPECT(fabs(step - 5) < 1e-12);
  if (fabs(step - 5) >= 1e-12) fprintf(stderr, "  measured %g s per step, expected 5\n", step);
  /* the bubble over every step but the first */
  double busy = 0;
  for (int b = 1; b < 12; b++) busy += dur[b] - 0.25;
  EXPECT(fabs(bubble[0] - (1 - busy / (ends[11] - ends[0]))) < 1e-12);
  /* a resumed run: steps counted from `first` */
  pipe_measure(&p, ev + 2, n - 2, 1, 12, &step, bubble);
  EXPECT(fabs(step - 5) < 1e-12);
  /* two steps: the second one's time */
  pipe_measure(&p, ev, 4, 0, 2, &step, bubble);
  EXPECT(fabs(step - 1) < 1e-12);
  /* one step: the whole run, from its first event */
  pipe_measure(&p, ev, 2, 0, 1, &step, bubble);
  EXPECT(fabs(step - 9.75) < 1e-12);
}

int main(void) {
  RUN(test_median_over_the_run);
  return TEST_REPORT();
}
