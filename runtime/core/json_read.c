/* runtime/core/json_read.c — see json_read.h. */
#include "runtime/core/json_read.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

void jr_fail(JsonRd *r, const char *path, const char *what) {
  if (r->failed) return;
  r->failed = true;
  snprintf(r->err, r->errlen, "%s: %s: %s", r->file, path, what);
}

static void join(char *b, size_t n, const char *path, const char *key) {
  snprintf(b, n, "%s%s%s", path, *path && *key ? "." : "", key);
}

/* v as short JSON text: numbers with all their digits, strings quoted with control
 * characters escaped (the value that broke must be visible, not cut at a NUL). */
static void show(const cJSON *v, char *b, size_t n) {
  if (cJSON_IsNumber(v)) {
    /* integers in full, others in the fewest digits that read back the same */
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 1e19)
      snprintf(b, n, "%.0f", d);
    else
      for (int prec = 6; prec <= 17; prec++) {
        snprintf(b, n, "%.*g", prec, d);
        if (strtod(b, NULL) == d) break;
      }
  } else if (cJSON_IsString(v)) {
    size_t k = 0;
    b[k++] = '"';
    for (const unsigned char *c = (const unsigned char *)v->valuestring; *c && k + 10 < n; c++)
      k += *c < 0x20 || *c == '"' || *c == '\\'
               ? (size_t)snprintf(b + k, n - k, *c < 0x20 ? "\\u%04x" : "\\%c", *c == 1 ? 0 : *c)
               : (size_t)snprintf(b + k, n - k, "%c", *c);
    snprintf(b + k, n - k, "\"");
  } else if (cJSON_IsBool(v)) {
    snprintf(b, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
  } else {
    snprintf(b, n, "%s", cJSON_IsNull(v) ? "null" : cJSON_IsArray(v) ? "an array" : "an object");
  }
}

void jr_fail_value(JsonRd *r, const char *path, const char *key, const cJSON *v, const char *what) {
  if (r->failed) return;
  char p[512], val[200];
  join(p, sizeof p, path, key);
  show(v, val, sizeof val);
  r->failed = true;
  snprintf(r->err, r->errlen, "%s: %s = %s: %s", r->file, p, val, what);
}

const cJSON *jr_get(JsonRd *r, const cJSON *o, const char *path, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) {
    char b[512];
    join(b, sizeof b, path, key);
    jr_fail(r, b, "missing");
  }
  return v;
}

/* o[key] if it is a number; NULL (after a message when required or mistyped). */
static const cJSON *number(JsonRd *r, const cJSON *o, const char *path, const char *key, bool required) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) {
    if (required) jr_get(r, o, path, key);
    return NULL;
  }
  if (!cJSON_IsNumber(v)) {
    jr_fail_value(r, path, key, v, "expected a number");
    return NULL;
  }
  return v;
}

int64_t jr_int(JsonRd *r, const cJSON *o, const char *path, const char *key, int64_t lo, int64_t hi, int64_t dflt,
               bool required) {
  const cJSON *v = number(r, o, path, key, required);
  if (!v) return dflt;
  double d = v->valuedouble;
  if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) {
    char b[96];
    snprintf(b, sizeof b, "must be an integer %lld..%lld", (long long)lo, (long long)hi);
    jr_fail_value(r, path, key, v, b);
    return dflt;
  }
  return (int64_t)d;
}

int64_t jr_count(JsonRd *r, const cJSON *o, const char *path, const char *key, int64_t dflt, bool required) {
  return jr_int(r, o, path, key, 0, JR_INT_MAX, dflt, required);
}

double jr_real(JsonRd *r, const cJSON *o, const char *path, const char *key, double lo, bool lo_open, double hi,
               bool hi_closed, double dflt, bool required) {
  const cJSON *v = number(r, o, path, key, required);
  if (!v) return dflt;
  double d = v->valuedouble;
  bool ok = isfinite(d) && (lo_open ? d > lo : d >= lo) && (hi_closed ? d <= hi : d < hi);
  if (!ok) {
    char b[96];
    if (isinf(hi))
      snprintf(b, sizeof b, "must be a finite number %s %g", lo_open ? ">" : ">=", lo);
    else
      snprintf(b, sizeof b, "must be in %c%g, %g%c", lo_open ? '(' : '[', lo, hi, hi_closed ? ']' : ')');
    jr_fail_value(r, path, key, v, b);
    return dflt;
  }
  return d;
}

const char *jr_str(JsonRd *r, const cJSON *o, const char *path, const char *key, const char *dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v && dflt) return dflt;
  if (!v) {
    jr_get(r, o, path, key);
    return "";
  }
  if (!cJSON_IsString(v)) {
    jr_fail_value(r, path, key, v, "expected a string");
    return "";
  }
  return v->valuestring;
}

bool jr_bool(JsonRd *r, const cJSON *o, const char *path, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v && !cJSON_IsBool(v)) jr_fail_value(r, path, key, v, "expected true or false");
  return v && cJSON_IsTrue(v);
}

/* Rewrites every \u0000 escape (an odd run of backslashes before the u) to \u0001. */
static void mark_nul_escapes(char *t, size_t len) {
  for (size_t i = 0; i + 6 <= len; i++) {
    if (t[i] != '\\') continue;
    size_t run = 0;
    while (i + run < len && t[i + run] == '\\') run++;
    size_t u = i + run; /* the character after the run */
    if (run % 2 == 1 && u + 5 <= len && t[u] == 'u' && memcmp(t + u + 1, "0000", 4) == 0) t[u + 4] = '1';
    i = u - 1;
  }
}

cJSON *jr_parse(JsonRd *r, const char *text, size_t len) {
  char *copy = pd_malloc(len + 1);
  memcpy(copy, text, len);
  copy[len] = '\0';
  mark_nul_escapes(copy, len);
  /* NULL means bad JSON: a failed allocation never returns here (cJSON allocates
   * through ir/support.c's hook, which reports out of memory and exits) */
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, false);
  if (!root) {
    long at = end && end >= copy && end <= copy + len ? (long)(end - copy) : 0L;
    const char *ep = cJSON_GetErrorPtr();
    if (ep && ep >= copy && ep <= copy + len) at = (long)(ep - copy);
    r->failed = true;
    snprintf(r->err, r->errlen, "%s: not valid JSON (near byte %ld)", r->file, at);
  }
  free(copy);
  return root;
}

static void check_string(JsonRd *r, const char *path, const char *key, const cJSON *v, const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c < 0x20) {
      jr_fail_value(r, path, key, v, "a string with a NUL or control character (no plan field has one)");
      return;
    }
}

static void walk(JsonRd *r, const cJSON *o, const char *path) {
  int i = 0;
  for (const cJSON *c = o->child; c && !r->failed; c = c->next, i++) {
    char p[512];
    if (cJSON_IsObject(o)) {
      cJSON key = {.type = cJSON_String, .valuestring = c->string};
      check_string(r, path, "(a key)", &key, c->string);
      join(p, sizeof p, path, c->string);
    } else {
      snprintf(p, sizeof p, "%s[%d]", path, i);
    }
    if (cJSON_IsString(c)) check_string(r, p, "", c, c->valuestring);
    if (cJSON_IsObject(c) || cJSON_IsArray(c)) walk(r, c, p);
  }
}

void jr_check_strings(JsonRd *r, const cJSON *root) {
  if (cJSON_IsObject(root) || cJSON_IsArray(root)) walk(r, root, "");
}
