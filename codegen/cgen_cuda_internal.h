/* codegen/cgen_cuda_internal.h — what the CUDA code generator's files share (private).
 *
 * cgen_cuda.c walks a stage's ops and cgen_cuda_ops.c turns each into launches and
 * GEMMs of the launch list; cgen_cuda_fuse.c finds elementwise chains and writes a
 * stage-specific kernel for each. All append to one CuEmit. */
#ifndef PD2BW_CGEN_CUDA_INTERNAL_H
#define PD2BW_CGEN_CUDA_INTERNAL_H

#include "codegen/cgen_internal.h"

#include <cjson/cJSON.h>

/* The GPU-only block after the layout's: the bad-id counter (u64 at 0), the cross-
 * entropy valid-row count (i32 at 8), the loss (f32 at 16: the loss tensor itself may
 * sit in WORK, which the backward reuses, so the runtime reads it here, any time
 * before the next forward), the microbatch key (u32 at 24: the runtime writes the
 * microbatch's global index there before a pass and the random kernels read it, so the
 * pass's launches do not change from one microbatch to the next and replay as one
 * CUDA graph) and the row losses (double from 64). One copy: a stage's launches run
 * in order on one stream, so no two ops use it at once. */
#define CU_SCRATCH ((int)BUF_CLASS_COUNT)
/* bf16 lists: the "params_bf16" block, a bfloat16 copy of the weight version the
 * microbatch uses (the params block's layout at half the offsets, or, when the versions
 * hold the copies, the version's params block itself: CuEmit.folded), which the optimizer
 * step writes (kernels/cuda_adamw_multi.cuh): the GEMMs read their weight operands there. */
#define CU_PARAMS16 ((int)BUF_CLASS_COUNT + 1)
#define CU_SCRATCH_BAD 0
#define CU_SCRATCH_NVALID 8
#define CU_SCRATCH_LOSS 16
#define CU_SCRATCH_MBKEY 24
#define CU_SCRATCH_ROWS 64

/* Threads per block of every launch (cuda_kernels.cuh: PKC_BLOCK), and of the
 * attention kernels, whose threads each hold head-size arrays in registers. */
#define CU_BLOCK 256
#define CU_ATT_BLOCK 128
/* The tensor-core attention's block (PKC_FLASH_THREADS) and tile rows (PKC_FLASH_BR). */
#define CU_FLASH_BLOCK 128
#define CU_FLASH_ROWS 64
/* Grids are capped (every kernel strides, so any grid is correct). */
#define CU_MAX_GRID (1u << 20)

/* A place in the launch list (its "ptr" arguments and GEMM operands): (block, byte
 * offset), resolved by the runtime to a GpuPtr (contract/contract.h); cls < 0 is NULL. */
typedef struct CuPlace {
  int cls; /* BufClass, CU_SCRATCH, or -1 */
  int64_t off;
} CuPlace;

typedef struct CuEmit {
  const Graph *g;
  const StageLayout *L;
  const CodegenCudaOptions *o;
  int stage;
  Str *src;         /* the stage's own kernels, after the pasted helpers */
  cJSON *list;      /* the array being filled: "forward" or "backward" */
  cJSON *kernels;   /* distinct kernel names launched, in first-use order */
  bool *done;       /* per op id: emitted (as part of a fused kernel) */
  bool *lib_listed; /* per library kernel (cuda_kernel_list.h order): in `kernels` */
  int flash_hs;     /* layout_cuda_flash_head_size(g): tensor-core attention's head size, or 0 */
  int nfused;       /* fused kernels written so far (their names' numbers) */
  int next_region_op; /* forward: the first op of the next region of the stage that has
                         ops (what is emitted after this region's last), else -1 */
  int64_t scratch;  /* bytes of cuda_scratch needed */
  int rng_base;     /* codegen_rng_base: dropout streams are passed relative to it */
  int op_base;      /* the pass's smallest op id: entries' "op" is relative to it, so that
                       stages with the same program have the same launch list */
  const StageLayout *stored; /* the stage's layout; L is the pass's view of it
                                (cgen_pass_view: the same without bf16 storage) */
  bool *cast;       /* per op id, bf16 layouts: its outputs' casts down emitted */
  bool *fp32_read;  /* per tensor id, bf16 layouts: a stored tensor some op of the pass
                       being emitted reads as float32 (else no upcast: cu_emit_upcasts) */
  /* bf16 layouts, the fused classifier (cu_find_classifier; -1: none): the stored
   * logits whose bf16 place the forward's pkc_classifier_bf16 fills with the gradient
   * instead of the logits (no cast down of them), that gradient (the backward's GEMMs
   * read it there: cu_stage_bf16) and the cross_entropy_bwd the kernel replaces (not
   * emitted, so the backward never upcasts the logits) */
  int cls_logits, cls_grad, cls_bwd;
  char *folded; /* per tensor id, when the versions hold the bf16 copies
                   (CodegenCudaOptions.bf16_in_versions): a weight read from its slot's
                   bf16 copy at its own offset; NULL: params_bf16 at half the offsets */
} CuEmit;

