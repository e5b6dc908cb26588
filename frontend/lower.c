/* frontend/lower.c — AST to IR graph.
 *
 * Order of work: collect the params (any order, -D overrides applied, each
 * evaluated once with a cycle check, recorded as graph consts), then lower the
 * statements in order into the prologue region; a `repeat NAME[N]` body is lowered
 * N times, copy i into region "NAME.i" with its weights named "NAME.i.<weight>";
 * statements after it go into the epilogue region. Expressions become ops in
 * lower_expr.c: found by name in the op table and checked generically against it
 * (arity, attribute names); shape rules are the op table's, run by graph_add_op at
 * the op's location.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/lower.h"

/* ---- bindings -------------------------------------------------------------- */

Binding *lower_lookup(LowerCtx *c, const char *name) {
  int i = namemap_get(&c->bind_index, name);
  if (i < 0 || i >= c->nbinds || strcmp(c->binds[i].name, name) != 0) return NULL;
  return &c->binds[i];
}

static const char *bind_kind_name(BindKind k) {
  switch (k) {
  case BIND_INPUT: return "input";
  case BIND_WEIGHT: return "weight";
  case BIND_VALUE: return "value";
  }
  return "?";
}

void lower_bind(LowerCtx *c, const char *name, BindKind kind, int index, Loc loc) {
  if (c->nbinds == c->cap_binds) {
    c->cap_binds = c->cap_binds ? 2 * c->cap_binds : 64;
    c->binds = pd_realloc(c->binds, (size_t)c->cap_binds * sizeof *c->binds);
  }
  c->binds[c->nbinds] = (Binding){name, kind, index, loc};
  namemap_put(c->a, &c->bind_index, name, c->nbinds);
  c->nbinds++;
}

/* A declaration may not reuse a name that is already bound or is a param. */
static bool check_fresh(LowerCtx *c, const char *name, Loc loc) {
  int pi = namemap_get(&c->param_index, name);
  if (pi >= 0) {
    diag_error(c->d, loc, "'%s' is already declared as a param (expected a new name)", name);
    diag_note(c->d, c->params[pi].decl->name_loc, "'%s' declared here", name);
    return false;
  }
  Binding *b = lower_lookup(c, name);
  if (b) {
    diag_error(c->d, loc, "'%s' is already declared as %s %s (expected a new name)", name,
               b->kind == BIND_INPUT ? "an" : "a", bind_kind_name(b->kind));
    diag_note(c->d, b->loc, "'%s' declared here", name);
    return false;
  }
  return true;
}

/* The next suffix to try is remembered per base, so re-assigning one name n times
 * costs O(n). */
const char *lower_unique_name(LowerCtx *c, const char *base) {
  const char *name = base;
  int k = namemap_get(&c->name_suffix, base);
  if (k < 1) k = 1;
  while (namemap_get(&c->tensor_names, name) >= 0) name = arena_printf(c->a, "%s.%d", base, k++);
  namemap_put(c->a, &c->name_suffix, base, k);
  namemap_put(c->a, &c->tensor_names, name, 1);
  return name;
}

/* ---- declarations ------------------------------------------------------------------ */

/* Evaluates `f32[B, seq, dim]`. Inputs must be batched (B first); weights never. */
static bool lower_type(LowerCtx *c, const Ast *t, bool is_input, DType *dt, Shape *s) {
  if (strcmp(t->name, "f32") == 0) *dt = DT_F32;
  else if (strcmp(t->name, "i32") == 0) *dt = DT_I32;
  else {
    diag_error(c->d, t->loc, "unknown type '%s' (expected f32 or i32)", t->name);
    return false;
  }
  if (!is_input && *dt != DT_F32) {
    diag_error(c->d, t->loc, "weights are f32 (found %s)", t->name);
    return false;
  }
  memset(s, 0, sizeof *s);
  int rank = 0;
  bool ok = true;
  int64_t numel = 1;
  for (const Ast *dim = t->list; dim; dim = dim->next, rank++) {
    if (rank == IR_MAX_RANK) {
      diag_error(c->d, dim->loc, "too many dimensions (expected at most %d)", IR_MAX_RANK);
      return false;
    }
    bool is_b = dim->kind == AST_NAME && strcmp(dim->name, "B") == 0 &&
                namemap_get(&c->param_index, "B") < 0;
    if (is_b) {
      if (!is_input || rank != 0) {
        diag_error(c->d, dim->loc, "'B', the microbatch dimension, can only be the first "
                   "dimension of an input");
        ok = false;
        continue;
      }
      s->batched = true;
      s->dim[rank] = 1;
      continue;
    }
    int64_t v;
    if (!eval_size(c, dim, FRONTEND_MAX_DIM, "a dimension", &v)) {
      ok = false;
      continue;
    }
    s->dim[rank] = v;
    if (__builtin_mul_overflow(numel, v, &numel) || numel > FRONTEND_MAX_NUMEL) {
      diag_error(c->d, dim->loc, "tensor is too large (expected at most 2^40 elements per "
                 "sample)");
      return false;
    }
  }
  s->rank = rank;
  if (ok && is_input && !s->batched) {
    diag_error(c->d, t->loc, "an input's first dimension must be 'B', the microbatch "
               "dimension (as in i32[B, seq])");
    return false;
  }
  return ok;
}

