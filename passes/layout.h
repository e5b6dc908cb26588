/* passes/layout.h — where every tensor of one pipeline stage lives.
 *
 * A stage is a contiguous range of regions [first_region, last_region] of a
 * differentiated graph: the forward ops of those regions and the backward ops that
 * autodiff put in them. layout_stage() gives each tensor the stage touches a class
 * (one of the blocks: StageLayout.total) and a byte offset inside that block, for
 * microbatch size b. The code generator bakes the offsets into stageN.c; the runtime
 * allocates the blocks; the planner calls the same function for stash and workspace
 * sizes, so the plan and the program never disagree.
 *
 * Invariants: offsets are 64-byte aligned; parameter gradients accumulate in GRADS at
 * their parameter's offset, and nothing tied crosses BOUNDARY (layout_stage); a bf16
 * layout's ops compute only on float32 working places ("bf16 storage":
 * layout_stage_bf16; "the classifier's gradient in the stash": layout_classifier_grad_ok);
 * padded rows never reach a parameter, a gradient or the loss (LAYOUT_ROW_PAD). */
#ifndef PD2BW_PASSES_LAYOUT_H
#define PD2BW_PASSES_LAYOUT_H

#include "ir/ir.h"
#include "contract/contract.h" /* BufClass: the blocks, shared with the runtime */

#define LAYOUT_ALIGN 64

typedef struct TensorPlace {
  BufClass cls;
  int64_t offset; /* bytes from the start of the block */
  int64_t bytes;  /* numel(b) · dtype size (not rounded), or with padded rows
                     (StageLayout.ld) rows(b) · ld · dtype size */
  bool accumulate;/* the producer adds into the place instead of overwriting */
  int alias;      /* tensor whose place this one reuses in place, or -1 (an alias of a
                     bf16 tensor is placed on its working place: cls WORK) */
  bool bf16;      /* stored as bfloat16 (bf16 layouts: layout_stage_bf16); bytes is then
                     padded numel · 2, and the float32 working places 2 · bytes */
  int64_t work[2];/* bf16: the WORK offset of its float32 working place in the forward
                     [0] and backward [1] pass, -1 when the pass does not touch it */
  int up[2];      /* bf16: the op before which pass p casts the stored copy up into
                     work[p] (its first reader there), -1 when p produces it (a cast
                     down right after the producer) or does not touch it */
} TensorPlace;

typedef struct StageLayout {
  const Graph *g;
  int first_region, last_region;
  int64_t b;
  bool bf16;          /* laid out with bf16 storage (layout_stage_bf16) */
  int *fwd_ops, nfwd; /* op ids run by the stage's forward, in order */
  int *bwd_ops, nbwd; /* op ids run by its backward, in order */
  int *params, nparams; /* parameter indices held, in PARAMS order */
  TensorPlace *place;   /* per tensor id (g->ntensors) */
  /* Per op id: scratch in WORK (0 bytes: none) = the kernel's scratch
   * (layout_op_scratch_elems reals), then, rounded up to LAYOUT_ALIGN, a temporary
   * of the output's size when the op must accumulate into a gradient but its kernel
   * cannot (its ops.def row lacks OPF_ACCUMULATES): it computes there and adds. */
  int64_t *scratch_off, *scratch_bytes;
  /* Block sizes in bytes (64-aligned). The blocks, and how many copies the runtime
   * keeps of each:
   *   PARAMS    one per weight version;        every parameter the stage's ops read
   *   GRADS     one;                           a parameter's gradient at the SAME
   *                                            offset as the parameter in PARAMS
   *   STASH     one per in-flight microbatch;  forward activations a backward op of
   *                                            the stage reads, and activations
   *                                            received from the previous stage
   *   WORK      one;                           transient values, offsets reused by a
   *                                            linear scan over op order (forward ops,
   *                                            then backward ops); also per-op kernel
   *                                            scratch (attention, layernorm stats) and,
   *                                            in bf16 layouts, the float32 working
   *                                            places of what STASH and BOUNDARY store
   *                                            as bfloat16 (layout_stage_bf16)
   *   INPUTS    one per in-flight microbatch;  data tensors (tokens, targets)
   *   BOUNDARY  one per in-flight microbatch;  the activation sent to the next stage
   *                                            and the gradient received from it or
   *                                            sent back to the previous one */
  int64_t total[BUF_CLASS_COUNT];
  int loss;             /* the loss tensor if the stage computes it, else -1 */
  int cls_grad;         /* bf16: the classifier's gradient stored over the logits
                           (layout_classifier_grad_ok, "the classifier's gradient in
                           the stash"), else -1;
                           its alias is the logits, its producer the cross_entropy_bwd
                           that the forward's classifier runs instead */
  /* Per tensor id: the one op of the whole graph that reads it (once), else -1
   * (no reader, or several): computed here once so that code generation's
   * per-op queries are not a scan of the graph each. */
  int *sole_reader;
  /* Per tensor id: elements from one row (last dimension) to the next in its place,
   * layout_row_strides's (the last dimension but for the classifier's logits). */
  int64_t *ld;
} StageLayout;

