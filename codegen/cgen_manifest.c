/* codegen/cgen_manifest.c — the manifest: what a stage program tells the runtime about
 * itself, so that plan.json cannot say otherwise (docs/plan-format.md, "The manifest").
 *
 * A stageN.c addresses every tensor by a literal offset in a block of a literal size,
 * so the program, not plan.json, decides the block sizes, where each parameter lives,
 * which tensors cross to the neighbouring stages and which parameters are tied. After
 * every program and its description in plan.json are made, codegen_manifest_stages
 * appends to each program, as data it compiles (pd2bw_manifest, returned by
 * pd2bw_stage_manifest()), {"stages": [{"stage", "program", "tied"}]} for every stage
 * that runs it: "program" is the stage's plan.json program less the keys that name or
 * measure the C file itself (`kept` below lists the rest; "cuda" pins the launch list
 * too), "tied" the plan's tied groups holding the stage. The runtime
 * (runtime/core/plan_manifest.c) reads it back from the text whose hash plan.json
 * records and refuses a plan that differs. Invariant: the program's hash changes with
 * the manifest, so plan.json's "hash" of every stage running it is rewritten here. */
#include "codegen/cgen_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The program keys the manifest keeps (every other key names or measures files). */
static const char *const kept[] = {"rng_base", "real_bytes", "microbatch_size", "blocks", "params",
                                   "inputs",   "loss",       "pipeline",        "cuda"};

static cJSON *stage_entry(const cJSON *st, int i, const cJSON *tied) {
  const cJSON *prog = cJSON_GetObjectItemCaseSensitive(st, "program");
  cJSON *e = cJSON_CreateObject(), *p = cJSON_CreateObject();
  cJSON_AddNumberToObject(e, "stage", i);
  for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(prog, kept[k]);
    if (v) cJSON_AddItemToObject(p, kept[k], cJSON_Duplicate(v, true));
  }
  cJSON_AddItemToObject(e, "program", p);
  if (!tied) return e;
  cJSON *t = cJSON_AddArrayToObject(e, "tied");
  const cJSON *g;
  cJSON_ArrayForEach(g, tied) {
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(g, "stages"), *s;
    bool holds = false;
    cJSON_ArrayForEach(s, ss) holds = holds || (cJSON_IsNumber(s) && s->valuedouble == i);
    if (!holds) continue;
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToObject(x, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(g, "name"), true));
    cJSON_AddItemToObject(x, "stages", cJSON_Duplicate(ss, true));
    cJSON_AddItemToArray(t, x);
  }
  return e;
}

/* JSON text as the body of a C string literal ('?' escaped: no trigraphs). */
static void c_string(Str *s, const char *json) {
  str_printf(s, "  \"");
  for (const char *c = json; *c; c++)
    str_printf(s, "%s%c", *c == '"' || *c == '\\' || *c == '?' ? "\\" : "", *c);
  str_printf(s, "\"\n");
}

static const char *source_of(const cJSON *st) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "program"),
                                                               "source"));
}

/* Appends the manifest of the stages running `name` to dir/name; their new hash in hash[17]. */
static bool append_manifest(const char *dir, const char *name, const cJSON *stages, const cJSON *tied,
                            char hash[17], Diag *d) {
  size_t plen = strlen(dir) + strlen(name) + 2;
  char *path = pd_malloc(plen);
  snprintf(path, plen, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  Str s = {0};
  bool ok = f != NULL && fseek(f, 0, SEEK_END) == 0;
  long size = ok ? ftell(f) : -1;
  ok = ok && size >= 0 && fseek(f, 0, SEEK_SET) == 0;
  if (ok) {
    s.cap = (size_t)size + 1;
    s.p = pd_malloc(s.cap);
    s.n = fread(s.p, 1, (size_t)size, f);
    s.p[s.n] = 0;
    ok = s.n == (size_t)size;
  }
  if (f) fclose(f);
  if (!ok) {
    free(s.p);
    diag_error(d, (Loc){path, 0, 0}, "cannot read back: %s", strerror(errno));
    free(path);
    return false;
  }
  str_printf(&s, "\n/* ==== manifest: the stages this program runs, as plan.json must describe them\n"
                 " * (codegen/cgen_manifest.c; the runtime refuses a plan that says otherwise) ==== */\n"
                 "static const char pd2bw_manifest[] =\n");
  c_string(&s, "{\"stages\": [");
  int i = 0, n = 0;
  const cJSON *st;
  cJSON_ArrayForEach(st, stages) {
    const char *src = source_of(st);
    if (src && strcmp(src, name) == 0) {
      cJSON *e = stage_entry(st, i, tied);
      char *text = cJSON_PrintUnformatted(e);
      size_t len = strlen(text);
      text = pd_realloc(text, len + 2);
      if (n++) memmove(text + 1, text, len + 1), text[0] = ',';
      c_string(&s, text);
      free(text);
      cJSON_Delete(e);
    }
    i++;
  }
  c_string(&s, "]}");
  str_printf(&s, ";\nconst char *pd2bw_stage_manifest(void);\n"
                 "const char *pd2bw_stage_manifest(void) { return pd2bw_manifest; }\n");
  codegen_hash_hex(s.p, strlen(s.p), hash);
  ok = cgen_write_file(path, s.p, strlen(s.p), d);
  free(s.p);
  free(path);
  return ok;
}

bool codegen_manifest_stages(const char *dir, cJSON *stages, const cJSON *tied, Diag *d) {
  int n = cJSON_GetArraySize(stages), ndone = 0;
  const char **done = pd_calloc((size_t)n + 1, sizeof *done); /* the programs done: a few, however deep */
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    const char *name = source_of(cJSON_GetArrayItem(stages, i));
    bool first = name != NULL;
    for (int j = 0; j < ndone && first; j++) first = strcmp(done[j], name) != 0;
    if (!first) continue;
    done[ndone++] = name;
    char hash[17];
    ok = append_manifest(dir, name, stages, tied, hash, d);
    for (int j = i; j < n && ok; j++) {
      cJSON *prog = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(stages, j), "program");
      const char *o = source_of(cJSON_GetArrayItem(stages, j));
      if (o && strcmp(o, name) == 0) cJSON_ReplaceItemInObjectCaseSensitive(prog, "hash", cJSON_CreateString(hash));
    }
  }
  free(done);
  return ok;
}
