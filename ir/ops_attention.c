/* ir/ops_attention.c — the attention ops' rules (shape, cost, gradient): attention over
 * packed qkv and attention_gqa over separate q, k, v with grouped key/value heads. As
 * ops.c's (ops_rules.h says how the table names them); their backward ops' shapes and
 * costs are in ops_backward.c. */
#include "ir/ops_rules.h"

/* ---- attention ------------------------------------------------------------------ */

bool op_shape_ATTENTION(SHAPE_ARGS) {
  char b1[64];
  if (!need_f32(g, op, 0, err, errlen) || !need_rank(g, op, 0, 3, 3, err, errlen)) return false;
  const Tensor *qkv = IN(0);
  double heads = op->attr[0], causal = op->attr[1];
  if (!is_int_attr(heads) || heads < 1) return ERR("'attention' heads must be a positive integer, got %g", heads);
  if (causal != 0 && causal != 1) return ERR("'attention' causal must be 0 or 1, got %g", causal);
  if (!check_p(op->attr[2], "attention", err, errlen)) return false;
  int64_t c3 = last_dim(qkv);
  if (c3 % 3 != 0)
    return ERR("'attention' needs packed q,k,v [B,T,3*C]; last dim of %s '%s' is not a multiple of 3",
               sh(qkv, b1), qkv->name);
  if ((c3 / 3) % (int64_t)heads != 0)
    return ERR("'attention' width %lld is not divisible by %g heads", (long long)(c3 / 3), heads);
  out[0] = with_last(qkv->shape, c3 / 3);
  odt[0] = DT_F32;
  out[1] = (Shape){.rank = 3, .batched = qkv->shape.batched,
                   .dim = {qkv->shape.dim[0], (int64_t)heads, qkv->shape.dim[1]}};
  odt[1] = DT_F32;
  return true;
}
/* QK^T and PV: 2 GEMMs of 2·T·T·C each per sample, plus the softmax. The causal
 * mask halves the useful work but the kernels compute full tiles; count them
 * all, as llm.c and Megatron's FLOP formulas do. */
OpCost op_cost_ATTENTION(COST_ARGS) {
  const Tensor *qkv = IN(0);
  double t = (double)qkv->shape.dim[1], c = (double)last_dim(qkv) / 3, h = op->attr[0];
  double nb = (double)(qkv->shape.batched ? b : qkv->shape.dim[0]);
  return (OpCost){nb * (4.0 * t * t * c + 5.0 * h * t * t), 4.0 * nb * t * 4 * c};
}
void op_grad_ATTENTION(GRAD_ARGS) {
  din[0] = -1;
  if (dout[0] < 0 || !wants(g, op, 0)) return;
  int in[] = {dout[0], op->in[0], op->out[0], op->out[1]};
  din[0] = emit1(g, op, OP_ATTENTION_BWD, in, 4, op->attr, gname(g, op->in[0]));
}

/* attention_gqa: q [B,T,H·D], k and v [B,T,KV·D], KV dividing H (0: KV = H). */
bool op_shape_ATTENTION_GQA(SHAPE_ARGS) {
  char b1[64], b2[64];
  for (int i = 0; i < 3; i++)
    if (!need_f32(g, op, i, err, errlen) || !need_rank(g, op, i, 3, 3, err, errlen)) return false;
  const Tensor *q = IN(0), *k = IN(1), *v = IN(2);
  double heads = op->attr[0], kvh = op->attr[1] == 0 ? heads : op->attr[1], causal = op->attr[2];
  int64_t cq = last_dim(q);
  if (heads == 0)
    return ERR("'attention_gqa' needs its heads attribute, attention_gqa(q, k, v, heads = H, kv_heads = KV): "
               "the width %lld of %s '%s' in H heads", (long long)cq, sh(q, b1), q->name);
  if (!is_int_attr(heads) || heads < 1) return ERR("'attention_gqa' heads must be a positive integer, got %g", heads);
  if (!is_int_attr(kvh) || kvh < 1) return ERR("'attention_gqa' kv_heads must be a positive integer, got %g", kvh);
  if (fmod(heads, kvh) != 0)
    return ERR("'attention_gqa' kv_heads %g does not divide heads %g (each key/value head serves a group of "
               "heads/kv_heads query heads)", kvh, heads);
  if (causal != 0 && causal != 1) return ERR("'attention_gqa' causal must be 0 or 1, got %g", causal);
  if (!check_p(op->attr[3], "attention_gqa", err, errlen)) return false;
  if (cq % (int64_t)heads != 0)
    return ERR("'attention_gqa' width %lld of %s '%s' is not divisible by %g heads", (long long)cq, sh(q, b1),
               q->name, heads);
  int64_t hs = cq / (int64_t)heads;
  for (int i = 1; i < 3; i++) {
    const Tensor *x = IN(i);
    if (x->shape.batched != q->shape.batched || x->shape.dim[0] != q->shape.dim[0] ||
        x->shape.dim[1] != q->shape.dim[1] || last_dim(x) != (int64_t)kvh * hs)
      return ERR("'attention_gqa' %s of q %s '%s' in %g heads of %lld needs [%s,%lld,%lld] (%g kv_heads of "
                 "%lld), got %s '%s'", i == 1 ? "k" : "v", sh(q, b1), q->name, heads, (long long)hs,
                 q->shape.batched ? "B" : "N", (long long)q->shape.dim[1], (long long)((int64_t)kvh * hs), kvh,
                 (long long)hs, sh(x, b2), x->name);
  }
  (void)k, (void)v;
  same_as(g, op, out, odt, 0, 0);
  out[1] = (Shape){.rank = 3, .batched = q->shape.batched, .dim = {q->shape.dim[0], (int64_t)heads, q->shape.dim[1]}};
  odt[1] = DT_F32;
  return true;
}
/* As attention's: QKᵀ and PV are 2 GEMMs of 2·T·T·(H·D) per sample whatever the
 * grouping (each query head still meets T keys); bytes are q, out and the smaller k, v. */
OpCost op_cost_ATTENTION_GQA(COST_ARGS) {
  const Tensor *q = IN(0), *k = IN(1);
  double t = (double)q->shape.dim[1], c = (double)last_dim(q), ckv = (double)last_dim(k), h = op->attr[0];
  double nb = (double)(q->shape.batched ? b : q->shape.dim[0]);
  return (OpCost){nb * (4.0 * t * t * c + 5.0 * h * t * t), 4.0 * nb * t * (2 * c + 2 * ckv)};
}
void op_grad_ATTENTION_GQA(GRAD_ARGS) {
  din[0] = din[1] = din[2] = -1;
  if (dout[0] < 0) return;
  int in[] = {dout[0], op->in[0], op->in[1], op->in[2], op->out[0], op->out[1]};
  int id = graph_emit(g, OP_ATTENTION_GQA_BWD, in, 6, op->attr, op->region, op->id, TK_ACT_GRAD,
                      gname(g, op->out[0]));
  for (int i = 0; i < 3; i++)
    if (wants(g, op, i)) din[i] = g->ops[id].out[i];
}

