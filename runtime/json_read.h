/* runtime/json_read.h — reading plan.json with errors that name the file and the
 * key ("plan/plan.json: stages[1].memory.total_bytes: expected a non-negative
 * integer"). Private to runtime/: the one-stage plan reader (plan_read.c) and the
 * pipeline's (pipeline_plan.c) share it. The first failure sticks; later calls
 * return their defaults, so a reader checks `failed` once at the end. */
#ifndef PD2BW_RUNTIME_JSON_READ_H
#define PD2BW_RUNTIME_JSON_READ_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct JsonRd {
  const char *file;
  char *err;
  size_t errlen;
  bool failed;
} JsonRd;

/* Records "file: path: what" in err (the first failure only). */
void jr_fail(JsonRd *r, const char *path, const char *what);
/* o[key], or NULL after "path.key: missing". */
const cJSON *jr_get(JsonRd *r, const cJSON *o, const char *path, const char *key);
/* Numbers; a missing optional key gives dflt. */
double jr_num(JsonRd *r, const cJSON *o, const char *path, const char *key, double dflt, bool required);
int64_t jr_count(JsonRd *r, const cJSON *o, const char *path, const char *key, int64_t dflt, bool required);
/* A string; missing with dflt == NULL is an error. */
const char *jr_str(JsonRd *r, const cJSON *o, const char *path, const char *key, const char *dflt);
/* true only for a JSON true. */
bool jr_flag(const cJSON *o, const char *key);

#endif
