/* bench/gpu/gemm_fit.h — the planner's GEMM cost fitted to measured GEMM times, and
 * the file gemm_sweep writes (gpu-check step (e)), which pd2bwc --profile reads as a
 * profile's "gemm" section (docs/plan-format.md, "Profile files"). Apart from the GPU
 * so that a CPU test (test_gemm_fit) holds the writer to the reader. */
#ifndef PD2BW_BENCH_GPU_GEMM_FIT_H
#define PD2BW_BENCH_GPU_GEMM_FIT_H

#include <stdbool.h>

/* One timed GEMM: M x N x K in `seconds`. */
typedef struct GemmPoint {
  int m, n, k;
  double seconds;
} GemmPoint;

/* One precision's sweep. */
typedef struct GemmSweep {
  const char *name; /* "fp32", "tf32" or "bf16": the planner's precision names */
  const GemmPoint *pt;
  int n;
  double peak_tflops; /* the precision's dense peak; 0: unknown (no "efficiency") */
} GemmSweep;

/* Least squares t = latency + FLOPs / rate over the points (FLOPs = 2·M·N·K), the
 * latency clamped at 0. false (nothing fitted) with fewer than two points or a rate
 * that is not positive. */
bool gemm_fit(const GemmPoint *pt, int n, double *latency_s, double *rate_flops);

/* The file's text (free() it):
 *   {"version": 1, "device": D, "gemm": {NAME: {"points": [{"m", "n", "k",
 *    "seconds"}, ...], "latency_us", "rate_tflops", "efficiency" (with a peak)}}}
 * A precision that could not be fitted is left out: the planner refuses a rate of 0,
 * and the others stay usable. */
char *gemm_sweep_json(const char *device, const GemmSweep *sw, int nsw);

#endif /* PD2BW_BENCH_GPU_GEMM_FIT_H */
