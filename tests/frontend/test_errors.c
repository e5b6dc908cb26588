/* tests/frontend/test_errors.c — the error corpus: every tests/errors/NNN-name.model
 * (or .cluster) must fail to load with exactly the diagnostics in
 * NNN-name.expected, and nothing may crash on the way. The diagnostics are captured
 * with open_memstream. `PD2BW_REGEN=1` rewrites the .expected files (review the
 * diff: each one is the exact text a user sees). One case is generated here
 * instead of committed: 100000 nested '('.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "frontend/frontend.h"
#include "test.h"

static bool regen;
static int ncases;

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

static bool write_file(const char *path, const char *text, size_t len) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return false;
  bool ok = fwrite(text, 1, len, f) == len;
  ok &= fclose(f) == 0;
  return ok && rename(tmp, path) == 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void run_case(const char *dir, const char *file) {
  char path[256], expected[256];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  size_t stem = strlen(file) - (ends_with(file, ".model") ? 6 : 8);
  snprintf(expected, sizeof expected, "%s/%.*s.expected", dir, (int)stem, file);
  Arena *a = arena_create();
  char *got = NULL;
  size_t got_len = 0;
  FILE *out = open_memstream(&got, &got_len);
  Diag d;
  diag_init(&d, out);
  bool loaded;
  if (ends_with(file, ".cluster")) {
    Cluster c;
    loaded = frontend_load_cluster(a, &d, path, &c);
  } else {
    Graph *g = frontend_load_model(a, &d, path, NULL, 0);
    loaded = g != NULL;
    graph_destroy(g);
  }
  fclose(out);
  ncases++;
  EXPECT(!loaded);
  EXPECT(d.nerrors > 0);
  if (regen) {
    EXPECT(write_file(expected, got, got_len));
  } else {
    size_t want_len = 0;
    char *want = read_all(expected, &want_len);
    bool same = want && want_len == got_len && memcmp(want, got, got_len) == 0;
    EXPECT(same);
    if (!same)
      fprintf(stderr, "%s: expected (%s):\n%s\ngot:\n%s\n", path, expected,
              want ? want : "(missing)", got);
    free(want);
  }
  free(got);
  arena_destroy(a);
}

static void test_corpus(void) {
  const char *dir = "tests/errors";
  DIR *dp = opendir(dir);
  EXPECT(dp != NULL);
  if (!dp) return;
  char **names = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (!ends_with(e->d_name, ".model") && !ends_with(e->d_name, ".cluster")) continue;
    names = realloc(names, (size_t)(n + 1) * sizeof *names);
    names[n++] = strdup(e->d_name);
  }
  closedir(dp);
  qsort(names, (size_t)n, sizeof *names, by_name);
  for (int i = 0; i < n; i++) {
    run_case(dir, names[i]);
    free(names[i]);
  }
  free(names);
  EXPECT(ncases >= 45);
  printf("%d error cases\n", ncases);
}

/* 100000 '(' : generated, so the repository holds no 100 kB file. */
static void test_generated_deep(void) {
  enum { N = 100000 };
  char *text = malloc(N + 64);
  size_t n = (size_t)sprintf(text, "model m {\n  x = ");
  memset(text + n, '(', N);
  n += N;
  Arena *a = arena_create();
  char *got = NULL;
  size_t got_len = 0;
  FILE *out = open_memstream(&got, &got_len);
  Diag d;
  diag_init(&d, out);
  EXPECT(!frontend_load_model_buffer(a, &d, "deep.model", text, n, NULL, 0));
  fclose(out);
  const char *want = "deep.model:2:262: error: brackets nested too deeply (more than 256 "
                     "levels)\n";
  EXPECT(strncmp(got, want, strlen(want)) == 0);
  EXPECT_EQ_INT(d.nerrors, 1);
  free(got);
  free(text);
  arena_destroy(a);
}

int main(void) {
  if (chdir(PD2BW_SOURCE_DIR) != 0) perror(PD2BW_SOURCE_DIR);
  const char *r = getenv("PD2BW_REGEN");
  regen = r && *r && strcmp(r, "0") != 0;
  RUN(test_corpus);
  RUN(test_generated_deep);
  return TEST_REPORT();
}
