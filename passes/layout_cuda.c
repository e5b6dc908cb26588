/* passes/layout_cuda.c — the size of the CUDA programs' cuda_scratch block (layout.h).
 *
 * Here rather than in codegen so that the planner, which must not depend on the code
 * generator, counts the same bytes the launch lists declare: codegen/cgen_cuda.c takes
 * its cuda_scratch size and bf16 staging offset from these functions, and whether a bf16
 * plan's attention runs on the tensor-core kernels (layout_cuda_attention_operands). Every GEMM the
 * CUDA generator emits reads its A and B as whole tensors at their places' row stride
 * (leading dimension = the row length, or its padding: layout_row_strides), so an
 * operand's extent is its place's element count; a weight (TK_PARAM) is read from the
 * bf16 weight copy (codegen/cgen_cuda.c: params_bf16) and stages nothing.
 */
#include "passes/layout.h"

#include <stdlib.h>

static int64_t up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

static int64_t last_dim(const Graph *g, int t) {
  const Shape *s = &g->tensors[t].shape;
  return s->rank ? s->dim[s->rank - 1] : 1;
}

/* Reads of a padded tensor that honour its row stride (layout.h). */
static bool stride_aware_read(const Op *op, int i) {
  OpKind k = op->kind;
  if (k == OP_CROSS_ENTROPY || k == OP_CROSS_ENTROPY_BWD) return i == 0;
  return op_has(k, OPF_GEMM) && i <= 1; /* A and B (the GEMM calls pass their row strides) */
}

int64_t *layout_row_strides(const Graph *g) {
  int nt = g->ntensors;
  int64_t *ld = pd_malloc((size_t)(nt ? nt : 1) * sizeof *ld);
  char *cand = pd_calloc((size_t)(nt ? nt : 1), 1);
  for (int t = 0; t < nt; t++) ld[t] = last_dim(g, t);
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    if (op->kind == OP_CROSS_ENTROPY || op->kind == OP_CROSS_ENTROPY_BWD) cand[op->in[0]] = 1;
    if (op->kind == OP_CROSS_ENTROPY_BWD) cand[op->out[0]] = 1;
  }
  for (int o = 0; o < g->nops; o++) { /* one reader that would not honour the stride: no padding */
    const Op *op = &g->ops[o];
    for (int i = 0; i < op->nin; i++)
      if (!stride_aware_read(op, i)) cand[op->in[i]] = 0;
  }
  for (int t = 0; t < nt; t++) {
    const Tensor *x = &g->tensors[t];
    if (!cand[t] || ld[t] % 8 == 0 || x->producer < 0 || (x->kind != TK_ACT && x->kind != TK_ACT_GRAD))
      continue;
    const Op *p = &g->ops[x->producer];
    bool writer = p->kind == OP_MATMUL || (p->kind == OP_LINEAR && p->nin == 2) ||
                  p->kind == OP_CROSS_ENTROPY_BWD;
    if (writer && x->shape.rank >= 2) ld[t] = up(ld[t], LAYOUT_ROW_PAD);
  }
  free(cand);
  return ld;
}

int64_t layout_padded_numel(const Graph *g, const int64_t *ld, int t, int64_t b) {
  return shape_numel(&g->tensors[t].shape, b) / last_dim(g, t) * ld[t];
}

/* A weight operand is read from the bf16 weight copy, never staged. */
static int64_t staged_elems(const Graph *g, const int64_t *ld, int t, int64_t b) {
  return g->tensors[t].kind == TK_PARAM ? 0 : layout_padded_numel(g, ld, t, b);
}

bool layout_cuda_gemm_operands(const Graph *g, const Op *op, const int64_t *ld, int64_t b,
                               int64_t *a_elems, int64_t *b_elems) {
  if (!op_has(op->kind, OPF_GEMM)) return false;
  *a_elems = staged_elems(g, ld, op->in[0], b);
  *b_elems = staged_elems(g, ld, op->in[1], b);
  return true;
}

int64_t layout_cuda_ce_rows(const Graph *g, const Op *op, int64_t b) {
  if (op->kind != OP_CROSS_ENTROPY) return 0;
  const Shape *s = &g->tensors[op->in[0]].shape;
  int64_t last = s->rank ? s->dim[s->rank - 1] : 1;
  return shape_numel(s, b) / last;
}

int layout_cuda_head_size(const Graph *g) {
  int hs = 0;
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    AttnGeom a;
    if (!op_attention_geom(g, op, &a)) continue;
    int h = a.hs > 0 ? (int)a.hs : -1;
    if (hs == 0) hs = h;
    else if (hs != h) hs = -1;
  }
  return hs > 0 ? hs : 0;
}

int layout_cuda_seq_len(const Graph *g) {
  int64_t T = 0;
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    AttnGeom a;
    if (!op_attention_geom(g, op, &a)) continue;
    int64_t t = a.T;
    if (T == 0) T = t;
    else if (T != t) T = -1;
  }
  return T > 0 && T <= INT32_MAX ? (int)T : 0;
}

