/* passes/pass_manager.c — runs the passes in order, verifies the IR after each
 * and prints it where asked (the MLIR/TVM habit: a pass's effect is visible). */
#include "passes/passes.h"

#include <string.h>

/* "check" is the shape/type check that the front end already ran while lowering
 * (graph_add_op applies every shape rule); here it re-verifies the lowered graph
 * so a dump after it shows exactly what the front end produced. */
static bool pass_check(Graph *g, Diag *d) {
  (void)d;
  graph_finalize(g);
  return true;
}

typedef struct Pass {
  const char *name;
  bool (*run)(Graph *g, Diag *d);
} Pass;

static const Pass passes[] = {
    {"check", pass_check},
    {"autodiff", pass_autodiff},
};

const char *const pass_names[] = {"check", "autodiff", NULL};

bool pass_name_valid(const char *name) {
  if (strcmp(name, "all") == 0) return true;
  for (int i = 0; pass_names[i]; i++)
    if (strcmp(pass_names[i], name) == 0) return true;
  return false;
}

bool passes_run(Graph *g, Diag *d, const PassOptions *opt) {
  for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
    if (!passes[i].run(g, d) || d->nerrors) return false;
    if (!opt || opt->verify) PD_CHECK(ir_verify(g, stderr), "(IR broken after pass %s)", passes[i].name);
    if (opt && opt->print_after &&
        (strcmp(opt->print_after, "all") == 0 || strcmp(opt->print_after, passes[i].name) == 0)) {
      FILE *out = opt->print_to ? opt->print_to : stdout;
      fprintf(out, "// ---- IR after %s ----\n", passes[i].name);
      ir_dump(g, out);
    }
  }
  return true;
}
