/* bench/gpu/gemm_sweep.c — cuBLAS GEMM times over a sweep of shapes, and the
 * planner's GEMM cost fitted to them (docs/language.md, "Compute"; run by
 * scripts/gpu-check.sh step (e)).
 *
 *   gemm_sweep [--device N] [--peak-fp32 T --peak-tf32 T --peak-bf16 T] OUT.json
 *
 * For each precision (fp32, tf32, bf16) it times M x N x K GEMMs with N = K = 2048
 * and 8192 and M = 512 .. 16384 (the rows of a GPT layer at b x seq tokens), fits
 * t = latency + FLOPs / rate by least squares (gemm_fit.c), and writes OUT.json
 * (atomically; gemm_sweep_json: a precision that could not be fitted is left out):
 *   {"version": 1, "device": "NVIDIA H200",
 *    "gemm": {"bf16": {"latency_us": L, "rate_tflops": R, "efficiency": R / peak,
 *                      "points": [{"m": M, "n": N, "k": K, "seconds": t}, ...]}, ...}}
 * ("efficiency" only when that precision's peak is given). The cluster file's
 * gemm_efficiency and gemm_latency_us are the plan precision's "efficiency" and
 * "latency_us"; the lines to paste are printed on stdout. Exit 77 without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gpu/gemm_fit.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/io/io.h"

static const char *const names[] = {"fp32", "tf32", "bf16"};
static const CxGemmType types[] = {CX_GEMM_FP32, CX_GEMM_TF32, CX_GEMM_BF16};
static const int ms[] = {512, 1024, 2048, 4096, 8192, 16384};
static const int nks[] = {2048, 8192};
enum { NM = sizeof ms / sizeof ms[0], NNK = sizeof nks / sizeof nks[0] };

int main(int argc, char **argv) {
  int device = 0;
  double peak[3] = {0, 0, 0};
  const char *out = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
    else if (strcmp(argv[i], "--peak-fp32") == 0 && i + 1 < argc) peak[0] = atof(argv[++i]);
    else if (strcmp(argv[i], "--peak-tf32") == 0 && i + 1 < argc) peak[1] = atof(argv[++i]);
    else if (strcmp(argv[i], "--peak-bf16") == 0 && i + 1 < argc) peak[2] = atof(argv[++i]);
    else if (argv[i][0] != '-' && !out) out = argv[i];
    else {
      fprintf(stderr, "usage: gemm_sweep [--device N] [--peak-fp32 T --peak-tf32 T --peak-bf16 T] OUT.json\n");
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "gemm_sweep: no output file\n");
    return 2;
  }
  char err[512];
  CxDeviceOps *ops = cx_cuda_open(device, err, sizeof err);
  if (!ops) {
    fprintf(stderr, "gemm_sweep: %s\n", err);
    return 77;
  }
  char name[256];
  snprintf(name, sizeof name, "%s", cx_cuda_name(ops));
  cx_cuda_close(ops); /* cx_cuda_gemm_tflops opens the device itself */
  GemmPoint pt[3][NNK * NM];
  GemmSweep sw[3];
  for (int p = 0; p < 3; p++) {
    sw[p] = (GemmSweep){.name = names[p], .pt = pt[p], .n = 0, .peak_tflops = peak[p]};
    for (int a = 0; a < NNK; a++)
      for (int j = 0; j < NM; j++) {
        int M = ms[j], N = nks[a], K = nks[a];
        double tf = cx_cuda_gemm_tflops(device, types[p], M, N, K, err, sizeof err);
        if (tf <= 0) {
          fprintf(stderr, "gemm_sweep: %s %dx%dx%d: %s\n", names[p], M, N, K, err);
          continue;
        }
        pt[p][sw[p].n++] = (GemmPoint){M, N, K, 2.0 * M * N * (double)K / (tf * 1e12)};
      }
    double lat, rate;
    if (!gemm_fit(pt[p], sw[p].n, &lat, &rate)) {
      printf("%s: too few GEMMs timed to fit (%d); left out of %s\n", names[p], sw[p].n, out);
      continue;
    }
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
  return 0;
}
