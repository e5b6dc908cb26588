/* runtime/core/plan_manifest.c — plan.json checked against the programs it names.
 *
 * A stage program is compiled with every block size, parameter offset and boundary
 * tensor as a literal; plan.json only describes them. So each program carries a
 * manifest (codegen/cgen_manifest.c: the description of every stage that runs it, as
 * a C string it compiles), and the plan reader compares the stage's plan.json entry
 * with it, key by key (rt_manifest_check). A plan.json that does not describe its
 * programs could make a program write outside a block or train another model. The
 * CUDA programs are made from the same layouts, pinned by the hashes in cuda, and
 * their launch lists' blocks are checked against the same program.blocks. */
#include "runtime/core/plan_manifest.h"

#include <stdlib.h>
#include <string.h>

#define MARK "static const char pd2bw_manifest[] =\n"
#define FIX "(plan.json does not describe the program it runs: restore it, or recompile the plan)"

/* The manifest's JSON text out of the program's C text (pd_malloc'd), or NULL. */
static char *extract(const char *src, size_t len) {
  const char *at = NULL;
  size_t ml = strlen(MARK);
  for (size_t i = 0; i + ml <= len && !at; i++)
    if (src[i] == 's' && memcmp(src + i, MARK, ml) == 0) at = src + i + ml;
  if (!at) return NULL;
  const char *end = src + len;
  char *out = pd_malloc((size_t)(end - at) + 1);
  size_t n = 0;
  while (at < end) {
    while (at < end && *at == ' ') at++;
    if (at >= end || *at != '"') break; /* the closing ";" */
    for (at++; at < end && *at != '"'; at++) {
      if (*at == '\\' && at + 1 < end) at++;
      out[n++] = *at;
    }
    while (at < end && *at != '\n') at++;
    at++;
  }
  out[n] = 0;
  return out;
}

static void show(const cJSON *v, char *b, size_t n) {
  char *t = v ? cJSON_PrintUnformatted(v) : NULL;
  snprintf(b, n, "%s", t ? t : "(none)");
  if (t && strlen(t) >= n && n > 4) memcpy(b + n - 4, "...", 4);
  free(t);
}

/* The first place where plan.json's `have` differs from the program's `want`: its
 * path appended to path[cap]; NULL when they agree. Keys of `have` the manifest does
 * not hold (source, hash, cuda, flops, ...) are not compared. */
static bool differs(const cJSON *want, const cJSON *have, char *path, size_t cap, const cJSON **w,
                    const cJSON **h) {
  size_t at = strlen(path);
  *w = want, *h = have;
  if (cJSON_IsObject(want)) {
    if (!cJSON_IsObject(have)) return true;
    const cJSON *k;
    cJSON_ArrayForEach(k, want) {
      snprintf(path + at, cap - at, ".%s", k->string);
      if (differs(k, cJSON_GetObjectItemCaseSensitive(have, k->string), path, cap, w, h)) return true;
    }
    path[at] = 0;
    return false;
  }
  if (cJSON_IsArray(want)) {
    if (!cJSON_IsArray(have) || cJSON_GetArraySize(have) != cJSON_GetArraySize(want)) return true;
    for (int i = 0; i < cJSON_GetArraySize(want); i++) {
      snprintf(path + at, cap - at, "[%d]", i);
      if (differs(cJSON_GetArrayItem(want, i), cJSON_GetArrayItem(have, i), path, cap, w, h)) return true;
    }
    path[at] = 0;
    return false;
  }
  return !have || !cJSON_Compare(want, have, true);
}

static const cJSON *entry_of(const cJSON *man, int i, char *stages, size_t n) {
  const cJSON *e, *all = cJSON_GetObjectItemCaseSensitive(man, "stages");
  size_t at = 0;
  stages[0] = 0;
  cJSON_ArrayForEach(e, all) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(e, "stage");
    if (cJSON_IsNumber(s) && s->valuedouble == i) return e;
    if (cJSON_IsNumber(s) && at + 16 < n) at += (size_t)snprintf(stages + at, n - at, "%s%d", at ? ", " : "", s->valueint);
  }
  return NULL;
}

static bool holds(const cJSON *g, int i) {
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(g, "stages")) if (cJSON_IsNumber(s) && s->valuedouble == i) return true;
  return false;
}

