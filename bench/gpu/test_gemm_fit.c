/* bench/gpu/test_gemm_fit.c — gemm_sweep's file (gemm_fit.c) against the reader that
 * uses it, pd2bwc --profile (passes/plan_profile.c), on the CPU: points made from a
 * known latency and rate are fitted back exactly; the written file loads as a profile
 * and gives the planner that rate and latency for its precision; a precision with too
 * few points is left out of the file, not written as a rate of 0 that would make the
 * planner refuse the whole file; a device name with quotes is escaped. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/gpu/gemm_fit.h"
#include "frontend/frontend.h"
#include "passes/planner.h"
#include "test.h"

enum { NPT = 12 };

/* The sweep's shapes, each timed as exactly latency + FLOPs / rate. */
static void synth(GemmPoint *pt, double lat, double rate) {
  static const int ms[] = {512, 1024, 2048, 4096, 8192, 16384}, nks[] = {2048, 8192};
  int i = 0;
  for (int a = 0; a < 2; a++)
    for (int j = 0; j < 6; j++, i++) {
      pt[i] = (GemmPoint){ms[j], nks[a], nks[a], 0};
      pt[i].seconds = lat + 2.0 * ms[j] * (double)nks[a] * nks[a] / rate;
    }
}

static void test_fit_exact(void) {
  GemmPoint pt[NPT];
  synth(pt, 22e-6, 811e12);
  double lat = 0, rate = 0;
  EXPECT(gemm_fit(pt, NPT, &lat, &rate));
  EXPECT_NEAR(lat, 22e-6, 1e-6, 0);
  EXPECT_NEAR(rate, 811e12, 1e-9, 0);
  EXPECT(!gemm_fit(pt, 1, &lat, &rate)); /* one point fits nothing */
}

static void test_file_is_a_profile(void) {
  GemmPoint bf[NPT], fp[NPT];
  synth(bf, 22e-6, 811e12);
  synth(fp, 9e-6, 52e12);
  GemmSweep sw[3] = {{"fp32", fp, NPT, 67}, {"tf32", NULL, 0, 494.5}, {"bf16", bf, NPT, 989}};
  char *text = gemm_sweep_json("GPU \"test\" 0", sw, 3);
  char path[] = "/tmp/pd2bw-test-gemm-fit-XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  if (fd < 0) return;
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  EXPECT(strstr(text, "\"tf32\"") == NULL); /* nothing to fit: left out */
  EXPECT(strstr(text, "\"efficiency\"") != NULL);
  PlanInput in;
  plan_input_init(&in, "t");
  plan_input_add_segment(&in, "s0");
  Diag d;
  diag_init(&d, stderr);
  EXPECT(plan_profile_load(&in, path, &d));
  EXPECT_NEAR(in.gemm_rate[GEMM_BF16], 811e12, 1e-9, 0);
  EXPECT_NEAR(in.gemm_latency_s[GEMM_BF16], 22e-6, 1e-6, 0);
  EXPECT_NEAR(in.gemm_rate[GEMM_FP32], 52e12, 1e-9, 0);
  EXPECT(in.gemm_rate[GEMM_TF32] == 0); /* the cluster's figure stays */
  plan_input_free(&in);
  unlink(path);
  free(text);
}

/* The calibration's cluster file loads as a cluster and says what was measured: the
 * bf16 rate over its peak as gemm_efficiency, twice the copy rate as memory_gbs; a
 * quote in the device's name does not break the file. */
static void test_gpu_cluster_file(void) {
  GpuCalibration g = {.device = "NVIDIA \"H200\"", .devices = 8, .memory_gib = 139.8,
                      .peak_tflops = {67, 494.5, 989}, .rate_tflops = {51, 400, 720}, .latency_us = 21,
                      .copy_gbs = 1900, .launch_us = 2.5, .intra_gbs = 450, .inter_gbs = 50, .when = "today"};
  char *text = gpu_cluster_text(&g);
  EXPECT(text != NULL);
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Cluster c;
  EXPECT(frontend_load_cluster_buffer(a, &d, "gpu.cluster", text, strlen(text), &c));
  EXPECT(c.devices_per_node == 8 && c.nodes == 1);
  EXPECT_NEAR(c.flops_bf16, 989e12, 1e-9, 0);
  EXPECT_NEAR(c.gemm_efficiency, 720.0 / 989, 1e-3, 0);
  EXPECT_NEAR(c.gemm_latency_s, 21e-6, 1e-3, 0);
  EXPECT_NEAR(c.launch_s, 2.5e-6, 1e-3, 0);
  EXPECT_NEAR(c.mem_bandwidth, 3800e9, 1e-3, 0);
  EXPECT(strstr(text, "NVIDIA _H200_") != NULL);
  arena_destroy(a);
  free(text);
}

int main(void) {
  RUN(test_fit_exact);
  RUN(test_file_is_a_profile);
  RUN(test_gpu_cluster_file);
  return TEST_REPORT();
}
