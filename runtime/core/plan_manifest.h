/* runtime/core/plan_manifest.h — plan.json against the stage programs' manifests
 * (plan_manifest.c; codegen/cgen_manifest.c writes them). Private to runtime/core. */
#ifndef PD2BW_RUNTIME_PLAN_MANIFEST_H
#define PD2BW_RUNTIME_PLAN_MANIFEST_H

#include "runtime/core/json_read.h"
#include "runtime/core/runtime.h"

/* The last program's parsed manifest, keyed by the program's hash: the stages sharing
 * a program (a deep pipeline's middle ones, in a row) parse it once. */
typedef struct RtManifestCache {
  char hash[17];
  cJSON *man;
} RtManifestCache;

/* Stage i's plan.json object `stage` (its "program", or the object itself) and the
 * plan's `tied` array (NULL: none) against the manifest in the program text src[len]
 * whose hash is `hash` (`name` its file name, for messages): the first difference fails
 * r naming the field, plan.json's value and the program's. A program without a
 * manifest is refused. */
void rt_manifest_check(JsonRd *r, RtManifestCache *c, const char *src, size_t len, const char *hash,
                       const char *name, int i, const cJSON *stage, const cJSON *tied);
void rt_manifest_cache_free(RtManifestCache *c);

#endif
