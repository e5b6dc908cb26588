/* passes/plan_profile.c — measured compute times (--profile FILE) replace the
 * roofline. Format (docs/plan-format.md, "Profile files"):
 *   {"version": 1, "microbatch_size": 4,
 *    "segments": [{"name": "h.0", "forward_s": 0.0012, "backward_s": 0.0025}, ...],
 *    "ops":      [{"segment": "h.0", "forward_s": ..., "backward_s": ...}, ...]}
 * Times are seconds per microbatch of microbatch_size samples (an entry may carry
 * its own "microbatch_size"); per-op entries are summed into their segment. Compute
 * is taken as linear in b, which is what the roofline assumes too.
 */
#include "passes/planner.h"

#include <cjson/cJSON.h>
#include <string.h>

static bool bad(Diag *d, const char *path, const char *what) {
  Loc l = {path, 1, 1};
  diag_error(d, l, "bad profile: %s", what);
  return false;
}

static int find_seg(const PlanInput *in, const char *name) {
  for (int i = 0; i < in->nsegs; i++)
    if (strcmp(in->segs[i].name, name) == 0) return i;
  return -1;
}

static bool apply(PlanInput *in, const cJSON *arr, const char *key, double b0, double *fw,
                  double *bw, bool *seen, const char *path, Diag *d) {
  if (!arr) return true;
  if (!cJSON_IsArray(arr)) return bad(d, path, "\"segments\" and \"ops\" must be arrays");
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, key);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "forward_s");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "backward_s");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(e, "microbatch_size");
    if (!cJSON_IsString(name) || !cJSON_IsNumber(f) || !cJSON_IsNumber(b))
      return bad(d, path, "every entry needs a name (or segment), forward_s and backward_s");
    double bs = cJSON_IsNumber(mb) ? mb->valuedouble : b0;
    if (!(bs >= 1) || f->valuedouble < 0 || b->valuedouble < 0)
      return bad(d, path, "times must be >= 0 and microbatch_size >= 1");
    int s = find_seg(in, name->valuestring);
    if (s < 0) {
      char msg[256];
      snprintf(msg, sizeof msg, "unknown segment '%s'", name->valuestring);
      return bad(d, path, msg);
    }
    fw[s] += f->valuedouble / bs;
    bw[s] += b->valuedouble / bs;
    seen[s] = true;
  }
  return true;
}

bool plan_profile_load(PlanInput *in, const char *path, Diag *d) {
  Arena *a = arena_create();
  Source src;
  bool ok = false;
  if (!source_read(a, d, path, &src)) goto done;
  cJSON *j = cJSON_ParseWithLength(src.text, src.len);
  if (!j) {
    bad(d, path, "not valid JSON");
    goto done;
  }
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "microbatch_size");
  if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
    bad(d, path, "expected \"version\": 1");
  } else {
    double b0 = cJSON_IsNumber(mb) ? mb->valuedouble : 1;
    double *fw = pd_calloc((size_t)in->nsegs + 1, sizeof(double));
    double *bw = pd_calloc((size_t)in->nsegs + 1, sizeof(double));
    bool *seen = pd_calloc((size_t)in->nsegs + 1, sizeof(bool));
    ok = apply(in, cJSON_GetObjectItemCaseSensitive(j, "segments"), "name", b0, fw, bw, seen, path, d) &&
         apply(in, cJSON_GetObjectItemCaseSensitive(j, "ops"), "segment", b0, fw, bw, seen, path, d);
    if (ok)
      for (int s = 0; s < in->nsegs; s++)
        if (seen[s]) in->segs[s].fwd_time_s = fw[s], in->segs[s].bwd_time_s = bw[s];
    free(fw), free(bw), free(seen);
  }
  cJSON_Delete(j);
done:
  arena_destroy(a);
  return ok;
}
