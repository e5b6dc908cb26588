/* bench/gpu/gemm_sweep.c — cuBLAS GEMM times over a sweep of shapes, and the
 * planner's GEMM cost fitted to them (docs/language.md, "Compute"; run by
 * scripts/gpu-check.sh step (e); its file and options: bench/gpu/README.md).
 *
 *   gemm_sweep [--device N] [--peak-fp32 T --peak-tf32 T --peak-bf16 T]
 *              [--cluster-out FILE --devices N --memory-gib G --intra-gbs X --inter-gbs Y] OUT.json
 *
 * For each precision (fp32, tf32, bf16) it times M x N x K GEMMs with N = K = 2048
 * and 8192 and M = 512 .. 16384 (the rows of a GPT layer at b x seq tokens), fits
 * t = latency + FLOPs / rate by least squares (gemm_fit.c), and writes OUT.json
 * atomically (gemm_sweep_json: a precision that could not be fitted is left out); the
 * cluster-file lines to paste are printed on stdout. --cluster-out also times GPT's
 * GEMMs, the copy rate and the launch cost, and writes the device's cluster file
 * (gpu_cluster_text). Exit 77 without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/gpu/gemm_fit.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/io/io.h"

static const char *const names[] = {"fp32", "tf32", "bf16"};
static const GemmType types[] = {GEMM_FP32, GEMM_TF32, GEMM_BF16};
static const int ms[] = {512, 1024, 2048, 4096, 8192, 16384};
static const int nks[] = {2048, 8192};
enum { NM = sizeof ms / sizeof ms[0], NNK = sizeof nks / sizeof nks[0] };
/* GPT widths C and the projections' N x K: qkv (3C x C), out (C x C), fc (4C x C), proj (C x 4C) */
static const int widths[] = {768, 1024, 2048};
static const int proj[][2] = {{3, 1}, {1, 1}, {4, 1}, {1, 4}};
enum { NW = sizeof widths / sizeof widths[0], NP = sizeof proj / sizeof proj[0], MODEL_M = 4096 };

/* The device's copy rate (GB/s copied) and one empty kernel's cost (us), timed with
 * events on stream 0; 0 where a step fails (said on stderr). */
static void device_rates(CudaDeviceOps *ops, double *copy_gbs, double *launch_us) {
  char err[512];
  const size_t half = (size_t)1 << 30;
  GpuPtr base;
  *copy_gbs = *launch_us = 0;
  if (!ops->streams(ops->dev, 1, err, sizeof err) || !ops->alloc(ops->dev, 2 * half, &base, err, sizeof err)) {
    fprintf(stderr, "gemm_sweep: device rates: %s\n", err);
    return;
  }
  void *e0 = ops->event_create(ops->dev), *e1 = ops->event_create(ops->dev);
  ops->memset0(ops->dev, 0, base, 2 * half);
  ops->dtod(ops->dev, 0, base + half, base, half); /* warm-up */
  ops->event_record(ops->dev, e0, 0);
  for (int i = 0; i < 10; i++) ops->dtod(ops->dev, 0, base + half, base, half);
  ops->event_record(ops->dev, e1, 0);
  ops->sync(ops->dev);
  float elapsed = ops->event_ms(ops->dev, e0, e1);
  if (elapsed > 0) *copy_gbs = 10.0 * (double)half / (elapsed * 1e-3) / 1e9;
  void *mod = ops->load(ops->dev, "extern \"C\" __global__ void pd2bw_nop(void) {}\n", "pd2bw_nop.cu", err, sizeof err);
  void *k = mod ? ops->kernel(ops->dev, mod, "pd2bw_nop") : NULL;
  if (k) {
    for (int i = 0; i < 10; i++) ops->launch(ops->dev, 0, k, 1, 32, NULL);
    ops->event_record(ops->dev, e0, 0);
    for (int i = 0; i < 2000; i++) ops->launch(ops->dev, 0, k, 1, 32, NULL);
    ops->event_record(ops->dev, e1, 0);
    ops->sync(ops->dev);
    elapsed = ops->event_ms(ops->dev, e0, e1);
    if (elapsed > 0) *launch_us = elapsed * 1e3 / 2000;
  } else {
    fprintf(stderr, "gemm_sweep: the empty kernel: %s\n", mod ? "no pd2bw_nop in its module" : err);
  }
  ops->event_destroy(ops->dev, e0);
  ops->event_destroy(ops->dev, e1);
}

