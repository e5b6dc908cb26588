/* passes/plan_limits.c — a plan against the runtime's limits (contract/plan_limits.h),
 * checked by pd2bwc before it writes anything: a model the runtime would refuse
 * ("this runtime handles 8") is a compile error at the weight that causes it. */
#include "passes/planner.h"

#include <string.h>

/* The model file, without a line: for what no one declaration causes. */
static Loc model_loc(const Graph *g) {
  for (int t = 0; g && t < g->ntensors; t++)
    if (g->tensors[t].loc.file) return (Loc){g->tensors[t].loc.file, 0, 0};
  return (Loc){0};
}

/* Where tied parameter `name` was declared (the model file when g does not say). */
static Loc param_loc(const Graph *g, const char *name) {
  for (int p = 0; g && p < g->nparams; p++) {
    const Tensor *t = &g->tensors[g->params[p].tensor];
    if (t->name && strcmp(t->name, name) == 0 && t->loc.file) return t->loc;
  }
  return model_loc(g);
}

bool plan_check_limits(const Plan *p, const Graph *g, Diag *d) {
  int before = d->nerrors;
  if (p->in.ntied > PLAN_MAX_TIED_GROUPS) {
    const char *name = p->in.tied[PLAN_MAX_TIED_GROUPS].name;
    diag_error(d, param_loc(g, name),
               "'%s' is the model's tied weight number %d (of %d): the runtime syncs at most %d tied weights "
               "(weights declared outside 'repeat' and used by its copies, or used in several places)",
               name, PLAN_MAX_TIED_GROUPS + 1, p->in.ntied, PLAN_MAX_TIED_GROUPS);
  }
  if (p->tied_over >= 0) {
    const char *name = p->in.tied[p->tied_over].name;
    diag_error(d, param_loc(g, name),
               "tied weight '%s' is used on %d of the plan's %d stages: the runtime keeps a tied weight on at most "
               "%d stages (pin fewer with --stages, or give each repeat copy its own weight)",
               name, p->tied_over_stages, p->cfg.stages, PLAN_MAX_TIED_SEGS);
  }
  for (int i = 0; i < p->cfg.stages; i++) {
    const PlanStage *st = &p->stages[i];
    if (st->nversions > PLAN_MAX_SLOTS || st->nstash > PLAN_MAX_SLOTS)
      diag_error(d, model_loc(g),
                 "stage %d of %d needs %d weight versions and %d stash slots (%s, %lld microbatches): the runtime "
                 "keeps at most %d of each (pin fewer stages, or another schedule)",
                 i, p->cfg.stages, st->nversions, st->nstash, plan_schedule_name(p->cfg.schedule),
                 (long long)p->cfg.microbatches, PLAN_MAX_SLOTS);
  }
  return d->nerrors == before;
}
