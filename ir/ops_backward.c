/* ir/ops_backward.c — the backward ops' shape and cost rules.
 *
 * Backward ops come only from autodiff (the gradient rules in ops.c), so their
 * shapes follow from inputs that are already checked: no message to the user here.
 * They are never differentiated again (no double backward), so they have no
 * gradient rule; ops_table.c names NULL for it. Costs as in ops.c: a multiply-add
 * is 2 FLOPs, bytes are the float32 traffic, per microbatch of size b. */
#include "ir/ops_rules.h"

bool op_shape_EMBEDDING_BWD(SHAPE_ARGS) {
  out[0] = shape2((int64_t)op->attr[0], last_dim(IN(0)));
  odt[0] = DT_F32;
  (void)err, (void)errlen;
  return true;
}
OpCost op_cost_EMBEDDING_BWD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){n, 12.0 * n};
}
bool op_shape_POSITIONS_BWD(SHAPE_ARGS) { return op_shape_EMBEDDING_BWD(g, op, out, odt, err, errlen); }
OpCost op_cost_POSITIONS_BWD(COST_ARGS) { return op_cost_EMBEDDING_BWD(g, op, b); }

bool op_shape_LINEAR_DW(SHAPE_ARGS) {
  (void)err, (void)errlen;
  out[0] = shape2(last_dim(IN(0)), last_dim(IN(1)));
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_LINEAR_DW(COST_ARGS) {
  double k = (double)last_dim(IN(0)), n = (double)last_dim(IN(1));
  return gemm_cost(k, n, numel(IN(0), b) / k);
}
bool op_shape_BIAS_GRAD(SHAPE_ARGS) {
  (void)err, (void)errlen;
  out[0] = shape1(last_dim(IN(0)));
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_BIAS_GRAD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){n, 4.0 * n};
}
bool op_shape_MATMUL_DW_T(SHAPE_ARGS) {
  (void)err, (void)errlen;
  out[0] = shape2(last_dim(IN(0)), last_dim(IN(1)));
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_MATMUL_DW_T(COST_ARGS) {
  double n = (double)last_dim(IN(0)), k = (double)last_dim(IN(1));
  return gemm_cost(n, k, numel(IN(0), b) / n);
}
bool op_shape_LAYERNORM_BWD(SHAPE_ARGS) {
  (void)err, (void)errlen;
  out[0] = IN(1)->shape;
  out[1] = out[2] = shape1(last_dim(IN(1)));
  odt[0] = odt[1] = odt[2] = DT_F32;
  return true;
}
OpCost op_cost_LAYERNORM_BWD(COST_ARGS) {
  double n = numel(IN(1), b);
  return (OpCost){16.0 * n, 16.0 * n};
}
bool op_shape_RMSNORM_DGAMMA(SHAPE_ARGS) {
  (void)err, (void)errlen;
  out[0] = shape1(last_dim(IN(1)));
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_RMSNORM_DGAMMA(COST_ARGS) {
  double n = numel(IN(1), b);
  return (OpCost){5.0 * n, 4.0 * (2 * n + last_dim(IN(1)))};
}
bool op_shape_RMSNORM_BWD(SHAPE_ARGS) {
  (void)err, (void)errlen;
  same_as(g, op, out, odt, 0, 1);
  return true;
}
OpCost op_cost_RMSNORM_BWD(COST_ARGS) {
  double n = numel(IN(1), b);
  return (OpCost){8.0 * n, 4.0 * (3 * n + numel(IN(2), b))};
}
/* dy-shaped outputs: gelu_bwd, relu_bwd, silu_bwd, softmax_bwd, rope_bwd, dropout_bwd, cross_entropy_bwd */
static bool same_as_in1(SHAPE_ARGS) {
  (void)err, (void)errlen;
  same_as(g, op, out, odt, 0, op->nin > 1 ? 1 : 0);
  return true;
}
bool op_shape_GELU_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
OpCost op_cost_GELU_BWD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){20.0 * n, 12.0 * n};
}
bool op_shape_RELU_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
OpCost op_cost_RELU_BWD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){n, 12.0 * n};
}
bool op_shape_SILU_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
OpCost op_cost_SILU_BWD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){9.0 * n, 12.0 * n};
}
bool op_shape_SOFTMAX_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
OpCost op_cost_SOFTMAX_BWD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){4.0 * n, 12.0 * n};
}
bool op_shape_ROPE_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
OpCost op_cost_ROPE_BWD(COST_ARGS) { return op_cost_ROPE(g, op, b); }
bool op_shape_ATTENTION_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
/* dQ, dK, dV, dP: twice the forward GEMM work (recomputing P is counted in the
 * forward-sized term, as flash-attention's backward does). The forward's cost reads
 * the packed qkv, this op's input 1 (input 0, dout, is a third as wide). */
OpCost op_cost_ATTENTION_BWD(COST_ARGS) {
  Op fwd = *op;
  fwd.in[0] = op->in[1];
  OpCost f = op_cost_ATTENTION(g, &fwd, b);
  f.bytes *= 2;
  f.flops *= 2;
  return f;
}
/* dq, dk, dv: the shapes of q, k, v. */
bool op_shape_ATTENTION_GQA_BWD(SHAPE_ARGS) {
  (void)err, (void)errlen;
  for (int i = 0; i < 3; i++) same_as(g, op, out, odt, i, i + 1);
  return true;
}
/* As attention_bwd: twice the forward. */
OpCost op_cost_ATTENTION_GQA_BWD(COST_ARGS) {
  Op f = *op; /* the forward's inputs are this op's 1..3 */
  for (int i = 0; i < 3; i++) f.in[i] = op->in[i + 1];
  OpCost c = op_cost_ATTENTION_GQA(g, &f, b);
  c.bytes *= 2;
  c.flops *= 2;
  return c;
}
bool op_shape_DROPOUT_BWD(SHAPE_ARGS) { return same_as_in1(g, op, out, odt, err, errlen); }
OpCost op_cost_DROPOUT_BWD(COST_ARGS) { return op_cost_DROPOUT(g, op, b); }
bool op_shape_GATHER_BWD(SHAPE_ARGS) {
  (void)err, (void)errlen;
  out[0] = IN(0)->shape;
  out[0].dim[1] = (int64_t)op->attr[0];
  odt[0] = DT_F32;
  return true;
}
OpCost op_cost_GATHER_BWD(COST_ARGS) {
  double n = numel(T(op->out[0]), b);
  return (OpCost){0, 8.0 * n};
}
bool op_shape_CROSS_ENTROPY_BWD(SHAPE_ARGS) {
  (void)err, (void)errlen;
  same_as(g, op, out, odt, 0, 0);
  return true;
}
OpCost op_cost_CROSS_ENTROPY_BWD(COST_ARGS) {
  double n = numel(IN(0), b);
  return (OpCost){5.0 * n, 8.0 * n};
}
