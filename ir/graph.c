/* ir/graph.c — building the graph: tensors, params, regions, ops.
 *
 * graph_add_op is the single door through which ops enter: it checks arity
 * against the op table, fills default attributes, runs the op's shape rule and
 * creates the outputs. The front end uses it (shape errors are user errors at the
 * op's location); autodiff uses graph_emit (a shape error there is a bug). */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

const char *dtype_name(DType t) {
  switch (t) {
  case DT_F32: return "f32";
  case DT_I32: return "i32";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
  case DT_F32: return 4;
  case DT_I32: return 4;
  }
  return 0;
}

int64_t shape_numel(const Shape *s, int64_t b) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= (i == 0 && s->batched) ? b : s->dim[i];
  return n;
}

bool shape_equal(const Shape *a, const Shape *b) {
  if (a->rank != b->rank || a->batched != b->batched) return false;
  for (int i = 0; i < a->rank; i++)
    if (!(i == 0 && a->batched) && a->dim[i] != b->dim[i]) return false;
  return true;
}

const char *shape_str(const Shape *s, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i <= s->rank && used + 1 < n; i++) {
    const char *sep = i == 0 ? "[" : ",";
    if (i == s->rank)
      used += (size_t)snprintf(buf + used, n - used, "%s]", i == 0 ? "[" : "");
    else if (i == 0 && s->batched)
      used += (size_t)snprintf(buf + used, n - used, "%sB", sep);
    else
      used += (size_t)snprintf(buf + used, n - used, "%s%lld", sep, (long long)s->dim[i]);
  }
  return buf;
}

#define GROW(arr, count, cap)                                                  \
  do {                                                                         \
    if ((count) == (cap)) {                                                    \
      (cap) = (cap) ? 2 * (cap) : 64;                                          \
      (arr) = pd_realloc((arr), (size_t)(cap) * sizeof *(arr));                \
    }                                                                          \
  } while (0)

Graph *graph_create(Arena *a, const char *name) {
  Graph *g = arena_alloc(a, sizeof *g);
  g->arena = a;
  g->name = arena_strdup(a, name ? name : "model");
  g->loss = -1;
  g->train.beta1 = 0.9;
  g->train.beta2 = 0.999;
  g->train.eps = 1e-8;
  g->train.flush_steps = -1; /* pd2bwc's default (docs/update-rules.md) */
  g->train.predict = -1;
  return g;
}

void graph_destroy(Graph *g) {
  if (!g) return;
  free(g->tensors);
  free(g->ops);
  free(g->params);
  free(g->regions);
  free(g->consts);
  g->tensors = NULL;
  g->ops = NULL;
  g->params = NULL;
  g->regions = NULL;
  g->consts = NULL;
}

int graph_add_region(Graph *g, RegionKind kind, int index, const char *name) {
  GROW(g->regions, g->nregions, g->cap_regions);
  Region *r = &g->regions[g->nregions];
  r->kind = kind;
  r->index = index;
  r->name = arena_strdup(g->arena, name);
  return g->nregions++;
}

static int add_tensor(Graph *g, const char *name, DType dt, Shape s, TensorKind kind, Loc loc) {
  GROW(g->tensors, g->ntensors, g->cap_tensors);
  int id = g->ntensors++;
  Tensor *t = &g->tensors[id];
  memset(t, 0, sizeof *t);
  t->id = id;
  t->name = name ? arena_strdup(g->arena, name) : arena_printf(g->arena, "%%%d", id);
  t->dtype = dt;
  t->shape = s;
  t->kind = kind;
  t->producer = -1;
  t->param = -1;
  t->grad = -1;
  t->loc = loc;
  return id;
}

int graph_add_input(Graph *g, const char *name, DType dt, Shape s, Loc loc) {
  return add_tensor(g, name, dt, s, TK_INPUT, loc);
}

int graph_add_param(Graph *g, const char *name, Shape s, InitKind init, double std, int region,
                    Loc loc) {
  int t = add_tensor(g, name, DT_F32, s, TK_PARAM, loc);
  GROW(g->params, g->nparams, g->cap_params);
  Param *p = &g->params[g->nparams];
  memset(p, 0, sizeof *p);
  p->tensor = t;
  p->init = init;
  p->std = std;
  p->decay = s.rank >= 2;
  p->region = region;
  g->tensors[t].param = g->nparams;
  g->tensors[t].needs_grad = true;
  g->nparams++;
  return t;
}

void graph_add_const(Graph *g, const char *name, double value, bool is_int) {
  GROW(g->consts, g->nconsts, g->cap_consts);
  ModelConst *c = &g->consts[g->nconsts++];
  c->name = arena_strdup(g->arena, name);
  c->value = value;
  c->is_int = is_int;
}