/* Lays out stage [first_region, last_region] of g (differentiated or not) for
 * microbatch size b >= 1. Never fails on a verified graph (internal errors abort).
 * O(graph): its per-tensor and per-op arrays are the graph's size.
 * Every tensor's offset is 64-byte aligned. Parameter gradients are ACCUMULATED (the
 * producer adds into GRADS), so the m microbatches of a batch sum without a buffer
 * each; a gradient contribution whose only consumer is the sum that makes a
 * parameter's gradient is placed on that gradient and accumulated too (the tied
 * embedding's two contributions then never need a V×C temporary).
 * Split across stages, a tied parameter (GPT's wte: embedding on the first stage, LM
 * head on the last) is held by every stage using it, each with its own gradient. The
 * contribution a stage computes for another stage's sum is accumulated into its OWN
 * gradient of the parameter (class GRADS, at the parameter's offset); on the summing
 * stage that remote operand is folded onto the gradient (class GRADS, alias), so the
 * sum adds nothing for it. The pipeline's TIED_SYNC then adds the stages' gradients.
 * Nothing tied crosses the BOUNDARY block, and on one stage nothing changes. */
StageLayout *layout_stage(const Graph *g, int first_region, int last_region, int64_t b);
/* The same with bf16 storage when bf16 (the layout of a --precision bf16 plan's
 * programs, CPU and CUDA alike; LayoutIndex.bf16); layout_stage is bf16 false.
 * bf16 storage: every float32 tensor placed in STASH or BOUNDARY is stored as bfloat16
 * (2 bytes an element in its block, TensorPlace.bf16), except statistics (attention's
 * lse, softmax's probabilities) and the loss. Ops never read or write the stored copy:
 * each pass that computes on such a tensor has a float32 working place in WORK
 * (TensorPlace.work), an interval of WORK's linear scan of its own: from the producer
 * to the pass's last reader, or, when the pass does not produce it (received
 * activations, the stashed activations in the backward, a received gradient), from
 * its first reader in the pass (TensorPlace.up: the generated code casts it up,
 * exactly, right before that op) to its last. The producer's pass casts the working
 * place into the stored copy right after the producer, rounding to nearest even. So
 * STASH and BOUNDARY halve (and with them every send between stages), and WORK grows
 * by what is live of the working places; the arithmetic stays float32. Without bf16
 * nothing of this exists and the layout is the float32 one, byte for byte. */
StageLayout *layout_stage_bf16(const Graph *g, int first_region, int last_region, int64_t b, bool bf16);

/* What every stage's layout reads of the whole graph, computed once in O(graph)
 * (layout_index.c), so that layout_stage_totals costs O(the stage's ops and the
 * tensors they touch). */
typedef struct LayoutIndex {
  const Graph *g;
  int nfwd_all;                  /* ops [0, nfwd_all) are the forward's */
  int64_t *ld;                   /* layout_row_strides(g) */
  int *fwd_start, *fwd_ops;      /* region r's forward op ids, ascending:
                                    fwd_ops[fwd_start[r] .. fwd_start[r + 1]) */
  int *bwd_start, *bwd_ops;      /* and its backward op ids */
  int *nuse, *sole_reader;       /* per tensor: reads over the graph; the one reader, else -1 */
  int *nconsumers, *consumer;    /* per tensor: ops reading it (each once); the first */
  int *rmin, *rmax;              /* per tensor: lowest and highest region reading it */
  int *slot;                     /* per tensor: -1 between calls (a layout's scratch map) */
  bool bf16;                     /* lay out with bf16 storage (false when created; the
                                    caller sets it, as layout_stage_bf16 does) */
} LayoutIndex;
LayoutIndex *layout_index_create(const Graph *g);
void layout_index_destroy(LayoutIndex *ix);

/* layout_stage's block sizes (StageLayout.total) of stage [first_region,
 * last_region] at microbatch b, in O(stage): the same layout, without the
 * graph-sized per-tensor arrays. Uses ix->slot as scratch, so one call at a time. */
void layout_stage_totals(LayoutIndex *ix, int first_region, int last_region, int64_t b,
                         int64_t total[BUF_CLASS_COUNT]);
void layout_destroy(StageLayout *L);

