/* ir/ops_table.c — the op table, generated from ops.def, and lookups in it.
 *
 * Each row names its rules (ops_rules.h declares them; ops.c and ops_backward.c
 * define them), so a row without them does not link. */
#include "ir/ops_rules.h"

#include <string.h>

/* Backward ops are not differentiated again (no double backward): their grad
 * entry is NULL, through these names that the table pastes. */
#define op_grad_EMBEDDING_BWD NULL
#define op_grad_POSITIONS_BWD NULL
#define op_grad_LINEAR_DW NULL
#define op_grad_BIAS_GRAD NULL
#define op_grad_MATMUL_DW_T NULL
#define op_grad_LAYERNORM_BWD NULL
#define op_grad_GELU_BWD NULL
#define op_grad_RELU_BWD NULL
#define op_grad_SOFTMAX_BWD NULL
#define op_grad_ATTENTION_BWD NULL
#define op_grad_DROPOUT_BWD NULL
#define op_grad_GATHER_BWD NULL
#define op_grad_CROSS_ENTROPY_BWD NULL

/* ---- the table -------------------------------------------------------------------- */

#define A0 .nattrs = 0
#define A1(n1, d1) .nattrs = 1, .attr_names = {n1}, .attr_defaults = {d1}
#define A2(n1, d1, n2, d2) .nattrs = 2, .attr_names = {n1, n2}, .attr_defaults = {d1, d2}
#define A3(n1, d1, n2, d2, n3, d3)                                             \
  .nattrs = 3, .attr_names = {n1, n2, n3}, .attr_defaults = {d1, d2, d3}
#define A4(n1, d1, n2, d2, n3, d3, n4, d4)                                     \
  .nattrs = 4, .attr_names = {n1, n2, n3, n4}, .attr_defaults = {d1, d2, d3, d4}

const OpInfo op_info[OP_COUNT] = {
#define OP(id, nm, mini, maxi, nout, attrs, fl)                                \
  [OP_##id] = {.name = nm,                                                     \
               .min_inputs = mini,                                             \
               .max_inputs = maxi,                                             \
               .noutputs = nout,                                               \
               attrs,                                                          \
               .flags = fl,                                                    \
               .shape = op_shape_##id,                                         \
               .cost = op_cost_##id,                                           \
               .grad = op_grad_##id},
#include "ops.def"
#undef OP
};

int op_lookup(const char *name) {
  for (int k = 0; k < OP_COUNT; k++)
    if (strcmp(op_info[k].name, name) == 0) return k;
  return -1;
}

int op_attr_index(OpKind kind, const char *name) {
  for (int i = 0; i < op_info[kind].nattrs; i++)
    if (strcmp(op_info[kind].attr_names[i], name) == 0) return i;
  return -1;
}