int layout_cuda_flash_head_size(const Graph *g) {
  int hs = layout_cuda_head_size(g);
  return hs >= 16 && hs <= 128 && hs % 16 == 0 ? hs : 0;
}

bool layout_cuda_attention_operands(const Graph *g, const Op *op, int flash_hs, int64_t b,
                                    int64_t *qkv_elems, int64_t *dy_elems) {
  AttnGeom a;
  if (!op_attention_geom(g, op, &a) || !flash_hs) return false;
  int q = a.fwd ? 0 : 1;
  *qkv_elems = shape_numel(&g->tensors[op->in[q]].shape, b);
  if (!a.packed) /* q, k, v one after another, each at a LAYOUT_CUDA_BF16_ALIGN boundary */
    *qkv_elems += shape_numel(&g->tensors[op->in[q + 1]].shape, b) + shape_numel(&g->tensors[op->in[q + 2]].shape, b) +
                  2 * LAYOUT_CUDA_BF16_ALIGN;
  *dy_elems = a.fwd ? 0 : shape_numel(&g->tensors[op->in[0]].shape, b);
  return true;
}

int64_t layout_cuda_gemm_staging(int64_t a_elems, int64_t b_elems) {
  return up(a_elems * 2, LAYOUT_CUDA_BF16_ALIGN) + b_elems * 2;
}

int64_t layout_cuda_bf16_staging(int64_t ce_rows) {
  return up(LAYOUT_CUDA_SCRATCH_ROWS + ce_rows * 8, LAYOUT_CUDA_BF16_ALIGN);
}

int64_t layout_cuda_scratch_size(int64_t ce_rows, int64_t gemm_staging, bool bf16) {
  int64_t end = LAYOUT_CUDA_SCRATCH_ROWS + ce_rows * 8;
  if (bf16 && gemm_staging > 0) end = layout_cuda_bf16_staging(ce_rows) + gemm_staging;
  return up(end, LAYOUT_ALIGN);
}

/* A bf16 layout's stored operand is read in place (its bf16 copy), never staged. */
static int64_t unless_stored(const StageLayout *L, int t, int64_t elems) {
  return L->bf16 && L->place[t].bf16 ? 0 : elems;
}

int64_t layout_cuda_scratch_bytes(const StageLayout *L, bool bf16) {
  const Graph *g = L->g;
  int64_t rows = 0, staging = 0, a, bb;
  int flash_hs = layout_cuda_flash_head_size(g);
  for (int k = 0; k < L->nfwd + L->nbwd; k++) {
    const Op *op = &g->ops[k < L->nfwd ? L->fwd_ops[k] : L->bwd_ops[k - L->nfwd]];
    if (k < L->nfwd) { /* the row losses are the forward's */
      int64_t r = layout_cuda_ce_rows(g, op, L->b);
      if (r > rows) rows = r;
    }
    if (layout_cuda_gemm_operands(g, op, L->ld, L->b, &a, &bb)) {
      a = unless_stored(L, op->in[0], a), bb = unless_stored(L, op->in[1], bb);
      if (layout_cuda_gemm_staging(a, bb) > staging) staging = layout_cuda_gemm_staging(a, bb);
    }
    AttnGeom ag;
    if (layout_cuda_attention_operands(g, op, flash_hs, L->b, &a, &bb) && op_attention_geom(g, op, &ag)) {
      bool fwd = ag.fwd; /* attention_gqa's three are counted staged, stored or not (plan_input.c alike) */
      a = ag.packed ? unless_stored(L, op->in[fwd ? 0 : 1], a) : a, bb = fwd ? bb : unless_stored(L, op->in[0], bb);
      if (layout_cuda_gemm_staging(a, bb) > staging) staging = layout_cuda_gemm_staging(a, bb);
    }
  }
  return layout_cuda_scratch_size(rows, staging, bf16);
}

bool layout_cuda_fold_params(const StageLayout *L, char *folded) {
  const Graph *g = L->g;
  char *use = pd_calloc((size_t)g->ntensors + 1, 1); /* 1: a GEMM's A or B, 2: a lookup's table, 4: other */
  for (int k = 0; k < L->nfwd + L->nbwd; k++) {
    const Op *op = &g->ops[k < L->nfwd ? L->fwd_ops[k] : L->bwd_ops[k - L->nfwd]];
    for (int i = 0; i < op->nin; i++)
      if (g->tensors[op->in[i]].kind == TK_PARAM)
        use[op->in[i]] |= op_has(op->kind, OPF_GEMM) && i < 2 ? 1 : op->kind == OP_EMBEDDING && i == 0 ? 2 : 4;
  }
  bool ok = true;
  for (int t = 0; t < g->ntensors; t++) {
    ok &= !((use[t] & 3) && (use[t] & 4));
    if (folded) folded[t] = (use[t] & 3) && !(use[t] & 4);
  }
  free(use);
  return ok;
}