/* The stage's tied groups: the manifest's against plan.json's "tied" entries holding it. */
static void check_tied(JsonRd *r, const cJSON *mine, const cJSON *tied, int i, const char *name) {
  const cJSON *g, *p;
  char m[700], a[200], b[200];
  cJSON_ArrayForEach(g, mine) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(g, "name");
    const cJSON *found = NULL;
    int k = 0, at = -1;
    cJSON_ArrayForEach(p, tied) {
      if (!found && cJSON_Compare(nm, cJSON_GetObjectItemCaseSensitive(p, "name"), true)) found = p, at = k;
      k++;
    }
    show(nm, a, sizeof a);
    show(cJSON_GetObjectItemCaseSensitive(g, "stages"), b, sizeof b);
    if (!found) {
      snprintf(m, sizeof m, "the program %s holds %s tied over stages %s; plan.json has no such group " FIX, name, a, b);
      jr_fail(r, "tied", m);
      return;
    }
    if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(g, "stages"), cJSON_GetObjectItemCaseSensitive(found, "stages"), true)) {
      char path[300], c[200];
      show(cJSON_GetObjectItemCaseSensitive(found, "stages"), c, sizeof c);
      snprintf(path, sizeof path, "tied[%d].stages = %s", at, c);
      snprintf(m, sizeof m, "the program %s ties %s over stages %s " FIX, name, a, b);
      jr_fail(r, path, m);
      return;
    }
  }
  int k = 0;
  cJSON_ArrayForEach(p, tied) {
    bool known = false;
    cJSON_ArrayForEach(g, mine) known = known || cJSON_Compare(cJSON_GetObjectItemCaseSensitive(g, "name"),
                                                               cJSON_GetObjectItemCaseSensitive(p, "name"), true);
    if (holds(p, i) && !known) {
      char path[64];
      snprintf(path, sizeof path, "tied[%d]", k);
      snprintf(m, sizeof m, "stage %d's program %s ties no such parameter " FIX, i, name);
      jr_fail_value(r, path, "name", cJSON_GetObjectItemCaseSensitive(p, "name"), m);
      return;
    }
    k++;
  }
}

void rt_manifest_cache_free(RtManifestCache *c) {
  cJSON_Delete(c->man);
  c->man = NULL;
  c->hash[0] = 0;
}

/* Compares stage i's plan.json entry with the manifest in the text whose hash
 * plan.json records (the text that is compiled): rng_base, real_bytes,
 * microbatch_size, blocks, params (name, shape, numel, offset, bytes, init, std, decay,
 * has_grad), inputs, loss, pipeline.boundary, cuda (the stage's CUDA files and their
 * hashes, its rng_base, ...), and the tied groups holding the stage. The first
 * difference fails r with the field, plan.json's value and the program's. */
void rt_manifest_check(JsonRd *r, RtManifestCache *c, const char *src, size_t len, const char *hash,
                       const char *name, int i, const cJSON *stage, const cJSON *tied) {
  if (r->failed) return;
  const cJSON *prog = cJSON_GetObjectItemCaseSensitive(stage, "program");
  char path[600], m[900], a[200];
  snprintf(path, sizeof path, "stages[%d]%s", i, prog ? ".program" : "");
  if (!prog) prog = stage;
  if (!c->man || strcmp(c->hash, hash) != 0) {
    rt_manifest_cache_free(c);
    char *text = extract(src, len);
    c->man = text ? cJSON_Parse(text) : NULL;
    free(text);
    snprintf(c->hash, sizeof c->hash, "%s", hash);
  }
  const cJSON *man = c->man;
  if (!man) {
    snprintf(m, sizeof m, "the program %s has no manifest (made by an older pd2bwc, or edited): recompile the plan", name);
    jr_fail(r, path, m);
    return;
  }
  char others[200];
  const cJSON *e = entry_of(man, i, others, sizeof others);
  const cJSON *w, *h;
  if (!e) {
    snprintf(m, sizeof m, "the program of stage%s %s, not of stage %d " FIX, strchr(others, ',') ? "s" : "", others, i);
    jr_fail_value(r, path, "source", cJSON_GetObjectItemCaseSensitive(prog, "source"), m);
  } else if (differs(cJSON_GetObjectItemCaseSensitive(e, "program"), prog, path, sizeof path, &w, &h)) {
    show(w, a, sizeof a);
    if (cJSON_IsArray(w) && cJSON_IsArray(h)) {
      snprintf(m, sizeof m, "%d entries; the program %s was compiled with %d " FIX, cJSON_GetArraySize(h), name,
               cJSON_GetArraySize(w));
      jr_fail(r, path, m);
    } else if (!h) {
      snprintf(m, sizeof m, "missing; the program %s was compiled with %s " FIX, name, a);
      jr_fail(r, path, m);
    } else {
      snprintf(m, sizeof m, "the program %s was compiled with %s " FIX, name, a);
      jr_fail_value(r, path, "", h, m);
    }
  } else if (cJSON_GetObjectItemCaseSensitive(e, "tied")) {
    check_tied(r, cJSON_GetObjectItemCaseSensitive(e, "tied"), cJSON_IsArray(tied) ? tied : NULL, i, name);
  }
}
