/* codegen/cgen_c_bf16.c — the C program's side of a bf16 layout's classifier gradient
 * kept in the stash (StageLayout.cls_grad; passes/layout.h, "the classifier's gradient
 * in the stash"), so that the C program stores in that stash slot what the CUDA
 * program's pkc_classifier_bf16 stores there (codegen/cgen_cuda_ops.c).
 *
 * Forward: right after the cross-entropy's loss, when training, cross_entropy_bwd in
 * place over the float32 logits of the forward's working place (their last use), then
 * pk_bf16_store of that gradient into the logits' stored place: each element the
 * float32 value the backward's cross_entropy_bwd used to compute from float32 logits,
 * rounded once to nearest even. The logits themselves are never cast down.
 * Backward: the replaced cross_entropy_bwd emits nothing, and each GEMM reading the
 * gradient reads its bf16 copy, widening each element where it reads it
 * (cpu_kernels_layers.h: pk_matmul_bf16a, pk_gemm_dw_bf16: no float32 copy, so no
 * WORK). Elements are contiguous in both places (the C program never pads rows:
 * layout.h's padded places are only larger). */
#include "codegen/cgen_c_internal.h"

void cc_classifier_start(Emit *e) {
  int t = e->stored->bf16 ? e->stored->cls_grad : -1;
  if (t < 0) return;
  const Op *b = &e->g->ops[e->g->tensors[t].producer];
  e->done[b->id] = e->cast[b->id] = true; /* the forward ran it */
  int lp = e->g->tensors[b->in[0]].producer; /* the logits' producer: no cast down */
  if (lp >= 0 && e->g->ops[lp].nout == 1) e->cast[lp] = true;
}

void cc_classifier_fwd(Emit *e, const Op *op) {
  int t = e->stored->bf16 ? e->stored->cls_grad : -1;
  if (t < 0 || e->stored->place[t].alias != op->in[0]) return;
  const TensorPlace *sp = &e->stored->place[t];
  int64_t V = cc_lastd(e, op->in[0]), M = cc_numel(e, op->in[0]) / V;
  PD_CHECK(sp->cls == BUF_STASH && sp->bf16, "(the classifier's gradient is not in the stash)");
  const char *x = cc_ptr(e, op->in[0]);
  str_printf(e->s,
             "  if (ctx->training) { /* the gradient, stored as bf16 over the logits */\n"
             "    K(cross_entropy_bwd)(%s, %s, %s, %lld, %lld, %d, (R)1);\n"
             "    pk_bf16_store((uint16_t *)(void *)(S + %lld), %s, %lld);\n  }\n",
             x, x, cc_ptr(e, op->in[1]), (long long)M, (long long)V, (int)op->attr[0], (long long)sp->offset, x,
             (long long)(M * V));
}

bool cc_gemm_bf16(Emit *e, const Op *op, const char *Y, int A) {
  int t = e->stored->bf16 ? e->stored->cls_grad : -1;
  int gi = t < 0 ? -1 : op->in[0] == t ? 0 : op->nin > 1 && op->in[1] == t ? 1 : -1;
  if (gi < 0) return false;
  const TensorPlace *sp = &e->stored->place[t];
  int64_t V = cc_lastd(e, t), M = cc_numel(e, t) / V;
  PD_CHECK(sp->cls == BUF_STASH, "(the classifier's gradient is not in the stash)");
  int x = op->in[1 - gi];
  char g16[64];
  snprintf(g16, sizeof g16, "(const uint16_t *)(void *)(S + %lld)", (long long)sp->offset);
  if (op->kind == OP_MATMUL && gi == 0)
    str_printf(e->s, "  pk_matmul_bf16a(%s, %s, %s, %lld, %lld, %lld, %d);\n", Y, g16, cc_ptr(e, x), (long long)M,
               (long long)V, (long long)cc_lastd(e, op->out[0]), op->attr[0] != 0);
  else if ((op->kind == OP_LINEAR_DW && gi == 1) || (op->kind == OP_MATMUL_DW_T && gi == 0))
    str_printf(e->s, "  pk_gemm_dw_bf16(%s, %s, %s, %lld, %lld, %lld, %d, %d);\n", Y, cc_ptr(e, x), g16, (long long)M,
               (long long)cc_lastd(e, x), (long long)V, op->kind == OP_MATMUL_DW_T, A);
  else
    PD_CHECK(false, "(op %s reads the classifier's gradient as input %d)", op_info[op->kind].name, gi);
  return true;
}
