/* runtime/core/plan_manifest.h — plan.json against the stage programs' manifests
 * (plan_manifest.c; codegen/cgen_manifest.c writes them). Private to runtime/core. */
#ifndef PD2BW_RUNTIME_PLAN_MANIFEST_H
#define PD2BW_RUNTIME_PLAN_MANIFEST_H

#include "runtime/core/json_read.h"
#include "runtime/core/runtime.h"

/* Stage i's plan.json object `stage` (its "program", or the object itself) and the
 * plan's `tied` array (NULL: none) against the manifest in the program text src[len]
 * (`name` its file name, for messages): the first difference fails r naming the field,
 * plan.json's value and the program's. A program without a manifest is refused. */
void rt_manifest_check(JsonRd *r, const char *src, size_t len, const char *name, int i, const cJSON *stage,
                       const cJSON *tied);

#endif
