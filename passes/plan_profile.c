/* passes/plan_profile.c — measured compute times (--profile FILE) replace the
 * roofline. Format (docs/plan-format.md, "Profile files"):
 *   {"version": 1, "microbatch_size": 4,
 *    "segments": [{"name": "h.0", "forward_s": 0.0012, "backward_s": 0.0025}, ...],
 *    "ops":      [{"segment": "h.0", "forward_s": ..., "backward_s": ...}, ...]}
 *    "stages":   [{"segments": ["h.1", "h.2"], "forward_s": ..., "backward_s": ...}],
 *    "gemm":     {"bf16": {"latency_us": 22, "rate_tflops": 811}, ...}}
 * Times are seconds per microbatch of microbatch_size samples (an entry may carry
 * its own "microbatch_size"); per-op entries are summed into their segment; a
 * stage entry (what a pipeline run measures: one time per stage) is split over its
 * segments in proportion to their FLOPs. At another microbatch size the cost model
 * scales the measured time (plan_cost.c).
 */
#include "passes/planner.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

/* The file's text and its parse. */
typedef struct ProfileText {
  const char *path, *text;
  size_t len;
  cJSON *json;
} ProfileText;

/* Ceiling on a measured time: a microbatch taking more than 11 days is not a
 * measurement, and sums of such values would overflow to inf in the cost model. */
#define PROFILE_MAX_TIME_S 1e6
#define PROFILE_MAX_MICROBATCH 2147483647.0

/* ---- locations: cJSON keeps none, so the text is scanned for them ---------------- */

static Loc loc_at(const ProfileText *src, size_t at) {
  Loc l = {src->path, 1, 1};
  for (size_t i = 0; i < at && i < src->len; i++) {
    if (src->text[i] == '\n') l.line++, l.col = 1;
    else l.col++;
  }
  return l;
}

/* Skips a JSON string starting at its opening quote; returns the index past it. */
static size_t skip_string(const ProfileText *src, size_t i) {
  for (i++; i < src->len && src->text[i] != '"'; i++)
    if (src->text[i] == '\\') i++;
  return i + 1;
}

static size_t skip_space(const ProfileText *src, size_t i) {
  while (i < src->len && strchr(" \t\r\n", src->text[i])) i++;
  return i;
}

/* The offset of the value of top-level key `key` (depth 1 of the document), or
 * src->len when there is none. */