/* True when tensor t is one a bf16 layout stores as bfloat16 if STASH or BOUNDARY
 * holds it: float32, not the loss, not statistics (attention's lse, softmax's output). */
bool layout_bf16_storable(const Graph *g, int t);

/* True when tensor t is a cross_entropy_bwd's gradient that a bf16 layout keeps in the
 * stash wherever the stage's own layout allows it (the graph's part of the rule below,
 * O(graph); the planner's estimate uses it).
 * The classifier's gradient in the stash (bf16 layouts, StageLayout.cls_grad): when
 * the stage's backward differentiates its cross-entropy with the same logits and
 * targets, the gradient was placed over the logits (their last use), the logits are
 * stored in STASH and read by no other op, and the gradient's only readers are the
 * stage's backward GEMMs reading it as a row-major [rows, V] operand (matmul's a,
 * linear_dw's and matmul_dw_t's dy), the forward computes the loss and the gradient in
 * one pass over its float32 logits and stores the gradient, rounded once to nearest
 * even, in the logits' stored place instead of the logits (CUDA: pkc_classifier_bf16;
 * C: cross_entropy_bwd in place, then pk_bf16_store). The gradient's place is then
 * that stored place (STASH, bf16, alias of the logits, no working place); the backward
 * has no cross_entropy_bwd and no working place for the logits or the gradient, and
 * its GEMMs read the bf16 gradient (cuBLAS the stored place; the C program's
 * bf16-reading GEMM loops, cpu_kernels_layers.h). */
bool layout_classifier_grad_ok(const Graph *g, int t);

/* Stable text dump: block totals, then one line per placed tensor (a bf16 one with its
 * working places' offsets, -1: none). */
void layout_dump(const StageLayout *L, FILE *out);

/* The parameter whose gradient tensor t is summed into through a chain of
 * single-consumer sums (add, scale by 1), or t's own parameter when t is a TK_GRAD;
 * -1 when it is not a gradient contribution. */
int layout_contribution_param(const Graph *g, int t);

/* True when op `o` is in the stage's forward or backward list. */
bool layout_has_op(const StageLayout *L, int o);

/* Kernel scratch elements (reals) op `op` needs at microbatch size b (attention's
 * probability rows, layernorm backward's statistics); 0 for most ops. */
int64_t layout_op_scratch_elems(const Graph *g, const Op *op, int64_t b);

/* ---- padded rows: the classifier's logits and their gradient (layout_cuda.c) ---------
 * GPT-2's vocabulary (50257) is odd, so a [rows, V] tensor's rows are not 16-byte
 * aligned and cuBLAS falls back to its align1 kernels for the LM-head GEMMs. The
 * logits (a cross-entropy's input) and their gradient (cross_entropy_bwd's output) are
 * therefore laid out with rows LAYOUT_ROW_PAD elements apart when the last dimension is
 * not a multiple of 8, and when every op touching them honours a row stride: produced
 * by matmul, a linear without bias, or cross_entropy_bwd; read by cross_entropy(_bwd)
 * or as a GEMM operand (matmul, linear, linear_dw, matmul_dw_t). The padding columns
 * are never written or read: the GEMMs run with N (or K) = V and the leading dimension
 * = the stride, the cross-entropy kernels see V columns; no parameter, gradient or data
 * tensor is ever padded, so the loss, the gradients' norm and checkpoints never see it.
 * The CPU program writes the same tensors contiguously, inside the larger place. */
#define LAYOUT_ROW_PAD 128
/* Per tensor id (caller frees): its row stride in elements, as above; O(ops). */
int64_t *layout_row_strides(const Graph *g);
/* Elements of tensor t's place at microbatch b with row stride ld[t]. */
int64_t layout_padded_numel(const Graph *g, const int64_t *ld, int t, int64_t b);

/* ---- the CUDA programs' GPU-only block, cuda_scratch (layout_cuda.c) ---------------
 * codegen/cgen_cuda.c lays it out: [0, 64) counters (bad ids, the cross-entropy's
 * valid count, the loss); from 64 the forward cross-entropy's per-row losses (8 bytes
 * a row); with bf16 GEMMs, from the next 256-byte boundary, one GEMM's operands as
 * bfloat16, A then B at the next 256-byte boundary, reused by every GEMM of the stage
 * (so the largest GEMM decides); a weight operand is not staged (the GEMM reads the
 * bf16 weight copy the optimizer writes: plan_weights_bf16). Its SIZE is defined here, once: codegen records this
 * figure (and checks its launches stay inside it), the planner counts it in a stage's
 * device memory. The bf16 staging therefore depends on the partition: it is the
 * largest GEMM among the stage's own ops (a GPT's LM head only where the epilogue is).
 * With bf16, the tensor-core attention (kernels/cuda_flash_*.cuh) reads bf16
 * copies of qkv (and, backward, of dy) from the same staging bytes, qkv then dy at the
 * next 256-byte boundary, as a GEMM's A and B: the staging is the largest of those too. */
