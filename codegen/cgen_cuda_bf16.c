/* codegen/cgen_cuda_bf16.c — the bfloat16 operands of a bf16 list's GEMMs and
 * tensor-core attention (cgen_cuda_internal.h).
 *
 * A weight operand is read from "params_bf16", the bf16 copy of the pass's weight
 * version (params' layout at half the offsets, or the version's own block at the
 * weight's offset: CuEmit.folded), which the optimizer step writes with every version
 * (kernels/cuda_adamw_multi.cuh) and the runtime casts once from the initial or resumed
 * weights; no launch casts it. An activation stored as bfloat16 (passes/layout.h, "bf16
 * storage"), and the logits' gradient the fused classifier stored in their place
 * (CuEmit.cls_grad), is read from its stored copy, which holds exactly the bits a cast
 * would make. Any other operand is one pkc_cast_f32_to_bf16 launch (round to nearest
 * even) into cuda_scratch's staging from bf16_staging on: A, then B at the next
 * 256-byte boundary, the same bytes for every GEMM (one stream, in order). Invariant:
 * passes/layout_cuda.c sizes the staging by the same rule (layout_cuda_scratch_bytes),
 * so the planner counts the bytes these launches reach. */
#include "codegen/cgen_cuda_internal.h"

#include <stdlib.h>

#include "kernels/cuda_kernel_list.h"

/* The staging buffers start at multiples of 256 bytes (the arena aligns the
 * cuda_scratch block so): cuBLAS's tensor-core kernels want aligned operands. */
#define CU_BF16_ALIGN 256
int64_t cu_bf16_align(int64_t n) { return (n + CU_BF16_ALIGN - 1) / CU_BF16_ALIGN * CU_BF16_ALIGN; }

/* cuda_scratch's size and the staging offset are passes/layout.h's (the planner counts
 * the same bytes); its constants must be this file's. */
_Static_assert(CU_SCRATCH_ROWS == LAYOUT_CUDA_SCRATCH_ROWS && CU_BF16_ALIGN == LAYOUT_CUDA_BF16_ALIGN,
               "cuda_scratch layout constants differ from passes/layout.h");

int64_t cu_bf16_staging(const CuEmit *e) {
  int64_t r = 0, x;
  for (int k = 0; k < e->L->nfwd; k++)
    if ((x = layout_cuda_ce_rows(e->g, &e->g->ops[e->L->fwd_ops[k]], e->L->b)) > r) r = x;
  return layout_cuda_bf16_staging(r);
}

char *cu_folded_weights(const StageLayout *L, const CodegenCudaOptions *o) {
  if (!o->bf16_in_versions || o->gemm != GEMM_BF16) return NULL;
  char *f = pd_calloc((size_t)L->g->ntensors + 1, 1);
  if (!layout_cuda_fold_params(L, f)) free(f), f = NULL; /* a weight read both ways: copies beside */
  return f;
}

CuPlace cu_stage_bf16(CuEmit *e, int op, int t, CuPlace X, int64_t r, int64_t cols, int64_t ld, int64_t to,
                    int64_t *end) {
  *end = to;
  if (X.cls == BUF_PARAMS && !e->folded) return cu_buf(CU_PARAMS16, X.off / 2); /* the weight copy */
  if (X.cls == BUF_PARAMS) { /* the copy in the version itself, at the weight's offset */
    PD_CHECK(t >= 0 && e->folded[t] && X.off == e->L->place[t].offset, "(weight operand t%d is not a folded weight)", t);
    return cu_buf(CU_PARAMS16, X.off);
  }
  if (t >= 0 && t == e->cls_grad) { /* the gradient the forward's classifier stored over the logits */
    const TensorPlace *pl = &e->stored->place[e->cls_logits];
    PD_CHECK(X.cls == (int)e->L->place[t].cls && X.off == e->L->place[t].offset, "(operand t%d is not its place)", t);
    return cu_buf((int)pl->cls, pl->offset);
  }
  if (t >= 0 && e->stored->place[t].bf16) { /* the stored copy, same rows and stride */
    const TensorPlace *pl = &e->stored->place[t];
    PD_CHECK(X.cls == (int)e->L->place[t].cls && X.off == e->L->place[t].offset, "(operand t%d is not its place)", t);
    return cu_buf((int)pl->cls, pl->offset);
  }
  int64_t n = (r - 1) * ld + cols; /* the elements the GEMM reads, gaps included */
  CuPlace S = cu_buf(CU_SCRATCH, to);
  cu_launch(e, op, "pkc_cast_f32_to_bf16", PKC_ELEM8, n, CU_BLOCK, 3, cu_arg_ptr(S), cu_arg_ptr(X),
            cu_arg_num("i64", (double)n));
  *end = to + n * 2;
  if (*end > e->scratch) e->scratch = *end;
  return S;
}
