/* ir/ops.c — the forward ops' rules: per op kind its shape rule, cost and gradient rule.
 *
 * The table (ops_table.c, generated from ops.def) names the three functions each row
 * needs (op_shape_<ID>, op_cost_<ID>, op_grad_<ID>); this file supplies them for the
 * forward ops, ops_backward.c the shapes and costs of the backward ops they emit.
 * Shape rules speak to the user: their messages say what was expected. Costs count
 * a multiply-add as 2 FLOPs and bytes as the float32 traffic of inputs and outputs,
 * per microbatch of size b; the planner's roofline uses both. Gradient rules emit
 * backward ops (kinds from the same table) through graph_emit. */
#include "ir/ops_rules.h"

#include <math.h>
#include <string.h>

/* ---- embedding ---------------------------------------------------------------- */

bool op_shape_EMBEDDING(SHAPE_ARGS) {
  char b[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 2, 2, err, errlen)) return false;
  if (!need_i32(g, op, 1, err, errlen) || !need_rank(g, op, 1, 1, 3, err, errlen)) return false;
  (void)b;
  out[0] = IN(1)->shape;
  out[0].dim[out[0].rank++] = IN(0)->shape.dim[1];
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_EMBEDDING(COST_ARGS) {
  (void)g;
  return (OpCost){0, 4.0 * 2 * numel(T(op->out[0]), b)};
}
void op_grad_EMBEDDING(GRAD_ARGS) {
  din[1] = -1;
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  double attr[] = {(double)IN(0)->shape.dim[0]};
  int in[] = {dout[0], op->in[1]};
  din[0] = emit1(g, op, OP_EMBEDDING_BWD, in, 2, attr, gname(g, op->in[0]));
}

bool op_shape_POSITIONS(SHAPE_ARGS) {
  char b[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 2, 2, err, errlen)) return false;
  if (!need_i32(g, op, 1, err, errlen) || !need_rank(g, op, 1, 2, 2, err, errlen)) return false;
  if (IN(1)->shape.dim[1] > IN(0)->shape.dim[0])
    return ERR("'positions' table %s '%s' has fewer rows than the sequence length %lld",
               sh(IN(0), b), IN(0)->name, (long long)IN(1)->shape.dim[1]);
  out[0] = IN(1)->shape;
  out[0].dim[out[0].rank++] = IN(0)->shape.dim[1];
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_POSITIONS(COST_ARGS) {
  (void)g;
  return (OpCost){0, 4.0 * 2 * numel(T(op->out[0]), b)};
}
void op_grad_POSITIONS(GRAD_ARGS) {
  din[1] = -1;
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  double attr[] = {(double)IN(0)->shape.dim[0]};
  din[0] = emit1(g, op, OP_POSITIONS_BWD, &dout[0], 1, attr, gname(g, op->in[0]));
}

/* ---- linear / matmul ------------------------------------------------------------ */

