/* The partition DP against brute force on small random problems: same bottleneck
 * (time per batch of the slowest stage) subject to memory, and the same "over
 * memory by" when nothing fits. */
#include "passes/planner.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* The DP's stage cost, written out independently. */
static double stage_time(const PlanInput *in, const Cluster *c, const PlanConfig *cfg,
                         PlanPlacement pl, int i, int a, int e) {
  int d = cfg->stages, w = cfg->replicas;
  double b = (double)cfg->microbatch_size, m = (double)cfg->microbatches;
  double f = plan_cost_fwd(in, c, a, e, cfg->microbatch_size);
  double t = f + plan_cost_bwd(in, c, a, e, cfg->microbatch_size) + (cfg->recompute ? f : 0);
  if (i > 0) t += 2 * plan_stage_in_bytes(in, a) * b / plan_place_p2p_bw(c, pl, d, w, i - 1);
  if (i < d - 1) t += 2 * in->segs[e - 1].out_bytes * b / plan_place_p2p_bw(c, pl, d, w, i);
  PlanStageSums s;
  plan_stage_sums(in, a, e, cfg->microbatch_size, &s);
  return m * t + plan_cost_allreduce((double)s.params * 4, w, plan_place_ar_bw(c, pl, d, w, i));
}

static double stage_mem(const PlanInput *in, const Cluster *c, const PlanConfig *cfg, int i, int a, int e) {
  int d = cfg->stages;
  return (double)plan_stage_memory(in, c, cfg, i, a, e,
                                   plan_versions_bound(cfg->schedule, d, i, cfg->microbatches, cfg->predict),
                                   plan_stash_bound(cfg->schedule, d, i, cfg->microbatches), NULL);
}

/* Enumerates every cut; returns the best bottleneck (or -1) and the smallest
 * largest-stage memory. */
static double brute(const PlanInput *in, const Cluster *c, const PlanConfig *cfg,
                    PlanPlacement pl, double *min_mem) {
  int n = in->nsegs, d = cfg->stages;
  int cuts[8];
  double best = -1;
  *min_mem = 1e300;
  for (int i = 0; i <= d; i++) cuts[i] = i;
  cuts[d] = n;
  for (;;) {
    double t = 0, mm = 0;
    bool fits = true;
    for (int i = 0; i < d; i++) {
      double mem = stage_mem(in, c, cfg, i, cuts[i], cuts[i + 1]);
      if (mem > mm) mm = mem;
      if (mem > c->memory_bytes) fits = false;
      double st = stage_time(in, c, cfg, pl, i, cuts[i], cuts[i + 1]);
      if (st > t) t = st;
    }
    if (mm < *min_mem) *min_mem = mm;
    if (fits && (best < 0 || t < best)) best = t;
    /* next combination of cuts[1..d-1] in 1..n-1 */
    int k = d - 1;
    while (k >= 1 && cuts[k] == n - d + k) k--;
    if (k < 1) break;
    cuts[k]++;
    for (int j = k + 1; j < d; j++) cuts[j] = cuts[j - 1] + 1;
  }
  return best;
}

static void test_dp_matches_brute_force(void) {
  int checked = 0, infeasible = 0;
  for (int trial = 0; trial < 1500; trial++) {
    PlanInput in;
    plan_input_init(&in, "random");
    int n = 2 + (int)(urand() * 7);
    in.input_bytes = 1e3 * urand();
    for (int s = 0; s < n; s++) {
      PlanSegment *g = plan_input_add_segment(&in, "seg");
      g->fwd_flops = 1e9 * (0.1 + urand());
      g->fwd_bytes = 1e7 * urand();
      g->bwd_flops = 2 * g->fwd_flops * (0.5 + urand());
      g->bwd_bytes = 2 * g->fwd_bytes;
      g->params = (int64_t)(1e6 * urand());
      /* boundary sizes over five decades, so that where a stage starts matters as
       * much as how much it holds (p2p time, receive buffers, recompute stash) */
      g->out_bytes = 1e3 * pow(10, 5 * urand());
      g->stash_bytes = 4e6 * urand();
      g->workspace_bytes = 1e6 * urand();
    }
    if (urand() < 0.5) {
      int segs[2] = {0, n - 1};
      plan_input_add_tied(&in, "tied", (int64_t)(2e6 * urand()), segs, 2);
    }
    Cluster c = {0};
    c.name = "r", c.nodes = 2, c.devices_per_node = 2;
    c.flops = 1e12, c.mem_bandwidth = 1e11, c.intra_bandwidth = 1e10, c.inter_bandwidth = 1e9;
    c.memory_bytes = 1e7 + 1e9 * urand() * urand();
    int d = 1 + (int)(urand() * (n < 4 ? n : 4));
    PlanConfig cfg = {d, urand() < 0.5 ? 1 : 2, 1 + (int64_t)(urand() * 4), 4 + (int64_t)(urand() * 4),
                      (PlanSchedule)(int)(urand() * PS_COUNT), urand() < 0.5, false};
    PlanPlacement pl = urand() < 0.5 ? PP_STAGE_MAJOR : PP_REPLICA_MAJOR;
    int cuts[9];
    double over = 0, min_mem;
    double got = plan_partition(&in, &c, &cfg, pl, cuts, &over);
    double want = brute(&in, &c, &cfg, pl, &min_mem);
    EXPECT((got < 0) == (want < 0));
    if (got >= 0 && want >= 0) {
      EXPECT_NEAR(got, want, 1e-12, 0);
      /* and the cuts it returns achieve it */
      double t = 0;
      for (int i = 0; i < d; i++) {
        EXPECT(cuts[i] < cuts[i + 1]);
        EXPECT(stage_mem(&in, &c, &cfg, i, cuts[i], cuts[i + 1]) <= c.memory_bytes);
        double st = stage_time(&in, &c, &cfg, pl, i, cuts[i], cuts[i + 1]);
        if (st > t) t = st;
      }
      EXPECT_NEAR(t, got, 1e-12, 0);
      checked++;
    } else if (got < 0 && want < 0) {
      EXPECT_NEAR(over, min_mem - c.memory_bytes, 1e-12, 1);
      infeasible++;
    }
    plan_input_free(&in);
  }
  EXPECT(checked > 50);
  EXPECT(infeasible > 20);
}

int main(void) {
  RUN(test_dp_matches_brute_force);
  return TEST_REPORT();
}