/* cgen_cuda.c */
CuPlace cu_tensor(const CuEmit *e, int t);
CuPlace cu_buf(int cls, int64_t off);
const char *cu_buf_name(int cls);
int64_t cu_numel(const CuEmit *e, int t);
/* Appends a launch of `name` (kind and work items size the grid) for op `op` with
 * nargs cJSON arguments (cu_arg_*; at most CU_MAX_ARGS), which it takes ownership of;
 * cu_launch_args takes them as an array. */
#define CU_MAX_ARGS 24
void cu_launch(CuEmit *e, int op, const char *name, int kind, int64_t items, unsigned block,
               int nargs, ...);
void cu_launch_args(CuEmit *e, int op, const char *name, int kind, int64_t items, unsigned block, int nargs,
                    cJSON *const *arg);
cJSON *cu_arg_ptr(CuPlace p);
/* {"buf", "offset"} of p (never NULL): a GEMM's A, B and C, the list's "loss". */
cJSON *cu_place_json(CuPlace p);
cJSON *cu_arg_num(const char *type, double v);
cJSON *cu_arg_runtime(const char *type, const char *what, double value);
/* A dropout op's Philox stream (its forward op id) as a launch argument: the runtime
 * passes the stage's rng_base + this stage-relative number. */
cJSON *cu_arg_stream(const CuEmit *e, int op_id);
/* A library kernel's launch kind (cuda_kernel_list.h); an error for any other name. */
int cu_kernel_kind(const char *name);

/* cgen_cuda.c, bf16 layouts: the exact casts up of the stored values op is the first
 * reader of in its pass (launches named `name`: op, or the GEMM an epilogue moves op to). */
void cu_emit_upcasts(CuEmit *e, const Op *op, int name);

/* cgen_cuda.c: input i of op is read as bfloat16 (cu_stage_bf16) in a bf16 list. */
bool cu_bf16_operand(const CuEmit *e, const Op *op, int i);

/* cgen_cuda_ops.c: the launches of op, not fused (emit_op). */
void cu_emit_op(CuEmit *e, const Op *op);
/* Sets e->cls_logits, cls_grad and cls_bwd from the layout (StageLayout.cls_grad; see CuEmit). */
void cu_find_classifier(CuEmit *e);
/* The GEMM of a linear whose bias a fused kernel adds (cu_fuse_from calls it); of
 * any GEMM op, its launches (cu_epilogue_from then gives the GEMM its epilogue). */
void cu_emit_linear_gemm(CuEmit *e, const Op *op);

/* cgen_cuda_segments.c: adds the launch list's "segments" (format 5) to list j. */
void cu_list_segments(const Graph *g, const StageLayout *L, cJSON *j);

/* CuEmit.folded for stage layout L (NULL unless o->bf16_in_versions and the stage's
 * layout allows it: layout_cuda_fold_params). */
char *cu_folded_weights(const StageLayout *L, const CodegenCudaOptions *o);
/* cgen_cuda_bf16.c: a bf16 list's GEMM and attention operands. n rounded up to the
 * staging's 256-byte alignment; where the staging starts in cuda_scratch (after the
 * stage's largest cross-entropy row-loss array, which the emission may not have reached
 * yet); operand X (tensor t, or -1 when not known; rows x cols at leading dimension ld,
 * float32) as bfloat16: a weight's bf16 copy (params_bf16), a stored tensor's bf16 copy
 * (bf16 layouts), else cast into the staging at `to`. *end: the staging's end after it
 * (bytes; `to` when nothing is cast). */
int64_t cu_bf16_align(int64_t n);
int64_t cu_bf16_staging(const CuEmit *e);
CuPlace cu_stage_bf16(CuEmit *e, int op, int t, CuPlace X, int64_t r, int64_t cols, int64_t ld, int64_t to,
                    int64_t *end);

/* cgen_cuda_fuse.c: tries to emit ops[k] (and the consecutive ops that fuse with it)
 * as one generated kernel; returns the number of ops consumed (0: none, the caller
 * emits ops[k] alone). `bias_lead` >= 0: ops[k] is a linear with a bias whose GEMM
 * was already emitted, and the kernel starts by adding the bias in place. */
int cu_fuse_from(CuEmit *e, const int *ops, int nops, int k, int bias_lead);

/* cgen_cuda_epilogue.c (with e->o->gemm_epilogues): emits ops[k] as a GEMM with a
 * cuBLASLt epilogue when it starts one of the file's patterns, marking the ops it
 * absorbed done; returns the number of ops emitted (0: none, go on as usual). */
int cu_epilogue_from(CuEmit *e, const int *ops, int nops, int k);

#endif
