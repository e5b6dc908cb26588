/* codegen/cgen_cuda_segments.c — a launch list's "segments" (format 5): per segment
 * of the stage (its regions, in order), how many of each pass's entries are its own,
 * so that the runtime can time each segment's launches (pd2bwrun --backend cuda
 * --profile-out: runtime/cuda/exec/cuda_profile.c).
 *
 *   "segments": {"forward": [n_0, ..., n_last], "backward": [n_0, ..., n_last]}
 *
 * The forward's entries run segment 0's first, the backward's the last segment's
 * first. An entry belongs to the region of its op ("op" + the pass's smallest op id):
 * codegen emits the stage region by region, so each region's entries are contiguous,
 * except that a residual add fused with the next region's layernorm is named by the
 * layernorm and so counts to the next region, of which it is then the first entry. */
#include "codegen/cgen_cuda_internal.h"

#include <limits.h>
#include <stdlib.h>

/* The counts of one pass, by region position; entries must run through the regions
 * in the pass's direction. */
static cJSON *counts(const Graph *g, const StageLayout *L, const cJSON *pass, int base, bool fwd) {
  int nseg = L->last_region - L->first_region + 1, at = fwd ? 0 : nseg - 1;
  int *n = pd_calloc((size_t)nseg, sizeof(int));
  const cJSON *en;
  cJSON_ArrayForEach(en, pass) {
    int id = base + cJSON_GetObjectItemCaseSensitive(en, "op")->valueint;
    PD_CHECK(id >= 0 && id < g->nops, "(launch entry of op %d)", id);
    int k = g->ops[id].region - L->first_region;
    PD_CHECK(k >= 0 && k < nseg && (fwd ? k >= at : k <= at),
             "(a %s launch of region position %d after one of %d: the pass is not emitted region by region)",
             fwd ? "forward" : "backward", k, at);
    n[at = k]++;
  }
  cJSON *arr = cJSON_CreateIntArray(n, nseg);
  free(n);
  return arr;
}

void cu_list_segments(const Graph *g, const StageLayout *L, cJSON *j) {
  int bbase = INT_MAX; /* the backward entries' op ids are relative to the smallest */
  for (int k = 0; k < L->nbwd; k++)
    if (L->bwd_ops[k] < bbase) bbase = L->bwd_ops[k];
  cJSON *s = cJSON_AddObjectToObject(j, "segments");
  cJSON_AddItemToObject(s, "forward",
                        counts(g, L, cJSON_GetObjectItemCaseSensitive(j, "forward"), codegen_rng_base(L), true));
  cJSON_AddItemToObject(s, "backward",
                        counts(g, L, cJSON_GetObjectItemCaseSensitive(j, "backward"), L->nbwd ? bbase : 0, false));
}