bool op_shape_LINEAR(SHAPE_ARGS) {
  char b1[64], b2[64];
  for (int i = 0; i < op->nin; i++)
    if (!need_f32(g, op, i, err, errlen)) return false;
  if (!need_rank(g, op, 0, 1, 4, err, errlen) || !need_rank(g, op, 1, 2, 2, err, errlen))
    return false;
  const Tensor *x = IN(0), *w = IN(1);
  if (last_dim(x) != w->shape.dim[0])
    return ERR("'linear' of %s '%s' needs a weight with %lld rows, got %s '%s'", sh(x, b1),
               x->name, (long long)last_dim(x), sh(w, b2), w->name);
  if (op->nin == 3) {
    const Tensor *bias = IN(2);
    if (bias->shape.rank != 1 || bias->shape.dim[0] != w->shape.dim[1])
      return ERR("'linear' bias must be [%lld] to match weight %s, got %s '%s'",
                 (long long)w->shape.dim[1], sh(w, b1), sh(bias, b2), bias->name);
  }
  out[0] = with_last(x->shape, w->shape.dim[1]);
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_LINEAR(COST_ARGS) {
  const Tensor *x = IN(0), *w = IN(1);
  double k = (double)w->shape.dim[0], n = (double)w->shape.dim[1];
  OpCost c = gemm_cost(numel(x, b) / k, n, k);
  if (op->nin == 3) c.flops += numel(x, b) / k * n;
  return c;
}
void op_grad_LINEAR(GRAD_ARGS) {
  for (int i = 0; i < op->nin; i++) din[i] = -1;
  if (dout[0] < 0) return;
  if (wants(g, op, 0)) {
    int in[] = {dout[0], op->in[1]};
    double attr[] = {1};
    din[0] = emit1(g, op, OP_MATMUL, in, 2, attr, gname(g, op->in[0]));
  }
  if (wants(g, op, 1)) {
    int in[] = {op->in[0], dout[0]};
    din[1] = emit1(g, op, OP_LINEAR_DW, in, 2, NULL, gname(g, op->in[1]));
  }
  if (op->nin == 3 && wants(g, op, 2)) din[2] = emit1(g, op, OP_BIAS_GRAD, &dout[0], 1, NULL, gname(g, op->in[2]));
}

bool op_shape_MATMUL(SHAPE_ARGS) {
  char b1[64], b2[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_f32(g, op, 1, err, errlen)) return false;
  if (!need_rank(g, op, 0, 1, 4, err, errlen) || !need_rank(g, op, 1, 2, 2, err, errlen))
    return false;
  double tb = op->attr[0];
  if (tb != 0 && tb != 1) return ERR("'matmul' attribute transpose_b must be 0 or 1, got %g", tb);
  const Tensor *a = IN(0), *w = IN(1);
  int64_t k = tb ? w->shape.dim[1] : w->shape.dim[0], n = tb ? w->shape.dim[0] : w->shape.dim[1];
  if (last_dim(a) != k)
    return ERR("'matmul' of %s '%s' with %s'%s'%s: inner dimensions %lld and %lld differ", sh(a, b1),
               a->name, tb ? "transposed " : "", w->name, sh(w, b2), (long long)last_dim(a),
               (long long)k);
  out[0] = with_last(a->shape, n);
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_MATMUL(COST_ARGS) {
  const Tensor *a = IN(0), *w = IN(1);
  double k = (double)last_dim(a), n = (double)last_dim(T(op->out[0]));
  (void)w;
  return gemm_cost(numel(a, b) / k, n, k);
}
void op_grad_MATMUL(GRAD_ARGS) {
  din[0] = din[1] = -1;
  if (dout[0] < 0) return;
  bool tb = op->attr[0] != 0;
  if (wants(g, op, 0)) {
    int in[] = {dout[0], op->in[1]};
    double attr[] = {tb ? 0 : 1};
    din[0] = emit1(g, op, OP_MATMUL, in, 2, attr, gname(g, op->in[0]));
  }
  if (wants(g, op, 1)) {
    if (tb) {
      int in[] = {dout[0], op->in[0]};
      din[1] = emit1(g, op, OP_MATMUL_DW_T, in, 2, NULL, gname(g, op->in[1]));
    } else {
      int in[] = {op->in[0], dout[0]};
      din[1] = emit1(g, op, OP_LINEAR_DW, in, 2, NULL, gname(g, op->in[1]));
    }
  }
}

/* ---- elementwise ---------------------------------------------------------------- */

bool op_shape_ADD(SHAPE_ARGS) {
  char b1[64], b2[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_f32(g, op, 1, err, errlen)) return false;
  const Tensor *a = IN(0), *c = IN(1);
  bool vec = c->shape.rank == 1 && !c->shape.batched && a->shape.rank >= 1 &&
             c->shape.dim[0] == last_dim(a) && !shape_equal(&a->shape, &c->shape);
  if (!shape_equal(&a->shape, &c->shape) && !vec)
    return ERR("'add' needs equal shapes or a vector over the last dim: %s '%s' and %s '%s'",
               sh(a, b1), a->name, sh(c, b2), c->name);
  same_as(g, op, out, odt, 0, 0);
  return true;
}
OpCost op_cost_ADD(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){n, 4.0 * (2 * n + numel(IN(1), b) - n + n)};
}
void op_grad_ADD(GRAD_ARGS) {
  din[0] = din[1] = -1;
  if (dout[0] < 0) return;
  if (wants(g, op, 0)) din[0] = dout[0];
  if (wants(g, op, 1)) {
    if (shape_equal(&IN(0)->shape, &IN(1)->shape))
      din[1] = dout[0];
    else
      din[1] = emit1(g, op, OP_BIAS_GRAD, &dout[0], 1, NULL, gname(g, op->in[1]));
  }
}

bool op_shape_MUL(SHAPE_ARGS) {
  char b1[64], b2[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_f32(g, op, 1, err, errlen)) return false;
  if (!shape_equal(&IN(0)->shape, &IN(1)->shape))
    return ERR("'mul' needs equal shapes: %s '%s' and %s '%s'", sh(IN(0), b1), IN(0)->name,
               sh(IN(1), b2), IN(1)->name);
  same_as(g, op, out, odt, 0, 0);
  return true;
}
OpCost op_cost_MUL(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){n, 12.0 * n};
}
void op_grad_MUL(GRAD_ARGS) {
  din[0] = din[1] = -1;
  if (dout[0] < 0) return;
  if (wants(g, op, 0)) {
    int in[] = {dout[0], op->in[1]};
    din[0] = emit1(g, op, OP_MUL, in, 2, NULL, gname(g, op->in[0]));
  }
  if (wants(g, op, 1)) {
    int in[] = {dout[0], op->in[0]};
    din[1] = emit1(g, op, OP_MUL, in, 2, NULL, gname(g, op->in[1]));
  }
}

