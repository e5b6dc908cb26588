/* tests/cudagen/cudagen_util.c — see cudagen_util.h. */
#include "cudagen_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *cg_read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
  if (s && n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
  fclose(f);
  return s;
}

bool cg_golden(const char *path, const char *got) {
  if (getenv("PD2BW_REGEN")) {
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "  %s: cannot write\n", path), false;
    fputs(got, f);
    printf("  regenerated %s\n", path);
    return fclose(f) == 0;
  }
  char *want = cg_read_all(path);
  if (!want) return fprintf(stderr, "  %s: cannot read\n", path), false;
  bool same = strcmp(want, got) == 0;
  if (!same) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    fprintf(stderr, "  %s differs from the generated text at byte %zu (PD2BW_REGEN=1 to accept)\n", path, i);
  }
  free(want);
  return same;
}

const cJSON *cg_next_launch(const cJSON *list, const cJSON *en) {
  const cJSON *fwd = cJSON_GetObjectItem(list, "forward"), *bwd = cJSON_GetObjectItem(list, "backward");
  if (!en) return fwd && fwd->child ? fwd->child : bwd ? bwd->child : NULL;
  if (en->next) return en->next;
  /* the end of an array: forward's goes on to backward's first */
  const cJSON *first = en;
  while (first->prev && first->prev->next) first = first->prev; /* cJSON: child->prev is the last */
  return fwd && first == fwd->child && bwd ? bwd->child : NULL;
}
