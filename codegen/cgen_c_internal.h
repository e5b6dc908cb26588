/* codegen/cgen_c_internal.h — what the C code generator's files share (private):
 * cgen_c.c (an op's kernel call, the stage file), cgen_c_fuse.c (fused elementwise
 * loops) and cgen_c_bf16.c (a bf16 layout's classifier gradient) write into the same
 * stage text through the same operand expressions, so they agree on every pointer and
 * length. Names start with cc_ (the CUDA generator's, cgen_cuda_internal.h, with cu_). */
#ifndef PD2BW_CGEN_C_INTERNAL_H
#define PD2BW_CGEN_C_INTERNAL_H

#include "codegen/cgen_internal.h"

typedef struct Emit {
  const Graph *g;
  const StageLayout *L;
  const CodegenOptions *o;
  Str *s;
  int rs;     /* 1 for float32 programs, 2 for float64: the offset multiplier */
  bool *done; /* per op: already emitted as part of a fused chain */
  int rng_base; /* codegen_rng_base: dropout op ids are emitted relative to it */
  const StageLayout *stored; /* the stage's layout; L is the pass's view of it
                                (cgen_pass_view: the same without bf16 storage) */
  bool *cast;   /* per op, bf16 layouts: its outputs' casts down emitted */
  Arena *strs;  /* the expressions cc_ptr and its kind return, freed with the emit */
} Emit;

/* cgen_c.c: tensor t's typed pointer expression (e->strs's: any number live), its
 * element count at the microbatch size, its last dimension (1 for a scalar), whether
 * its place is added into, and dropout's probability as an expression
 * ("ctx->training ? p : 0.0": evaluation turns it off). */
const char *cc_ptr(Emit *e, int t);
int64_t cc_numel(Emit *e, int t);
int64_t cc_lastd(Emit *e, int t);
bool cc_acc(Emit *e, int t);
const char *cc_pexpr(Emit *e, double p);

/* cgen_c_fuse.c (with e->o->fuse): emits ops[k] and the ops after it that fuse with it
 * as one loop, marking them done, and returns how many; 0 (nothing emitted) when fewer
 * than two fuse. */
int cc_fuse_from(Emit *e, const int *ops, int nops, int k);

/* cgen_c_bf16.c, bf16 layouts' classifier gradient in the stash (StageLayout.cls_grad;
 * each does nothing without one): marks the cross_entropy_bwd the forward runs done
 * and the logits' cast down emitted; after cross-entropy op's loss, the gradient into
 * the stash; a GEMM reading the gradient as bf16 (true: emitted, writing Y, A: add). */
void cc_classifier_start(Emit *e);
void cc_classifier_fwd(Emit *e, const Op *op);
bool cc_gemm_bf16(Emit *e, const Op *op, const char *Y, int A);

#endif