#define LAYOUT_CUDA_SCRATCH_ROWS 64 /* where the row losses start */
#define LAYOUT_CUDA_BF16_ALIGN 256  /* the staging buffers' alignment (cuBLAS wants it) */

/* Float32 elements a bf16 plan stages as op's GEMM's A and B on the CUDA backend (the
 * whole in[0] and in[1], padded rows included: ld = layout_row_strides(g); 0 for a
 * weight, which the GEMM reads from the bf16 weight copy; linear, matmul, linear_dw,
 * matmul_dw_t); false for other ops. */
bool layout_cuda_gemm_operands(const Graph *g, const Op *op, const int64_t *ld, int64_t b,
                               int64_t *a_elems, int64_t *b_elems);
/* Rows of a forward cross-entropy's row-loss array at microbatch b; 0 for other ops. */
int64_t layout_cuda_ce_rows(const Graph *g, const Op *op, int64_t b);
/* The head size every attention op of the graph uses, or 0 (none, or several): the
 * CUDA kernel library's PKC_ATT_HS. */
int layout_cuda_head_size(const Graph *g);
/* The sequence length every attention op of the graph uses (qkv's rows per sample), or
 * 0 (none, or several): the kernel library's PKC_ATT_T, which makes the tensor-core
 * attention's tile counts and row offsets constants. */
int layout_cuda_seq_len(const Graph *g);
/* That head size when the tensor-core attention kernels are compiled for it (a
 * multiple of 16 in 16..128): a bf16 plan then launches them; else 0. */
int layout_cuda_flash_head_size(const Graph *g);
/* Float32 elements an attention op casts to bf16 for the tensor-core kernels in a bf16
 * plan: qkv (attention_gqa: q, k and v, each from a LAYOUT_CUDA_BF16_ALIGN boundary, so
 * two alignments' worth more), and for the backward dy (0 forward); false for other ops, or when the
 * graph's head size keeps the fp32 kernels (flash_hs = layout_cuda_flash_head_size(g),
 * 0: the caller computes it once, since it scans the whole graph). Staged as layout_cuda_gemm_staging(qkv, dy)
 * (counted, like a GEMM's operands, only with bf16). */
bool layout_cuda_attention_operands(const Graph *g, const Op *op, int flash_hs, int64_t b,
                                    int64_t *qkv_elems, int64_t *dy_elems);
/* Bytes one bf16 GEMM stages: A's copy rounded up to 256, then B's. */
int64_t layout_cuda_gemm_staging(int64_t a_elems, int64_t b_elems);
/* Offset of the bf16 staging in cuda_scratch after ce_rows row losses. */
int64_t layout_cuda_bf16_staging(int64_t ce_rows);
/* cuda_scratch bytes (a multiple of LAYOUT_ALIGN) from the stage's largest forward
 * cross-entropy (rows) and, with bf16 GEMMs, its largest layout_cuda_gemm_staging
 * (GEMM or tensor-core attention; pass 0 without). */
int64_t layout_cuda_scratch_size(int64_t ce_rows, int64_t gemm_staging, bool bf16);
/* The stage's cuda_scratch bytes from its forward and backward ops. In a bf16 layout an
 * operand stored as bfloat16 (TensorPlace.bf16) is not staged: the GEMM or the
 * tensor-core attention reads its stored copy, the very bits a cast of its working
 * place would make (the copy is the working place rounded, or the working place is
 * the copy widened). */
int64_t layout_cuda_scratch_bytes(const StageLayout *L, bool bf16);
/* Whether the stage's weight versions can hold its bf16 weight copies themselves (2bw's
 * weight prediction in a bf16 plan: planner.h plan_bf16_in_versions): true when no
 * parameter is both a GEMM's A or B or an embedding lookup's table (read from the bf16
 * copy: pkc_embedding_fwd_bf16_f32) and another operand read as float32 in the stage's
 * forward and backward ops. With folded != NULL (one flag per tensor id) marks those
 * parameters (GEMM weights and lookup tables), whose slot then holds only the bf16 copy,
 * in the first half of the parameter's float32 place. A tied embedding is then a bf16
 * copy on every stage that holds it, so its stages step it alike (delay compensation
 * reads W(t-1) from that copy on each). */
bool layout_cuda_fold_params(const StageLayout *L, char *folded);

/* Every size and offset above is for float32 reals; a float64 program (the
 * gradient-check build) doubles them all, which keeps int32 tensors in bounds (a bf16
 * layout has no float64 program). */

#endif
