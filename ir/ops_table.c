/* ir/ops_table.c — the op table, generated from ops.def, and lookups in it.
 *
 * Each row names its rules (ops_rules.h declares them; ops.c and ops_backward.c
 * define them), so a row without them does not link. */
#include "ir/ops_rules.h"

#include <string.h>

/* ---- the table -------------------------------------------------------------------- */

#define A0 .nattrs = 0
#define A1(n1, d1) .nattrs = 1, .attr_names = {n1}, .attr_defaults = {d1}
#define A2(n1, d1, n2, d2) .nattrs = 2, .attr_names = {n1, n2}, .attr_defaults = {d1, d2}
#define A3(n1, d1, n2, d2, n3, d3)                                             \
  .nattrs = 3, .attr_names = {n1, n2, n3}, .attr_defaults = {d1, d2, d3}
#define A4(n1, d1, n2, d2, n3, d3, n4, d4)                                     \
  .nattrs = 4, .attr_names = {n1, n2, n3, n4}, .attr_defaults = {d1, d2, d3, d4}

#define LOWER(fam, k) .family = OPFAM_##fam, .kernel = k
#define ELEM(both) .elem_c = both, .elem_cuda = both
#define ELEM2(c, cuda) .elem_c = c, .elem_cuda = cuda
#define NO_ELEM .elem_c = NULL

/* Backward ops are not differentiated again (no double backward): a row flagged
 * OPF_BWD takes NULL for its gradient rule (a constant condition, so the undefined
 * op_grad_<ID> is never referenced). */
const OpInfo op_info[OP_COUNT] = {
#define OP(id, nm, mini, maxi, nout, attrs, fl, lowering, elem)                \
  [OP_##id] = {.name = nm,                                                     \
               .min_inputs = mini,                                             \
               .max_inputs = maxi,                                             \
               .noutputs = nout,                                               \
               attrs,                                                          \
               .flags = fl,                                                    \
               lowering,                                                       \
               elem,                                                           \
               .shape = op_shape_##id,                                         \
               .cost = op_cost_##id,                                           \
               .grad = ((fl) & OPF_BWD) ? NULL : op_grad_##id},
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

int op_rng_stream(const Op *op) { return op_has(op->kind, OPF_BWD) ? op->fwd_op : op->id; }

double op_rng_p(const Op *op) {
  int i = op_attr_index(op->kind, "p");
  PD_CHECK(op_has(op->kind, OPF_RNG) && i >= 0, "(op %s draws no mask)", op_info[op->kind].name);
  return op->attr[i];
}

bool op_masks_elements(const Op *op) { return op_has(op->kind, OPF_RNG) && op_rng_p(op) > 0; }

bool op_attention_geom(const Graph *g, const Op *op, AttnGeom *a) {
  if (op_info[op->kind].family != OPFAM_ATTENTION) return false;
  a->fwd = op_has(op->kind, OPF_FWD);
  a->packed = op_info[op->kind].min_inputs == (a->fwd ? 1 : 4); /* attention(qkv), attention_bwd(dy, qkv, ..) */
  a->q = op->in[a->fwd ? 0 : 1];
  const Shape *s = &g->tensors[a->q].shape;
  int64_t c = s->dim[s->rank - 1] / (a->packed ? 3 : 1);
  a->heads = (int)op->attr[0];
  a->kv_heads = a->packed || op->attr[1] == 0 ? a->heads : (int)op->attr[1];
  a->causal = (int)op->attr[op_attr_index(op->kind, "causal")];
  a->p = op_rng_p(op);
  a->T = s->dim[1];
  a->hs = a->heads > 0 && c % a->heads == 0 ? c / a->heads : -1;
  return true;
}