static bool lower_init(LowerCtx *c, const Ast *e, InitKind *init, double *std) {
  *std = 0;
  if (e->kind == AST_NAME && strcmp(e->name, "zeros") == 0) {
    *init = INIT_ZEROS;
    return true;
  }
  if (e->kind == AST_NAME && strcmp(e->name, "ones") == 0) {
    *init = INIT_ONES;
    return true;
  }
  if (e->kind == AST_CALL && strcmp(e->name, "normal") == 0) {
    static const char *const names[] = {"std"};
    const Ast *slot[1] = {NULL};
    if (!bind_call_args(c, e, names, 1, slot)) return false;
    if (!slot[0]) {
      diag_error(c->d, e->loc, "normal needs a standard deviation, as in normal(0.02)");
      return false;
    }
    Value v;
    if (!eval_scalar(c, slot[0], &v)) return false;
    if (!(v.f > 0)) {
      diag_error(c->d, slot[0]->loc, "standard deviation is %g (expected a number > 0)", v.f);
      return false;
    }
    *init = INIT_NORMAL;
    *std = v.f;
    return true;
  }
  diag_error(c->d, e->loc, "unknown initialiser (expected zeros, ones or normal(std))");
  return false;
}

static void lower_input(LowerCtx *c, const Ast *s) {
  if (!check_fresh(c, s->name, s->name_loc)) return;
  DType dt;
  Shape shape;
  int t = -1;
  if (lower_type(c, s->a, true, &dt, &shape))
    t = graph_add_input(c->g, lower_unique_name(c, s->name), dt, shape, s->name_loc);
  lower_bind(c, s->name, BIND_INPUT, t, s->name_loc);
}

static void lower_weight(LowerCtx *c, const Ast *s) {
  if (!check_fresh(c, s->name, s->name_loc)) return;
  DType dt;
  Shape shape;
  InitKind init;
  double std;
  int t = -1;
  bool ok_type = lower_type(c, s->a, false, &dt, &shape);
  bool ok_init = lower_init(c, s->b, &init, &std);
  if (ok_type && ok_init) {
    const char *name = lower_unique_name(c, arena_printf(c->a, "%s%s", c->prefix, s->name));
    t = graph_add_param(c->g, name, shape, init, std, c->region, s->name_loc);
    if (s->flag) c->g->params[c->g->tensors[t].param].decay = false;
  }
  lower_bind(c, s->name, BIND_WEIGHT, t, s->name_loc);
}

static void lower_assign(LowerCtx *c, const Ast *s) {
  if (namemap_get(&c->param_index, s->name) >= 0) {
    diag_error(c->d, s->name_loc, "cannot assign to param '%s' (expected a new name or a "
               "value)", s->name);
    return;
  }
  Binding *b = lower_lookup(c, s->name);
  if (b && b->kind != BIND_VALUE) {
    diag_error(c->d, s->name_loc, "cannot assign to %s '%s' (expected a new name or a value)",
               bind_kind_name(b->kind), s->name);
    diag_note(c->d, b->loc, "'%s' declared here", s->name);
    return;
  }
  const char *name = arena_printf(c->a, "%s%s", c->prefix, s->name);
  int t = lower_tensor(c, s->a, name);
  b = lower_lookup(c, s->name); /* lowering may have grown the binding list */
  if (b) b->index = t;          /* re-assignment: carried out of a repeat body */
  else lower_bind(c, s->name, BIND_VALUE, t, s->name_loc);
}

/* ---- statements ------------------------------------------------------------------- */

static void lower_repeat(LowerCtx *c, ModelState *st, const Ast *s) {
  if (st->repeat) {
    diag_error(c->d, s->loc, "a model has at most one repeat block (expected the blocks "
               "merged into one)");
    diag_note(c->d, st->repeat->loc, "the first repeat block is here");
    return;
  }
  st->repeat = s;
  int64_t n;
  if (!eval_size(c, s->a, FRONTEND_MAX_REPEAT, "the repeat count", &n)) return;
  Graph *g = c->g;
  g->nblocks = (int)n;
  g->block_name = arena_strdup(c->a, s->name);
  int mark = c->nbinds, mark_branch_only = c->nbranch_only;
  for (int i = 0; i < n; i++) {
    int errors = c->d->nerrors;
    const char *region = arena_printf(c->a, "%s.%d", s->name, i);
    c->region = graph_add_region(g, RG_BLOCK, i, region);
    c->prefix = arena_printf(c->a, "%s.", region);
    lower_statements(c, st, s->list, SCOPE_REPEAT);
    c->nbinds = mark; /* the body's own names live for one copy */
    c->nbranch_only = mark_branch_only;
    if (c->d->nerrors > errors) break; /* the other copies would repeat the messages */
  }
  c->prefix = "";
  c->region = graph_add_region(g, RG_EPILOGUE, 0, "epilogue");
}

