/* pipe_measure: the summary's "measured, steady state" step time is the median of the
 * run's per-step times (stage 0's update to update), not the mean over steps 2-5, and
 * the bubble window spans the run after the first step (issue 14). pipe_profile_write:
 * each segment's median over the passes, so a preempted pass does not make its
 * segments slower in the profile (the mean did); the replicas' passes together. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/io/io.h"
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

static void test_profile_median(void) {
  char *names[2] = {"prologue", "h.0"};
  PipeStage ps = {.seg_names = names, .nsegs = 2};
  PipePlan p = {.d = 1, .w = 2, .b = 4, .st = &ps};
  /* two replicas: 3 + 2 forward passes; one pass preempted for 100 ms in h.0 */
  SegTimes rep[2], all;
  double fwd[5][2] = {{1e-4, 2e-3}, {1e-4, 2e-3}, {1e-4, 0.1}, {1e-4, 2e-3}, {1e-4, 2e-3}};
  for (int r = 0; r < 2; r++) seg_times_init(&rep[r], 2, 0);
  for (int i = 0; i < 5; i++) {
    double *row = seg_times_row(&rep[i < 3 ? 0 : 1], false);
    row[0] = fwd[i][0], row[1] = fwd[i][1];
    row = seg_times_row(&rep[i < 3 ? 0 : 1], true);
    row[0] = 2 * fwd[i][0], row[1] = 4e-3;
  }
  seg_times_init(&all, 2, 0);
  for (int r = 0; r < 2; r++) seg_times_add(&all, &rep[r]);
  EXPECT_EQ_INT(all.nfwd, 5);
  char path[] = "/tmp/pd2bw-test-profile-XXXXXX", err[256];
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  if (fd >= 0) close(fd);
  EXPECT(pipe_profile_write(&p, &all, "cpu", path, err, sizeof err));
  size_t n = 0;
  char *text = io_read_all(path, &n, err, sizeof err);
  cJSON *j = text ? cJSON_Parse(text) : NULL, *segs = cJSON_GetObjectItem(j, "segments");
  EXPECT(cJSON_GetArraySize(segs) == 2);
  double h0 = cJSON_GetObjectItem(cJSON_GetArrayItem(segs, 1), "forward_s")->valuedouble;
  EXPECT(fabs(h0 - 2e-3) < 1e-15); /* the mean would be 21.6 ms */
  if (fabs(h0 - 2e-3) >= 1e-15) fprintf(stderr, "  h.0 forward %g s, expected the median 0.002\n", h0);
  EXPECT(fabs(cJSON_GetObjectItem(cJSON_GetArrayItem(segs, 0), "backward_s")->valuedouble - 2e-4) < 1e-15);
  EXPECT(cJSON_GetObjectItem(j, "microbatch_size")->valueint == 4);
  cJSON_Delete(j);
  free(text);
  unlink(path);
  /* the rows stop at SEG_TIMES_MAX_PASSES: later passes run untimed */
  SegTimes t;
  seg_times_init(&t, 1, 0);
  for (int i = 0; i < SEG_TIMES_MAX_PASSES; i++) EXPECT(seg_times_row(&t, false) != NULL);
  EXPECT(seg_times_row(&t, false) == NULL);
  for (int r = 0; r < 2; r++) seg_times_free(&rep[r]);
  seg_times_free(&all);
  seg_times_free(&t);
}

int main(void) {
  RUN(test_median_over_the_run);
  RUN(test_profile_median);
  return TEST_REPORT();
}
