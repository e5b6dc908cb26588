/* ir/ops_rules.h — what the op table's rule files share (internal to ir/).
 *
 * The op table (ir/ops.def) names three functions per row: op_shape_<ID>,
 * op_cost_<ID>, op_grad_<ID>. They live in files by concern: ops.c the forward ops'
 * rules (shape, cost, gradient), ops_attention.c the attention ops', ops_backward.c the
 * backward ops' shape and cost rules, ops_table.c the table that names them all. This
 * header declares every rule from ops.def itself, so a new row without its functions
 * still fails to link, and holds the shape, cost and gradient helpers the rule files
 * share. Backward rows (OPF_BWD)
 * have no gradient rule: their op_grad_<ID> is declared here but never defined, and
 * ops_table.c's row takes NULL for it by the flag. */
#ifndef PD2BW_IR_OPS_RULES_H
#define PD2BW_IR_OPS_RULES_H

#include "ir/ir.h"

#define T(id) (&g->tensors[(id)])
#define IN(i) T(op->in[i])
#define SHAPE_ARGS const Graph *g, const Op *op, Shape *out, DType *odt, char *err, size_t errlen
#define COST_ARGS const Graph *g, const Op *op, int64_t b
#define GRAD_ARGS Graph *g, const Op *op, const int *dout, int *din

#define OP(id, nm, mini, maxi, nout, attrs, fl, lowering, elem)                \
  bool op_shape_##id(SHAPE_ARGS);                                              \
  OpCost op_cost_##id(COST_ARGS);                                              \
  void op_grad_##id(GRAD_ARGS);
#include "ops.def"
#undef OP

/* Elements of tensor t at microbatch size b. */
static inline double numel(const Tensor *t, int64_t b) { return (double)shape_numel(&t->shape, b); }

static inline int64_t last_dim(const Tensor *t) { return t->shape.rank ? t->shape.dim[t->shape.rank - 1] : 1; }

/* Output i of op has the same shape and dtype as input j. */
static inline void same_as(const Graph *g, const Op *op, Shape *out, DType *odt, int i, int j) {
  out[i] = IN(j)->shape;
  odt[i] = IN(j)->dtype;
}

static inline Shape shape2(int64_t a, int64_t c) {
  Shape s = {.rank = 2, .batched = false, .dim = {a, c}};
  return s;
}

static inline Shape shape1(int64_t a) {
  Shape s = {.rank = 1, .batched = false, .dim = {a}};
  return s;
}

/* rows = elements of x / K: the M of the GEMM */
static inline OpCost gemm_cost(double m, double n, double k) {
  return (OpCost){2.0 * m * n * k, 4.0 * (m * k + k * n + m * n)};
}

/* ---- the forward rules' helpers (ops.c, ops_attention.c) ---------------------- */

#include <math.h>
#include <stdio.h>


#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

static inline const char *sh(const Tensor *t, char *buf) { return shape_str(&t->shape, buf, 64); }

static inline bool need_f32(const Graph *g, const Op *op, int i, char *err, size_t errlen) {
  if (IN(i)->dtype == DT_F32) return true;
  return ERR("input %d of '%s' must be f32, got %s '%s'", i + 1, op_info[op->kind].name,
             dtype_name(IN(i)->dtype), IN(i)->name);
}

static inline bool need_i32(const Graph *g, const Op *op, int i, char *err, size_t errlen) {
  if (IN(i)->dtype == DT_I32) return true;
  return ERR("input %d of '%s' must be i32 ids, got %s '%s'", i + 1, op_info[op->kind].name,
             dtype_name(IN(i)->dtype), IN(i)->name);
}

static inline bool need_rank(const Graph *g, const Op *op, int i, int lo, int hi, char *err,
                      size_t errlen) {
  int r = IN(i)->shape.rank;
  if (r >= lo && r <= hi) return true;
  char b[64];
  if (lo == hi)
    return ERR("input %d of '%s' must have rank %d, got %s '%s'", i + 1, op_info[op->kind].name,
               lo, sh(IN(i), b), IN(i)->name);
  return ERR("input %d of '%s' must have rank %d to %d, got %s '%s'", i + 1,
             op_info[op->kind].name, lo, hi, sh(IN(i), b), IN(i)->name);
}

static inline bool is_int_attr(double v) { return v == floor(v) && fabs(v) < 9e15; }

/* Shape `s` with its last dim replaced by n. */
static inline Shape with_last(Shape s, int64_t n) {
  s.dim[s.rank - 1] = n;
  return s;
}

/* Emits op and returns its first output. */
static inline int emit1(Graph *g, const Op *op, OpKind kind, const int *in, int nin, const double *attr,
                 const char *name) {
  int id = graph_emit(g, kind, in, nin, attr, op->region, op->id, TK_ACT_GRAD, name);
  return g->ops[id].out[0];
}

static inline const char *gname(Graph *g, int t) { return arena_printf(g->arena, "d%s", g->tensors[t].name); }

static inline bool wants(const Graph *g, const Op *op, int i) { return g->tensors[op->in[i]].needs_grad; }

static inline bool check_p(double p, const char *opname, char *err, size_t errlen) {
  if (p >= 0 && p < 1) return true;
  return ERR("'%s' dropout probability p must be in [0, 1), got %g", opname, p);
}

#endif
