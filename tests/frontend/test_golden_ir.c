/* tests/frontend/test_golden_ir.c — the IR of every bundled model, byte for byte.
 *
 * Each model is lowered with small overrides (so the files stay short) and
 * ir_dump()ed; the text must equal tests/golden/ir/<name>.ir. After an intended
 * change, regenerate with `PD2BW_REGEN=1 ctest -R frontend_golden_ir` (from the
 * build directory) and review the diff like code (tests/golden/README.md).
 */
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "frontend/frontend.h"
#include "test.h"

typedef struct Golden {
  const char *name;  /* tests/golden/ir/<name>.ir */
  const char *model; /* the model file */
  const char *overrides[4];
  int noverrides;
} Golden;

static const Golden goldens[] = {
    {"gpt", "models/gpt.model", {"layers=2"}, 1},
    {"tinygpt", "models/tinygpt.model", {"layers=2"}, 1},
    {"bert", "models/bert.model", {"layers=2"}, 1},
    {"mlp", "models/mlp.model", {NULL}, 0},
};

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0;
  FILE *out = open_memstream(&buf, &cap);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, n, out);
  fclose(f);
  fclose(out);
  *len = cap;
  return buf;
}

/* Writes through a temporary name so a failed run never leaves half a file. */
static bool write_file(const char *path, const char *text, size_t len) {
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return false;
  bool ok = fwrite(text, 1, len, f) == len;
  ok &= fclose(f) == 0;
  return ok && rename(tmp, path) == 0;
}

static bool regen;

static void check(const Golden *gd) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = frontend_load_model(a, &d, gd->model, gd->overrides, gd->noverrides);
  EXPECT(g != NULL);
  if (!g) {
    arena_destroy(a);
    return;
  }
  char *got = NULL;
  size_t got_len = 0;
  FILE *out = open_memstream(&got, &got_len);
  ir_dump(g, out);
  fclose(out);
  char path[256];
  snprintf(path, sizeof path, "tests/golden/ir/%s.ir", gd->name);
  if (regen) {
    EXPECT(write_file(path, got, got_len));
    printf("regenerated %s\n", path);
  } else {
    size_t want_len = 0;
    char *want = read_all(path, &want_len);
    EXPECT(want != NULL);
    bool same = want && want_len == got_len && memcmp(want, got, got_len) == 0;
    EXPECT(same);
    if (!same) {
      fprintf(stderr, "%s differs from the IR of %s; see it with\n"
                      "  pd2bwc %s --emit=ir ... or regenerate (tests/golden/README.md)\n",
              path, gd->model, gd->model);
      size_t i = 0;
      while (want && i < want_len && i < got_len && want[i] == got[i]) i++;
      fprintf(stderr, "first difference at byte %zu\n", i);
    }
    free(want);
  }
  free(got);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_golden_ir(void) {
  for (size_t i = 0; i < sizeof goldens / sizeof goldens[0]; i++) check(&goldens[i]);
}

int main(void) {
  if (chdir(PD2BW_SOURCE_DIR) != 0) perror(PD2BW_SOURCE_DIR);
  const char *r = getenv("PD2BW_REGEN");
  regen = r && *r && strcmp(r, "0") != 0;
  RUN(test_golden_ir);
  return TEST_REPORT();
}