static void lower_minimize(LowerCtx *c, ModelState *st, const Ast *s) {
  if (st->minimize) {
    diag_error(c->d, s->loc, "a model minimises one loss (found a second 'minimize')");
    diag_note(c->d, st->minimize->loc, "the first 'minimize' is here");
    return;
  }
  st->minimize = s;
  Binding *b = lower_lookup(c, s->name);
  if (!b) {
    if (lower_report_branch_only(c, s->name, s->name_loc)) return;
    diag_error(c->d, s->name_loc, "undefined name '%s' (expected the loss tensor)", s->name);
    return;
  }
  if (b->index < 0) return;
  const Tensor *t = &c->g->tensors[b->index];
  if (t->shape.rank != 0 || t->dtype != DT_F32) {
    char buf[64];
    diag_error(c->d, s->name_loc, "'%s' is %s%s (expected a scalar f32 loss, such as "
               "cross_entropy gives)", s->name, dtype_name(t->dtype),
               shape_str(&t->shape, buf, sizeof buf));
    return;
  }
  c->g->loss = b->index;
}

bool lower_misplaced(LowerCtx *c, const Ast *s, unsigned scope) {
  if (!scope) return false;
  if (s->kind == AST_REPEAT && (scope & SCOPE_REPEAT)) {
    diag_error(c->d, s->loc, "repeat blocks cannot be nested");
    return true;
  }
  const char *what = s->kind == AST_PARAM ? "'param'" /* collected before any statement */
                     : s->kind == AST_MINIMIZE ? "'minimize'"
                     : s->kind == AST_TRAIN ? "'train'"
                     : s->kind == AST_REPEAT ? "'repeat'" /* the planner cuts one unconditional block */
                     : s->kind == AST_INPUT && (scope & SCOPE_REPEAT) ? "'input'" /* may be conditional */
                     : NULL;
  if (!what) return false;
  diag_error(c->d, s->loc, "%s belongs at model level, not inside %s", what,
             scope & SCOPE_REPEAT ? "a repeat block" : "an 'if' block");
  return true;
}

void lower_statements(LowerCtx *c, ModelState *st, const Ast *items, unsigned scope) {
  for (const Ast *s = items; s; s = s->next) {
    if (lower_misplaced(c, s, scope)) continue;
    switch (s->kind) {
    case AST_PARAM: break; /* collected before the statements */
    case AST_INPUT: lower_input(c, s); break;
    case AST_WEIGHT: lower_weight(c, s); break;
    case AST_ASSIGN: lower_assign(c, s); break;
    case AST_REPEAT: lower_repeat(c, st, s); break;
    case AST_IF: lower_if(c, st, s, scope); break;
    case AST_MINIMIZE: lower_minimize(c, st, s); break;
    case AST_TRAIN:
      if (st->train) {
        diag_error(c->d, s->loc, "a model has one train section (found a second)");
        diag_note(c->d, st->train->loc, "the first train section is here");
      } else {
        st->train = s;
        lower_train(c, s);
      }
      break;
    case AST_INT: case AST_FLOAT: case AST_STRING: case AST_NAME: case AST_BINARY:
    case AST_NEG: case AST_CALL: case AST_ARG: case AST_TYPE: case AST_SETTING:
    case AST_MODEL: case AST_CLUSTER:
      PD_CHECK(0, "(statement of kind %d)", (int)s->kind);
    }
  }
}

/* ---- params and overrides ------------------------------------------------------------ */

