/* Issue 14, "one ranking": candidates are ranked by the figure plan.json reports
 * (the simulation), so the free choice is never slower, by its own prediction, than
 * any schedule pinned on the same model, cluster and batch; and the candidate table
 * carries that figure for the chosen row. */
#include <math.h>

#include "gpt_input.h"
#include "test.h"

static Plan *quiet_plan(const PlanInput *in, const Cluster *c, const PlanPins *pins) {
  FILE *null = fopen("/dev/null", "w");
  Diag d;
  diag_init(&d, null ? null : stderr);
  Plan *p = plan_create(in, c, pins, &d);
  if (null) fclose(null);
  return p;
}

static void test_free_choice_never_slower_than_pinned(void) {
  /* GPT shapes (layers, width, heads) at seq 512, as the paper's, scaled by depth */
  static const double shapes[][3] = {{8, 2048, 16}, {16, 3072, 32}};
  /* nodes x devices per node, memory GiB, TFLOP/s, inter-node GB/s */
  static const double clusters[][5] = {{1, 8, 16, 125, 25}, {8, 8, 16, 125, 3.125}, {1, 8, 131, 494.5, 50}};
  static const int64_t batches[] = {64, 512, 2048};
  int compared = 0;
  for (size_t mi = 0; mi < sizeof shapes / sizeof shapes[0]; mi++)
    for (size_t ci = 0; ci < sizeof clusters / sizeof clusters[0]; ci++)
      for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        PlanInput in;
        gpt_input(&in, (int)shapes[mi][0], shapes[mi][1], 512, 50257, shapes[mi][2], batches[bi]);
        Cluster c = test_cluster((int)clusters[ci][0], (int)clusters[ci][1], clusters[ci][2]);
        c.flops = clusters[ci][3] * 1e12;
        c.inter_bandwidth = clusters[ci][4] * 1e9;
        PlanPins pins;
        plan_pins_init(&pins);
        Plan *free_p = quiet_plan(&in, &c, &pins);
        if (free_p) {
          /* the chosen row of the table reports what the plan predicts */
          for (int k = 0; k < free_p->ncands; k++)
            if (free_p->cands[k].chosen)
              EXPECT_NEAR(free_p->cands[k].step_time_s, free_p->sim.step_time_s, 1e-9, 0);
          for (int s = 0; s < PS_COUNT; s++) {
            PlanPins pin = pins;
            pin.schedule = s;
            Plan *q = quiet_plan(&in, &c, &pin);
            if (!q) continue;
            compared++;
            if (free_p->sim.step_time_s > q->sim.step_time_s * (1 + 1e-9)) {
              fprintf(stderr, "  L=%g C=%g cluster %zu B=%lld: free choice %s %.6g s/batch, --schedule %s %.6g\n",
                      shapes[mi][0], shapes[mi][1], ci, (long long)batches[bi],
                      plan_schedule_name(free_p->cfg.schedule), free_p->sim.step_time_s,
                      plan_schedule_name((PlanSchedule)s), q->sim.step_time_s);
              EXPECT(free_p->sim.step_time_s <= q->sim.step_time_s * (1 + 1e-9));
            }
            plan_destroy(q);
          }
        }
        plan_destroy(free_p);
        plan_input_free(&in);
      }
  EXPECT(compared > 40);
}

int main(void) {
  RUN(test_free_choice_never_slower_than_pinned);
  return TEST_REPORT();
}
