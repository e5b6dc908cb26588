/* codegen/cgen_lower.h — the lowering both generators share: what ops.def says about
 * an op, turned into what a backend prints (private to codegen/).
 *
 * An op of a generic family (OPFAM_MAP, OPFAM_ROWS, OPFAM_SEQ) is lowered once, here, into a
 * KernelCall: its kernel's base name and its arguments, in order, as typed values. The
 * C generator prints it as `K(name)(args);`, the CUDA generator as a launch of
 * pkc_<name>_f32 with the same arguments, so the two programs call their twin
 * kernels alike by construction. An op of another family has a hand-written emitter
 * per family in each generator.
 *
 * A fused elementwise chain (cgen_c_fuse.c, cgen_cuda_fuse.c) prints each op's
 * element expression from the table (OpInfo.elem_c / elem_cuda) through
 * cgen_elem_print; an OPF_RNG op's element is then multiplied by its keep mask by the
 * chain itself (op_masks_elements). */
#ifndef PD2BW_CGEN_LOWER_H
#define PD2BW_CGEN_LOWER_H

#include "codegen/cgen_internal.h"

typedef enum CgenBackend { CGEN_C, CGEN_CUDA } CgenBackend;

typedef enum KArgKind {
  KARG_DEST,   /* where the op writes (its output, or its accumulation temporary) */
  KARG_TENSOR, /* a tensor's place (.tensor) */
  KARG_I64,    /* an element or row count (.value) */
  KARG_I32,    /* a row length (.value) */
  KARG_REAL,   /* an attribute: float32 on the GPU, the program's real type in C */
  KARG_FLAG,   /* the accumulate flag: 1 when the destination is added into */
} KArgKind;

typedef struct KArg {
  KArgKind kind;
  int tensor;
  double value;
} KArg;

#define KCALL_MAX_ARGS 16

/* One kernel call: pk_<kernel>_<real> in C, pkc_<kernel>_f32 on the GPU; its work
 * items per launch kind: elements (n), rows or columns (cgen_kcall_items). */
typedef struct KernelCall {
  const char *kernel;
  int64_t n, rows, cols;
  int nargs;
  KArg arg[KCALL_MAX_ARGS];
} KernelCall;

/* The call of op (family OPFAM_MAP, OPFAM_ROWS or OPFAM_SEQ) at microbatch size b,
 * its destination accumulated into when `accumulate`:
 *   OPFAM_MAP:  kernel(y, in..., n), n = elements of y;
 *   OPFAM_ROWS: kernel(y, in..., rows, C, attrs... [, accumulate]) over in[0]'s rows
 *               of its last dimension C; the flag only for an OPF_ACCUMULATES op;
 *   OPFAM_SEQ:  kernel(y, in..., rows, T, C, attrs... [, accumulate]), as ROWS over
 *               in[0] [B,T,C], whose row r is at position r mod T. */
KernelCall cgen_lower_call(const Graph *g, const Op *op, int64_t b, bool accumulate);

/* The work items of a launch of kind `launch_kind` (PkcLaunchKind). */
int64_t cgen_kcall_items(const KernelCall *c, int launch_kind);

/* Whether op may join a fused elementwise chain: the table gives its element
 * expression, and its first operand is float32. */
bool cgen_fusible(const Graph *g, const Op *op);

/* Appends op's element expression for backend to s: x the chained value's expression,
 * y the other operand's (binary ops; else NULL). */
void cgen_elem_print(Str *s, CgenBackend backend, const Op *op, const char *x, const char *y);

#endif