static size_t top_value(const ProfileText *src, const char *key) {
  size_t klen = strlen(key);
  int depth = 0;
  for (size_t i = 0; i < src->len; i++) {
    char c = src->text[i];
    if (c == '"') {
      size_t end = skip_string(src, i);
      size_t j = skip_space(src, end);
      if (depth == 1 && end - i == klen + 2 && memcmp(src->text + i + 1, key, klen) == 0 && j < src->len &&
          src->text[j] == ':')
        return skip_space(src, j + 1);
      i = end - 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
  return src->len;
}

/* Where element k of the top-level array `key` starts (the file when not found). */
static Loc entry_loc(const ProfileText *src, const char *key, int k) {
  size_t i = top_value(src, key);
  if (i >= src->len || src->text[i] != '[') return (Loc){src->path, 0, 0};
  int depth = 0, n = 0;
  size_t start = skip_space(src, i + 1);
  for (; i < src->len; i++) {
    char c = src->text[i];
    if (c == '"') {
      i = skip_string(src, i) - 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) break;
    } else if (c == ',' && depth == 1) {
      if (n++ == k) break;
      start = skip_space(src, i + 1);
    }
  }
  return n >= k ? loc_at(src, start) : (Loc){src->path, 0, 0};
}

static Loc key_loc(const ProfileText *src, const char *key) {
  size_t i = top_value(src, key);
  return i < src->len ? loc_at(src, i) : (Loc){src->path, 0, 0};
}

/* ---- values ------------------------------------------------------------------------ */

static bool time_ok(const cJSON *v) {
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 &&
         v->valuedouble <= PROFILE_MAX_TIME_S;
}

static bool microbatch_ok(double b) { return b >= 1 && b <= PROFILE_MAX_MICROBATCH && b == floor(b); }

static int find_seg(const PlanInput *in, const char *name) {
  for (int i = 0; i < in->nsegs; i++)
    if (strcmp(in->segs[i].name, name) == 0) return i;
  return -1;
}

static bool apply(PlanInput *in, const ProfileText *src, const char *list, const char *key, double b0, double *fw,
                  double *bw, bool *seen, Diag *d) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(src->json, list);
  if (!arr) return true;
  if (!cJSON_IsArray(arr)) {
    diag_error(d, key_loc(src, list), "bad profile: \"%s\" must be an array", list);
    return false;
  }
  const cJSON *e;
  int k = 0;
  cJSON_ArrayForEach(e, arr) {
    Loc at = entry_loc(src, list, k++);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, key);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "forward_s");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "backward_s");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(e, "microbatch_size");
    if (!cJSON_IsString(name) || !cJSON_IsNumber(f) || !cJSON_IsNumber(b)) {
      diag_error(d, at, "bad profile: every entry of \"%s\" needs \"%s\", \"forward_s\" and \"backward_s\"",
                 list, key);
      return false;
    }
    const cJSON *badt = !time_ok(f) ? f : !time_ok(b) ? b : NULL;
    if (badt) {
      diag_error(d, at, "bad profile: %s of '%.64s' is %g (expected seconds per microbatch, from 0 to %g)",
                 badt == f ? "forward_s" : "backward_s", name->valuestring, badt->valuedouble, PROFILE_MAX_TIME_S);
      return false;
    }
    if (mb && (!cJSON_IsNumber(mb) || !microbatch_ok(mb->valuedouble))) {
      diag_error(d, at, "bad profile: microbatch_size of '%.64s' must be an integer from 1 to %.0f", name->valuestring,
                 PROFILE_MAX_MICROBATCH);
      return false;
    }
    double bs = mb ? mb->valuedouble : b0;
    int s = find_seg(in, name->valuestring);
    if (s < 0) {
      diag_error(d, at, "bad profile: unknown segment '%.64s'", name->valuestring);
      return false;
    }
    fw[s] += f->valuedouble / bs;
    bw[s] += b->valuedouble / bs;
    seen[s] = true;
    in->segs[s].profile_b = (int64_t)bs;
  }
  return true;
}

/* "gemm": per precision {"latency_us", "rate_tflops"} (bench/gpu/gemm_sweep's file;
 * its "points" and "efficiency" are not needed here). */
static bool apply_gemm(PlanInput *in, const ProfileText *src, Diag *d) {
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(src->json, "gemm");
  if (!g) return true;
  if (!cJSON_IsObject(g)) {
    diag_error(d, key_loc(src, "gemm"), "bad profile: \"gemm\" must be an object of precisions");
    return false;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, g) {
    GemmType p;
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(e, "latency_us");
    const cJSON *rate = cJSON_GetObjectItemCaseSensitive(e, "rate_tflops");
    if (!gemm_type_parse(e->string, &p)) { /* fp32, tf32 or bf16 only */
      diag_error(d, key_loc(src, "gemm"), "bad profile: unknown GEMM precision '%.32s' (expected fp32, tf32, bf16)",
                 e->string);
      return false;
    }
    if (!cJSON_IsNumber(lat) || !cJSON_IsNumber(rate) || !isfinite(lat->valuedouble) || lat->valuedouble < 0 ||
        lat->valuedouble > 1e6 || !isfinite(rate->valuedouble) || !(rate->valuedouble > 0) ||
        rate->valuedouble > 1e9) {
      diag_error(d, key_loc(src, "gemm"), "bad profile: gemm.%s needs \"latency_us\" (0 to 1e6) and "
                 "\"rate_tflops\" (> 0, at most 1e9)", e->string);
      return false;
    }
    in->gemm_rate[p] = rate->valuedouble * 1e12;
    in->gemm_latency_s[p] = lat->valuedouble * 1e-6;
  }
  return true;
}