/* Appends the op, runs its shape rule; returns the id or -1 with err filled. */
static int add_op(Graph *g, OpKind kind, const int *in, int nin, const double *attr, int region,
                  int fwd_op, TensorKind out_kind, const char *name, Loc loc, char *err,
                  size_t errlen) {
  const OpInfo *info = &op_info[kind];
  if (nin < info->min_inputs || nin > info->max_inputs) {
    if (info->min_inputs == info->max_inputs)
      snprintf(err, errlen, "'%s' takes %d input%s, got %d", info->name, info->min_inputs,
               info->min_inputs == 1 ? "" : "s", nin);
    else
      snprintf(err, errlen, "'%s' takes %d to %d inputs, got %d", info->name, info->min_inputs,
               info->max_inputs, nin);
    return -1;
  }
  GROW(g->ops, g->nops, g->cap_ops);
  Op *op = &g->ops[g->nops];
  memset(op, 0, sizeof *op);
  op->id = g->nops;
  op->kind = kind;
  op->nin = nin;
  for (int i = 0; i < nin; i++) {
    PD_CHECK(in[i] >= 0 && in[i] < g->ntensors, "(input %d of %s is %d)", i, info->name, in[i]);
    op->in[i] = in[i];
  }
  for (int i = 0; i < info->nattrs; i++) op->attr[i] = attr ? attr[i] : info->attr_defaults[i];
  op->region = region;
  op->fwd_op = fwd_op;
  op->loc = loc;
  Shape shapes[IR_MAX_OUT];
  DType dtypes[IR_MAX_OUT];
  memset(shapes, 0, sizeof shapes);
  for (int i = 0; i < IR_MAX_OUT; i++) dtypes[i] = DT_F32;
  err[0] = 0;
  if (!info->shape(g, op, shapes, dtypes, err, errlen)) return -1;
  int id = g->nops++;
  op->nout = info->noutputs;
  bool needs_grad = false;
  for (int i = 0; i < nin; i++) needs_grad |= g->tensors[in[i]].needs_grad;
  for (int i = 0; i < info->noutputs; i++) {
    const char *oname = name;
    /* A forward op's first output is the one model text names (attention's out; its
     * lse is out.1); a backward op's outputs are all numbered. */
    if (name && info->noutputs > 1 && (i > 0 || !(info->flags & OPF_FWD)))
      oname = arena_printf(g->arena, "%s.%d", name, i);
    int t = add_tensor(g, oname, dtypes[i], shapes[i], out_kind, loc);
    g->tensors[t].producer = id;
    g->tensors[t].needs_grad = needs_grad && (info->flags & OPF_FWD) && dtypes[i] == DT_F32;
    g->ops[id].out[i] = t;
  }
  return id;
}

int graph_add_op(Graph *g, Diag *d, OpKind kind, const int *in, int nin, const double *attr,
                 int region, const char *name, Loc loc) {
  char err[256];
  int id = add_op(g, kind, in, nin, attr, region, -1, TK_ACT, name, loc, err, sizeof err);
  if (id < 0) diag_error(d, loc, "%s", err);
  return id;
}

int graph_emit(Graph *g, OpKind kind, const int *in, int nin, const double *attr, int region,
               int fwd_op, TensorKind out_kind, const char *name) {
  char err[256];
  Loc loc = fwd_op >= 0 ? g->ops[fwd_op].loc : (Loc){0};
  int id = add_op(g, kind, in, nin, attr, region, fwd_op, out_kind, name, loc, err, sizeof err);
  PD_CHECK(id >= 0, "(emitting %s: %s)", op_info[kind].name, err);
  return id;
}

int graph_finalize(Graph *g) {
  /* Which regions use each parameter: more than one means the parameter is tied
   * (held by every stage that owns one of those regions). Backward ops are not
   * counted: they follow their forward op's region. */
  int ntied = 0;
  /* One pass over the ops. Forward ops come in region order, so the regions
   * using a parameter are seen as runs: count the changes of region. */
  int *last = pd_malloc(((size_t)g->nparams + 1) * sizeof *last);
  for (int p = 0; p < g->nparams; p++) {
    last[p] = -1;
    g->params[p].nuses_regions = 0;
  }
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    if (op->fwd_op >= 0 || op->region < 0 || op->region >= g->nregions) continue;
    for (int i = 0; i < op->nin; i++) {
      int p = g->tensors[op->in[i]].param;
      if (g->tensors[op->in[i]].kind != TK_PARAM || p < 0 || last[p] == op->region) continue;
      last[p] = op->region;
      g->params[p].nuses_regions++;
    }
  }
  for (int p = 0; p < g->nparams; p++) ntied += g->params[p].nuses_regions > 1;
  free(last);
  /* needs_grad flows forward from parameters through differentiable ops. */
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    if (!(op_info[op->kind].flags & OPF_FWD)) continue;
    bool needs = false;
    for (int i = 0; i < op->nin; i++) needs |= g->tensors[op->in[i]].needs_grad;
    for (int i = 0; i < op->nout; i++)
      g->tensors[op->out[i]].needs_grad = needs && g->tensors[op->out[i]].dtype == DT_F32;
  }
  return ntied;
}

int64_t graph_param_count(const Graph *g) {
  int64_t n = 0;
  for (int p = 0; p < g->nparams; p++) n += shape_numel(&g->tensors[g->params[p].tensor].shape, 1);
  return n;
}

OpCost graph_cost(const Graph *g, int first, int last, int64_t b) {
  OpCost total = {0, 0};
  for (int o = first; o < last && o < g->nops; o++) {
    OpCost c = op_info[g->ops[o].kind].cost(g, &g->ops[o], b);
    total.flops += c.flops;
    total.bytes += c.bytes;
  }
  return total;
}
