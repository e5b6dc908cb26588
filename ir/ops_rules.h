/* ir/ops_rules.h — what the op table's rule files share (internal to ir/).
 *
 * The op table (ir/ops.def) names three functions per row: op_shape_<ID>,
 * op_cost_<ID>, op_grad_<ID>. They live in files by concern: ops.c the forward ops'
 * rules (shape, cost, gradient), ops_backward.c the backward ops' shape and cost
 * rules, ops_table.c the table that names them all. This header declares every rule
 * from ops.def itself, so a new row without its functions still fails to link, and
 * holds the few shape and cost helpers both rule files need. Backward rows (OPF_BWD)
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

#endif