bool op_shape_SCALE(SHAPE_ARGS) {
  if (!need_f32(g, op, 0, err, errlen)) return false;
  if (!isfinite(op->attr[0])) return ERR("'scale' attribute s must be finite");
  same_as(g, op, out, odt, 0, 0);
  return true;
}
OpCost op_cost_SCALE(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){n, 8.0 * n};
}
void op_grad_SCALE(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  din[0] = emit1(g, op, OP_SCALE, &dout[0], 1, op->attr, gname(g, op->in[0]));
}

/* Unary f32 ops that keep their shape: gelu, relu, softmax, dropout. */
static bool unary_f32(SHAPE_ARGS) {
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 1, 4, err, errlen)) return false;
  same_as(g, op, out, odt, 0, 0);
  return true;
}

bool op_shape_GELU(SHAPE_ARGS) { return unary_f32(g, op, out, odt, err, errlen); }
OpCost op_cost_GELU(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){12.0 * n, 8.0 * n};
}
void op_grad_GELU(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {dout[0], op->in[0]};
  din[0] = emit1(g, op, OP_GELU_BWD, in, 2, NULL, gname(g, op->in[0]));
}

bool op_shape_RELU(SHAPE_ARGS) { return unary_f32(g, op, out, odt, err, errlen); }
OpCost op_cost_RELU(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){n, 8.0 * n};
}
void op_grad_RELU(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {dout[0], op->in[0]};
  din[0] = emit1(g, op, OP_RELU_BWD, in, 2, NULL, gname(g, op->in[0]));
}

bool op_shape_SILU(SHAPE_ARGS) { return unary_f32(g, op, out, odt, err, errlen); }
OpCost op_cost_SILU(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){5.0 * n, 8.0 * n};
}
void op_grad_SILU(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {dout[0], op->in[0]};
  din[0] = emit1(g, op, OP_SILU_BWD, in, 2, NULL, gname(g, op->in[0]));
}

bool op_shape_SOFTMAX(SHAPE_ARGS) { return unary_f32(g, op, out, odt, err, errlen); }
OpCost op_cost_SOFTMAX(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){5.0 * n, 8.0 * n};
}
void op_grad_SOFTMAX(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {dout[0], op->out[0]};
  din[0] = emit1(g, op, OP_SOFTMAX_BWD, in, 2, NULL, gname(g, op->in[0]));
}

/* rope: x[B,T,C] in heads of D = C/heads, D even (the rotation pairs x_i with
 * x_{i+D/2}). */
bool op_shape_ROPE(SHAPE_ARGS) {
  char b[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 3, 3, err, errlen)) return false;
  double heads = op->attr[0], theta = op->attr[1];
  int64_t c = last_dim(IN(0));
  if (heads == 0)
    return ERR("'rope' needs its heads attribute, rope(x, heads = H): the width %lld of %s '%s' in H heads",
               (long long)c, sh(IN(0), b), IN(0)->name);
  if (!is_int_attr(heads) || heads < 1) return ERR("'rope' heads must be a positive integer, got %g", heads);
  if (c % (int64_t)heads != 0)
    return ERR("'rope' width %lld of %s '%s' is not divisible by %g heads", (long long)c, sh(IN(0), b),
               IN(0)->name, heads);
  if ((c / (int64_t)heads) % 2 != 0)
    return ERR("'rope' head size %lld (width %lld / %g heads) of %s '%s' is odd: rotary position embedding "
               "rotates pairs (x[i], x[i + D/2]) and needs an even head size",
               (long long)(c / (int64_t)heads), (long long)c, heads, sh(IN(0), b), IN(0)->name);
  if (!(theta > 0) || !isfinite(theta)) return ERR("'rope' attribute theta must be positive, got %g", theta);
  same_as(g, op, out, odt, 0, 0);
  return true;
}
/* Two products and a sum per element, and each pair's angle (its cos and sin): about
 * 4 FLOPs an element; x read and y written once. */
