/* bench/gpu/gemm_fit.c — see gemm_fit.h. */
#include "bench/gpu/gemm_fit.h"

#include <cjson/cJSON.h>
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
