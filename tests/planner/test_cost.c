/* The per-op cost model (issue 14): a GEMM's fixed costs make a sample cheaper at a
 * larger microbatch; a measured profile holds at its own microbatch size and is
 * scaled by the model at another; a stage's measured time ("stages") is split over
 * its segments by their FLOPs, not evenly. */
#include <stdio.h>
#include <unistd.h>

#include "gpt_input.h"
#include "test.h"

/* Two segments, each one GEMM of 1 GFLOP per sample (s1: 3 GFLOP), no bytes. */
static void two_gemms(PlanInput *in) {
  plan_input_init(in, "t");
  in->batch = 8;
  for (int i = 0; i < 2; i++) {
    PlanSegment *s = plan_input_add_segment(in, i ? "s1" : "s0");
    double f = i ? 3e9 : 1e9;
    s->fwd_flops = f, s->bwd_flops = 2 * f;
    plan_segment_add_op(s, (PlanOpTerm){true, false, f, 0, 0, 0});
    plan_segment_add_op(s, (PlanOpTerm){true, true, 2 * f, 0, 0, 0});
  }
}

static Cluster cost_cluster(void) {
  Cluster c = test_cluster(1, 2, 16);
  c.flops = 1e12, c.gemm_efficiency = 0.5, c.gemm_latency_s = 1e-3, c.launch_s = 1e-4;
  return c;
}

static void test_gemm_cost_depends_on_b(void) {
  PlanInput in;
  two_gemms(&in);
  Cluster c = cost_cluster();
  /* 1 GFLOP at 0.5 TFLOP/s + 1 ms + 0.1 ms, per sample of b */
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 1), 2e-3 + 1.1e-3, 1e-12, 0);
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 8), 16e-3 + 1.1e-3, 1e-12, 0);
  EXPECT(plan_cost_fwd(&in, &c, 0, 2, 8) / 8 < plan_cost_fwd(&in, &c, 0, 2, 1));
  plan_input_free(&in);
}

static char *write_tmp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/pd2bw-test-cost-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static void test_profile_scaled_by_model(void) {
  PlanInput in;
  two_gemms(&in);
  Cluster c = cost_cluster();
  char *path = write_tmp("{\"version\": 1, \"microbatch_size\": 2, \"segments\": ["
                         "{\"name\": \"s0\", \"forward_s\": 0.004, \"backward_s\": 0.008}]}");
  Diag d;
  diag_init(&d, stderr);
  EXPECT(path && plan_profile_load(&in, path, &d));
  if (path) unlink(path);
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 2), 0.004, 1e-12, 0); /* as measured */
  /* at b=4: x model(4)/model(2) = (8 ms + 1.1 ms) / (4 ms + 1.1 ms), not x2 */
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 4), 0.004 * 9.1 / 5.1, 1e-9, 0);
  EXPECT_NEAR(plan_cost_bwd(&in, &c, 0, 1, 4), 0.008 * (16 + 1.1) / (8 + 1.1), 1e-9, 0);
  plan_input_free(&in);
}

static void test_profile_stage_split_by_flops(void) {
  PlanInput in;
  two_gemms(&in);
  Cluster c = cost_cluster();
  char *path = write_tmp("{\"version\": 1, \"microbatch_size\": 4, \"stages\": ["
                         "{\"segments\": [\"s0\", \"s1\"], \"forward_s\": 0.008, \"backward_s\": 0.016}]}");
  Diag d;
  diag_init(&d, stderr);
  EXPECT(path && plan_profile_load(&in, path, &d));
  if (path) unlink(path);
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 4), 0.002, 1e-12, 0); /* 1/4 of the FLOPs */
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 1, 2, 4), 0.006, 1e-12, 0);
  EXPECT_NEAR(plan_cost_bwd(&in, &c, 0, 2, 4), 0.016, 1e-12, 0);
  plan_input_free(&in);
}

/* gemm_sweep's file as a profile: the measured GEMM rate and latency of the plan's
 * precision replace the cluster's peak x gemm_efficiency and gemm_latency_us. */
