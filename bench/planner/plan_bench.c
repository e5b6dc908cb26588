/* bench/planner/plan_bench.c — how long plan_create takes on a very large model.
 *
 *   plan_bench [--layers 96] [--width 12288] [--seq 2048] [--vocab 50257]
 *              [--heads 96] [--batch 1024] [--nodes 128] [--per-node 8]
 *              [--memory-gib 80] [--repeat 5] [--out DIR]
 *
 * Builds the synthetic GPT the planner tests use (tests/planner/gpt_input.h), plans
 * it on the cluster (100 TFLOP/s, 2 TB/s memory, 150 GB/s in a node, 25 GB/s
 * between nodes per device) and prints the time of each plan_create (search,
 * partition, streams, memory plan, verification and simulation), then the summary.
 */
#include <string.h>
#include <time.h>

#include "passes/planner.h"
#include "planner/gpt_input.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  double L = 96, C = 12288, T = 2048, V = 50257, H = 96, B = 1024, nodes = 128, dpn = 8;
  double mem = 80, repeat = 5;
  const char *out = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--out") == 0 && i + 1 < argc) {
      out = argv[++i];
      continue;
    }
    double *dst = strcmp(a, "--layers") == 0     ? &L
                  : strcmp(a, "--width") == 0    ? &C
                  : strcmp(a, "--seq") == 0      ? &T
                  : strcmp(a, "--vocab") == 0    ? &V
                  : strcmp(a, "--heads") == 0    ? &H
                  : strcmp(a, "--batch") == 0    ? &B
                  : strcmp(a, "--nodes") == 0    ? &nodes
                  : strcmp(a, "--per-node") == 0 ? &dpn
                  : strcmp(a, "--memory-gib") == 0 ? &mem
                  : strcmp(a, "--repeat") == 0   ? &repeat
                                                 : NULL;
    if (!dst || i + 1 >= argc) {
      fprintf(stderr, "plan_bench: unknown or incomplete option '%s'\n", a);
      return 2;
    }
    *dst = atof(argv[++i]);
  }
  PlanInput in;
  gpt_input(&in, (int)L, C, T, V, H, (int64_t)B);
  Cluster c = test_cluster((int)nodes, (int)dpn, mem);
  Diag d;
  diag_init(&d, stderr);
  int n = repeat >= 1 ? (int)repeat : 1;
  double *t = malloc((size_t)n * sizeof(double));
  Plan *p = NULL;
  for (int r = 0; r < n; r++) {
    plan_destroy(p);
    double t0 = now();
    p = plan_create(&in, &c, NULL, &d);
    t[r] = now() - t0;
    if (!p) return 1;
    printf("run %d: plan_create %.3f s\n", r, t[r]);
  }
  qsort(t, (size_t)n, sizeof *t, cmp);
  printf("GPT %d layers x %.0f wide (%.1f B params), %d devices (%d nodes of %d): "
         "min %.3f s, median %.3f s over %d runs, %d candidates\n",
         (int)L, C, (12 * C * C * L + V * C) / 1e9, (int)(nodes * dpn), (int)nodes, (int)dpn,
         t[0], t[n / 2], n, p->ncands);
  printf("chosen: d=%d w=%d b=%lld m=%lld %s recompute=%s, predicted %.4g samples/s, bubble %.1f%%\n",
         p->cfg.stages, p->cfg.replicas, (long long)p->cfg.microbatch_size,
         (long long)p->cfg.microbatches, plan_schedule_name(p->cfg.schedule),
         p->cfg.recompute ? "on" : "off",
         (double)in.batch / p->sim.step_time_s, 100 * p->sim.bubble_fraction);
  if (out) {
    double t0 = now();
    bool ok = plan_write(p, out, NULL, &d);
    printf("plan_write to %s: %.3f s%s\n", out, now() - t0, ok ? "" : " (failed)");
  }
  free(t);
  plan_destroy(p);
  plan_input_free(&in);
  return 0;
}
