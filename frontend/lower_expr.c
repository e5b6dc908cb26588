/* frontend/lower_expr.c — tensor expressions to ops.
 *
 * A call is looked up in the op table by name (with a "did you mean" for a close
 * misspelling) and checked against its row generically: a forward op, the arity,
 * attribute names (each once, a number of sane magnitude); the shape rule is the op
 * table's, run by graph_add_op at the call's location. A name is a binding's tensor.
 * Apart from lower.c, which walks declarations and statements, because this is the
 * part that speaks for the op table to the user. */
#include <math.h>
#include <string.h>

#include "frontend/lower.h"

/* Levenshtein distance, capped: for "did you mean" on op names. */
static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 32 || lb > 32) return 99;
  int row[33];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cur = row[j];
      int best = prev + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      prev = cur;
    }
  }
  return row[lb];
}

const char *lower_suggest_op(const char *name) {
  const char *best = NULL;
  int best_d = 3; /* suggest only close misspellings */
  for (int k = 0; k < OP_COUNT; k++) {
    if (!(op_info[k].flags & OPF_FWD)) continue;
    int dist = edit_distance(name, op_info[k].name);
    if (dist < best_d) best_d = dist, best = op_info[k].name;
  }
  return best;
}

/* "p" or "heads, causal or p" for messages about attributes. */
static const char *attr_list(Arena *a, const OpInfo *info) {
  const char *s = "";
  for (int i = 0; i < info->nattrs; i++)
    s = arena_printf(a, "%s%s%s", s, i == 0 ? "" : i == info->nattrs - 1 ? " or " : ", ",
                     info->attr_names[i]);
  return s;
}

static int lower_call(LowerCtx *c, const Ast *e, const char *name) {
  int kind = op_lookup(e->name);
  if (kind < 0) {
    if (strcmp(e->name, "sqrt") == 0) {
      diag_error(c->d, e->loc, "sqrt gives a number (expected a tensor)");
      return -1;
    }
    const char *hint = lower_suggest_op(e->name);
    if (hint)
      diag_error(c->d, e->loc, "unknown op '%s' (did you mean '%s'?)", e->name, hint);
    else
      diag_error(c->d, e->loc, "unknown op '%s' (expected an op of docs/language.md)", e->name);
    return -1;
  }
  const OpInfo *info = &op_info[kind];
  if (!(info->flags & OPF_FWD)) {
    diag_error(c->d, e->loc, "'%s' is made by autodiff (expected a forward op)", e->name);
    return -1;
  }
  int in[IR_MAX_IN], nin = 0;
  double attr[IR_MAX_ATTR];
  bool attr_given[IR_MAX_ATTR] = {false};
  for (int i = 0; i < info->nattrs; i++) attr[i] = info->attr_defaults[i];
  bool ok = true;
  for (const Ast *arg = e->list; arg; arg = arg->next) {
    if (!arg->name) {
      if (nin == info->max_inputs) {
        diag_error(c->d, arg->loc, "'%s' takes %s%d tensor argument%s (expected ')' or "
                   "attribute = value)", info->name,
                   info->min_inputs == info->max_inputs ? "" : "at most ", info->max_inputs,
                   info->max_inputs == 1 ? "" : "s");
        return -1;
      }
      int t = lower_tensor(c, arg->a, NULL);
      if (t < 0) ok = false;
      in[nin++] = t;
      continue;
    }
    int ai = op_attr_index((OpKind)kind, arg->name);
    if (ai < 0) {
      if (info->nattrs == 0)
        diag_error(c->d, arg->loc, "'%s' has no attributes (found '%s')", info->name, arg->name);
      else
        diag_error(c->d, arg->loc, "'%s' has no attribute '%s' (expected %s)", info->name,
                   arg->name, attr_list(c->a, info));
      ok = false;
      continue;
    }
    if (attr_given[ai]) {
      diag_error(c->d, arg->loc, "attribute '%s' given twice", arg->name);
      ok = false;
      continue;
    }
    attr_given[ai] = true;
    Value v;
    if (!eval_scalar(c, arg->a, &v)) {
      ok = false;
      continue;
    }
    /* Attributes are probabilities, flags and sizes; a huge one is a mistake, and
       shape rules convert sizes to int64, which must not overflow. */
    if (fabs(v.f) > (double)FRONTEND_MAX_NUMEL) {
      diag_error(c->d, arg->a->loc, "attribute '%s' is %g (expected a magnitude of at most "
                 "2^40)", arg->name, v.f);
      ok = false;
      continue;
    }
    attr[ai] = v.f;
  }
  if (!ok) return -1;
  if (nin < info->min_inputs) {
    diag_error(c->d, e->loc, "'%s' takes %s%d tensor argument%s, found %d", info->name,
               info->min_inputs == info->max_inputs ? "" : "at least ", info->min_inputs,
               info->min_inputs == 1 ? "" : "s", nin);
    return -1;
  }
  if (c->g->nops >= FRONTEND_MAX_OPS) {
    diag_error(c->d, e->loc, "the model has more than %d ops after unrolling the repeat "
               "(expected a smaller model)", FRONTEND_MAX_OPS);
    return -1;
  }
  int op = graph_add_op(c->g, c->d, (OpKind)kind, in, nin, attr, c->region,
                        name ? lower_unique_name(c, name) : NULL, e->loc);
  if (op < 0) return -1;
  return c->g->ops[op].out[0];
}

int lower_tensor(LowerCtx *c, const Ast *e, const char *name) {
  switch (e->kind) {
  case AST_CALL: return lower_call(c, e, name);
  case AST_NAME: {
    Binding *b = lower_lookup(c, e->name);
    if (b) return b->index;
    if (namemap_get(&c->param_index, e->name) >= 0) {
      diag_error(c->d, e->loc, "'%s' is a param, a number (expected a tensor)", e->name);
      return -1;
    }
    if (lower_report_branch_only(c, e->name, e->loc)) return -1;
    diag_error(c->d, e->loc, "undefined name '%s' (expected a tensor)", e->name);
    return -1;
  }
  case AST_INT: case AST_FLOAT: case AST_NEG:
    diag_error(c->d, e->loc, "expected a tensor, found a number");
    return -1;
  case AST_BINARY:
    diag_error(c->d, e->loc, "'%c' works on numbers only (expected a tensor; use add(a, b) "
               "or mul(a, b) on tensors)", e->op);
    return -1;
  case AST_STRING:
    diag_error(c->d, e->loc, "expected a tensor, found a string");
    return -1;
  case AST_ARG: case AST_TYPE: case AST_PARAM: case AST_INPUT: case AST_WEIGHT:
  case AST_ASSIGN: case AST_REPEAT: case AST_IF: case AST_MINIMIZE: case AST_TRAIN: case AST_SETTING:
  case AST_MODEL: case AST_CLUSTER:
    break;
  }
  PD_CHECK(0, "(lower_tensor on node kind %d)", (int)e->kind);
  return -1;
}