OpCost op_cost_ROPE(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){4.0 * n, 8.0 * n};
}
/* The gradient of a rotation is the inverse rotation: rope_bwd(dy), angle -a. */
void op_grad_ROPE(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  din[0] = emit1(g, op, OP_ROPE_BWD, &dout[0], 1, op->attr, gname(g, op->in[0]));
}

bool op_shape_DROPOUT(SHAPE_ARGS) {
  if (!check_p(op->attr[0], "dropout", err, errlen)) return false;
  return unary_f32(g, op, out, odt, err, errlen);
}
OpCost op_cost_DROPOUT(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){op->attr[0] > 0 ? 4.0 * n : 0, op->attr[0] > 0 ? 8.0 * n : 0};
}
void op_grad_DROPOUT(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  din[0] = emit1(g, op, OP_DROPOUT_BWD, &dout[0], 1, op->attr, gname(g, op->in[0]));
}

/* ---- layernorm ------------------------------------------------------------------ */

bool op_shape_LAYERNORM(SHAPE_ARGS) {
  char b1[64], b2[64];
  for (int i = 0; i < 3; i++)
    if (!need_f32(g, op, i, err, errlen)) return false;
  if (!need_rank(g, op, 0, 1, 4, err, errlen)) return false;
  int64_t c = last_dim(IN(0));
  for (int i = 1; i < 3; i++)
    if (IN(i)->shape.rank != 1 || IN(i)->shape.dim[0] != c)
      return ERR("'layernorm' of %s '%s' needs %s [%lld], got %s '%s'", sh(IN(0), b1),
                 IN(0)->name, i == 1 ? "a gain" : "a bias", (long long)c, sh(IN(i), b2),
                 IN(i)->name);
  if (!(op->attr[0] > 0)) return ERR("'layernorm' attribute eps must be positive, got %g", op->attr[0]);
  same_as(g, op, out, odt, 0, 0);
  return true;
}
OpCost op_cost_LAYERNORM(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){8.0 * n, 8.0 * n};
}
void op_grad_LAYERNORM(GRAD_ARGS) {
  din[0] = din[1] = din[2] = -1;
  if (dout[0] < 0) return;
  int in[] = {dout[0], op->in[0], op->in[1]};
  int id = graph_emit(g, OP_LAYERNORM_BWD, in, 3, op->attr, op->region, op->id, TK_ACT_GRAD,
                      gname(g, op->out[0]));
  for (int i = 0; i < 3; i++)
    if (wants(g, op, i)) din[i] = g->ops[id].out[i];
}

bool op_shape_RMSNORM(SHAPE_ARGS) {
  char b1[64], b2[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_f32(g, op, 1, err, errlen)) return false;
  if (!need_rank(g, op, 0, 1, 4, err, errlen)) return false;
  int64_t c = last_dim(IN(0));
  if (IN(1)->shape.rank != 1 || IN(1)->shape.batched || IN(1)->shape.dim[0] != c)
    return ERR("'rmsnorm' of %s '%s' needs a gain [%lld], got %s '%s'", sh(IN(0), b1), IN(0)->name, (long long)c,
               sh(IN(1), b2), IN(1)->name);
  if (!(op->attr[0] > 0) || !isfinite(op->attr[0]))
    return ERR("'rmsnorm' attribute eps must be positive, got %g", op->attr[0]);
  same_as(g, op, out, odt, 0, 0);
  return true;
}
OpCost op_cost_RMSNORM(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){4.0 * n, 4.0 * (2 * n + numel(IN(1), b))};
}
void op_grad_RMSNORM(GRAD_ARGS) {
  din[0] = din[1] = -1;
  if (dout[0] < 0) return;
  if (wants(g, op, 0)) {
    int in[] = {dout[0], op->in[0], op->in[1]};
    din[0] = emit1(g, op, OP_RMSNORM_BWD, in, 3, op->attr, gname(g, op->in[0]));
  }
  if (wants(g, op, 1)) {
    int in[] = {dout[0], op->in[0]};
    din[1] = emit1(g, op, OP_RMSNORM_DGAMMA, in, 2, op->attr, gname(g, op->in[1]));
  }
}