/* "stages": a stage's measured time split over its segments by their FLOPs. */
static bool apply_stages(PlanInput *in, const ProfileText *src, double b0, double *fw, double *bw, bool *seen,
                         Diag *d) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(src->json, "stages");
  if (!arr) return true;
  if (!cJSON_IsArray(arr)) {
    diag_error(d, key_loc(src, "stages"), "bad profile: \"stages\" must be an array");
    return false;
  }
  const cJSON *e;
  int k = 0;
  cJSON_ArrayForEach(e, arr) {
    Loc at = entry_loc(src, "stages", k++);
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(e, "segments");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "forward_s");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "backward_s");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(e, "microbatch_size");
    if (!cJSON_IsArray(names) || cJSON_GetArraySize(names) < 1 || !time_ok(f) || !time_ok(b)) {
      diag_error(d, at, "bad profile: every entry of \"stages\" needs \"segments\" (a non-empty array of "
                 "names), \"forward_s\" and \"backward_s\" (seconds per microbatch, from 0 to %g)",
                 PROFILE_MAX_TIME_S);
      return false;
    }
    if (mb && (!cJSON_IsNumber(mb) || !microbatch_ok(mb->valuedouble))) {
      diag_error(d, at, "bad profile: microbatch_size must be an integer from 1 to %.0f", PROFILE_MAX_MICROBATCH);
      return false;
    }
    double bs = mb ? mb->valuedouble : b0, ff = 0, fb = 0;
    int n = cJSON_GetArraySize(names);
    const cJSON *nm;
    cJSON_ArrayForEach(nm, names) {
      int s = cJSON_IsString(nm) ? find_seg(in, nm->valuestring) : -1;
      if (s < 0) {
        diag_error(d, at, "bad profile: unknown segment '%.64s'", cJSON_IsString(nm) ? nm->valuestring : "?");
        return false;
      }
      ff += in->segs[s].fwd_flops, fb += in->segs[s].bwd_flops;
    }
    cJSON_ArrayForEach(nm, names) {
      int s = find_seg(in, nm->valuestring);
      double sf = ff > 0 ? in->segs[s].fwd_flops / ff : 1.0 / n, sb = fb > 0 ? in->segs[s].bwd_flops / fb : 1.0 / n;
      fw[s] += f->valuedouble * sf / bs;
      bw[s] += b->valuedouble * sb / bs;
      seen[s] = true;
      in->segs[s].profile_b = (int64_t)bs;
    }
  }
  return true;
}

bool plan_profile_load(PlanInput *in, const char *path, Diag *d) {
  Arena *a = arena_create();
  Source src;
  bool ok = false;
  if (!source_read(a, d, path, &src)) goto done;
  ProfileText t = {src.path, src.text, src.len, cJSON_ParseWithLength(src.text, src.len)};
  if (!t.json) {
    diag_error(d, (Loc){path, 0, 0}, "bad profile: not valid JSON");
    goto done;
  }
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(t.json, "version");
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(t.json, "microbatch_size");
  if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
    diag_error(d, ver ? key_loc(&t, "version") : (Loc){path, 0, 0}, "bad profile: expected \"version\": 1");
  } else if (mb && (!cJSON_IsNumber(mb) || !microbatch_ok(mb->valuedouble))) {
    diag_error(d, key_loc(&t, "microbatch_size"), "bad profile: microbatch_size must be an integer from 1 to %.0f",
               PROFILE_MAX_MICROBATCH);
  } else {
    double b0 = mb ? mb->valuedouble : 1;
    double *fw = pd_calloc((size_t)in->nsegs + 1, sizeof(double));
    double *bw = pd_calloc((size_t)in->nsegs + 1, sizeof(double));
    bool *seen = pd_calloc((size_t)in->nsegs + 1, sizeof(bool));
    ok = apply(in, &t, "segments", "name", b0, fw, bw, seen, d) && apply(in, &t, "ops", "segment", b0, fw, bw, seen, d) &&
         apply_stages(in, &t, b0, fw, bw, seen, d) && apply_gemm(in, &t, d);
    if (ok)
      for (int s = 0; s < in->nsegs; s++)
        if (seen[s]) in->segs[s].fwd_time_s = fw[s], in->segs[s].bwd_time_s = bw[s];
    free(fw), free(bw), free(seen);
  }
  cJSON_Delete(t.json);
done:
  arena_destroy(a);
  return ok;
}