int main(int argc, char **argv) {
  int device = 0;
  double peak[3] = {0, 0, 0};
  const char *out = NULL, *cluster_out = NULL;
  GpuCalibration cal = {.devices = 1, .memory_gib = 0, .intra_gbs = 1, .inter_gbs = 1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
    else if (strcmp(argv[i], "--peak-fp32") == 0 && i + 1 < argc) peak[0] = atof(argv[++i]);
    else if (strcmp(argv[i], "--peak-tf32") == 0 && i + 1 < argc) peak[1] = atof(argv[++i]);
    else if (strcmp(argv[i], "--peak-bf16") == 0 && i + 1 < argc) peak[2] = atof(argv[++i]);
    else if (strcmp(argv[i], "--cluster-out") == 0 && i + 1 < argc) cluster_out = argv[++i];
    else if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) cal.devices = atoi(argv[++i]);
    else if (strcmp(argv[i], "--memory-gib") == 0 && i + 1 < argc) cal.memory_gib = atof(argv[++i]);
    else if (strcmp(argv[i], "--intra-gbs") == 0 && i + 1 < argc) cal.intra_gbs = atof(argv[++i]);
    else if (strcmp(argv[i], "--inter-gbs") == 0 && i + 1 < argc) cal.inter_gbs = atof(argv[++i]);
    else if (argv[i][0] != '-' && !out) out = argv[i];
    else {
      fprintf(stderr, "usage: gemm_sweep [--device N] [--peak-fp32 T --peak-tf32 T --peak-bf16 T]\n"
                      "                  [--cluster-out FILE --devices N --memory-gib G --intra-gbs X --inter-gbs Y] OUT.json\n");
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "gemm_sweep: no output file\n");
    return 2;
  }
  char err[512];
  CudaDeviceOps *ops = cuda_dev_open(device, err, sizeof err);
  if (!ops) {
    fprintf(stderr, "gemm_sweep: %s\n", err);
    return 77;
  }
  char name[256];
  snprintf(name, sizeof name, "%s", cuda_dev_name(ops));
  if (cluster_out) device_rates(ops, &cal.copy_gbs, &cal.launch_us);
  cuda_dev_close(ops); /* cuda_gemm_tflops opens the device itself */
  GemmPoint pt[3][NNK * NM + NW * NP];
  GemmSweep sw[3];
  for (int p = 0; p < 3; p++) {
    sw[p] = (GemmSweep){.name = names[p], .pt = pt[p], .n = 0, .peak_tflops = peak[p]};
    for (int a = 0; a < NNK; a++)
      for (int j = 0; j < NM; j++) {
        int M = ms[j], N = nks[a], K = nks[a];
        double tf = cuda_gemm_tflops(device, types[p], M, N, K, err, sizeof err);
        if (tf <= 0) {
          fprintf(stderr, "gemm_sweep: %s %dx%dx%d: %s\n", names[p], M, N, K, err);
          continue;
        }
        pt[p][sw[p].n++] = (GemmPoint){M, N, K, 2.0 * M * N * (double)K / (tf * 1e12)};
      }
    for (int a = 0; cluster_out && p > 0 && a < NW; a++) /* the model's shapes, TF32 and BF16 */
      for (int j = 0; j < NP; j++) {
        int N = proj[j][0] * widths[a], K = proj[j][1] * widths[a];
        double tf = cuda_gemm_tflops(device, types[p], MODEL_M, N, K, err, sizeof err);
        if (tf > 0) pt[p][sw[p].n++] = (GemmPoint){MODEL_M, N, K, 2.0 * MODEL_M * N * (double)K / (tf * 1e12)};
      }
    double lat, rate;
    if (!gemm_fit(pt[p], sw[p].n, &lat, &rate)) {
      printf("%s: too few GEMMs timed to fit (%d); left out of %s\n", names[p], sw[p].n, out);
      continue;
    }
    cal.rate_tflops[p] = rate / 1e12;
    if (p == 2) cal.latency_us = lat * 1e6;
    printf("%s: t = %.1f us + FLOPs / %.1f TFLOP/s", names[p], lat * 1e6, rate / 1e12);
    if (peak[p] > 0)
      printf("  ->  gemm_efficiency = %.3f; gemm_latency_us = %.1f;", rate / 1e12 / peak[p], lat * 1e6);
    printf("\n");
  }
  char *text = gemm_sweep_json(name, sw, 3);
  bool ok = atomic_write_text(out, text, err, sizeof err);
  free(text);
  if (!ok) {
    fprintf(stderr, "gemm_sweep: %s\n", err);
    return 1;
  }
  printf("wrote %s (pd2bwc --profile %s)\n", out, out);
  if (!cluster_out) return 0;
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  cal.device = name, cal.when = when;
  memcpy(cal.peak_tflops, peak, sizeof peak);
  printf("copy %.1f GB/s, empty kernel %.2f us\n", cal.copy_gbs, cal.launch_us);
  text = gpu_cluster_text(&cal);
  ok = text && atomic_write_text(cluster_out, text, err, sizeof err);
  free(text);
  if (!ok) {
    fprintf(stderr, "gemm_sweep: %s: %s\n", cluster_out, text ? err : "the cluster text does not fit");
    return 1;
  }
  printf("wrote %s (pd2bwc --cluster %s)\n", cluster_out, cluster_out);
  return 0;
}
