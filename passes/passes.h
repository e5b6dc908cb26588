/* passes/passes.h — everything that transforms or analyses the IR between the
 * front end and code generation: autodiff, the pass manager, the cost model and
 * the planner (partition, replication, schedules, buffer placement, simulation,
 * verification; see passes/planner.h), and the per-stage tensor layout that the
 * code generators and the planner's memory plan share (passes/layout.h).
 *
 * Promises: a pass either succeeds and leaves a graph that ir_verify() accepts,
 * or reports user errors on the Diag and returns false. No pass emits code or
 * writes files except the planner's output step. */
#ifndef PD2BW_PASSES_H
#define PD2BW_PASSES_H

#include "ir/ir.h"

/* Reverse-mode autodiff: appends the backward ops to g (g->nfwd_ops marks where
 * they start) and sets every parameter's gradient tensor (Tensor.grad, kind
 * TK_GRAD). The minimised value must be a cross_entropy output. */
bool pass_autodiff(Graph *g, Diag *d);

/* ---- pass manager ------------------------------------------------------------
 * Passes run in a fixed order; each can be printed after (--print-ir-after=NAME,
 * or "all") and the IR is verified after every one. */
typedef struct PassOptions {
  const char *print_after; /* pass name, "all", or NULL */
  FILE *print_to;          /* where --print-ir-after dumps go (stdout) */
  bool verify;             /* run ir_verify after each pass (default on) */
} PassOptions;

/* Names of the passes in order, NULL-terminated. */
extern const char *const pass_names[];
bool pass_name_valid(const char *name);
/* Runs all passes over g. */
bool passes_run(Graph *g, Diag *d, const PassOptions *opt);

#include "passes/layout.h"
#include "passes/planner.h"

#endif
