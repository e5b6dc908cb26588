/* runtime/core/json_read.h — reading plan.json with errors that name the file, the key
 * and the value ("plan/plan.json: config.microbatches = 1099511627776: must be
 * 1..1048576"). Private to runtime/: the one-stage plan reader (plan_read.c) and the
 * pipeline's (pipeline_plan.c) share it. The first failure sticks; later calls
 * return their defaults, so a reader checks `failed` once at the end. Every number
 * is read with its documented range (docs/plan-format.md, "What the runtime
 * checks"), so no value reaches an allocation size unchecked. */
#ifndef PD2BW_RUNTIME_JSON_READ_H
#define PD2BW_RUNTIME_JSON_READ_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest integer a JSON number (a double) holds exactly: 2^53. */
#define JR_INT_MAX ((int64_t)1 << 53)

typedef struct JsonRd {
  const char *file;
  char *err;
  size_t errlen;
  bool failed;
} JsonRd;

/* Records "file: path: what" in err (the first failure only). */
void jr_fail(JsonRd *r, const char *path, const char *what);
/* Records "file: path.key = VALUE: what" (VALUE as JSON, control characters shown
 * as \uXXXX). */
void jr_fail_value(JsonRd *r, const char *path, const char *key, const cJSON *v, const char *what);
/* o[key], or NULL after "path.key: missing". */
const cJSON *jr_get(JsonRd *r, const cJSON *o, const char *path, const char *key);
/* An integer in [lo, hi]; a missing optional key gives dflt. */
int64_t jr_int(JsonRd *r, const cJSON *o, const char *path, const char *key, int64_t lo, int64_t hi, int64_t dflt,
               bool required);
/* jr_int over 0..JR_INT_MAX. */
int64_t jr_count(JsonRd *r, const cJSON *o, const char *path, const char *key, int64_t dflt, bool required);
/* A finite number x with lo <= x (lo < x when lo_open) and x < hi (x <= hi when
 * hi_closed; hi = INFINITY: no upper bound). */
double jr_real(JsonRd *r, const cJSON *o, const char *path, const char *key, double lo, bool lo_open, double hi,
               bool hi_closed, double dflt, bool required);
/* A string; missing with dflt == NULL is an error. */
const char *jr_str(JsonRd *r, const cJSON *o, const char *path, const char *key, const char *dflt);
/* true only for a JSON true; anything but a boolean or absence is an error. */
bool jr_bool(JsonRd *r, const cJSON *o, const char *path, const char *key);

/* Parses text as JSON. A string holding U+0000 is refused by name: cJSON would cut
 * it at the NUL ("gpipe\u0000junk" would read as "gpipe"), so such escapes become
 * U+0001 before parsing and jr_check_strings finds them. NULL (bad JSON) with err
 * set; out of memory never returns (cJSON allocates through pd_malloc's path). */
cJSON *jr_parse(JsonRd *r, const char *text, size_t len);
/* Every key and string value in the tree is free of control characters (U+0000 to
 * U+001F): no field pd2bwc writes has one. */
void jr_check_strings(JsonRd *r, const cJSON *root);

#endif
