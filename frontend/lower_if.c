/* frontend/lower_if.c — `if COND { ... } else { ... }`, decided when the model compiles.
 *
 * COND is a size expression over params, so -D picks the branch, and only that branch
 * is lowered: a weight of the other never reaches the graph. The other branch is only
 * checked for statements that belong at model level; its ops are checked when a
 * setting takes it. What an if defines must not depend on the branch taken, so the
 * names known after it are those both branches define (read from the text, the same
 * whichever runs) with the same kind; a name of one branch only is dropped at the
 * end of the if and its later use is an error that says so (docs/language.md §3.10).
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/lower.h"

/* The names a statement list defines, in order, with where and as what. */
typedef struct Defined {
  const char *name;
  BindKind kind;
  Loc loc;
} Defined;
typedef struct NameSet {
  Defined *v;
  int n, cap;
  NameMap index;
} NameSet;

static int set_find(const NameSet *s, const char *name) {
  int i = namemap_get(&s->index, name);
  return i >= 0 && i < s->n && strcmp(s->v[i].name, name) == 0 ? i : -1;
}

static void set_add(LowerCtx *c, NameSet *s, const char *name, BindKind kind, Loc loc) {
  if (set_find(s, name) >= 0) return; /* a re-assignment in the same branch */
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->v = pd_realloc(s->v, (size_t)s->cap * sizeof *s->v);
  }
  s->v[s->n] = (Defined){name, kind, loc};
  namemap_put(c->a, &s->index, name, s->n++);
}

/* Recursion follows nested ifs only, bounded by the lexer's bracket depth. */
static void branch_names(LowerCtx *c, const Ast *items, NameSet *out) {
  for (const Ast *s = items; s; s = s->next) {
    if (s->kind == AST_WEIGHT) set_add(c, out, s->name, BIND_WEIGHT, s->name_loc);
    else if (s->kind == AST_INPUT) set_add(c, out, s->name, BIND_INPUT, s->name_loc);
    else if (s->kind == AST_ASSIGN && !lower_lookup(c, s->name) &&
             namemap_get(&c->param_index, s->name) < 0)
      set_add(c, out, s->name, BIND_VALUE, s->name_loc);
    else if (s->kind == AST_IF) {
      NameSet a = {0}, b = {0};
      branch_names(c, s->list, &a);
      branch_names(c, s->b, &b);
      for (int i = 0; i < a.n; i++)
        if (set_find(&b, a.v[i].name) >= 0) set_add(c, out, a.v[i].name, a.v[i].kind, a.v[i].loc);
      free(a.v);
      free(b.v);
    }
  }
}

static void branch_only_add(LowerCtx *c, const Defined *d, bool in_else) {
  if (c->nbranch_only == c->cap_branch_only) {
    c->cap_branch_only = c->cap_branch_only ? 2 * c->cap_branch_only : 16;
    c->branch_only = pd_realloc(c->branch_only, (size_t)c->cap_branch_only * sizeof *c->branch_only);
  }
  c->branch_only[c->nbranch_only] = (BranchOnly){d->name, d->loc, in_else};
  namemap_put(c->a, &c->branch_only_index, d->name, c->nbranch_only++);
}

bool lower_report_branch_only(LowerCtx *c, const char *name, Loc use) {
  int i = namemap_get(&c->branch_only_index, name);
  if (i < 0 || i >= c->nbranch_only || strcmp(c->branch_only[i].name, name) != 0) return false;
  diag_error(c->d, use, "'%s' is defined in only one branch of an 'if' (expected it defined in "
             "both branches, or before the if)", name);
  diag_note(c->d, c->branch_only[i].loc, "'%s' is defined here, in the %s branch only", name,
            c->branch_only[i].in_else ? "else" : "first");
  return true;
}

/* The branch not lowered: only what its text alone can get wrong. */
static void check_untaken(LowerCtx *c, const Ast *items, unsigned scope) {
  for (const Ast *s = items; s; s = s->next)
    if (!lower_misplaced(c, s, scope) && s->kind == AST_IF) {
      check_untaken(c, s->list, scope);
      check_untaken(c, s->b, scope);
    }
}

/* The condition: an integer, 0 for the else branch. -1 after an error. */
static int eval_condition(LowerCtx *c, const Ast *cond) {
  Value v;
  c->in_condition = true;
  bool ok = eval_scalar(c, cond, &v);
  c->in_condition = false;
  if (!ok) return -1;
  if (!v.is_int) {
    diag_error(c->d, cond->loc, "the condition is %g, not an integer (expected an integer: 0 "
               "takes the else branch, any other value the first)", v.f);
    return -1;
  }
  return v.i != 0;
}

void lower_if(LowerCtx *c, ModelState *st, const Ast *s, unsigned scope) {
  scope |= SCOPE_IF;
  NameSet then = {0}, other = {0};
  branch_names(c, s->list, &then);
  branch_names(c, s->b, &other);
  for (int i = 0; i < then.n; i++) {
    int j = set_find(&other, then.v[i].name);
    if (j < 0) branch_only_add(c, &then.v[i], false);
    else if (other.v[j].kind != then.v[i].kind) {
      static const char *const kinds[] = {[BIND_INPUT] = "an input", [BIND_WEIGHT] = "a weight",
                                          [BIND_VALUE] = "a value"};
      diag_error(c->d, other.v[j].loc, "'%s' is %s here but %s in the first branch (expected the "
                 "same kind in both branches)", then.v[i].name, kinds[other.v[j].kind],
                 kinds[then.v[i].kind]);
      diag_note(c->d, then.v[i].loc, "'%s' is defined here", then.v[i].name);
    }
  }
  for (int j = 0; j < other.n; j++)
    if (set_find(&then, other.v[j].name) < 0) branch_only_add(c, &other.v[j], true);

  int taken = eval_condition(c, s->a);
  int mark = c->nbinds;
  if (taken < 0) {
    check_untaken(c, s->list, scope);
    check_untaken(c, s->b, scope);
  } else {
    check_untaken(c, taken ? s->b : s->list, scope);
    lower_statements(c, st, taken ? s->list : s->b, scope);
  }
  /* Keep what both branches define; drop the rest (a stale index entry is ignored by
   * lower_lookup). After a failed condition the shared names are bound poisoned, so
   * that their uses stay silent. */
  int kept = mark;
  for (int k = mark; k < c->nbinds; k++) {
    if (set_find(&then, c->binds[k].name) < 0 || set_find(&other, c->binds[k].name) < 0) continue;
    c->binds[kept] = c->binds[k];
    namemap_put(c->a, &c->bind_index, c->binds[kept].name, kept);
    kept++;
  }
  c->nbinds = kept;
  if (taken < 0)
    for (int i = 0; i < then.n; i++)
      if (set_find(&other, then.v[i].name) >= 0 && !lower_lookup(c, then.v[i].name))
        lower_bind(c, then.v[i].name, then.v[i].kind, -1, then.v[i].loc);
  free(then.v);
  free(other.v);
}
