/* frontend/names.c — a small string-keyed hash map (contract_fnv1a, linear probing) so
 * name lookups stay O(1) however many names a (fuzzed) file declares. */
#include <string.h>

#include "contract/contract.h"
#include "frontend/lower.h"

static uint64_t hash(const char *s) { return contract_fnv1a(CONTRACT_FNV_BASIS, s, strlen(s)); }

int namemap_get(const NameMap *m, const char *key) {
  if (m->cap == 0) return -1;
  for (size_t i = hash(key) & (size_t)(m->cap - 1);; i = (i + 1) & (size_t)(m->cap - 1)) {
    if (!m->keys[i]) return -1;
    if (strcmp(m->keys[i], key) == 0) return m->vals[i];
  }
}

void namemap_put(Arena *a, NameMap *m, const char *key, int val) {
  if (2 * (m->n + 1) > m->cap) {
    NameMap bigger = {0};
    bigger.cap = m->cap ? 2 * m->cap : 64;
    bigger.keys = arena_alloc(a, (size_t)bigger.cap * sizeof *bigger.keys);
    bigger.vals = arena_alloc(a, (size_t)bigger.cap * sizeof *bigger.vals);
    for (int i = 0; i < m->cap; i++)
      if (m->keys[i]) namemap_put(a, &bigger, m->keys[i], m->vals[i]);
    *m = bigger;
  }
  size_t i = hash(key) & (size_t)(m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (size_t)(m->cap - 1);
  if (!m->keys[i]) {
    m->keys[i] = key;
    m->n++;
  }
  m->vals[i] = val;
}
