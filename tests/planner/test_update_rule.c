/* Issue 15, "the planner and the user are told": the stale-weight update rules (2bw,
 * pipedream) cost accuracy (bench/convergence/RESULTS.md), so the free choice takes
 * one only where it buys speed: a chosen 2bw or pipedream plan is strictly faster,
 * by its own prediction, than every vanilla plan (gpipe, 1f1b) pinned on the same
 * model, cluster and batch; ties go to vanilla; one device (d = 1) is always vanilla. */
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

static void test_stale_rule_only_for_speed(void) {
  static const double shapes[][3] = {{4, 512, 8}, {8, 2048, 16}};
  /* nodes x devices per node, memory GiB */
  static const int clusters[][3] = {{1, 1, 80}, {1, 2, 80}, {1, 8, 16}};
  static const int64_t batches[] = {8, 64};
  int stale = 0, vanilla = 0;
  for (size_t mi = 0; mi < sizeof shapes / sizeof shapes[0]; mi++)
    for (size_t ci = 0; ci < sizeof clusters / sizeof clusters[0]; ci++)
      for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        PlanInput in;
        gpt_input(&in, (int)shapes[mi][0], shapes[mi][1], 512, 50257, shapes[mi][2], batches[bi]);
        Cluster c = test_cluster(clusters[ci][0], clusters[ci][1], clusters[ci][2]);
        PlanPins pins;
        plan_pins_init(&pins);
        Plan *p = quiet_plan(&in, &c, &pins);
        if (p && plan_schedule_stale(p->cfg.schedule)) {
          stale++;
          EXPECT(p->cfg.stages > 1); /* one stage: always the vanilla rule */
          for (int s = 0; s < PS_COUNT; s++) {
            if (plan_schedule_stale((PlanSchedule)s)) continue;
            PlanPins pin = pins;
            pin.schedule = s;
            Plan *q = quiet_plan(&in, &c, &pin);
            if (q && !(p->sim.step_time_s < q->sim.step_time_s * (1 - 1e-12))) {
              fprintf(stderr, "  L=%g cluster %zu B=%lld: %s chosen at %.9g s/batch, %s pinned %.9g\n", shapes[mi][0],
                      ci, (long long)batches[bi], plan_schedule_name(p->cfg.schedule), p->sim.step_time_s,
                      plan_schedule_name((PlanSchedule)s), q->sim.step_time_s);
              EXPECT(p->sim.step_time_s < q->sim.step_time_s * (1 - 1e-12));
            }
            plan_destroy(q);
          }
        } else if (p) {
          vanilla++;
        }
        plan_destroy(p);
        plan_input_free(&in);
      }
  EXPECT(stale > 0 && vanilla > 0); /* both kinds of choice were made */
}

/* One device, schedule free: the vanilla rule even where 2bw would simulate as fast. */
static void test_one_device_is_vanilla(void) {
  PlanInput in;
  gpt_input(&in, 4, 512, 512, 50257, 8, 16);
  Cluster c = test_cluster(1, 1, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  Plan *p = quiet_plan(&in, &c, &pins);
  EXPECT(p != NULL);
  if (p) {
    EXPECT(p->cfg.stages == 1);
    EXPECT(!plan_schedule_stale(p->cfg.schedule));
    pins.schedule = PS_2BW; /* pinned, 2bw is still there */
    Plan *q = quiet_plan(&in, &c, &pins);
    EXPECT(q != NULL && q->cfg.schedule == PS_2BW);
    if (q) EXPECT(p->sim.step_time_s <= q->sim.step_time_s * (1 + 1e-9));
    plan_destroy(q);
  }
  plan_destroy(p);
  plan_input_free(&in);
}

int main(void) {
  RUN(test_stale_rule_only_for_speed);
  RUN(test_one_device_is_vanilla);
  return TEST_REPORT();
}
