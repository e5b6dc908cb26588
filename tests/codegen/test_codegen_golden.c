/* Golden stage programs: the generated stage0.c of the tiny GPT and the MLP (built
 * through the IR API, so the test does not depend on the front end), compared byte
 * for byte with tests/golden/codegen/<model>.stage0.c. The kernels' text, pasted
 * verbatim at the top of every program, is replaced by one line naming its size, so
 * a kernel change does not churn these files. PD2BW_REGEN=1 rewrites them. */
#include "build_models.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "test.h"

#include <stdlib.h>

static const char *const BEGIN = "/* ==== kernels/philox.h and cpu_kernels.h, verbatim ==== */\n";
static const char *const END = "/* ==== end of the kernels ==== */\n";

/* The source with the kernels' text cut out (pd_malloc'd). */
static char *without_kernels(const char *src) {
  const char *b = strstr(src, BEGIN), *e = strstr(src, END);
  EXPECT(b && e && b < e);
  if (!b || !e) return pd_strdup(src);
  size_t n = strlen(src) + 128;
  char *out = pd_malloc(n);
  snprintf(out, n, "%.*s%s/* (the kernels' text, elided in the golden file) */\n%s", (int)(b - src), src,
           BEGIN, e);
  return out;
}

static void check_golden(const char *model, Graph *g, int64_t b) {
  Diag d;
  diag_init(&d, stderr);
  EXPECT(pass_autodiff(g, &d));
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, b);
  char *src = codegen_c_source(g, L, 0, &(CodegenOptions){.fuse = true});
  char *got = without_kernels(src);
  char path[256];
  snprintf(path, sizeof path, "tests/golden/codegen/%s.stage0.c", model);
  if (getenv("PD2BW_REGEN")) {
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (f) {
      fputs(got, f);
      fclose(f);
      printf("  regenerated %s\n", path);
    }
  } else {
    FILE *f = fopen(path, "rb");
    EXPECT(f != NULL);
    if (f) {
      fseek(f, 0, SEEK_END);
      long n = ftell(f);
      fseek(f, 0, SEEK_SET);
      char *want = calloc((size_t)n + 1, 1);
      EXPECT(fread(want, 1, (size_t)n, f) == (size_t)n);
      fclose(f);
      bool same = strcmp(want, got) == 0;
      if (!same) {
        size_t i = 0;
        while (want[i] && want[i] == got[i]) i++;
        fprintf(stderr, "  %s differs from the generated program at byte %zu (PD2BW_REGEN=1 to accept)\n", path, i);
      }
      EXPECT(same);
      free(want);
    }
  }
  /* Deterministic: a second generation gives the same bytes. */
  char *again = codegen_c_source(g, L, 0, &(CodegenOptions){.fuse = true});
  EXPECT(strcmp(again, src) == 0);
  free(again);
  free(got);
  free(src);
  layout_destroy(L);
}

static void test_golden_tinygpt(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, 64, 16, 32, 2, 2);
  check_golden("tinygpt", g, 2);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_golden_mlp(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_mlp(a, &d, 8, 16, 4);
  check_golden("mlp", g, 4);
  graph_destroy(g);
  arena_destroy(a);
}

int main(void) {
  RUN(test_golden_tinygpt);
  RUN(test_golden_mlp);
  return TEST_REPORT();
}
