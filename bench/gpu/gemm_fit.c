/* bench/gpu/gemm_fit.c — see gemm_fit.h. */
#include "bench/gpu/gemm_fit.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir/ir.h"

bool gemm_fit(const GemmPoint *pt, int n, double *latency_s, double *rate_flops) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    double x = 2.0 * pt[i].m * (double)pt[i].n * pt[i].k, y = pt[i].seconds;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  double den = n * sxx - sx * sx;
  double slope = n > 1 && den > 0 ? (n * sxy - sx * sy) / den : 0;
  if (!(slope > 0)) return false;
  double lat = (sy - slope * sx) / n;
  *latency_s = lat > 0 ? lat : 0;
  *rate_flops = 1 / slope;
  return true;
}

char *gemm_sweep_json(const char *device, const GemmSweep *sw, int nsw) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "device", device);
  cJSON *g = cJSON_AddObjectToObject(root, "gemm");
  for (int p = 0; p < nsw; p++) {
    double lat, rate;
    if (!gemm_fit(sw[p].pt, sw[p].n, &lat, &rate)) continue;
    cJSON *e = cJSON_AddObjectToObject(g, sw[p].name);
    cJSON *pts = cJSON_AddArrayToObject(e, "points");
    for (int i = 0; i < sw[p].n; i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "m", sw[p].pt[i].m);
      cJSON_AddNumberToObject(o, "n", sw[p].pt[i].n);
      cJSON_AddNumberToObject(o, "k", sw[p].pt[i].k);
      cJSON_AddNumberToObject(o, "seconds", sw[p].pt[i].seconds);
      cJSON_AddItemToArray(pts, o);
    }
    cJSON_AddNumberToObject(e, "latency_us", lat * 1e6);
    cJSON_AddNumberToObject(e, "rate_tflops", rate / 1e12);
    if (sw[p].peak_tflops > 0) cJSON_AddNumberToObject(e, "efficiency", rate / 1e12 / sw[p].peak_tflops);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  PD_CHECK(text != NULL, "(cJSON_Print)");
  return text;
}

char *gpu_cluster_text(const GpuCalibration *c) {
  static const char *const prec[3] = {"fp32", "tf32", "bf16"};
  size_t cap = 4096;
  char *t = malloc(cap);
  if (!t) return NULL;
  double peak[3];
  for (int p = 0; p < 3; p++) peak[p] = c->peak_tflops[p] > 0 ? c->peak_tflops[p] : c->rate_tflops[p];
  double eff = c->rate_tflops[2] > 0 && peak[2] > 0 ? c->rate_tflops[2] / peak[2] : 1;
  char dev[128]; /* a model-language string: no quote, no backslash, no control character */
  size_t j = 0;
  for (const char *q = c->device; *q && j + 1 < sizeof dev; q++) dev[j++] = *q == '"' || *q == '\\' || (unsigned char)*q < 32 ? '_' : *q;
  dev[j] = 0;
  int n = snprintf(t, cap,
                   "# %s, measured by scripts/gpu-check.sh's calibration (bench/gpu/gemm_sweep) on %s.\n"
                   "# cuBLAS fitted rates (t = latency + FLOPs / rate over the sweep and the GPT shapes):\n",
                   dev, c->when);
  for (int p = 0; p < 3; p++)
    n += snprintf(t + n, cap - (size_t)n, "#   %s: %.1f TFLOP/s (peak %s %.1f)\n", prec[p], c->rate_tflops[p],
                  c->peak_tflops[p] > 0 ? "given" : "unknown, the rate:", peak[p]);
  n += snprintf(t + n, cap - (size_t)n,
                "#   bf16 fixed cost %.1f us per GEMM; device-to-device copy %.1f GB/s; an empty kernel %.2f us\n"
                "# intra_node_gbs and inter_node_gbs are not measured: the links as gpu-check was told.\n"
                "cluster gpu {\n  nodes = 1;\n  devices_per_node = %d;\n  device = \"%s\";\n  memory_gib = %.1f;\n",
                c->latency_us, c->copy_gbs, c->launch_us, c->devices, dev, c->memory_gib);
  for (int p = 0; p < 3; p++)
    if (peak[p] > 0) n += snprintf(t + n, cap - (size_t)n, "  tflops_%s = %.4g;\n", prec[p], peak[p]);
  n += snprintf(t + n, cap - (size_t)n,
                "  gemm_efficiency = %.3f;\n  gemm_latency_us = %.3g;\n  launch_us = %.3g;\n  memory_gbs = %.4g;\n"
                "  intra_node_gbs = %.4g;\n  inter_node_gbs = %.4g;\n}\n",
                eff > 1 ? 1 : eff, c->latency_us > 1e-3 ? c->latency_us : 1e-3, c->launch_us > 1e-3 ? c->launch_us : 1e-3,
                2 * c->copy_gbs, c->intra_gbs, c->inter_gbs);
  if (n < 0 || (size_t)n >= cap) {
    free(t);
    return NULL;
  }
  return t;
}
