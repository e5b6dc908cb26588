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

/* What gpu-check's calibration step measured of one device (gemm_sweep --cluster-out),
 * and what the script knows of the machine around it. */
typedef struct GpuCalibration {
  const char *device;          /* "NVIDIA H200" */
  int devices;                 /* GPUs per node (nvidia-smi -L) */
  double memory_gib;           /* per device (nvidia-smi) */
  double peak_tflops[3];       /* dense peaks, fp32 / tf32 / bf16 (0: unknown: the fitted rate) */
  double rate_tflops[3];       /* fitted cuBLAS rates, same order (0: not fitted) */
  double latency_us;           /* the bf16 fit's fixed cost per GEMM */
  double copy_gbs;             /* device-to-device copy, bytes copied per second / 1e9 */
  double launch_us;            /* one empty kernel, launched back to back */
  double intra_gbs, inter_gbs; /* links, as the script was told (not measured here) */
  const char *when;            /* "2026-12-07 11:00 UTC" */
} GpuCalibration;

/* The device's cluster file (free() it): per-precision peaks, gemm_efficiency = the
 * bf16 rate over its peak (the plans a GPU runs are bf16), memory_gbs = 2 x the copy
 * rate (a copy reads and writes), launch_us, with every measurement in comments. */
char *gpu_cluster_text(const GpuCalibration *c);

#endif /* PD2BW_BENCH_GPU_GEMM_FIT_H */
