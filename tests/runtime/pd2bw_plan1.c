/* pd2bw_plan1 — TEMPORARY stand-in for `pd2bwc` until the compiler driver writes
 * stage programs: compiles a model file into a ONE-stage plan directory (plan.json +
 * stage0.c) through the same front end, passes and codegen pd2bwc uses.
 *     pd2bw_plan1 MODEL -o DIR [-D NAME=VALUE]... [--microbatch-size B]
 * The microbatch size defaults to the model's train.microbatch; m = batch / b.
 * scripts/main-job.sh falls back to it (and says so) when pd2bwc's plan has no
 * stage0.c. */
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *model = NULL, *out = NULL;
  const char *defs[64];
  int ndefs = 0;
  long b = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
      out = argv[++i];
    else if (strcmp(argv[i], "-D") == 0 && i + 1 < argc && ndefs < 64)
      defs[ndefs++] = argv[++i];
    else if (strcmp(argv[i], "--microbatch-size") == 0 && i + 1 < argc)
      b = strtol(argv[++i], NULL, 10);
    else if (!model && argv[i][0] != '-')
      model = argv[i];
    else {
      fprintf(stderr, "usage: pd2bw_plan1 MODEL -o DIR [-D NAME=VALUE]... [--microbatch-size B]\n");
      return 2;
    }
  }
  if (!model || !out) {
    fprintf(stderr, "usage: pd2bw_plan1 MODEL -o DIR [-D NAME=VALUE]... [--microbatch-size B]\n");
    return 2;
  }
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = frontend_load_model(a, &d, model, defs, ndefs);
  int rc = 1;
  PassOptions po = {.verify = true};
  if (g && passes_run(g, &d, &po)) {
    if (!b) b = g->train.microbatch ? (long)g->train.microbatch : 1;
    int64_t batch = g->train.batch ? g->train.batch : b;
    if (batch % b != 0) {
      fprintf(stderr, "pd2bw_plan1: batch %lld is not a multiple of the microbatch size %ld\n", (long long)batch, b);
    } else if (codegen_single_stage_plan(g, b, batch / b, &(CodegenOptions){.fuse = true}, out, &d)) {
      printf("pd2bw_plan1: wrote %s/plan.json and %s/stage0.c (one stage, microbatch %ld x %lld)\n", out, out, b,
             (long long)(batch / b));
      rc = 0;
    }
  }
  if (g) graph_destroy(g);
  arena_destroy(a);
  return rc;
}