/* ---- reshape, gather --------------------------------------------------------------- */

bool op_shape_RESHAPE(SHAPE_ARGS) {
  char b1[64];
  const Tensor *x = IN(0);
  Shape s = {.batched = x->shape.batched};
  if (s.batched) s.dim[s.rank++] = 1;
  for (int i = 0; i < 3; i++) {
    double d = op->attr[i];
    if (d == 0) break;
    if (!is_int_attr(d) || d < 1) return ERR("'reshape' dims must be positive integers, got %g", d);
    if (s.rank == IR_MAX_RANK) return ERR("'reshape' result has more than %d dims", IR_MAX_RANK);
    s.dim[s.rank++] = (int64_t)d;
  }
  if (s.rank == (s.batched ? 1 : 0)) return ERR("'reshape' needs d1 (and optionally d2, d3)");
  if (shape_numel(&s, 1) != shape_numel(&x->shape, 1)) {
    char b2[64];
    return ERR("'reshape' of %s '%s' to %s changes the element count", sh(x, b1), x->name,
               shape_str(&s, b2, sizeof b2));
  }
  out[0] = s;
  odt[0] = x->dtype;
  return true;
}
OpCost op_cost_RESHAPE(COST_ARGS) {
  (void)g, (void)op, (void)b;
  return (OpCost){0, 0};
}
void op_grad_RESHAPE(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  const Shape *s = &IN(0)->shape;
  double attr[3] = {0, 0, 0};
  for (int i = s->batched ? 1 : 0, j = 0; i < s->rank; i++, j++) attr[j] = (double)s->dim[i];
  din[0] = emit1(g, op, OP_RESHAPE, &dout[0], 1, attr, gname(g, op->in[0]));
}

bool op_shape_GATHER(SHAPE_ARGS) {
  char b1[64], b2[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 3, 3, err, errlen)) return false;
  if (!need_i32(g, op, 1, err, errlen) || !need_rank(g, op, 1, 2, 2, err, errlen)) return false;
  if (IN(0)->shape.batched != IN(1)->shape.batched ||
      (!IN(0)->shape.batched && IN(0)->shape.dim[0] != IN(1)->shape.dim[0]))
    return ERR("'gather' positions %s '%s' must have the batch of %s '%s'", sh(IN(1), b1),
               IN(1)->name, sh(IN(0), b2), IN(0)->name);
  out[0] = IN(0)->shape;
  out[0].dim[1] = IN(1)->shape.dim[1];
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_GATHER(COST_ARGS) {
  (void)g;
  return (OpCost){0, 8.0 * numel(T(op->out[0]), b)};
}
void op_grad_GATHER(GRAD_ARGS) {
  din[0] = din[1] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {dout[0], op->in[1]};
  double attr[] = {(double)IN(0)->shape.dim[1]};
  din[0] = emit1(g, op, OP_GATHER_BWD, in, 2, attr, gname(g, op->in[0]));
}

/* ---- loss ------------------------------------------------------------------------- */

bool op_shape_CROSS_ENTROPY(SHAPE_ARGS) {
  char b1[64], b2[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 2, 4, err, errlen)) return false;
  if (!need_i32(g, op, 1, err, errlen)) return false;
  const Tensor *lg = IN(0), *tg = IN(1);
  Shape want = lg->shape;
  want.rank--;
  if (!shape_equal(&want, &tg->shape))
    return ERR("'cross_entropy' targets must be %s to match logits %s '%s', got %s '%s'",
               shape_str(&want, b1, sizeof b1), sh(lg, b2), lg->name, shape_str(&tg->shape, b1, sizeof b1),
               tg->name);
  if (!is_int_attr(op->attr[0])) return ERR("'cross_entropy' ignore_index must be an integer");
  out[0] = (Shape){.rank = 0};
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_CROSS_ENTROPY(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){5.0 * n, 4.0 * n};
}
void op_grad_CROSS_ENTROPY(GRAD_ARGS) {
  din[0] = din[1] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {op->in[0], op->in[1]};
  din[0] = emit1(g, op, OP_CROSS_ENTROPY_BWD, in, 2, op->attr, gname(g, op->in[0]));
}