/* Parses "-D name=value" into its param; false after an error "on the command line". */
static bool apply_override(LowerCtx *c, const char *text) {
  Loc cmd = {"command line", 0, 0};
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) {
    diag_error(c->d, cmd, "-D %s: expected NAME=VALUE", text);
    return false;
  }
  char *name = arena_printf(c->a, "%.*s", (int)(eq - text), text);
  int pi = namemap_get(&c->param_index, name);
  if (pi < 0 && train_setting_known(name)) {
    diag_error(c->d, cmd, "-D %s: '%s' is not a param of model '%s' (the train setting is -D train.%s)", text, name,
               c->g->name, text);
    return false;
  }
  if (pi < 0) {
    diag_error(c->d, cmd, "-D %s: '%s' is not a param of model '%s'", text, name, c->g->name);
    return false;
  }
  const char *value = eq + 1;
  char *end;
  Value v = {0};
  errno = 0;
  long long i = strtoll(value, &end, 10);
  if (*value && !*end && errno == 0) {
    v = (Value){true, i, (double)i};
  } else {
    errno = 0;
    double f = strtod(value, &end);
    if (!*value || *end || !isfinite(f) || errno == ERANGE) {
      diag_error(c->d, cmd, "-D %s: expected a number after '='", text);
      return false;
    }
    v = (Value){false, 0, f};
  }
  c->params[pi].value = v;
  c->params[pi].state = PS_DONE;
  c->params[pi].overridden = true;
  return true;
}

static bool collect_params(LowerCtx *c, const Ast *model, const char *const *overrides,
                           int noverrides) {
  int n = 0;
  for (const Ast *s = model->list; s; s = s->next) n += s->kind == AST_PARAM;
  c->params = arena_alloc(c->a, (size_t)(n ? n : 1) * sizeof *c->params);
  bool ok = true;
  for (const Ast *s = model->list; s; s = s->next) {
    if (s->kind != AST_PARAM) continue;
    int prev = namemap_get(&c->param_index, s->name);
    if (prev >= 0) {
      diag_error(c->d, s->name_loc, "param '%s' is declared twice", s->name);
      diag_note(c->d, c->params[prev].decl->name_loc, "the first declaration is here");
      ok = false;
      continue;
    }
    if (strcmp(s->name, "B") == 0) {
      diag_error(c->d, s->name_loc, "'B' is the microbatch dimension (expected another name)");
      ok = false;
      continue;
    }
    c->params[c->nparams] = (ParamDef){s->name, s, PS_TODO, false, {0}};
    namemap_put(c->a, &c->param_index, s->name, c->nparams++);
  }
  if (!ok) return false;
  for (int i = 0; i < noverrides; i++)
    if (!train_override_is(overrides[i])) ok &= apply_override(c, overrides[i]);
  if (!ok) return false;
  for (int i = 0; i < c->nparams; i++) {
    Value v;
    if (!eval_param(c, i, c->params[i].decl->name_loc, &v)) {
      ok = false;
      continue;
    }
    graph_add_const(c->g, c->params[i].name, v.f, v.is_int);
  }
  return ok;
}

/* The largest batched tensor over the whole batch must stay within
 * FRONTEND_MAX_BATCH_NUMEL (each is checked per sample as it is declared). */
static void check_batch_numel(const Graph *g, Diag *d) {
  if (g->train.batch < 1) return;
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *x = &g->tensors[t];
    int64_t total;
    if (!x->shape.batched) continue;
    if (!__builtin_mul_overflow(shape_numel(&x->shape, 1), g->train.batch, &total) && total <= FRONTEND_MAX_BATCH_NUMEL)
      continue;
    diag_error(d, x->loc, "'%s' has %lld elements a sample, too many for a batch of %lld (expected at most 2^48 "
               "elements over the batch)", x->name ? x->name : "?", (long long)shape_numel(&x->shape, 1),
               (long long)g->train.batch);
    return;
  }
}

Graph *frontend_lower_model(Arena *a, Diag *d, const Ast *model, const char *const *overrides,
                            int noverrides) {
  PD_CHECK(model && model->kind == AST_MODEL);
  int errors = d->nerrors;
  LowerCtx c;
  memset(&c, 0, sizeof c);
  c.a = a;
  c.d = d;
  c.prefix = "";
  c.g = graph_create(a, model->name);
  Graph *g = c.g;
  g->train = (TrainConfig){.optimizer = OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999,
                           .eps = 1e-8, .weight_decay = 0.0, .schedule = LR_CONSTANT,
                           .flush_steps = -1, .predict = -1, /* pd2bwc's 2bw defaults */
                           .loc = model->loc};
  if (collect_params(&c, model, overrides, noverrides)) {
    c.region = graph_add_region(g, RG_PROLOGUE, 0, "prologue");
    ModelState st = {0};
    lower_statements(&c, &st, model->list, 0);
    /* after the train section, so that the command line wins */
    if (d->nerrors == errors) lower_train_overrides(&c, overrides, noverrides);
    if (!st.minimize && d->nerrors == errors)
      diag_error(d, model->name_loc, "model '%s' has no 'minimize LOSS;' (expected the "
                 "loss to train on)", model->name);
  }
  free(c.binds);
  free(c.branch_only);
  if (d->nerrors == errors) check_batch_numel(g, d);
  if (d->nerrors > errors) {
    graph_destroy(g);
    return NULL;
  }
  graph_finalize(g);
  return g;
}
