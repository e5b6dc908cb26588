/* codegen/cgen_bf16.c — what both generators need of a bf16 layout (passes/layout.h,
 * "bf16 storage"): the places a pass's ops compute on, and which ops an upcast must
 * precede.
 *
 * A tensor stored as bfloat16 is never an operand of an op: in each pass the ops read
 * and write its float32 working place. So each pass is emitted against a view of the
 * layout in which such a tensor's place IS its working place (class WORK, float32
 * bytes), and every emitter (kernel calls, fused loops, GEMM epilogues, their overlap
 * checks) works unchanged. The casts come from the stored layout: down right after the
 * producer, up right before the first reader of a pass that does not produce it
 * (TensorPlace.up). The exception is the classifier's gradient kept in the stash
 * (StageLayout.cls_grad): no pass computes on it in float32, so its view place stays
 * its stored bf16 place, which only the GEMMs reading it as bf16 reach (cgen_c.c's
 * emit_dense, cgen_cuda_bf16.c's cu_stage_bf16). */
#include "codegen/cgen_internal.h"

#include <string.h>

StageLayout cgen_pass_view(const StageLayout *L, int pass, TensorPlace **place) {
  StageLayout v = *L;
  *place = NULL;
  if (!L->bf16) return v;
  int nt = L->g->ntensors;
  TensorPlace *p = pd_malloc((size_t)(nt ? nt : 1) * sizeof *p);
  memcpy(p, L->place, (size_t)nt * sizeof *p);
  for (int t = 0; t < nt; t++) {
    if (!p[t].bf16 || t == L->cls_grad) continue;
    /* a pass that does not touch it has no place for it: an emitter reaching it fails */
    p[t].cls = p[t].work[pass] >= 0 ? BUF_WORK : BUF_NONE;
    p[t].offset = p[t].work[pass];
    p[t].bytes *= 2; /* bf16, work and up stay: cgen_needs_upcast reads them */
  }
  v.place = *place = p;
  return v;
}

bool cgen_needs_upcast(const StageLayout *L, const Op *op) {
  if (!L->bf16) return false;
  for (int i = 0; i < op->nin; i++) {
    const TensorPlace *pl = &L->place[op->in[i]];
    if (pl->bf16 && (pl->up[0] == op->id || pl->up[1] == op->id)) return true;
  }
  return false;
}
