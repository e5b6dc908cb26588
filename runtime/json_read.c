/* runtime/json_read.c — see json_read.h. */
#include "runtime/json_read.h"

#include <stdio.h>
#include <string.h>


void jr_fail(JsonRd *r, const char *path, const char *what) {
  if (r->failed) return;
  r->failed = true;
  snprintf(r->err, r->errlen, "%s: %s: %s", r->file, path, what);
}

const cJSON *jr_get(JsonRd *r, const cJSON *o, const char *path, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) {
    char b[512];
    snprintf(b, sizeof b, "%s%s%s", path, *path ? "." : "", key);
    jr_fail(r, b, "missing");
  }
  return v;
}

double jr_num(JsonRd *r, const cJSON *o, const char *path, const char *key, double dflt, bool required) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  char b[512];
  snprintf(b, sizeof b, "%s%s%s", path, *path ? "." : "", key);
  if (!v) {
    if (required) jr_fail(r, b, "missing");
    return dflt;
  }
  if (!cJSON_IsNumber(v)) {
    jr_fail(r, b, "expected a number");
    return dflt;
  }
  return v->valuedouble;
}

int64_t jr_count(JsonRd *r, const cJSON *o, const char *path, const char *key, int64_t dflt, bool required) {
  double d = jr_num(r, o, path, key, (double)dflt, required);
  if (d < 0 || d != (double)(int64_t)d || d > 9e15) {
    char b[512];
    snprintf(b, sizeof b, "%s.%s", path, key);
    jr_fail(r, b, "expected a non-negative integer");
    return dflt;
  }
  return (int64_t)d;
}

const char *jr_str(JsonRd *r, const cJSON *o, const char *path, const char *key, const char *dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v && dflt) return dflt;
  char b[512];
  snprintf(b, sizeof b, "%s%s%s", path, *path ? "." : "", key);
  if (!v) {
    jr_fail(r, b, "missing");
    return "";
  }
  if (!cJSON_IsString(v)) {
    jr_fail(r, b, "expected a string");
    return "";
  }
  return v->valuestring;
}

bool jr_flag(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return v && cJSON_IsTrue(v);
}