static void test_gemm_sweep_file(void) {
  PlanInput in;
  two_gemms(&in);
  in.precision = GEMM_BF16;
  Cluster c = cost_cluster();
  c.flops_bf16 = 2e12;
  char *path = write_tmp("{\"version\": 1, \"device\": \"test\", \"gemm\": {"
                         "\"bf16\": {\"points\": [], \"latency_us\": 2000, \"rate_tflops\": 0.25, \"efficiency\": 0.1},"
                         "\"fp32\": {\"latency_us\": 1, \"rate_tflops\": 1}}}");
  Diag d;
  diag_init(&d, stderr);
  EXPECT(path && plan_profile_load(&in, path, &d));
  if (path) unlink(path);
  /* 1 GFLOP at 0.25 TFLOP/s + 2 ms + the 0.1 ms launch */
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 1), 4e-3 + 2e-3 + 0.1e-3, 1e-12, 0);
  plan_input_free(&in);
  /* a precision left zero is tf32: the tf32 entry is the one charged */
  two_gemms(&in);
  path = write_tmp("{\"version\": 1, \"gemm\": {\"tf32\": {\"latency_us\": 2000, \"rate_tflops\": 0.25}}}");
  EXPECT(path && plan_profile_load(&in, path, &d));
  if (path) unlink(path);
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 0, 1, 1), 4e-3 + 2e-3 + 0.1e-3, 1e-12, 0);
  plan_input_free(&in);
  /* an unknown precision is a located error */
  two_gemms(&in);
  path = write_tmp("{\"version\": 1, \"gemm\": {\"fp8\": {\"latency_us\": 1, \"rate_tflops\": 1}}}");
  FILE *null = fopen("/dev/null", "w");
  diag_init(&d, null);
  EXPECT(path && !plan_profile_load(&in, path, &d));
  EXPECT_EQ_INT(d.nerrors, 1);
  if (null) fclose(null);
  if (path) unlink(path);
  plan_input_free(&in);
}

/* A CPU node's spare cores (all_cores_gemm_speedup): one rank on a 4-core node gets all
 * of them and its GEMMs run S times faster; 2 ranks get 2 cores each, 1 + (S-1)/3
 * faster; 4 ranks one core each, as fast as the file's rate; other ops do not change;
 * without the key nothing changes. */
static void test_cores_per_rank(void) {
  PlanInput in;
  two_gemms(&in);
  Cluster c = cost_cluster();
  c.devices_per_node = 4, c.all_cores_gemm_speedup = 2.5, c.launch_s = 0, c.gemm_latency_s = 0;
  PlanConfig one = {.stages = 1, .replicas = 1}, two = {.stages = 2, .replicas = 1}, four = {.stages = 2, .replicas = 2};
  Cluster c1 = plan_cluster_for_config(&c, &one), c2 = plan_cluster_for_config(&c, &two),
          c4 = plan_cluster_for_config(&c, &four);
  double base = 1e9 / (1e12 * 0.5); /* s0's forward at b=1: 1 GFLOP at half of 1 TFLOP/s */
  EXPECT_NEAR(plan_cost_fwd(&in, &c1, 0, 1, 1), base / 2.5, 1e-12, 0);
  EXPECT_NEAR(plan_cost_fwd(&in, &c2, 0, 1, 1), base / 1.5, 1e-12, 0);
  EXPECT_NEAR(plan_cost_fwd(&in, &c4, 0, 1, 1), base, 1e-12, 0);
  c.all_cores_gemm_speedup = 0;
  Cluster c0 = plan_cluster_for_config(&c, &one);
  EXPECT_NEAR(plan_cost_fwd(&in, &c0, 0, 1, 1), base, 1e-12, 0);
  plan_input_free(&in);
}

int main(void) {
  RUN(test_gemm_cost_depends_on_b);
  RUN(test_profile_scaled_by_model);
  RUN(test_profile_stage_split_by_flops);
  RUN(test_gemm_sweep_file);
  RUN(test_cores_per_rank);
  return TEST_REPORT();
}
